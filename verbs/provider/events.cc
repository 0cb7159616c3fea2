/// @file
/// EventPipe (events.h).
#include "verbs/provider/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace roce::verbs_compat {

EventPipe::~EventPipe() {
  if (wfd_ >= 0) ::close(wfd_);
  if (drain_ >= 0) ::close(drain_);
}

int EventPipe::open() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return errno;
  ::fcntl(p[1], F_SETFL, O_NONBLOCK);
  rfd_ = p[0];
  wfd_ = p[1];
  // A second open of the pipe's read side is a file of its own: non-blocking for the provider
  // while the program's read end stays as the program sets it.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", rfd_);
  drain_ = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  return 0;
}

bool EventPipe::write(const void* rec) {
  std::lock_guard<std::mutex> g(mu_);
  return ::write(wfd_, rec, record_) == static_cast<ssize_t>(record_);
}

unsigned EventPipe::purge(std::uint64_t element) {
  std::lock_guard<std::mutex> g(mu_);
  if (drain_ < 0) return 0;
  // Every unread record out (a reader of the program may take some meanwhile: those were
  // read), the others back in their order. Records are written whole and read whole (both
  // under PIPE_BUF), so each read here takes one record.
  std::vector<char> keep;
  std::vector<char> rec(record_);
  unsigned gone = 0;
  for (;;) {
    const ssize_t n = ::read(drain_, rec.data(), record_);
    if (n != static_cast<ssize_t>(record_)) break;
    std::uint64_t e;
    std::memcpy(&e, rec.data(), sizeof e);
    if (e == element)
      ++gone;
    else
      keep.insert(keep.end(), rec.begin(), rec.end());
  }
  for (std::size_t at = 0; at < keep.size(); at += record_)
    (void)!::write(wfd_, keep.data() + at, record_);
  return gone;
}

}  // namespace roce::verbs_compat
