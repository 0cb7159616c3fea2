// verbs-memory-attached: verbs/memory/adopt.h against real roced instances (attached over
// their sockets; the integration test runs two on a memif link).
//   check SOCK_A SOCK_B   a process attached to A adopts a malloc'd buffer, a stack buffer,
//                         overlapping ranges and a read-only mapping; a context on B (in the
//                         same process) WRITEs into them and READs them over the link; every
//                         byte checked at the program's own addresses; EFAULT for a hole.
//   hold SOCK_A (registered|released)   adopts and registers, optionally releases again,
//                         prints HOLDING and waits to be killed (kill -9 by the test).
//   bench SOCK_A          the cost of adoption: us per MiB, and per registration of pages
//                         already adopted.
#include <roce/client.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "verbs/memory/adopt.h"

namespace {

using namespace roce;
using client::Buffer;
using client::Context;
using client::Mr;
using verbs::SendWr;
using verbs::Sge;
using verbs::WrOpcode;
using verbs_compat::adopt;
using verbs_compat::AdoptOptions;
using verbs_compat::release;

constexpr std::uint32_t kAll =
    verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite | verbs::kAccessRemoteRead;

[[noreturn]] void die(const std::string& what, int e = 0) {
  std::fprintf(stderr, "verbs-memory-attached: FAIL: %s%s%s\n", what.c_str(), e ? ": " : "",
               e ? std::strerror(e) : "");
  std::exit(1);
}
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

/// An adopted range with its MR on the target context (what the provider's ibv_reg_mr does).
struct Registered {
  Buffer* buf = nullptr;
  Mr* mr = nullptr;
};
Registered reg(Context& ctx, client::Pd* pd, void* addr, std::size_t len, std::uint32_t access,
               int* err = nullptr) {
  int e = 0;
  AdoptOptions o;
  o.writable = access & (verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite);
  Registered r;
  r.buf = adopt(ctx, addr, len, &e, o);
  if (r.buf == nullptr) {
    if (err) {
      *err = e;
      return r;
    }
    die("adopt", e);
  }
  r.mr = ctx.reg_mr(pd, addr, len, access);
  if (r.mr == nullptr) die("reg_mr on an adopted range", errno);
  return r;
}
void unreg(Context& ctx, Registered& r) {
  if (const int rc = ctx.dereg_mr(r.mr)) die("dereg_mr", rc);
  if (const int rc = release(ctx, r.buf)) die("release", rc);
}

/// B's side: a QP connected to A's, a buffer of its own, WRITE and READ towards A's MRs.
struct Peer {
  Context* a;
  Context* b;
  client::Pd* pd_b;
  client::Qp* qp_a;
  client::Qp* qp_b;
  client::Cq* cq_b;
  Buffer* mem;
  Mr* mr;

  void rdma(WrOpcode op, std::size_t off, std::size_t len, const Mr* remote,
            const void* remote_addr) {
    Sge sge{reinterpret_cast<std::uint64_t>(static_cast<char*>(mem->addr) + off),
            static_cast<std::uint32_t>(len), mr->lkey};
    SendWr wr;
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = verbs::kSendSignaled;
    wr.rdma.remote_addr =
        remote->iova + static_cast<std::uint64_t>(static_cast<const char*>(remote_addr) -
                                                  static_cast<const char*>(remote->addr));
    wr.rdma.rkey = remote->rkey;
    if (const int rc = b->post_send(qp_b, &wr, nullptr)) die("post_send", rc);
    verbs::Wc wc;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      const int n = b->poll_cq(cq_b, 1, &wc);
      if (n < 0) die("poll_cq", -n);
      if (n == 1) break;
      if (std::chrono::steady_clock::now() > end) die("no completion in 10 s");
      b->wait_cq(cq_b, 100);
    }
    if (wc.status != verbs::WcStatus::kSuccess)
      die("remote addr " + std::to_string(wr.rdma.remote_addr) + " rkey " +
          std::to_string(wr.rdma.rkey) + " mr iova " + std::to_string(remote->iova) + " len " +
          std::to_string(remote->length) + " op len " + std::to_string(len) + ": " +
          std::string("RDMA completed with ") + std::string(verbs::to_string(wc.status)));
  }
  /// Peer writes `len` bytes of pattern `seed` at `dst` (in `remote`), then reads them back.
  void write_to(const Mr* remote, void* dst, std::size_t len, unsigned seed) {
    fill(mem->addr, len, seed);
    rdma(WrOpcode::kWrite, 0, len, remote, dst);
  }
  bool read_from(const Mr* remote, const void* src, std::size_t len, unsigned seed) {
    std::memset(static_cast<char*>(mem->addr) + (4 << 20), 0, len);
    rdma(WrOpcode::kRead, 4 << 20, len, remote, src);
    return same(static_cast<char*>(mem->addr) + (4 << 20), len, seed);
  }
};

