// verbs/memory/adopt.h against a fake roced that maps each registered region itself: what the
// program had stays, what "roced" writes shows at the program's own addresses, the errors of
// rdma-core's ibv_reg_mr, the sharing of pages between registrations, holes for untouched
// pages, memory returned once unmapped, fork.
#include "verbs/memory/adopt.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/verbs/memory/fake_roced.h"
#include "verbs/memory/maps.h"

namespace roce::verbs_compat::test {
namespace {

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

void fill(void* p, std::size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(i * 131 + seed);
}
bool same(const void* p, std::size_t n, unsigned seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != static_cast<unsigned char>(i * 131 + seed)) return false;
  return true;
}
Vma mapping_at(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::vector<Vma> m;
  EXPECT_TRUE(read_maps(a, a + 1, m));
  return m.empty() ? Vma{} : m.front();
}
char* map_pages(std::size_t n, int prot = PROT_READ | PROT_WRITE) {
  void* p = ::mmap(nullptr, n * kPage, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return static_cast<char*>(p);
}

// The memfd's size once earlier tests' unmapped pages are returned (a release collects them).
std::uint64_t settled_file_bytes() {
  FakeRoced roced;
  char* p = map_pages(1);
  int err = 0;
  client::Buffer* b = adopt(roced, p, 1, &err);
  EXPECT_NE(b, nullptr);
  ::munmap(p, kPage);
  EXPECT_EQ(release(roced, b), 0);
  return adopt_stats().file_bytes;
}

TEST(Maps, ParsesALine) {
  const char line[] = "7f0000001000-7f0000003000 r-xs 00002000 fd:01 12345    /usr/lib/x (deleted)";
  Vma v;
  ASSERT_TRUE(parse_maps_line(line, sizeof line - 1, v));
  EXPECT_EQ(v.start, 0x7f0000001000u);
  EXPECT_EQ(v.end, 0x7f0000003000u);
  EXPECT_TRUE(v.read && !v.write && v.exec && v.shared);
  EXPECT_EQ(v.offset, 0x2000u);
  EXPECT_EQ(v.dev_major, 0xfdu);
  EXPECT_EQ(v.dev_minor, 1u);
  EXPECT_EQ(v.inode, 12345u);
  EXPECT_EQ(v.path, "/usr/lib/x (deleted)");
  const char anon[] = "7f0000001000-7f0000003000 rw-p 00000000 00:00 0 ";
  ASSERT_TRUE(parse_maps_line(anon, sizeof anon - 1, v));
  EXPECT_TRUE(v.anonymous());
  EXPECT_FALSE(parse_maps_line("garbage", 7, v));
}

TEST(Adopt, MallocBufferKeepsItsDataAndSharesWrites) {
  FakeRoced roced;
  const std::size_t n = 300000;
  auto* buf = static_cast<unsigned char*>(std::malloc(n));
  fill(buf, n, 7);
  int err = 0;
  client::Buffer* b = adopt(roced, buf + 10, n - 20, &err);
  ASSERT_NE(b, nullptr) << std::strerror(err);
  EXPECT_TRUE(same(buf, n, 7));  // the program's data (and its neighbours' in the edge pages)
  EXPECT_TRUE(mapping_at(buf).shared);
  unsigned char* r = roced.seen_by_roced(buf + 10);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(same(r - 10, n, 7));
  r[1000] = 0xAB;              // roced writes (an RDMA WRITE landing) ...
  EXPECT_EQ(buf[1010], 0xAB);  // ... the program reads it at its own address
  buf[2000] = 0xCD;
  EXPECT_EQ(r[1990], 0xCD);
  // The buffer's range lies in the Buffer (Context::reg_mr's rule).
  const auto s = reinterpret_cast<std::uintptr_t>(b->addr);
  EXPECT_LE(s, reinterpret_cast<std::uintptr_t>(buf + 10));
  EXPECT_GE(s + b->length, reinterpret_cast<std::uintptr_t>(buf + n - 10));
  EXPECT_EQ(release(roced, b), 0);
  EXPECT_TRUE(roced.views.empty());  // roced's mapping released at dereg
  buf[5] = 1;                        // the memory stays the program's
  std::free(buf);
  EXPECT_EQ(release(roced, b), EINVAL);  // released twice
}

__attribute__((noinline)) void stack_buffer(FakeRoced& roced) {
  volatile unsigned char buf[20000];
  for (std::size_t i = 0; i < sizeof buf; ++i) buf[i] = static_cast<unsigned char>(i * 131 + 3);
  int err = 0;
  client::Buffer* b = adopt(roced, const_cast<unsigned char*>(buf), sizeof buf, &err);
  ASSERT_NE(b, nullptr) << std::strerror(err);
  EXPECT_TRUE(same(const_cast<unsigned char*>(buf), sizeof buf, 3));
  roced.seen_by_roced(const_cast<unsigned char*>(buf))[100] = 0x5A;
  EXPECT_EQ(buf[100], 0x5A);
  EXPECT_EQ(release(roced, b), 0);
}
__attribute__((noinline)) int deeper(int n) {
  volatile char pad[4096];
  pad[0] = static_cast<char>(n);
  return n == 0 ? pad[0] : deeper(n - 1) + pad[0];
}

TEST(Adopt, StackBuffer) {
  FakeRoced roced;
  stack_buffer(roced);
  EXPECT_EQ(deeper(64), 64 * 65 / 2);  // the stack still grows and works below and over it
}

TEST(Adopt, ReadOnlyMappingKeepsItsProtection) {
  FakeRoced roced;
  char* p = map_pages(4);
  fill(p, 4 * kPage, 9);
  ASSERT_EQ(::mprotect(p, 4 * kPage, PROT_READ), 0);
  int err = 0;
  EXPECT_EQ(adopt(roced, p, 4 * kPage, &err), nullptr);  // write access asked: as ib_umem_get
  EXPECT_EQ(err, EFAULT);
  client::Buffer* b = adopt(roced, p, 4 * kPage, &err, AdoptOptions{.writable = false});
  ASSERT_NE(b, nullptr) << std::strerror(err);
  const Vma v = mapping_at(p);
  EXPECT_TRUE(v.shared && v.read && !v.write);
  EXPECT_TRUE(same(p, 4 * kPage, 9));
  roced.seen_by_roced(p)[7] = 1;  // roced maps it read-write (the MR's access rules apply there)
  EXPECT_EQ(p[7], 1);
  EXPECT_EQ(release(roced, b), 0);
  ::munmap(p, 4 * kPage);
}

TEST(Adopt, BadRangesAreEfault) {
  FakeRoced roced;
  char* p = map_pages(3);
  ASSERT_EQ(::munmap(p + kPage, kPage), 0);  // a hole in the middle
  int err = 0;
  EXPECT_EQ(adopt(roced, p, 3 * kPage, &err), nullptr);
  EXPECT_EQ(err, EFAULT);
  EXPECT_EQ(mapping_at(p).shared, false);  // nothing replaced
  ::munmap(p, 3 * kPage);
  EXPECT_EQ(adopt(roced, p, kPage, &err), nullptr);  // wholly unmapped
  EXPECT_EQ(err, EFAULT);
  char* q = map_pages(2, PROT_NONE);
  EXPECT_EQ(adopt(roced, q, 2 * kPage, &err), nullptr);
  EXPECT_EQ(err, EFAULT);
  ::munmap(q, 2 * kPage);
  EXPECT_EQ(adopt(roced, nullptr, 10, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  // Kernel addresses and ranges past the end of the address space: nothing is mapped there.
  EXPECT_EQ(adopt(roced, reinterpret_cast<void*>(0xffff'8000'0000'0000ull), kPage, &err), nullptr);
  EXPECT_EQ(err, EFAULT);
  EXPECT_EQ(adopt(roced, reinterpret_cast<void*>(0x7fff'ffff'f000ull), 1ull << 40, &err), nullptr);
  EXPECT_EQ(err, EFAULT);
  EXPECT_EQ(adopt(roced, reinterpret_cast<void*>(~0ull - 100), 1000, &err), nullptr);  // wraps
  EXPECT_EQ(err, EINVAL);
  char* r = map_pages(1);
  EXPECT_EQ(adopt(roced, r, 0, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  ::munmap(r, kPage);
  EXPECT_TRUE(roced.views.empty());
}

TEST(Adopt, SharedMappingsOfOthersAreNotSupported) {
  FakeRoced roced;
  int err = 0;
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(::ftruncate(fileno(f), 2 * static_cast<off_t>(kPage)), 0);
  void* p = ::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(adopt(roced, p, 2 * kPage, &err), nullptr);
  EXPECT_EQ(err, EOPNOTSUPP);
  ::munmap(p, 2 * kPage);
  std::fclose(f);
  void* s = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_EQ(adopt(roced, s, kPage, &err), nullptr);
  EXPECT_EQ(err, EOPNOTSUPP);
  ::munmap(s, kPage);
}

TEST(Adopt, PrivateFileMappingKeepsTheFilesBytes) {
  // A MAP_PRIVATE file (a program's .data, a file read through mmap): pages never touched are
  // the file's bytes, not zero.
  FakeRoced roced;
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  std::vector<unsigned char> bytes(3 * kPage);
  fill(bytes.data(), bytes.size(), 71);
  ASSERT_EQ(::pwrite(fileno(f), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  void* p = ::mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(f), 0);
  ASSERT_NE(p, MAP_FAILED);
  int err = 0;
  client::Buffer* b = adopt(roced, p, 3 * kPage, &err);
  ASSERT_NE(b, nullptr) << std::strerror(err);
  EXPECT_TRUE(same(p, 3 * kPage, 71));
  EXPECT_TRUE(same(roced.seen_by_roced(p), 3 * kPage, 71));
  static_cast<char*>(p)[0] = 9;  // private still: the file keeps its bytes
  unsigned char first = 0;
  ASSERT_EQ(::pread(fileno(f), &first, 1, 0), 1);
  EXPECT_EQ(first, static_cast<unsigned char>(71));
  EXPECT_EQ(release(roced, b), 0);
  ::munmap(p, 3 * kPage);
  std::fclose(f);
}

TEST(Adopt, ForgetDropsAContextsRegions) {
  FakeRoced roced;
  char* p = map_pages(2);
  int err = 0;
  ASSERT_NE(adopt(roced, p, kPage, &err), nullptr);
  ASSERT_NE(adopt(roced, p + kPage, kPage, &err), nullptr);
  const std::size_t before = adopt_stats().regions;
  ASSERT_GE(roced.views.size(), 1u);
  forget(roced);  // the Context goes away with its regions
  EXPECT_EQ(adopt_stats().regions, before - roced.views.size());
  EXPECT_EQ(p[5], 0);
  ::munmap(p, 2 * kPage);
}

// roced's view (a fake's mapping) of the byte at `addr`, through Buffer `b`.
char& through(client::Buffer* b, const void* addr) {
  auto* v = static_cast<FakeRoced::View*>(b);
  return static_cast<char*>(v->map)[static_cast<const char*>(addr) - static_cast<char*>(b->addr)];
}

TEST(Adopt, OverlappingRegistrationsShareThePages) {
  FakeRoced roced;
  // Two 2 MiB windows (regions are whole windows): w is the boundary between them.
  const std::size_t window = 2u << 20;
  char* raw = map_pages(3 * window / kPage);
  char* w = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(raw) + 2 * window - 1) &
                                    ~(window - 1));
  ASSERT_LE(w + window, raw + 3 * window);
  char* p = w - 6 * kPage;  // pages p[0..16) around the boundary, which sits at page 6
  fill(p, 16 * kPage, 1);
  int err = 0;
  const std::uint64_t before = settled_file_bytes();
  client::Buffer* b1 = adopt(roced, p + 1 * kPage + 100, 4 * kPage - 200, &err);  // pages 1..4
  ASSERT_NE(b1, nullptr);
  // Pages 3..10: over b1's adopted pages 3..4 and new ones, across the windows' boundary.
  client::Buffer* b2 = adopt(roced, p + 3 * kPage, 8 * kPage, &err);
  ASSERT_NE(b2, nullptr);
  EXPECT_NE(b1, b2);
  EXPECT_EQ(adopt_stats().file_bytes - before, 10 * kPage);  // pages 1..10, each copied once
  // Inside b1 and b2 (whose windows hold b1's): no new region, one more reference on the
  // newest region holding the range, the one Context::reg_mr picks.
  client::Buffer* b3 = adopt(roced, p + 2 * kPage, 10, &err);
  EXPECT_EQ(b3, b2);
  // Near b1, in its window: a region too (a program's heap: one region for many buffers).
  client::Buffer* b5 = adopt(roced, p - 20 * kPage, 100, &err);
  EXPECT_EQ(b5, b2);
  EXPECT_EQ(roced.registrations, 2);
  EXPECT_TRUE(same(p, 16 * kPage, 1));
  // Page 4 is one page for the program and both regions.
  through(b1, p + 4 * kPage + 1) = 'x';
  EXPECT_EQ(p[4 * kPage + 1], 'x');
  EXPECT_EQ(through(b2, p + 4 * kPage + 1), 'x');
  // Releasing b3 and b5 keeps b2; b1's last reference frees b1; b2 goes on.
  EXPECT_EQ(release(roced, b3), 0);
  EXPECT_EQ(release(roced, b5), 0);
  EXPECT_EQ(roced.views.size(), 2u);
  EXPECT_EQ(release(roced, b1), 0);
  EXPECT_EQ(roced.views.size(), 1u);
  p[4 * kPage + 2] = 'y';
  EXPECT_EQ(through(b2, p + 4 * kPage + 2), 'y');
  // Pages 1..2 adopted again: no copy (they are ours already), and b2's region (its windows)
  // holds them.
  client::Buffer* b4 = adopt(roced, p + 1 * kPage, 2 * kPage, &err);
  EXPECT_EQ(b4, b2);
  EXPECT_EQ(roced.registrations, 2);
  EXPECT_EQ(adopt_stats().file_bytes - before, 10 * kPage);  // b5's page was never touched
  EXPECT_EQ(release(roced, b4), 0);
  EXPECT_EQ(release(roced, b2), 0);
  EXPECT_TRUE(roced.views.empty());
  EXPECT_TRUE(same(p, 4 * kPage, 1));  // data kept after every release
  ::munmap(raw, 3 * window);
}

// A new region's window stops short of a shared mapping that is not adopt()'s (a Buffer of
// the Context, made before it): Context::reg_mr takes the newest Buffer holding a range, and
// must not find the window's holes for that Buffer's memory.
TEST(Adopt, WindowsStopAtOtherSharedMappings) {
  FakeRoced roced;
  const std::size_t window = 2u << 20;
  char* raw = map_pages(2 * window / kPage);
  char* w =
      reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(raw) + window - 1) & ~(window - 1));
  const int fd = ::memfd_create("foreign", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 2 * kPage), 0);
  char* low = w + 16 * kPage;  // below the adopted page, and above it
  char* high = w + window / 2;
  ASSERT_NE(::mmap(low, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0),
            MAP_FAILED);
  ASSERT_NE(::mmap(high, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0),
            MAP_FAILED);
  char* p = w + 64 * kPage;
  p[0] = 5;
  int err = 0;
  client::Buffer* b = adopt(roced, p, 100, &err);
  ASSERT_NE(b, nullptr) << std::strerror(err);
  EXPECT_EQ(static_cast<char*>(b->addr), low + 2 * kPage);
  EXPECT_EQ(static_cast<char*>(b->addr) + b->length, high);
  EXPECT_EQ(p[0], 5);
  EXPECT_EQ(release(roced, b), 0);
  ::close(fd);
  ::munmap(raw, 2 * window);
}

TEST(Adopt, RegionsFallBackToTheRangeAtTheMemoryQuota) {
  FakeRoced roced;
  roced.max_length = 64 * kPage;  // roced's max_memory below a window
  char* p = map_pages(4);
  int err = 0;
  client::Buffer* b = adopt(roced, p, 4 * kPage, &err);
  ASSERT_NE(b, nullptr) << std::strerror(err);
  EXPECT_EQ(b->addr, p);
  EXPECT_EQ(b->length, 4 * kPage);
  EXPECT_EQ(release(roced, b), 0);
  ::munmap(p, 4 * kPage);
}

TEST(Adopt, NeighboursInOnePage) {
  FakeRoced roced;
  char* p = map_pages(1);
  int err = 0;
  client::Buffer* a = adopt(roced, p, 100, &err);
  client::Buffer* b = adopt(roced, p + 200, 100, &err);  // the same page: the same region
  EXPECT_EQ(a, b);
  EXPECT_EQ(roced.registrations, 1);
  EXPECT_EQ(release(roced, a), 0);
  EXPECT_EQ(release(roced, b), 0);
  ::munmap(p, kPage);
}

TEST(Adopt, UntouchedPagesStayHolesAndUnmappedPagesAreReturned) {
  FakeRoced roced;
  const std::size_t n = 256;
  char* p = map_pages(n);
  p[17 * kPage] = 1;  // one page touched
  int err = 0;
  const std::uint64_t before = settled_file_bytes();
  client::Buffer* b = adopt(roced, p, n * kPage, &err);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(adopt_stats().file_bytes - before, kPage);
  EXPECT_EQ(p[17 * kPage], 1);
  EXPECT_EQ(p[18 * kPage], 0);
  std::memset(p, 2, n * kPage);  // the program uses it all
  EXPECT_EQ(adopt_stats().file_bytes - before, n * kPage);
  EXPECT_EQ(release(roced, b), 0);
  // Still mapped by the program: kept.
  EXPECT_EQ(adopt_stats().file_bytes - before, n * kPage);
  EXPECT_EQ(p[5], 2);
  ::munmap(p, n * kPage);
  // The next registration call finds it unmapped and drops the file's copy.
  char* q = map_pages(1);
  client::Buffer* c = adopt(roced, q, 1, &err);
  ASSERT_NE(c, nullptr);
  EXPECT_LE(adopt_stats().file_bytes, before + kPage);
  EXPECT_EQ(release(roced, c), 0);
  ::munmap(q, kPage);
}

TEST(Adopt, TransparentHugePages) {
  FakeRoced roced;
  const std::size_t huge = 2u << 20;
  char* raw = map_pages(3 * huge / kPage);
  char* p =
      reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(raw) + huge - 1) & ~(huge - 1));
  ::madvise(p, huge, MADV_HUGEPAGE);
  fill(p, huge, 4);
  int err = 0;
  client::Buffer* b = adopt(roced, p + 12345, 70000, &err);  // part of a huge page
  ASSERT_NE(b, nullptr) << std::strerror(err);
  EXPECT_TRUE(same(p, huge, 4));
  roced.seen_by_roced(p + 12345)[1] = 0x11;
  EXPECT_EQ(static_cast<unsigned char>(p[12346]), 0x11);
  EXPECT_EQ(release(roced, b), 0);
  ::munmap(raw, 3 * huge);
}

TEST(Adopt, ForkGivesTheChildAPrivateCopy) {
  FakeRoced roced;
  char* p = map_pages(4);
  std::memset(p, 'A', 4 * kPage);
  int err = 0;
  client::Buffer* b = adopt(roced, p, 4 * kPage, &err);
  ASSERT_NE(b, nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    bool ok = p[0] == 'A' && !mapping_at(p).shared;  // the fork-time data, private
    std::memset(p, 'C', 4 * kPage);
    // The parent's Buffers are not the child's: releasing one touches no Context (attached,
    // that would deregister the parent's region over the shared socket).
    ok = ok && release(roced, b) == 0 && roced.views.size() == 1;
    // The child adopts anew, into a memfd of its own.
    int e = 0;
    client::Buffer* c = adopt(roced, p, kPage, &e);
    ok = ok && c != nullptr && adopt_stats().fd >= 0 && p[0] == 'C' && mapping_at(p).shared;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(p[0], 'A');  // the child's writes stayed in the child
  roced.seen_by_roced(p)[0] = 'R';
  EXPECT_EQ(p[0], 'R');  // the parent still shares with roced
  EXPECT_EQ(release(roced, b), 0);
  ::munmap(p, 4 * kPage);
}

TEST(Adopt, DontforkLeavesTheChildWithout) {
  FakeRoced roced;
  char* p = map_pages(2);
  int err = 0;
  client::Buffer* b = adopt(roced, p, 2 * kPage, &err, AdoptOptions{.dontfork = true});
  ASSERT_NE(b, nullptr) << std::strerror(err);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<Vma> m;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    ::_exit(read_maps(a, a + 1, m) && (m.empty() || m.front().start > a) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(release(roced, b), 0);
  ::munmap(p, 2 * kPage);
}

TEST(Adopt, PagesMovedByMremapAreAdoptedAtTheirNewAddress) {
  FakeRoced roced;
  char* p = map_pages(4);
  fill(p, 4 * kPage, 51);
  int err = 0;
  client::Buffer* b = adopt(roced, p, 4 * kPage, &err);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(release(roced, b), 0);
  char* to = map_pages(8);  // somewhere free to move to
  char* q = static_cast<char*>(
      ::mremap(p, 4 * kPage, 4 * kPage, MREMAP_MAYMOVE | MREMAP_FIXED, to + 2 * kPage));
  ASSERT_EQ(q, to + 2 * kPage);
  EXPECT_NE(mapping_at(q).offset, reinterpret_cast<std::uintptr_t>(q));  // moved: offset != address
  client::Buffer* c = adopt(roced, q, 4 * kPage, &err);
  ASSERT_NE(c, nullptr) << std::strerror(err);
  EXPECT_EQ(mapping_at(q).offset, reinterpret_cast<std::uintptr_t>(q));
  EXPECT_TRUE(same(q, 4 * kPage, 51));
  roced.seen_by_roced(q)[9] = 'm';
  EXPECT_EQ(q[9], 'm');
  EXPECT_EQ(release(roced, c), 0);
  ::munmap(to, 8 * kPage);
}

TEST(Adopt, DontforkAdvisedLaterIsKept) {
  // libibverbs after ibv_fork_init advises MADV_DONTFORK itself, on what is mapped by then.
  FakeRoced roced;
  char* p = map_pages(2);
  int err = 0;
  client::Buffer* b = adopt(roced, p, 2 * kPage, &err);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(::madvise(p, 2 * kPage, MADV_DONTFORK), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<Vma> m;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    ::_exit(read_maps(a, a + 1, m) && (m.empty() || m.front().start > a) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_TRUE(mapping_at(p).shared);  // the parent's stays shared with roced
  EXPECT_EQ(release(roced, b), 0);
  ::munmap(p, 2 * kPage);
}

TEST(Adopt, ConcurrentOverlappingRegistrations) {
  // Threads register and release overlapping ranges of one buffer at once; every Buffer they
  // get maps, on "roced's" side, the bytes the program sees.
  FakeRoced roced;
  constexpr std::size_t kPages = 64;
  char* p = map_pages(kPages);
  fill(p, kPages * kPage, 61);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      unsigned seed = t * 7919 + 1;
      for (int i = 0; i < 200; ++i) {
        seed = seed * 1103515245 + 12345;
        const std::size_t first = (seed >> 8) % kPages;
        const std::size_t len = 1 + (seed >> 16) % ((kPages - first) * kPage - 1);
        char* at = p + first * kPage + (seed >> 4) % 64;
        const std::size_t n = std::min(len, static_cast<std::size_t>(p + kPages * kPage - at));
        int err = 0;
        client::Buffer* b = adopt(roced, at, n, &err);
        if (b == nullptr) {
          ++bad;
          continue;
        }
        auto* view = static_cast<FakeRoced::View*>(b);
        const std::size_t off = static_cast<std::size_t>(at - static_cast<char*>(b->addr));
        if (std::memcmp(static_cast<char*>(view->map) + off, at, n) != 0) ++bad;
        if (release(roced, b) != 0) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(same(p, kPages * kPage, 61));
  EXPECT_TRUE(roced.views.empty());
  EXPECT_EQ(adopt_stats().references, 0u);
  ::munmap(p, kPages * kPage);
}

TEST(Adopt, QuotaErrorsComeBack) {
  FakeRoced roced;
  roced.max_regions = 0;
  char* p = map_pages(1);
  int err = 0;
  EXPECT_EQ(adopt(roced, p, 10, &err), nullptr);
  EXPECT_EQ(err, EDQUOT);
  ::munmap(p, kPage);
}

}  // namespace
}  // namespace roce::verbs_compat::test
