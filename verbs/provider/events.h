/// @file
/// The descriptors libibverbs reads event records from (a completion channel's fd, a context's
/// async_fd), kept as the kernel keeps its uverbs event files: an object's unread records leave
/// with the object, and what the program did read of an object is known, so that destroying it
/// can wait until the program acknowledged those (ibv_cmd_destroy_cq/_qp wait for the counts
/// the kernel reports).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace roce::verbs_compat {

/// A pipe of fixed-size records, each naming its object in its first 8 bytes (rdma-core's
/// ib_uverbs_comp_event_desc: cq_handle; ib_uverbs_async_event_desc: element). The program
/// reads the read end (libibverbs' ibv_get_cq_event / ibv_get_async_event read one record);
/// the provider writes records and takes unread ones out again through a non-blocking read
/// end of its own (the same pipe opened a second time), which never waits for a record a
/// reader of the program took first.
class EventPipe {
 public:
  explicit EventPipe(std::size_t record) : record_(record) {}
  ~EventPipe();  ///< closes the write end and the provider's read end (not read_fd())
  EventPipe(const EventPipe&) = delete;
  EventPipe& operator=(const EventPipe&) = delete;

  /// Makes the pipe: 0 or an errno value.
  int open();
  /// What the program reads (it closes it: ibv_destroy_comp_channel, verbs_uninit_context).
  int read_fd() const { return rfd_; }
  /// Writes one record; false when the pipe is full (a program that never reads its events
  /// loses the newest).
  bool write(const void* rec);
  /// Takes the unread records naming `element` out of the pipe (the others stay, in their
  /// order): how many. Nothing without exact().
  unsigned purge(std::uint64_t element);
  /// Whether purge() works, i.e. the pipe could be opened a second time (/proc is there): only
  /// then does the provider know what the program read, and wait for its acks.
  bool exact() const { return drain_ >= 0; }

 private:
  std::mutex mu_;
  std::size_t record_;
  int rfd_ = -1, wfd_ = -1, drain_ = -1;
};

}  // namespace roce::verbs_compat