__attribute__((noinline)) void stack_case(Context& a, client::Pd* pd, Peer& peer) {
  unsigned char buf[24000];
  fill(buf, sizeof buf, 21);
  Registered r = reg(a, pd, buf + 5, sizeof buf - 10, kAll);
  if (!same(buf, sizeof buf, 21)) die("stack buffer changed by its adoption");
  peer.write_to(r.mr, buf + 100, 20000, 22);
  if (!same(buf + 100, 20000, 22)) die("stack buffer: the peer's WRITE is not at its address");
  unreg(a, r);
  std::printf("verbs-memory-attached: OK: stack buffer adopted, WRITE of 20000 bytes seen\n");
}

int check(const std::string& sa, const std::string& sb) {
  auto a = Context::attach(sa);
  auto b = Context::attach(sb);
  if (!a || !b) die("attach", errno);
  client::Pd* pd_a = a->alloc_pd();
  client::Pd* pd_b = b->alloc_pd();
  client::Cq* cq_a = a->create_cq(16);
  client::Cq* cq_b = b->create_cq(16);
  verbs::QpCap cap;
  cap.max_send_wr = cap.max_recv_wr = 8;
  cap.max_send_sge = cap.max_recv_sge = 1;
  client::Qp* qa = a->create_qp(pd_a, verbs::QpType::kRc, cq_a, cq_a, cap);
  client::Qp* qb = b->create_qp(pd_b, verbs::QpType::kRc, cq_b, cq_b, cap);
  if (!pd_a || !pd_b || !cq_a || !cq_b || !qa || !qb) die("resources", errno);
  client::RcPeer to_b{qb->qp_num, 200, b->port().gid, std::nullopt};
  client::RcPeer to_a{qa->qp_num, 100, a->port().gid, std::nullopt};
  if (const int rc = a->connect_rc(qa, to_b, 100, verbs::Mtu::k1024)) die("connect A", rc);
  if (const int rc = b->connect_rc(qb, to_a, 200, verbs::Mtu::k1024)) die("connect B", rc);
  Buffer* mem = b->alloc_buffer(8 << 20);
  if (!mem) die("alloc_buffer", errno);
  Mr* mr_b = b->reg_mr(pd_b, mem->addr, mem->length, kAll);
  if (!mr_b) die("reg_mr B", errno);
  Peer peer{a.get(), b.get(), pd_b, qa, qb, cq_b, mem, mr_b};
  const long ps = ::sysconf(_SC_PAGESIZE);

  // 1. malloc'd memory: the program's data stays; the peer's WRITE shows at its address; its
  // READ gets what the program wrote there after the adoption.
  const std::size_t n = (1 << 20) + 777;
  auto* m = static_cast<unsigned char*>(std::malloc(n));
  fill(m, n, 11);
  Registered r1 = reg(*a, pd_a, m + 3, n - 3, kAll);
  if (!same(m, n, 11)) die("malloc'd buffer changed by its adoption");
  if (!peer.read_from(r1.mr, m + 3, 1 << 20, 11 + 3 * 131))
    die("READ of the adopted buffer differs from the program's data");
  peer.write_to(r1.mr, m + 500, 1 << 20, 12);
  if (!same(m + 500, 1 << 20, 12)) die("the peer's WRITE is not at the program's address");
  fill(m, n, 13);  // the program writes; the peer reads it
  if (!peer.read_from(r1.mr, m + 3, 4096, 13 + 3 * 131)) die("READ after the program's write");
  std::printf(
      "verbs-memory-attached: OK: malloc'd buffer adopted, data kept, WRITE and READ of 1 MiB "
      "at the program's own address\n");

  // 2. stack
  stack_case(*a, pd_a, peer);

  // 3. overlapping: R2 spans R1's last pages and new ones; R1 deregistered, R2 still works
  auto* o = static_cast<unsigned char*>(
      ::mmap(nullptr, 16 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  fill(o, 16 * ps, 31);
  Registered o1 = reg(*a, pd_a, o + 1 * ps, 5 * ps, kAll);
  Registered o2 = reg(*a, pd_a, o + 4 * ps + 9, 8 * ps, kAll);
  Registered o3 = reg(*a, pd_a, o + 2 * ps, 100, kAll);  // inside o1: o1's region, a new MR
  if (o3.buf != o1.buf) die("a range inside an adopted one got a region of its own");
  if (!same(o, 16 * ps, 31)) die("overlapping adoptions changed the data");
  peer.write_to(o1.mr, o + 5 * ps, static_cast<std::size_t>(ps), 32);  // a page both share
  if (!peer.read_from(o2.mr, o + 5 * ps, static_cast<std::size_t>(ps), 32))
    die("a page written through one MR reads otherwise through the other");
  unreg(*a, o1);
  peer.write_to(o3.mr, o + 2 * ps, 100, 35);  // o1's region lives on for o3
  if (!same(o + 2 * ps, 100, 35)) die("WRITE through the MR inside a released one");
  unreg(*a, o3);
  peer.write_to(o2.mr, o + 6 * ps, 2 * static_cast<std::size_t>(ps), 33);
  if (!same(o + 6 * ps, 2 * static_cast<std::size_t>(ps), 33))
    die("WRITE after the overlap's dereg");
  unreg(*a, o2);
  std::printf(
      "verbs-memory-attached: OK: overlapping registrations share pages; dereg of one keeps "
      "the others\n");

  // 4. a read-only mapping: EFAULT for write access, fine for remote read
  auto* ro = static_cast<unsigned char*>(
      ::mmap(nullptr, 4 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  fill(ro, 4 * ps, 41);
  ::mprotect(ro, 4 * ps, PROT_READ);
  int err = 0;
  reg(*a, pd_a, ro, 4 * ps, kAll, &err);
  if (err != EFAULT)
    die("read-only mapping with write access: want EFAULT, got " + std::to_string(err));
  Registered r4 = reg(*a, pd_a, ro, 4 * ps, verbs::kAccessRemoteRead);
  if (!peer.read_from(r4.mr, ro + 100, 3 * ps, 41 + 100 * 131)) die("READ of a read-only mapping");
  unreg(*a, r4);
  std::printf(
      "verbs-memory-attached: OK: read-only mapping: EFAULT for write access, READ works\n");

  // 5. an unmapped range
  auto* h = static_cast<unsigned char*>(
      ::mmap(nullptr, 3 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ::munmap(h + ps, ps);
  reg(*a, pd_a, h, 3 * ps, kAll, &err);
  if (err != EFAULT) die("a range with a hole: want EFAULT, got " + std::to_string(err));
  std::printf("verbs-memory-attached: OK: a range with an unmapped page: EFAULT\n");

  // 6. roced's checks of a region's file offset (attach protocol 6): page aligned, inside the
  // file. A memfd of 4 pages: the last page is fine, one past it and an unaligned one are not.
  // The memfd is mapped inside the 2 MiB window of an adopted page's region, as mmap may place
  // any mapping next to adopted memory: the MR must take the memfd's region, not the window's
  // (whose file holds nothing there; a READ then got zeros, in about 1 run in 40).
  {
    constexpr std::size_t kWin = 2u << 20;
    auto* reserve = static_cast<char*>(
        ::mmap(nullptr, 2 * kWin, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (reserve == MAP_FAILED) die("mmap", errno);
    char* win = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(reserve) + kWin - 1) &
                                        ~std::uintptr_t{kWin - 1});
    if (::mprotect(win, static_cast<std::size_t>(ps), PROT_READ | PROT_WRITE) != 0)
      die("mprotect", errno);
    win[0] = 1;
    Registered near = reg(*a, pd_a, win, 8, kAll);
    const int fd = ::memfd_create("offset-check", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ::ftruncate(fd, 4 * ps) != 0) die("memfd", errno);
    void* map =
        ::mmap(win + kWin / 2, 4 * ps, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (map == MAP_FAILED) die("mmap", errno);
    static_cast<char*>(map)[3 * ps + 1] = 'z';
    const auto page = static_cast<std::uint64_t>(ps);
    Buffer* ok = a->register_memfd_at(fd, 3 * page, static_cast<char*>(map) + 3 * ps, page);
    if (ok == nullptr) die("register_memfd_at of the last page", errno);
    Registered last{ok, a->reg_mr(pd_a, static_cast<char*>(map) + 3 * ps, page, kAll)};
    if (!last.mr) die("reg_mr on an offset region", errno);
    peer.rdma(WrOpcode::kRead, 4 << 20, 2, last.mr, static_cast<char*>(map) + 3 * ps);
    if (const char got = static_cast<char*>(peer.mem->addr)[(4 << 20) + 1]; got != 'z')
      die("READ through a region at a file offset: byte 1 is " +
          std::to_string(static_cast<unsigned char>(got)) + ", not 'z'");
    a->dereg_mr(last.mr);
    a->free_buffer(ok);
    errno = 0;
    if (a->register_memfd_at(fd, 4 * page, map, page) != nullptr || errno != EINVAL)
      die("a region past the file's end: want EINVAL", errno);
    if (a->register_memfd_at(fd, page / 2, map, page) != nullptr || errno != EINVAL)
      die("an unaligned file offset: want EINVAL", errno);
    if (a->register_memfd_at(fd, ~std::uint64_t{0} - page + 1, map, page) != nullptr ||
        errno != EINVAL)
      die("a file offset that wraps: want EINVAL", errno);
    ::close(fd);
    unreg(*a, near);
    ::munmap(reserve, 2 * kWin);
    std::printf(
        "verbs-memory-attached: OK: regions at file offsets: inside the file mapped, past it, "
        "unaligned or wrapping EINVAL\n");
  }

  unreg(*a, r1);
  const auto st = verbs_compat::adopt_stats();
  if (st.regions != 0 || st.references != 0) die("regions left after every release");
  std::printf("verbs-memory-attached: OK: every region released\n");
  std::free(m);
  return 0;
}

int hold(const std::string& sa, bool released) {
  auto a = Context::attach(sa);
  if (!a) die("attach", errno);
  client::Pd* pd = a->alloc_pd();
  const std::size_t n = 8 << 20;
  auto* m = static_cast<unsigned char*>(std::malloc(n));
  fill(m, n, 1);
  Registered r = reg(*a, pd, m, n, kAll);
  Registered s = reg(*a, pd, m + n / 2, n / 2, kAll);
  if (released) {
    unreg(*a, s);
    unreg(*a, r);
  }
  std::printf("verbs-memory-attached: HOLDING %s\n", released ? "released" : "registered");
  std::fflush(stdout);
  for (;;) ::pause();
}

double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

int bench(const std::string& sa) {
  auto a = Context::attach(sa);
  if (!a) die("attach", errno);
  client::Pd* pd = a->alloc_pd();
  std::printf("%-10s %-44s %12s %12s\n", "size", "case", "us", "us/MiB");
  for (std::size_t mib : {1, 16, 64}) {
    const std::size_t n = mib << 20;
    const auto row = [&](const char* what, double us) {
      std::printf("%-10s %-44s %12.1f %12.1f\n", (std::to_string(mib) + " MiB").c_str(), what, us,
                  us / static_cast<double>(mib));
    };
    // Touched memory (what a program registers after filling it).
    auto* m = static_cast<unsigned char*>(
        ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    std::memset(m, 1, n);
    int err = 0;
    auto t = std::chrono::steady_clock::now();
    Buffer* b = adopt(*a, m, n, &err);
    const double first = us_since(t);
    if (!b) die("adopt", err);
    t = std::chrono::steady_clock::now();
    Mr* mr = a->reg_mr(pd, m, n, kAll);
    const double mr_us = us_since(t);
    if (!mr) die("reg_mr", errno);
    row("adopt, touched pages (copy+remap+region)", first);
    row("reg_mr after it (roced's MR)", mr_us);
    // Again, while the first is registered: no copy, the same region.
    t = std::chrono::steady_clock::now();
    Buffer* b2 = adopt(*a, m + 4096, n - 8192, &err);
    row("adopt again, region shared", us_since(t));
    release(*a, b2);
    a->dereg_mr(mr);
    release(*a, b);
    // Again after the release: no copy, a new region.
    t = std::chrono::steady_clock::now();
    b = adopt(*a, m, n, &err);
    row("adopt again after release (new region)", us_since(t));
    release(*a, b);
    // The program's first touch of the pages after the adoption (page faults of the memfd).
    t = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; i += 4096) m[i] = 2;
    row("first touch after adoption (page faults)", us_since(t));
    // fork() while the range is adopted: the pages go private for the fork and back.
    t = std::chrono::steady_clock::now();
    const pid_t child = ::fork();
    if (child == 0) ::_exit(m[0] == 2 ? 0 : 1);
    row("fork() in the parent, range adopted", us_since(t));
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the forked child saw other data");
    if (m[4096] != 2) die("the parent's data changed over fork()");
    ::munmap(m, n);
    // The next call finds the range unmapped and returns its pages (a tiny adoption carries it).
    {
      void* tiny =
          ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      t = std::chrono::steady_clock::now();
      Buffer* tb = adopt(*a, tiny, 1, &err);
      row("next adopt after munmap (returns the pages)", us_since(t));
      if (tb) release(*a, tb);
      ::munmap(tiny, 4096);
    }
    // The window for other threads: a thread increments a counter in the cover's first page
    // (outside the registered range, as a neighbour's variable would be), another one in a
    // middle page, while the range is adopted; the increments lost at each thread's rate
    // estimate its window (the edge pages are copied last, right before the remap).
    {
      auto* w = static_cast<unsigned char*>(
          ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      std::memset(w, 1, n);
      struct Writer {
        volatile std::uint64_t* counter;
        std::uint64_t done = 0;
        double us = 0;
      };
      Writer edge{reinterpret_cast<volatile std::uint64_t*>(w)};
      Writer middle{reinterpret_cast<volatile std::uint64_t*>(w + n / 2)};
      std::atomic<int> ready{0};
      std::atomic<bool> stop{false};
      const auto run = [&](Writer& wr) {
        *wr.counter = 0;
        ++ready;
        while (ready.load() < 3) {
        }
        const auto t0 = std::chrono::steady_clock::now();
        while (!stop.load(std::memory_order_relaxed)) {
          *wr.counter = *wr.counter + 1;
          ++wr.done;
        }
        wr.us = us_since(t0);
      };
      std::thread t1(run, std::ref(edge)), t2(run, std::ref(middle));
      while (ready.load() < 2) {
      }
      ++ready;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      Buffer* wb = adopt(*a, w + 64, n - 64, &err);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      stop = true;
      t1.join();
      t2.join();
      if (!wb) die("adopt", err);
      for (const Writer* wr : {&edge, &middle}) {
        const double lost = static_cast<double>(wr->done - *wr->counter);
        const double per_us = static_cast<double>(wr->done) / wr->us;
        std::printf("%-10s %-44s %12.1f %12s (%.0f increments of %.0f/us lost)\n",
                    (std::to_string(mib) + " MiB").c_str(),
                    wr == &edge ? "window: other thread, cover's first page"
                                : "window: other thread, a middle page",
                    lost / per_us, "-", lost, per_us);
      }
      release(*a, wb);
      ::munmap(w, n);
      // Its pages returned now (a tiny adoption carries it), not in the next row's time.
      void* tiny =
          ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (Buffer* tb = adopt(*a, tiny, 1, &err)) release(*a, tb);
      ::munmap(tiny, 4096);
    }
    // Untouched memory: holes, nothing copied.
    m = static_cast<unsigned char*>(
        ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    t = std::chrono::steady_clock::now();
    b = adopt(*a, m, n, &err);
    row("adopt, untouched pages (holes)", us_since(t));
    release(*a, b);
    ::munmap(m, n);
    // For scale: memcpy of the same size.
    std::vector<unsigned char> x(n, 3), y(n);
    t = std::chrono::steady_clock::now();
    std::memcpy(y.data(), x.data(), n);
    row("memcpy of the size (scale)", us_since(t));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "check" && argc == 4) return check(argv[2], argv[3]);
  if (mode == "hold" && argc == 4) return hold(argv[2], std::string(argv[3]) == "released");
  if (mode == "bench" && argc == 3) return bench(argv[2]);
  std::fprintf(stderr,
               "usage: verbs-memory-attached check SOCK_A SOCK_B | hold SOCK_A "
               "(registered|released) | bench SOCK_A\n");
  return 2;
}
