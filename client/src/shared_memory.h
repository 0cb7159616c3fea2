/// @file
/// Shared memory for libroce's buffers: sealed memfds mapped into the process.
#pragma once

#include <cstddef>

namespace roce::client {

/// A zero-filled memfd of `length` bytes, sealed against resizing, mapped read-write at
/// `*addr`. Returns the fd, or -1 with errno set.
int make_buffer(std::size_t length, void** addr);
/// Maps `length` bytes of `fd` read-write; null with errno set.
void* map_fd(int fd, std::size_t length);

}  // namespace roce::client
