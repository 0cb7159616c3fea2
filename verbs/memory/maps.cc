/// @file
/// /proc/self/maps, read in chunks and parsed by hand: a registration reads only the lines up
/// to its range (the kernel makes the text as it is read).
#include "verbs/memory/maps.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace roce::verbs_compat {

int Vma::prot() const {
  return (read ? PROT_READ : 0) | (write ? PROT_WRITE : 0) | (exec ? PROT_EXEC : 0);
}

namespace {

// A hex number at p (no prefix); advances p. False when there is none.
bool hex(const char*& p, const char* end, std::uint64_t& v) {
  const char* s = p;
  v = 0;
  for (; p < end; ++p) {
    const char c = *p;
    unsigned d;
    if (c >= '0' && c <= '9')
      d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<unsigned>(c - 'a' + 10);
    else
      break;
    v = v << 4 | d;
  }
  return p != s;
}
bool dec(const char*& p, const char* end, std::uint64_t& v) {
  const char* s = p;
  v = 0;
  for (; p < end && *p >= '0' && *p <= '9'; ++p) v = v * 10 + static_cast<unsigned>(*p - '0');
  return p != s;
}
bool skip(const char*& p, const char* end, char c) {
  if (p >= end || *p != c) return false;
  ++p;
  return true;
}
void spaces(const char*& p, const char* end) {
  while (p < end && *p == ' ') ++p;
}

}  // namespace

// "start-end rwxp offset major:minor inode   path"
bool parse_maps_line(const char* line, std::size_t n, Vma& out) {
  const char* p = line;
  const char* end = line + n;
  std::uint64_t a, b, off, maj, min, ino;
  if (!hex(p, end, a) || !skip(p, end, '-') || !hex(p, end, b) || !skip(p, end, ' ')) return false;
  if (end - p < 5) return false;
  out.start = static_cast<std::uintptr_t>(a);
  out.end = static_cast<std::uintptr_t>(b);
  out.read = p[0] == 'r';
  out.write = p[1] == 'w';
  out.exec = p[2] == 'x';
  out.shared = p[3] == 's';
  p += 4;
  if (!skip(p, end, ' ') || !hex(p, end, off) || !skip(p, end, ' ') || !hex(p, end, maj) ||
      !skip(p, end, ':') || !hex(p, end, min) || !skip(p, end, ' ') || !dec(p, end, ino))
    return false;
  out.offset = off;
  out.dev_major = static_cast<unsigned>(maj);
  out.dev_minor = static_cast<unsigned>(min);
  out.inode = ino;
  spaces(p, end);
  out.path.assign(p, end);
  return out.start < out.end;
}

bool read_maps(std::uintptr_t from, std::uintptr_t to, std::vector<Vma>& out, bool smaps) {
  out.clear();
  const int fd = ::open(smaps ? "/proc/self/smaps" : "/proc/self/maps", O_RDONLY | O_CLOEXEC);
  bool last_kept = false;  // smaps: the attribute lines that follow belong to out.back()
  if (fd < 0) return false;
  char buf[16384];
  std::size_t have = 0;
  bool done = false;
  while (!done) {
    const ssize_t r = ::read(fd, buf + have, sizeof buf - have);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      errno = e;
      return false;
    }
    if (r == 0) done = true;
    have += static_cast<std::size_t>(r);
    std::size_t at = 0;
    for (;;) {
      const void* nl = std::memchr(buf + at, '\n', have - at);
      if (nl == nullptr) {
        if (!done) break;
        if (at == have) break;
        nl = buf + have;  // a last line without its newline
      }
      const std::size_t len = static_cast<std::size_t>(static_cast<const char*>(nl) - (buf + at));
      Vma v;
      if (parse_maps_line(buf + at, len, v)) {
        if (to != 0 && v.start >= to) {
          done = true;
          break;
        }
        last_kept = v.end > from;
        if (last_kept) out.push_back(std::move(v));
      } else if (smaps && last_kept && len > 8 && std::memcmp(buf + at, "VmFlags:", 8) == 0) {
        // Two-letter flags separated by blanks; "dc": VM_DONTCOPY.
        for (std::size_t i = 8; i + 1 < len; ++i)
          if (buf[at + i] == 'd' && buf[at + i + 1] == 'c' && buf[at + i - 1] == ' ' &&
              (i + 2 == len || buf[at + i + 2] == ' '))
            out.back().dontcopy = true;
      }
      at += len + 1;
      if (at >= have) {
        at = have;
        break;
      }
    }
    std::memmove(buf, buf + at, have - at);
    have -= at;
    if (have == sizeof buf) {  // a line longer than the buffer (a very long path): drop it
      have = 0;
    }
  }
  ::close(fd);
  return true;
}

}  // namespace roce::verbs_compat
