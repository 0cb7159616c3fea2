/// @file
/// adopt.h: the process's memfd of adopted pages (file offset = address), the regions each
/// Context registered of it, the copy-and-remap, the hole punching of pages nobody maps, and
/// the fork handler that gives a child private copies.
#include "verbs/memory/adopt.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "verbs/memory/maps.h"

namespace roce::verbs_compat {
namespace {

using Range = std::pair<std::uintptr_t, std::uintptr_t>;  // [first, second)

/// The file spans every user address (x86-64 with 5-level paging stops below 2^56; arm64
/// below 2^52): sparse, it holds only the adopted pages.
constexpr std::uint64_t kFileSize = 1ull << 57;

/// The alignment of the regions registered with roced (adopt()).
constexpr std::uintptr_t kWindow = 2u << 20;

struct Region {
  client::Buffer* buf = nullptr;
  std::uintptr_t start = 0, end = 0;
  unsigned refs = 0;  ///< 0: free_buffer said EBUSY, retried at the next release
};

struct State {
  std::mutex mu;
  int fd = -1;
  unsigned dev_major = 0, dev_minor = 0;
  std::uint64_t inode = 0;
  std::map<client::Context*, std::vector<Region>> regions;  ///< per Context, oldest first
  std::vector<Range> pending;  ///< file ranges no region covers, last seen mapped
  std::vector<Vma> forking;    ///< the mappings made private for a fork in progress
  bool forked = false;         ///< a child: the Buffers it inherited are not its own
};

State& state() {
  static State* s = new State;  // never destroyed: adopted pages outlive static destructors
  return *s;
}

// The copies go through the kernel by raw system calls: the cover of a range holds bytes the
// program does not own (allocator metadata, ASan's redzones, other frames) that the libc
// wrappers' sanitizer interceptors would take for bad reads.
ssize_t raw_pwrite(int fd, const void* p, std::size_t n, std::uint64_t off) {
  return ::syscall(SYS_pwrite64, fd, p, n, static_cast<off_t>(off));
}
ssize_t raw_pread(int fd, void* p, std::size_t n, std::uint64_t off) {
  return ::syscall(SYS_pread64, fd, p, n, static_cast<off_t>(off));
}
// Reads all of [off, off + n) of the file into p; false on a short read.
bool read_file(int fd, void* p, std::size_t n, std::uint64_t off) {
  auto* d = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = raw_pread(fd, d, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    d += r;
    n -= static_cast<std::size_t>(r);
    off += static_cast<std::uint64_t>(r);
  }
  return true;
}

std::uintptr_t page_size() {
  static const auto p = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

bool ours(const State& st, const Vma& v) {
  return st.fd >= 0 && v.inode == st.inode && v.dev_major == st.dev_major &&
         v.dev_minor == st.dev_minor;
}

// ---- a stack of its own ----
// The pages being replaced may hold this thread's live frames (a buffer on the stack; the
// child's copy of adopted stack pages): they must not change between their copy and their
// replacement, so the copy and the remap run on another stack while those frames sit still.
thread_local const std::function<int()>* side_job = nullptr;
thread_local int side_result = 0;

void side_trampoline() { side_result = (*side_job)(); }

int on_side_stack(const std::function<int()>& fn) {
  constexpr std::size_t kSize = 256u << 10;
  void* stack = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED) return ENOMEM;
  ucontext_t caller, side;
  ::getcontext(&side);
  side.uc_stack.ss_sp = stack;
  side.uc_stack.ss_size = kSize;
  side.uc_link = &caller;
  ::makecontext(&side, side_trampoline, 0);
  side_job = &fn;
  side_result = ENOMEM;
  ::swapcontext(&caller, &side);
  ::munmap(stack, kSize);
  return side_result;
}

// Whether replacing [a, b) of `v` may touch this thread's live frames: the mapping holds the
// stack pointer, or the range lies near it (the frames of the calls made during the copy and
// the remap, a signal handler's, sit just below it; the callers' just above).
bool near_this_stack(const Vma& v, std::uintptr_t a, std::uintptr_t b) {
  constexpr std::uintptr_t kReach = 256u << 10;
  const auto sp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  return (v.start <= sp && sp < v.end) || (a < sp + kReach && b + kReach > sp);
}

void on_fork_prepare();
void on_fork_parent();
void on_fork_child();

int open_file(State& st) {
  if (st.fd >= 0) return 0;
  static std::once_flag atfork;
  std::call_once(atfork, [] { ::pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child); });
  const int fd = ::memfd_create("roce-adopted", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errno == EMFILE || errno == ENFILE ? errno : ENOMEM;
  struct stat s {};
  if (::ftruncate(fd, static_cast<off_t>(kFileSize)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0 || ::fstat(fd, &s) != 0) {
    ::close(fd);
    return ENOMEM;
  }
  st.fd = fd;
  st.dev_major = major(s.st_dev);
  st.dev_minor = minor(s.st_dev);
  st.inode = s.st_ino;
  return 0;
}

// [from, to) minus every range of `cut` (sorted or not).
std::vector<Range> subtract(std::vector<Range> from, const std::vector<Range>& cut) {
  for (const Range& c : cut) {
    std::vector<Range> next;
    for (const Range& r : from) {
      if (c.second <= r.first || c.first >= r.second) {
        next.push_back(r);
        continue;
      }
      if (r.first < c.first) next.emplace_back(r.first, c.first);
      if (c.second < r.second) next.emplace_back(c.second, r.second);
    }
    from = std::move(next);
  }
  return from;
}

std::vector<Range> merged(std::vector<Range> v) {
  std::sort(v.begin(), v.end());
  std::vector<Range> out;
  for (const Range& r : v) {
    if (!out.empty() && r.first <= out.back().second)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

void punch(const State& st, Range r) {
  ::fallocate(st.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(r.first),
              static_cast<off_t>(r.second - r.first));
}

// The file's pages in `pending` that no region covers and no mapping of the process shows any
// more are dropped; what is still mapped stays pending.
void collect(State& st) {
  if (st.pending.empty() || st.fd < 0) return;
  std::vector<Vma> maps;
  if (!read_maps(0, 0, maps)) return;
  std::vector<Range> keep;
  for (const Vma& v : maps)
    if (ours(st, v)) keep.emplace_back(v.offset, v.offset + (v.end - v.start));
  std::vector<Range> live;
  for (const auto& [ctx, rs] : st.regions)
    for (const Region& r : rs) live.emplace_back(r.start, r.end);
  std::vector<Range> gone = subtract(st.pending, keep);
  gone = subtract(std::move(gone), live);
  for (const Range& r : gone) punch(st, r);
  st.pending = merged(subtract(st.pending, gone));
}

// Whether some pending range is (partly) unmapped now: msync(MS_ASYNC), a walk of the
// mappings and nothing else, fails with ENOMEM there. A range the program mapped something
// else over still passes; release() checks exactly.
bool pending_unmapped(const State& st) {
  for (const Range& r : st.pending)
    if (::msync(reinterpret_cast<void*>(r.first), r.second - r.first, MS_ASYNC) != 0 &&
        errno == ENOMEM)
      return true;
  return false;
}

// Writes [a, b) of the process into the file at offset a, skipping pages of anonymous memory
// that were never touched (neither present nor swapped in /proc/self/pagemap): they read as
// zero and the file's hole is zero.
// `file` is where a goes in the file (a itself but for pages mremap moved).
int copy_in(const State& st, std::uintptr_t a, std::uintptr_t b, bool anonymous,
            std::uint64_t file) {
  const std::uintptr_t ps = page_size();
  const auto write_run = [&](std::uintptr_t x, std::uintptr_t y) -> int {
    while (x < y) {
      const ssize_t w = raw_pwrite(st.fd, reinterpret_cast<const void*>(x), y - x, file + (x - a));
      if (w < 0) {
        if (errno == EINTR) continue;
        return errno == EFAULT ? EFAULT : ENOMEM;
      }
      x += static_cast<std::uintptr_t>(w);
    }
    return 0;
  };
  if (!anonymous) return write_run(a, b);
  const int pm = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pm < 0) return write_run(a, b);
  int rc = 0;
  std::uint64_t entries[512];
  std::uintptr_t run = 0;  // start of the current run of pages with data (0: none)
  for (std::uintptr_t p = a; p < b && rc == 0;) {
    const std::size_t n = std::min<std::size_t>(512, (b - p) / ps);
    const auto want = static_cast<ssize_t>(n * sizeof entries[0]);
    if (::pread(pm, entries, n * sizeof entries[0], static_cast<off_t>(p / ps * 8)) != want) {
      rc = write_run(run ? run : p, b);  // cannot tell: copy the rest
      run = 0;
      p = b;
      break;
    }
    for (std::size_t i = 0; i < n; ++i, p += ps) {
      const bool data = (entries[i] >> 63 & 1) || (entries[i] >> 62 & 1);  // present, swapped
      if (data && run == 0) run = p;
      if (!data && run != 0) {
        if ((rc = write_run(run, p))) break;
        run = 0;
      }
    }
  }
  if (rc == 0 && run != 0) rc = write_run(run, b);
  ::close(pm);
  return rc;
}

// One piece of the cover that is not yet adopted: the file gets its bytes, then the file
// replaces it. The cover's first and last pages go last: the range may share them with other
// objects that other threads write (the window in adopt.h).
int adopt_piece(State& st, const Vma& v, std::uintptr_t a, std::uintptr_t b, std::uintptr_t s,
                std::uintptr_t e) {
  const std::uintptr_t ps = page_size();
  if (ours(st, v)) {
    // Our pages that mremap moved here (offset != address): through a bounce buffer, since
    // their file range may overlap the one they go to.
    void* tmp = ::mmap(nullptr, b - a, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tmp == MAP_FAILED) return ENOMEM;
    const bool got = read_file(st.fd, tmp, b - a, v.offset + (a - v.start));
    const ssize_t w = got ? raw_pwrite(st.fd, tmp, b - a, a) : -1;
    ::munmap(tmp, b - a);
    if (w != static_cast<ssize_t>(b - a)) return ENOMEM;
  } else {
    // Stale pages of an earlier adoption the program unmapped (punching costs a walk of the
    // file's mappings and TLB flushes: only when there is data).
    const off_t data = ::lseek(st.fd, static_cast<off_t>(a), SEEK_DATA);
    if (data >= 0 && static_cast<std::uintptr_t>(data) < b) punch(st, {a, b});
  }
  const bool anon = v.anonymous();
  std::uintptr_t lo = a, hi = b;
  if (lo == s && hi - lo > ps) lo += ps;
  if (hi == e && hi - lo > ps) hi -= ps;
  if (!ours(st, v)) {
    int rc = copy_in(st, lo, hi, anon, lo);
    if (rc == 0 && lo != a) rc = copy_in(st, a, lo, anon, a);
    if (rc == 0 && hi != b) rc = copy_in(st, hi, b, anon, hi);
    if (rc != 0) return rc;
  }
  void* at = reinterpret_cast<void*>(a);
  if (::mmap(at, b - a, v.prot(), MAP_SHARED | MAP_FIXED, st.fd, static_cast<off_t>(a)) ==
      MAP_FAILED)
    return errno == EINVAL ? EOPNOTSUPP : ENOMEM;
  if (!ours(st, v)) return 0;
  // The moved pages' old place in the file: returned once nothing maps it.
  const std::uint64_t old = v.offset + (a - v.start);
  st.pending.emplace_back(old, old + (b - a));
  return 0;
}

/// Narrows a new region's window [ws, we) around the adopted [s, e) so that it reaches no
/// shared mapping that is not ours: such a mapping may be a Buffer of the Context (a memfd
/// roced maps, libroce's alloc_buffer) registered before the window, and Context::reg_mr,
/// which takes the newest Buffer holding a range, must not find the window's holes for it.
/// (A mapping made after the window is the newer Buffer, and found first.) Without /proc's
/// help, the range's own pages.
void clip_window(const State& st, std::uintptr_t s, std::uintptr_t e, std::uintptr_t& ws,
                 std::uintptr_t& we) {
  std::vector<Vma> maps;
  if (!read_maps(ws, we, maps)) {
    ws = s;
    we = e;
    return;
  }
  for (const Vma& v : maps) {
    if (!v.shared || ours(st, v)) continue;
    if (v.end <= s) ws = std::max(ws, v.end);
    if (v.start >= e) we = std::min(we, v.start);
  }
}

int adopt_range(State& st, std::uintptr_t s, std::uintptr_t e, const AdoptOptions& opt) {
  std::vector<Vma> maps;
  if (!read_maps(s, e, maps)) return errno != 0 ? errno : ENOMEM;  // no /proc: ENOENT, EACCES
  struct Piece {
    const Vma* v;
    std::uintptr_t a, b;
  };
  std::vector<Piece> todo;
  std::uintptr_t cur = s;
  for (const Vma& v : maps) {
    if (v.start >= e) break;
    if (v.start > cur) return EFAULT;  // a hole
    const std::uintptr_t a = std::max(v.start, s), b = std::min(v.end, e);
    if (v.special() || !v.read) return EFAULT;
    if (opt.writable && !v.write) return EFAULT;
    if (ours(st, v)) {
      if (v.offset + (a - v.start) != a) todo.push_back({&v, a, b});  // moved by mremap
    } else if (v.shared) {
      return EOPNOTSUPP;
    } else if (v.path.starts_with("/anon_hugepage")) {
      return EOPNOTSUPP;
    } else {
      todo.push_back({&v, a, b});
    }
    cur = b;
  }
  if (cur < e) return EFAULT;
  // The file range a piece goes to may still hold pages the program maps elsewhere (mremap
  // moved them after an earlier adoption): those are its data, not to be overwritten.
  std::vector<Vma> all;
  bool read_all = false;
  for (const Piece& p : todo) {
    const off_t data = ::lseek(st.fd, static_cast<off_t>(p.a), SEEK_DATA);
    if (data < 0 || static_cast<std::uintptr_t>(data) >= p.b) continue;
    if (!read_all && !read_maps(0, 0, all)) return ENOMEM;
    read_all = true;
    for (const Vma& v : all)
      if (ours(st, v) && v.offset != v.start && !(v.start < p.b && v.end > p.a) && v.offset < p.b &&
          v.offset + (v.end - v.start) > p.a)
        return EBUSY;
  }
  for (const Piece& p : todo) {
    const auto job = [&] { return adopt_piece(st, *p.v, p.a, p.b, s, e); };
    if (const int rc = near_this_stack(*p.v, p.a, p.b) ? on_side_stack(job) : job()) return rc;
  }
  return 0;
}

// ---- fork ----
// For the length of fork() every adopted page is private again: the kernel then gives the
// child an exact copy of the parent at the moment of the fork (its live stack frames
// included, which no copy taken before or after could), and the child shares nothing with
// the parent or roced. prepare: each mapping of the memfd becomes a private anonymous copy
// in place; parent: what the parent holds goes back into the file and the file's mapping
// back in place; child: the copies are its own, the memfd closed. Mappings advised
// MADV_DONTFORK (AdoptOptions::dontfork, ibv_fork_init) stay shared: the child has none.

void privatize(const State& st, const Vma& v) {
  const std::size_t len = v.end - v.start;
  void* fresh = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh == MAP_FAILED) return;  // this mapping stays shared with the child
  // Only the file's data (SEEK_DATA): holes stay zero without being allocated.
  const auto first = static_cast<off_t>(v.offset);
  const auto last = static_cast<off_t>(v.offset + len);
  for (off_t at = first; at < last;) {
    const off_t data = ::lseek(st.fd, at, SEEK_DATA);
    if (data < 0 || data >= last) break;
    off_t hole = ::lseek(st.fd, data, SEEK_HOLE);
    if (hole < 0 || hole > last) hole = last;
    if (!read_file(st.fd, static_cast<char*>(fresh) + (data - first),
                   static_cast<std::size_t>(hole - data), static_cast<std::uint64_t>(data))) {
      ::munmap(fresh, len);
      return;
    }
    at = hole;
  }
  ::mprotect(fresh, len, v.prot());
  if (::mremap(fresh, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(v.start)) ==
      MAP_FAILED)
    ::munmap(fresh, len);
}

void on_fork_prepare() {
  State& st = state();
  st.mu.lock();
  st.forking.clear();
  if (st.fd < 0) return;
  std::vector<Vma> maps;
  if (!read_maps(0, 0, maps, true)) return;
  for (Vma& v : maps)
    if (ours(st, v) && !v.dontcopy) st.forking.push_back(std::move(v));
  on_side_stack([&] {
    for (const Vma& v : st.forking) privatize(st, v);
    return 0;
  });
}

void on_fork_parent() {
  State& st = state();
  on_side_stack([&] {
    for (const Vma& v : st.forking) {
      if (copy_in(st, v.start, v.end, true, v.offset) != 0) continue;  // stays private
      ::mmap(reinterpret_cast<void*>(v.start), v.end - v.start, v.prot(), MAP_SHARED | MAP_FIXED,
             st.fd, static_cast<off_t>(v.offset));
    }
    return 0;
  });
  st.forking.clear();
  st.mu.unlock();
}

void on_fork_child() {
  State& st = state();
  if (st.fd >= 0) ::close(st.fd);
  st.fd = -1;
  st.forking.clear();
  st.regions.clear();
  st.pending.clear();
  st.forked = true;
  st.mu.unlock();
}

}  // namespace

client::Buffer* adopt(client::Context& ctx, void* addr, std::size_t length, int* err,
                      const AdoptOptions& opt) {
  int dummy;
  if (err == nullptr) err = &dummy;
  const auto x = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t ps = page_size();
  if (addr == nullptr || length == 0 || x + length < x || x + length > UINTPTR_MAX - ps) {
    *err = EINVAL;
    return nullptr;
  }
  const std::uintptr_t s = x & ~(ps - 1), e = (x + length + ps - 1) & ~(ps - 1);
  State& st = state();
  std::lock_guard<std::mutex> g(st.mu);
  if (const int rc = open_file(st)) {
    *err = rc;
    return nullptr;
  }
  if (pending_unmapped(st)) collect(st);  // release() always collects; here only when cheap
  if (const int rc = adopt_range(st, s, e, opt)) {
    *err = rc;
    return nullptr;
  }
  // ibv_fork_init's MADV_DONTFORK went to the mapping the remap replaced: again on ours.
  if (opt.dontfork) ::madvise(reinterpret_cast<void*>(s), e - s, MADV_DONTFORK);
  std::vector<Region>& rs = st.regions[&ctx];
  // The newest region that holds the range: the one Context::reg_mr picks too.
  for (auto r = rs.rbegin(); r != rs.rend(); ++r)
    if (r->start <= s && e <= r->end) {
      ++r->refs;
      return r->buf;
    }
  // A new region spans the aligned windows around the range, so that registrations near it (a
  // program's heap) share it; the window's pages not adopted are holes no MR reaches. Past
  // roced's max_memory, the range's own pages.
  std::uintptr_t rs_start = s & ~(kWindow - 1), rs_end = (e + kWindow - 1) & ~(kWindow - 1);
  clip_window(st, s, e, rs_start, rs_end);
  const auto region = [&] {
    return ctx.register_memfd_at(st.fd, rs_start, reinterpret_cast<void*>(rs_start),
                                 static_cast<std::size_t>(rs_end - rs_start));
  };
  client::Buffer* b = region();
  if (b == nullptr && (errno == EDQUOT || errno == EINVAL) && (rs_start != s || rs_end != e)) {
    rs_start = s;
    rs_end = e;
    b = region();
  }
  if (b == nullptr) {
    *err = errno != 0 ? errno : ENOMEM;
    return nullptr;
  }
  rs.push_back(Region{b, rs_start, rs_end, 1});
  return b;
}

int release(client::Context& ctx, client::Buffer* buffer) {
  State& st = state();
  std::lock_guard<std::mutex> g(st.mu);
  const auto it = st.regions.find(&ctx);
  if (it == st.regions.end()) return st.forked ? 0 : EINVAL;
  std::vector<Region>& rs = it->second;
  const auto r = std::find_if(rs.begin(), rs.end(),
                              [&](const Region& x) { return x.buf == buffer && x.refs > 0; });
  if (r == rs.end()) return st.forked ? 0 : EINVAL;
  --r->refs;
  // The last reference frees roced's region; a region the Context still counts MRs on (it
  // picked this Buffer for another adoption's MR) is retried at the next release.
  for (auto z = rs.begin(); z != rs.end();) {
    if (z->refs == 0 && ctx.free_buffer(z->buf) != EBUSY) {
      st.pending.emplace_back(z->start, z->end);
      z = rs.erase(z);
    } else {
      ++z;
    }
  }
  if (rs.empty()) st.regions.erase(it);
  st.pending = merged(std::move(st.pending));
  collect(st);
  return 0;
}

void forget(client::Context& ctx) {
  State& st = state();
  std::lock_guard<std::mutex> g(st.mu);
  const auto it = st.regions.find(&ctx);
  if (it == st.regions.end()) return;
  for (const Region& r : it->second) st.pending.emplace_back(r.start, r.end);
  st.regions.erase(it);
  st.pending = merged(std::move(st.pending));
  collect(st);
}

AdoptStats adopt_stats() {
  State& st = state();
  std::lock_guard<std::mutex> g(st.mu);
  AdoptStats s;
  s.fd = st.fd;
  struct stat f {};
  if (st.fd >= 0 && ::fstat(st.fd, &f) == 0)
    s.file_bytes = static_cast<std::uint64_t>(f.st_blocks) * 512;
  for (const auto& [ctx, rs] : st.regions) {
    s.regions += rs.size();
    for (const Region& r : rs) s.references += r.refs;
  }
  s.pending = st.pending.size();
  return s;
}

}  // namespace roce::verbs_compat
