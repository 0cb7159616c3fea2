// What an attached client may do to roced's memory, checked against a real AttachServer in this
// process: its lane on the poll loop of a net_ring port (no hugepages, no peer), the client
// speaking the attach protocol on the raw socket so that it can send what libroce never would.
//
// - an SRQ whose error CQ was destroyed: refused receives must not touch the freed CQ;
// - a memfd shrunk by another thread while roced registers it: roced seals before it measures;
// - queue sizes beyond the documented limits (EINVAL) and allocations beyond the client's
//   memory quota (EDQUOT), every roced-side byte charged;
// - refused work requests while the client never polls: the lane stops at a full CQ;
// - regions beyond their count (EDQUOT), and an allocation failure inside a command on the
//   lcore: the client gets ENOMEM, roced keeps serving.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_ring.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/attach/attach_server.h"
#include "controlplane/attach/protocol.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/poll_loop.h"

// ---- allocation failure on demand --------------------------------------------------------------
// While `g_fail_over` is non-zero, an operator new of at least that many bytes on the lcore's
// thread throws std::bad_alloc: what a failed allocation in a posted command looks like.
namespace {
std::atomic<std::size_t> g_fail_over{0};
thread_local bool t_lcore = false;
void* alloc_or_throw(std::size_t n) {
  if (t_lcore && g_fail_over.load(std::memory_order_relaxed) != 0 &&
      n >= g_fail_over.load(std::memory_order_relaxed))
    throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace
void* operator new(std::size_t n) { return alloc_or_throw(n); }
void* operator new[](std::size_t n) { return alloc_or_throw(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace roce::attach {
namespace {

const wire::MacAddr kMac{{0x02, 0, 0x5e, 0, 0x08, 1}};
const wire::Ipv4Addr kIp{0xC0000281};  // 192.0.2.129
const wire::MacAddr kPeerMac{{0x02, 0, 0x5e, 0, 0x08, 2}};
const wire::Ipv4Addr kPeerIp{0xC0000282};  // 192.0.2.130

class Eal : public ::testing::Environment {
 public:
  void SetUp() override {
    port::eal_init({"--no-huge", "--no-shconf", "-m", "256", "--no-pci",
                    "--file-prefix=attachguard" + std::to_string(getpid()), "--log-level=*:error",
                    "-l", "0"});
  }
};
const auto* const kEal = ::testing::AddGlobalTestEnvironment(new Eal);

// roced's side: one net_ring port, its poll loop on a thread of its own, the attach server.
class Roced {
 public:
  /// `peer`: the two ports are wired to each other (what one sends the other receives);
  /// `tweak` changes the attach configuration; `mac` and `ip` are the port's.
  explicit Roced(const AttachQuotas& q = {}, std::uint32_t handle_limit = 0xFFFFFFFFu,
                 Roced* peer = nullptr, const std::function<void(AttachConfig&)>& tweak = {},
                 wire::MacAddr mac = kMac, wire::Ipv4Addr ip = kIp) {
    static int n = 0;
    const std::string name = "ag" + std::to_string(n++);
    ip_ = ip;
    if (peer != nullptr) {
      rx_ = peer->tx_;
      tx_ = peer->rx_;
    } else {
      rx_ = rte_ring_create((name + "_rx").c_str(), 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
      tx_ = rte_ring_create((name + "_tx").c_str(), 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    }
    if (!rx_ || !tx_) throw std::runtime_error("rings");
    const int id = rte_eth_from_rings(name.c_str(), &rx_, 1, &tx_, 1, 0);
    char dev[RTE_ETH_NAME_MAX_LEN];
    if (id < 0 || rte_eth_dev_get_name_by_port(static_cast<std::uint16_t>(id), dev) != 0)
      throw std::runtime_error("net_ring port");
    engine::EngineConfig ec;
    ec.mac = mac;
    ec.ipv4 = ip;
    ec.max_qps = 64;
    eng_ = std::make_unique<engine::Engine>(ec);
    port::PortSpec ps;
    ps.device = dev;
    ps.mac = mac;
    ps.mbufs = 1024;
    port_ = std::make_unique<port::DpdkPort>(ps);
    loop_ = std::make_unique<port::PollLoop>(*port_, *eng_);
    AttachConfig cfg;
    cfg.socket = "/tmp/roce-attach-guard-" + std::to_string(getpid()) + "-" + name + ".sock";
    cfg.quotas = q;
    cfg.handle_limit = handle_limit;
    if (tweak) tweak(cfg);
    server_ = std::make_unique<AttachServer>(
        cfg, std::vector<AttachPort>{{"p0", mac, ip, {loop_.get()}}});
    thread_ = std::thread([this] {
      t_lcore = true;
      while (!stop_.load()) {
        loop_->poll_once();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
  }
  ~Roced() {
    server_->stop();
    stop_ = true;
    thread_.join();
    server_.reset();
  }
  const std::string& socket() const { return server_->socket_path(); }
  /// Frames the port has sent and nobody took (the net_ring's tx ring, 1024 at most).
  unsigned sent() const { return rte_ring_count(tx_); }
  AttachServer& server() { return *server_; }
  engine::Engine& engine() { return *eng_; }
  /// True while the poll loop thread still runs (a command that threw would have ended it).
  bool alive() const { return !stop_.load(); }
  /// A segment host at `ip` (MAC `mac`) asks for our address: the port's ARP cache learns it,
  /// as from the wire (the frame handed to the loop's neighbour code on its own thread).
  void teach(wire::Ipv4Addr ip, wire::MacAddr mac) {
    std::array<std::uint8_t, 42> f{};
    std::fill_n(f.begin(), 6, 0xFF);
    std::copy(mac.b.begin(), mac.b.end(), f.begin() + 6);
    f[12] = 0x08, f[13] = 0x06;  // ARP
    f[14] = 0, f[15] = 1, f[16] = 0x08, f[17] = 0, f[18] = 6, f[19] = 4, f[20] = 0, f[21] = 1;
    std::copy(mac.b.begin(), mac.b.end(), f.begin() + 22);  // sender MAC
    for (int i = 0; i < 4; ++i) f[28 + i] = static_cast<std::uint8_t>(ip.v >> (24 - 8 * i));
    for (int i = 0; i < 4; ++i) f[38 + i] = static_cast<std::uint8_t>(ip_.v >> (24 - 8 * i));
    std::atomic<bool> done{false};
    port::PollLoop* l = loop_.get();
    const std::array<std::uint8_t, 42>* fp = &f;
    std::atomic<bool>* d = &done;
    while (!loop_->post([l, fp, d] {
      std::array<std::uint8_t, 128> out{};
      (void)l->neighbour().on_frame(*fp, out);
      d->store(true);
    }))
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    while (!done.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

 private:
  rte_ring* rx_ = nullptr;
  rte_ring* tx_ = nullptr;
  wire::Ipv4Addr ip_;
  std::unique_ptr<engine::Engine> eng_;
  std::unique_ptr<port::DpdkPort> port_;
  std::unique_ptr<port::PollLoop> loop_;
  std::unique_ptr<AttachServer> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A client on the raw socket: requests as the protocol allows them, not as libroce builds them.
class Raw {
 public:
  /// Says hello with `version`: a failed hello throws only at this library's own version
  /// (hello_err() tells the others).
  explicit Raw(const std::string& path, std::uint32_t version = kVersion) {
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      throw std::runtime_error("connect " + path);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    Request rq;
    rq.op = Op::kHello;
    rq.hello.version = version;
    Reply rep;
    hello_err_ = call(rq, rep);
    if (hello_err_ != 0 && version == kVersion) throw std::runtime_error("hello");
  }
  ~Raw() { ::close(fd_); }
  int hello_err() const { return hello_err_; }
  /// kRegMr (rereg = 0) or kReregMr of the MR `rereg`: the reply's key in `key`.
  int mr(std::uint32_t pd, std::uint32_t region, std::uint64_t offset, std::uint64_t length,
         std::uint32_t access, std::uint32_t& handle, std::uint32_t& key, std::uint32_t rereg = 0) {
    Request rq;
    rq.op = rereg != 0 ? Op::kReregMr : Op::kRegMr;
    rq.handle = rereg;
    rq.mr.pd = pd;
    rq.mr.region = region;
    rq.mr.offset = offset;
    rq.mr.length = length;
    rq.mr.iova = 0x10000 + offset;
    rq.mr.access = access;
    Reply rep;
    const int rc = call(rq, rep);
    if (rc == 0) {
      handle = rep.handle;
      key = rep.key;
    }
    return rc;
  }
  /// Sends `rq` (with `fd_in` passed when >= 0) and returns the reply's errno; the descriptors
  /// that came with it are closed unless `keep` wants them.
  int call(Request& rq, Reply& rep, int fd_in = -1, std::vector<int>* keep = nullptr) {
    rq.seq = ++seq_;
    iovec iov{&rq, sizeof rq};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(2 * sizeof(int))] = {};
    if (fd_in >= 0) {
      m.msg_control = ctl;
      m.msg_controllen = CMSG_SPACE(sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd_in, sizeof(int));
    }
    if (::sendmsg(fd_, &m, 0) != sizeof rq) return -1;
    iov = {&rep, sizeof rep};
    msghdr r{};
    r.msg_iov = &iov;
    r.msg_iovlen = 1;
    r.msg_control = ctl;
    r.msg_controllen = sizeof ctl;
    if (::recvmsg(fd_, &r, MSG_CMSG_CLOEXEC) != sizeof rep) return -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&r); c != nullptr; c = CMSG_NXTHDR(&r, c)) {
      const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < k; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
        if (keep)
          keep->push_back(f);
        else
          ::close(f);
      }
    }
    return rep.err;
  }
  std::uint32_t pd() {
    Request rq;
    rq.op = Op::kAllocPd;
    Reply rep;
    EXPECT_EQ(call(rq, rep), 0);
    return rep.handle;
  }
  int cq(std::uint32_t depth, std::uint32_t& h, std::vector<int>* keep = nullptr,
         Reply* out = nullptr) {
    Request rq;
    rq.op = Op::kCreateCq;
    rq.cq.depth = depth;
    Reply rep;
    const int rc = call(rq, rep, -1, keep);
    h = rep.handle;
    if (out) *out = rep;
    return rc;
  }
  int srq(std::uint32_t pd, std::uint32_t max_wr, std::uint32_t& h, Reply& rep,
          std::vector<int>* keep) {
    Request rq;
    rq.op = Op::kCreateSrq;
    rq.srq.pd = pd;
    rq.srq.max_wr = max_wr;
    rq.srq.max_sge = 1;
    const int rc = call(rq, rep, -1, keep);
    h = rep.handle;
    return rc;
  }
  int qp(std::uint32_t pd, std::uint32_t scq, std::uint32_t rcq, std::uint32_t srq,
         const engine::QpCap& cap, std::uint32_t& h, Reply* out = nullptr,
         std::vector<int>* keep = nullptr, engine::QpType type = engine::QpType::kRc) {
    Request rq;
    rq.op = Op::kCreateQp;
    rq.qp.pd = pd;
    rq.qp.type = type;
    rq.qp.send_cq = scq;
    rq.qp.recv_cq = rcq;
    rq.qp.srq = srq;
    rq.qp.cap = cap;
    Reply rep;
    const int rc = call(rq, rep, -1, keep);
    h = rep.handle;
    if (out) *out = rep;
    return rc;
  }
  int modify(std::uint32_t qp, const verbs::QpAttr& a, std::uint32_t mask) {
    Request rq;
    rq.op = Op::kModifyQp;
    rq.modify.qp = qp;
    rq.modify.attr = a;
    rq.modify.mask = mask;
    Reply rep;
    return call(rq, rep);
  }
  int destroy(Op op, std::uint32_t h) {
    Request rq;
    rq.op = op;
    rq.handle = h;
    Reply rep;
    return call(rq, rep);
  }
  /// kCmOpen: the CM event ring's memfd and eventfd go to `keep` (closed otherwise).
  int cm_open(std::vector<int>* keep = nullptr, Reply* out = nullptr) {
    Request rq;
    rq.op = Op::kCmOpen;
    Reply rep;
    const int rc = call(rq, rep, -1, keep);
    if (out) *out = rep;
    return rc;
  }
  int cm_connect(std::uint32_t qp, wire::Ipv4Addr dst, std::uint16_t port,
                 std::uint32_t* id = nullptr) {
    Request rq;
    rq.op = Op::kCmConnect;
    rq.cm.qp = qp;
    rq.cm.dst = dst;
    rq.cm.port = port;
    Reply rep;
    const int rc = call(rq, rep);
    if (id) *id = rep.handle;
    return rc;
  }
  int cm(Op op, std::uint32_t id, std::uint32_t qp = 0, std::uint16_t port = 0) {
    Request rq;
    rq.op = op;
    rq.cm.id = id;
    rq.cm.qp = qp;
    rq.cm.port = port;
    Reply rep;
    return call(rq, rep);
  }
  int region(int memfd, std::uint64_t len, std::uint32_t* h = nullptr) {
    Request rq;
    rq.op = Op::kRegRegion;
    rq.region.length = len;
    rq.region.client_addr = 0x10000;
    Reply rep;
    const int rc = call(rq, rep, memfd);
    if (h) *h = rep.handle;
    return rc;
  }

 private:
  int fd_ = -1;
  std::uint32_t seq_ = 0;
  int hello_err_ = 0;
};

engine::QpCap small_cap(std::uint32_t recv_wr = 4) {
  engine::QpCap c;
  c.max_send_wr = 4;
  c.max_recv_wr = recv_wr;
  c.max_send_sge = 1;
  c.max_recv_sge = 1;
  c.max_inline_data = 0;
  return c;
}

// Maps a ring roced passed (memfd, bytes) and opens the queue in it.
template <class T>
struct Mapped {
  void* map = nullptr;
  std::size_t bytes = 0;
  ShmQueueHeader* h = nullptr;
  Mapped(int fd, std::size_t n, std::size_t offset = 0) : bytes(n) {
    map = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) throw std::runtime_error("mmap");
    h = ShmQueueLayout<T>::open(static_cast<std::uint8_t*>(map) + offset, n - offset);
    if (h == nullptr) throw std::runtime_error("not a queue");
  }
  ~Mapped() { ::munmap(map, bytes); }
};

// Waits until the lane took everything published on a ring (its head reached the tail).
bool consumed(ShmQueueHeader* h, int ms = 2000) {
  for (int i = 0; i < ms; ++i) {
    if (h->head.load() == h->tail.load()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

void close_all(std::vector<int>& fds) {
  for (int f : fds) ::close(f);
  fds.clear();
}

// Item 1: an SRQ's error CQ is the receive CQ of a live QP on it, never a destroyed CQ.
TEST(AttachGuard, SrqErrorCqDoesNotOutliveItsCq) {
  Roced roced;
  Raw c(roced.socket());
  const std::uint32_t pd = c.pd();
  std::uint32_t a = 0, s = 0, q = 0;
  ASSERT_EQ(c.cq(16, a), 0);
  std::vector<int> fds;
  Reply srep;
  ASSERT_EQ(c.srq(pd, 16, s, srep, &fds), 0);
  ASSERT_EQ(fds.size(), 1u);
  Mapped<RecvEntry> ring(fds[0], srep.bytes);
  close_all(fds);
  ShmProducer<RecvEntry> rq(ring.h, srep.slots);
  ASSERT_EQ(c.qp(pd, a, a, s, small_cap(0), q), 0);
  ASSERT_EQ(c.destroy(Op::kDestroyQp, q), 0);
  // No QP uses A any more: it may go, as rdma-core lets a CQ go that no QP names.
  ASSERT_EQ(c.destroy(Op::kDestroyCq, a), 0);
  RecvEntry bad;
  bad.wr_id = 7;
  bad.num_sge = kMaxSge + 1;  // refused by the lane: a completion for... no CQ any more
  ASSERT_TRUE(rq.push(bad));
  EXPECT_TRUE(consumed(ring.h));
  // A new QP on the SRQ brings a CQ for its refused receives again.
  std::uint32_t b = 0, q2 = 0;
  Reply crep;
  ASSERT_EQ(c.cq(16, b, &fds, &crep), 0);
  ASSERT_EQ(fds.size(), 1u);  // the ring's memfd (its eventfd comes with Op::kCqNotify)
  Mapped<CqEntry> cqring(fds[0], crep.bytes);
  close_all(fds);
  ShmConsumer<CqEntry> cqc(cqring.h, crep.slots);
  ASSERT_EQ(c.qp(pd, b, b, s, small_cap(0), q2), 0);
  bad.wr_id = 8;
  ASSERT_TRUE(rq.push(bad));
  EXPECT_TRUE(consumed(ring.h));
  CqEntry wc;
  for (int i = 0; i < 2000 && !cqc.pop(wc); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(wc.wr_id, 8u);
  EXPECT_EQ(wc.status, engine::WcStatus::kLocQpOpErr);
  EXPECT_EQ(roced.server().counts(0).refused_wrs, 2u)
      << "wr 7 dropped, wr 8 completed: both counted";
  EXPECT_TRUE(roced.alive());
}

// Item 2: a memfd another thread of the client shrinks while roced registers it. roced must seal
// it before it measures it: a region that registers is never smaller than asked, ever after.
TEST(AttachGuard, RegionIsSealedBeforeItIsMeasured) {
  Roced roced;
  Raw c(roced.socket());
  constexpr std::uint64_t kLen = 1 << 16;
  std::atomic<int> cur{-1};
  std::atomic<bool> stop{false};
  std::thread shrinker([&] {
    while (!stop.load()) {
      const int fd = cur.load();
      if (fd < 0) continue;
      // Shrink, and leave it so once roced sealed it: a client that wants roced to map more
      // than there is.
      if (::ftruncate(fd, 0) != 0) continue;
      if (::fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK) continue;
      [[maybe_unused]] const int r = ::ftruncate(fd, static_cast<off_t>(kLen));
    }
  });
  int registered = 0, short_ones = 0;
  for (int i = 0; i < 3000 && short_ones == 0; ++i) {
    const int fd = ::memfd_create("guard", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, kLen), 0);
    cur = fd;
    std::uint32_t h = 0;
    const int rc = c.region(fd, kLen, &h);
    cur = -1;
    if (rc == 0) {
      ++registered;
      struct stat st {};
      ASSERT_EQ(::fstat(fd, &st), 0);
      // Sealed by now: it cannot shrink any more, so this is what roced's mapping has behind it.
      if (static_cast<std::uint64_t>(st.st_size) < kLen) ++short_ones;
      EXPECT_TRUE(::fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK);
      EXPECT_EQ(c.destroy(Op::kDeregRegion, h), 0);
    } else {
      EXPECT_EQ(rc, EINVAL);  // seen shrunk: refused
    }
    ::close(fd);
  }
  stop = true;
  shrinker.join();
  std::printf("%d regions registered\n", registered);
  EXPECT_EQ(short_ones, 0) << "roced mapped a memfd smaller than the region (SIGBUS ahead)";
  // A memfd that cannot be sealed is refused.
  const int unsealable = ::memfd_create("guard", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(unsealable, kLen), 0);
  EXPECT_EQ(c.region(unsealable, kLen), EPERM);
  ::close(unsealable);
}

// Item 3: what a client may ask is bounded (EINVAL), and what roced allocates for it is
// charged to its memory quota (EDQUOT beyond) and shown in the counts.
TEST(AttachGuard, QueueSizesAreBoundedAndCharged) {
  AttachQuotas quotas;
  quotas.max_memory = 64 << 20;
  Roced roced(quotas);
  Raw c(roced.socket());
  const std::uint32_t pd = c.pd();
  std::uint32_t cq = 0, q = 0;
  const std::uint64_t before = roced.server().counts(0).memory_bytes;
  ASSERT_EQ(c.cq(4096, cq), 0);
  const std::uint64_t with_cq = roced.server().counts(0).memory_bytes;
  // the CQ's ring (shared) and the engine's array of completions, at least
  EXPECT_GE(with_cq - before, 2 * 4096 * sizeof(engine::Wc));
  engine::QpCap big = small_cap();
  big.max_send_wr = 1u << 16;
  big.max_inline_data = 4096;  // 256 MiB of inline buffers, as the engine would allocate them
  EXPECT_EQ(c.qp(pd, cq, cq, 0, big, q), EINVAL);
  big = small_cap();
  big.max_inline_data = 1u << 20;
  EXPECT_EQ(c.qp(pd, cq, cq, 0, big, q), EINVAL);
  big = small_cap();
  big.max_recv_wr = 1u << 20;
  EXPECT_EQ(c.qp(pd, cq, cq, 0, big, q), EINVAL);
  EXPECT_EQ(c.cq(1u << 20, q), EINVAL);
  // Within the limits, QPs are charged until the quota says no.
  engine::QpCap deep = small_cap();
  deep.max_send_wr = deep.max_recv_wr = 16384;
  int made = 0, rc = 0;
  std::uint64_t last = roced.server().counts(0).memory_bytes;
  while (made < 40 && (rc = c.qp(pd, cq, cq, 0, deep, q)) == 0) {
    const std::uint64_t now = roced.server().counts(0).memory_bytes;
    EXPECT_GE(now - last, 16384u * (sizeof(SendEntry) + sizeof(RecvEntry)));
    last = now;
    ++made;
  }
  std::printf("%d QPs of 16384 + 16384 work requests, %llu bytes charged\n", made,
              static_cast<unsigned long long>(last));
  EXPECT_TRUE(rc == EDQUOT || rc == ENOMEM) << rc;
  EXPECT_LE(last, quotas.max_memory);
}

// Item 4: refused work requests of a client that never polls: the lane stops taking from the
// ring once the CQ cannot hold their completions, and goes on when the client polls.
TEST(AttachGuard, RefusedCompletionsWaitForRoomInTheCq) {
  Roced roced;
  Raw c(roced.socket());
  const std::uint32_t pd = c.pd();
  constexpr std::uint32_t kDepth = 4, kPosted = 60;
  std::uint32_t cq = 0, q = 0;
  std::vector<int> fds;
  Reply crep, qrep;
  ASSERT_EQ(c.cq(kDepth, cq, &fds, &crep), 0);
  Mapped<CqEntry> cqmap(fds[0], crep.bytes);
  close_all(fds);
  ShmConsumer<CqEntry> cqc(cqmap.h, crep.slots);
  engine::QpCap cap = small_cap();
  cap.max_send_wr = 64;
  ASSERT_EQ(c.qp(pd, cq, cq, 0, cap, q, &qrep, &fds), 0);
  Mapped<SendEntry> sqmap(fds[0], qrep.bytes);
  close_all(fds);
  ShmProducer<SendEntry> sq(sqmap.h, qrep.slots);
  for (std::uint32_t i = 0; i < kPosted; ++i) {
    SendEntry e;
    e.wr_id = i;
    e.opcode = engine::WrOpcode::kRegMr;  // the lane refuses it
    ASSERT_TRUE(sq.push(e));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::uint32_t taken = sqmap.h->head.load();
  std::printf("taken from the ring while the CQ is not polled: %u of %u\n", taken, kPosted);
  EXPECT_LE(taken, 2 * kDepth) << "refused completions pile up beyond the CQ";
  // Polling makes room: every refusal arrives, in order.
  std::uint32_t next = 0;
  CqEntry wc;
  for (int i = 0; i < 5000 && next < kPosted; ++i) {
    if (!cqc.pop(wc)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    EXPECT_EQ(wc.wr_id, next);
    EXPECT_EQ(wc.status, engine::WcStatus::kLocQpOpErr);
    ++next;
  }
  EXPECT_EQ(next, kPosted);
  EXPECT_EQ(roced.server().counts(0).refused_wrs, kPosted);
}

// Item 5: regions are bounded in number (each one is a mapping of roced's), and an allocation
// that fails inside a command on the lcore is the client's ENOMEM, not the end of roced.
TEST(AttachGuard, RegionsAreCounted) {
  Roced roced;
  Raw c(roced.socket());
  int made = 0, rc = 0;
  std::vector<int> fds;
  while (made < 3000) {
    const int fd = ::memfd_create("guard", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 1), 0);
    fds.push_back(fd);
    if ((rc = c.region(fd, 1)) != 0) break;
    ++made;
  }
  std::printf("%d one-byte regions registered, then %s\n", made, std::strerror(rc));
  EXPECT_EQ(rc, EDQUOT);
  EXPECT_LT(made, 3000);
  close_all(fds);
  // Charged a page each at least.
  EXPECT_GE(roced.server().counts(0).memory_bytes, static_cast<std::uint64_t>(made) * 4096);
}

// kReregMr (protocol 8): the MR keeps its key and moves to its new PD and region, whose
// counts follow (the old ones free again); a refusal changes nothing.
TEST(AttachGuard, ReregMrKeepsTheKeyAndMovesTheMr) {
  Roced roced;
  Raw c(roced.socket());
  const std::uint32_t pd1 = c.pd(), pd2 = c.pd();
  std::vector<int> fds;
  std::uint32_t r1 = 0, r2 = 0;
  for (std::uint32_t* r : {&r1, &r2}) {
    const int fd = ::memfd_create("guard", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 8192), 0);
    fds.push_back(fd);
    ASSERT_EQ(c.region(fd, 8192, r), 0);
  }
  constexpr std::uint32_t kRw = verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite;
  std::uint32_t mr = 0, key = 0, h = 0, k = 0;
  ASSERT_EQ(c.mr(pd1, r1, 0, 4096, kRw, mr, key), 0);
  EXPECT_EQ(c.destroy(Op::kDeregRegion, r1), EBUSY);
  // Refused: no such MR, a range past the region, remote write without local write, a PD or
  // region that is not the client's.
  EXPECT_EQ(c.mr(pd2, r2, 0, 4096, kRw, h, k, mr + 1000), EINVAL);
  EXPECT_EQ(c.mr(pd2, r2, 4096, 8192, kRw, h, k, mr), EINVAL);
  EXPECT_EQ(c.mr(pd2, r2, 0, 4096, verbs::kAccessRemoteWrite, h, k, mr), EINVAL);
  EXPECT_EQ(c.mr(pd2 + 1000, r2, 0, 4096, kRw, h, k, mr), EINVAL);
  EXPECT_EQ(c.mr(pd2, r2 + 1000, 0, 4096, kRw, h, k, mr), EINVAL);
  EXPECT_EQ(c.destroy(Op::kDeallocPd, pd1), EBUSY) << "a refused rereg moved the MR";
  EXPECT_EQ(c.destroy(Op::kDeregRegion, r1), EBUSY);
  // Region, offset, PD and access all change; the key stays.
  ASSERT_EQ(c.mr(pd2, r2, 4096, 4096, verbs::kAccessRemoteRead, h, k, mr), 0);
  EXPECT_EQ(h, mr);
  EXPECT_EQ(k, key);
  EXPECT_EQ(c.destroy(Op::kDeregRegion, r1), 0) << "the old region still counts the MR";
  EXPECT_EQ(c.destroy(Op::kDeallocPd, pd1), 0) << "the old PD still counts the MR";
  EXPECT_EQ(c.destroy(Op::kDeregRegion, r2), EBUSY);
  EXPECT_EQ(c.destroy(Op::kDeallocPd, pd2), EBUSY);
  EXPECT_EQ(c.destroy(Op::kDeregMr, mr), 0);
  EXPECT_EQ(c.destroy(Op::kDeregRegion, r2), 0);
  EXPECT_EQ(c.destroy(Op::kDeallocPd, pd2), 0);
  close_all(fds);
}

// Protocol 8 only added a request: a client of 7 is answered; older and newer ones are refused
// with EPROTO and may say hello again with a version roced speaks (libroce's fallback).
TEST(AttachGuard, HelloOfAnOlderClient) {
  Roced roced;
  Raw old(roced.socket(), 7);
  EXPECT_EQ(old.hello_err(), 0);
  EXPECT_NE(old.pd(), 0u);
  Raw older(roced.socket(), kOldestVersion - 1);
  EXPECT_EQ(older.hello_err(), EPROTO);
  Raw newer(roced.socket(), kVersion + 1);
  EXPECT_EQ(newer.hello_err(), EPROTO);
  Request rq;
  rq.op = Op::kHello;
  Reply rep;
  EXPECT_EQ(newer.call(rq, rep), 0) << "again with this version";
  EXPECT_EQ(rep.hello.version, kVersion);
}

TEST(AttachGuard, AllocationFailureOnTheLcoreIsTheClientsEnomem) {
  Roced roced;
  Raw c(roced.socket());
  const std::uint32_t pd = c.pd();
  std::uint32_t cq = 0, q = 0;
  ASSERT_EQ(c.cq(64, cq), 0);
  engine::QpCap deep = small_cap();
  deep.max_send_wr = 16384;
  g_fail_over = 256 << 10;  // the engine's send queue of this QP is bigger than that
  const int rc = c.qp(pd, cq, cq, 0, deep, q);
  g_fail_over = 0;
  EXPECT_EQ(rc, ENOMEM);
  EXPECT_TRUE(roced.alive());
  // Still serving, this client and others.
  EXPECT_EQ(c.qp(pd, cq, cq, 0, small_cap(), q), 0);
  Raw other(roced.socket());
  EXPECT_NE(other.pd(), 0u);
}

// An MR (or PD) the engine made for a request that then found no handle for it (every one in
// use) is not left behind untracked: drop() would miss it, and the MR's rkey would outlive the
// region's mapping.
TEST(AttachGuard, NothingOutlivesAFailedHandle) {
  Roced roced({}, 2);  // two handles: a PD and a region
  {
    Raw c(roced.socket());
    const std::uint32_t pd = c.pd();
    const int fd = ::memfd_create("guard", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(::ftruncate(fd, 4096), 0);
    std::uint32_t region = 0;
    ASSERT_EQ(c.region(fd, 4096, &region), 0);
    ::close(fd);
    Request rq;
    rq.op = Op::kRegMr;
    rq.mr.pd = pd;
    rq.mr.region = region;
    rq.mr.length = 4096;
    rq.mr.iova = 0x10000;
    rq.mr.access = engine::kAccessLocalWrite | engine::kAccessRemoteWrite;
    Reply rep;
    EXPECT_EQ(c.call(rq, rep), ENOMEM) << "no handle left";
    rq = Request{};
    rq.op = Op::kAllocPd;
    EXPECT_EQ(c.call(rq, rep), ENOMEM) << "no handle left";
  }
  for (int i = 0; i < 2000 && roced.server().counts(0).clients != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(roced.server().counts(0).clients, 0u);
  EXPECT_EQ(roced.engine().mr_count(), 0u) << "an MR without a handle survived its client";
}

// The defaults as a user meets them: an MPI job's ranks (one uid, more than 16 of them) all
// attach (max_clients_per_uid is off unless configured).
TEST(AttachGuard, DefaultsFitAnMpiJob) {
  Roced roced;
  std::vector<std::unique_ptr<Raw>> ranks;
  for (int i = 0; i < 20; ++i)
    ASSERT_NO_THROW(ranks.push_back(std::make_unique<Raw>(roced.socket()))) << "rank " << i;
}

// A QP may ask rxe's max_inline_data (512); one without send SGEs is EINVAL (a bad argument,
// not ENOMEM).
TEST(AttachGuard, QpCapsAsRxe) {
  Roced roced;
  Raw c(roced.socket());
  const std::uint32_t pd = c.pd();
  std::uint32_t cq = 0, q = 0;
  ASSERT_EQ(c.cq(16, cq), 0);
  engine::QpCap cap = small_cap();
  cap.max_inline_data = 512;
  EXPECT_EQ(c.qp(pd, cq, cq, 0, cap, q), 0) << "max_inline_data 512";
  cap.max_inline_data = 0;
  cap.max_send_sge = 0;
  EXPECT_EQ(c.qp(pd, cq, cq, 0, cap, q), EINVAL) << "max_send_sge 0";
}

// A CQ nobody waits on costs roced no descriptor: max_cqs CQs fit whatever max_fds says; the
// eventfd is made when the client first waits on the CQ (counted then against max_fds).
TEST(AttachGuard, CqsBeyondMaxFdsWhenNotWaitedOn) {
  AttachQuotas q;
  q.max_cqs = 100;
  q.max_fds = 8;
  Roced roced(q);
  Raw c(roced.socket());
  std::vector<std::uint32_t> cqs;
  int rc = 0;
  for (int i = 0; i < 100 && rc == 0; ++i) {
    std::uint32_t h = 0;
    if ((rc = c.cq(4, h)) == 0) cqs.push_back(h);
  }
  EXPECT_EQ(cqs.size(), 100u) << "then " << std::strerror(rc);
  // Waiting on one asks for its eventfd: max_fds counts them (the event ring's is one).
  auto notify = [&c](std::uint32_t h) {
    Request rq;
    rq.op = Op::kCqNotify;
    rq.handle = h;
    Reply rep;
    return c.call(rq, rep);
  };
  for (unsigned i = 0; i + 1 < q.max_fds; ++i) EXPECT_EQ(notify(cqs[i]), 0) << i;
  EXPECT_EQ(notify(cqs[0]), 0) << "the same CQ again: the same eventfd, not another";
  EXPECT_EQ(notify(cqs[q.max_fds]), EDQUOT);
  EXPECT_EQ(c.destroy(Op::kDestroyCq, cqs[0]), 0);
  EXPECT_EQ(notify(cqs[q.max_fds]), 0) << "a destroyed CQ gives its descriptor back";
}

// kNeighbour with ask set sends an ARP request from roced's port: a hostile client asking in a
// loop over many addresses must not make roced flood the segment with broadcasts (and fill its
// neighbour cache with their answers). Asks beyond the client's budget are looked up only.
TEST(AttachGuard, NeighbourAsksAreBudgeted) {
  Roced roced;
  Raw c(roced.socket());
  const unsigned before = roced.sent();
  const auto t0 = std::chrono::steady_clock::now();
  int known = 0;
  for (std::uint32_t i = 0; i < 500; ++i) {
    Request rq;
    rq.op = Op::kNeighbour;
    rq.cm.dst = wire::Ipv4Addr{0x0A000000u + i};  // 10.0.0.0/8, nobody answers
    rq.handle = 1;                                // ask
    Reply rep;
    ASSERT_EQ(c.call(rq, rep), 0);
    known += rep.handle != 0;
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(known, 0);
  const unsigned arps = roced.sent() - before;
  std::printf("500 asks in %lld ms: %u ARP requests\n", static_cast<long long>(ms), arps);
  EXPECT_LE(arps, 64u * (static_cast<unsigned>(ms) / 100 + 1));
  EXPECT_GT(arps, 0u);
}

// kNeighbour that finds a MAC keeps it for the client's UD sends by GID (the attached AH).
// That table was the lane's, shared by every client on it, never shrunk and charged to nobody:
// a client looking up address after address (the port's cache learns a segment host's
// senders) grew roced without bound. Now it is the client's own: charged to its max_memory,
// bounded, gone with the client.
TEST(AttachGuard, UdNeighboursAreTheClientsChargedAndReleased) {
  Roced roced;
  const std::uint64_t base = roced.server().counts(0).memory_bytes;
  constexpr std::uint32_t kPeers = 300;
  for (std::uint32_t i = 0; i < kPeers; ++i)
    roced.teach(wire::Ipv4Addr{0x0A010000u + i}, wire::MacAddr{{0x02, 0, 0, 1, 0, 1}});
  {
    Raw c(roced.socket());
    const std::uint64_t hello = roced.server().counts(0).memory_bytes;
    for (std::uint32_t i = 0; i < kPeers; ++i) {
      Request rq;
      rq.op = Op::kNeighbour;
      rq.cm.dst = wire::Ipv4Addr{0x0A010000u + i};
      Reply rep;
      ASSERT_EQ(c.call(rq, rep), 0);
      ASSERT_EQ(rep.handle, 1u) << "the port's cache knows " << i;
    }
    const std::uint64_t grown = roced.server().counts(0).memory_bytes - hello;
    std::printf("%u neighbours found: the client charged %llu bytes for them\n", kPeers,
                static_cast<unsigned long long>(grown));
    EXPECT_GE(grown, kPeers * 32ull) << "the MACs roced keeps for the client are not charged";
    // Asking again keeps one entry per address.
    Request rq;
    rq.op = Op::kNeighbour;
    rq.cm.dst = wire::Ipv4Addr{0x0A010000u};
    Reply rep;
    ASSERT_EQ(c.call(rq, rep), 0);
    EXPECT_EQ(roced.server().counts(0).memory_bytes - hello, grown);
  }
  for (int i = 0; i < 2000 && roced.server().counts(0).memory_bytes != base; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(roced.server().counts(0).memory_bytes, base);
}

// A client names its peer's MAC itself (or leaves it to roced's ARP). Only a unicast one is
// taken: the kernel resolves a RoCE destination to its neighbour's MAC, it never lets a
// program send to broadcast or a group address, and the engine has no multicast. Before,
// roced put a client's RoCE frames on the segment's broadcast address at the client's rate.
TEST(AttachGuard, AddressVectorsAreUnicast) {
  Roced roced;
  Raw c(roced.socket());
  const std::uint32_t pd = c.pd();
  std::uint32_t cq = 0, ud = 0, rc = 0;
  std::vector<int> fds;
  Reply crep, qrep;
  ASSERT_EQ(c.cq(16, cq, &fds, &crep), 0);
  Mapped<CqEntry> cqmap(fds[0], crep.bytes);
  close_all(fds);
  ShmConsumer<CqEntry> cqc(cqmap.h, crep.slots);
  ASSERT_EQ(c.qp(pd, cq, cq, 0, small_cap(), ud, &qrep, &fds, engine::QpType::kUd), 0);
  Mapped<SendEntry> sqmap(fds[0], qrep.bytes);
  close_all(fds);
  ShmProducer<SendEntry> sq(sqmap.h, qrep.slots);
  verbs::QpAttr a;
  a.qp_state = verbs::QpState::kInit;
  a.qkey = 0x11111111;
  ASSERT_EQ(
      c.modify(ud, a, verbs::kQpState | verbs::kQpPkeyIndex | verbs::kQpPort | verbs::kQpQkey), 0);
  a.qp_state = verbs::QpState::kRtr;
  ASSERT_EQ(c.modify(ud, a, verbs::kQpState), 0);
  a.qp_state = verbs::QpState::kRts;
  ASSERT_EQ(c.modify(ud, a, verbs::kQpState | verbs::kQpSqPsn), 0);
  const wire::MacAddr group[] = {{{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
                                 {{0x01, 0x00, 0x5E, 0x00, 0x00, 0x01}},
                                 {{0x33, 0x33, 0x00, 0x00, 0x00, 0x01}}};
  const wire::MacAddr unicast{{0x02, 0, 0, 9, 9, 9}};
  const unsigned before = roced.sent();
  std::uint64_t wr = 0;
  for (const wire::MacAddr& m : group) {
    SendEntry e;
    e.wr_id = ++wr;
    e.remote_qpn = 0x99;
    e.remote_qkey = 0x11111111;
    e.ah.dgid = wire::ipv4_mapped(wire::Ipv4Addr{0x0A020001u});
    e.ah.dmac = m;
    e.send_flags = engine::kSendSignaled;
    ASSERT_TRUE(sq.push(e));
  }
  SendEntry e;  // the control: a unicast MAC goes out
  e.wr_id = ++wr;
  e.remote_qpn = 0x99;
  e.remote_qkey = 0x11111111;
  e.ah.dgid = wire::ipv4_mapped(wire::Ipv4Addr{0x0A020001u});
  e.ah.dmac = unicast;
  e.send_flags = engine::kSendSignaled;
  ASSERT_TRUE(sq.push(e));
  std::uint64_t got = 0;
  int refused = 0;
  CqEntry wc;
  for (int i = 0; i < 2000 && got < wr; ++i) {
    if (!cqc.pop(wc)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    ++got;
    if (wc.wr_id <= 3)
      refused += wc.status != engine::WcStatus::kSuccess;
    else
      EXPECT_EQ(wc.status, engine::WcStatus::kSuccess);
  }
  EXPECT_EQ(got, wr);
  EXPECT_EQ(refused, 3) << "UD sends to a group MAC were taken";
  EXPECT_EQ(roced.sent() - before, 1u) << "frames to a group MAC left the port";
  // An RC QP's address vector: the same rule at RTR.
  ASSERT_EQ(c.qp(pd, cq, cq, 0, small_cap(), rc), 0);
  verbs::QpAttr r;
  r.qp_state = verbs::QpState::kInit;
  ASSERT_EQ(
      c.modify(rc, r,
               verbs::kQpState | verbs::kQpPkeyIndex | verbs::kQpPort | verbs::kQpAccessFlags),
      0);
  r.qp_state = verbs::QpState::kRtr;
  r.ah.dgid = wire::ipv4_mapped(wire::Ipv4Addr{0x0A020001u});
  r.ah.dmac = group[0];
  r.dest_qp_num = 0x99;
  const std::uint32_t rtr = verbs::kQpState | verbs::kQpAv | verbs::kQpPathMtu | verbs::kQpDestQpn |
                            verbs::kQpRqPsn | verbs::kQpMaxDestRdAtomic | verbs::kQpMinRnrTimer;
  EXPECT_EQ(c.modify(rc, r, rtr), EINVAL);
  r.ah.dmac = unicast;
  EXPECT_EQ(c.modify(rc, r, rtr), 0);
}

// A hugetlbfs memfd seals against shrinking like any memfd, but its pages can still be
// punched out (fallocate PUNCH_HOLE needs only the write seal to be refused): roced's next touch
// of the region then needs a fresh huge page, and with the pool empty (roced's own DPDK memory
// takes most of it) the fault is a SIGBUS on the lcore. Measured by hand with one huge page:
// seal, map as reg_region does, punch, take the freed page elsewhere, touch: SIGBUS. So roced
// maps no hugetlbfs file: EINVAL, whatever the pool holds.
TEST(AttachGuard, RegionIsNotHugetlb) {
  const int fd = ::memfd_create("guard-huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
  if (fd < 0) GTEST_SKIP() << "no hugetlbfs memfd here: " << std::strerror(errno);
  constexpr std::uint64_t kHuge = 2u << 20;
  ASSERT_EQ(::ftruncate(fd, kHuge), 0);
  Roced roced;
  Raw c(roced.socket());
  EXPECT_EQ(c.region(fd, kHuge), EINVAL);
  // An ordinary memfd of the same size still registers.
  const int ok = ::memfd_create("guard", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(ok, 0);
  ASSERT_EQ(::ftruncate(ok, kHuge), 0);
  EXPECT_EQ(c.region(ok, kHuge), 0);
  ::close(ok);
  ::close(fd);
}

// A client's CM events wait on the lane when its ring is full. Only connect requests were
// bounded there (refused beyond cm_backlog): a client that called cm_connect in a loop, each
// rejected at once, and never read its events grew roced by tens of MB a minute, charged to
// nobody. Now cm_connect and cm_accept answer EAGAIN while cm_backlog events wait, and what
// waits is charged to the client's max_memory until it reads it.
TEST(AttachGuard, CmEventsOfAClientAreBoundedAndCharged) {
  constexpr std::uint32_t kBacklog = 16;
  Roced roced({}, 0xFFFFFFFFu, nullptr, [](AttachConfig& a) { a.cm_backlog = kBacklog; });
  // The peer listens on nothing: its CM rejects each REQ at once.
  Roced peer({}, 0xFFFFFFFFu, &roced, {}, kPeerMac, kPeerIp);
  roced.teach(kPeerIp, kPeerMac);
  peer.teach(kIp, kMac);  // (else its first REJs wait for its ARP, and the REQs' repeats)
  Raw other(peer.socket());
  ASSERT_EQ(other.cm_open(), 0);  // the peer's CM (QP1) is made with its first client's
  const std::uint64_t base = roced.server().counts(0).memory_bytes;
  Raw c(roced.socket());
  std::vector<int> fds;
  Reply open;
  ASSERT_EQ(c.cm_open(&fds, &open), 0);
  ASSERT_EQ(fds.size(), 2u);
  const std::uint32_t pd = c.pd();
  std::uint32_t cq = 0, qp = 0;
  ASSERT_EQ(c.cq(16, cq), 0);
  ASSERT_EQ(c.qp(pd, cq, cq, 0, small_cap(), qp), 0);
  const std::uint64_t held = roced.server().counts(0).memory_bytes;
  int ok = 0, again = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until && again == 0) {
    const int rc = c.cm_connect(qp, kPeerIp, 9);
    if (rc == 0)
      ++ok;
    else if (rc == EAGAIN)
      ++again;
    else if (rc == EINVAL)  // the QP's previous connection is not rejected yet
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    else
      FAIL() << "cm_connect: " << std::strerror(rc);
  }
  std::printf("%d connects rejected, then EAGAIN: %d\n", ok, again);
  ASSERT_EQ(again, 1) << "cm_connect went on while its rejections piled up unread";
  EXPECT_LE(ok, static_cast<int>(kCmEventSlots + kBacklog + 8));
  // What waits beyond the ring is the client's.
  const std::uint64_t waiting = roced.server().counts(0).memory_bytes - held;
  EXPECT_GE(waiting, kBacklog * sizeof(CmEventEntry));
  // (REJs of requests still in flight may add events between two looks: look until both
  // views agree, at most 2 s.)
  std::uint64_t listed = 0, counted = 0;
  for (int i = 0; i < 200; ++i) {
    listed = 0;
    for (const ClientInfo& info : roced.server().clients()) listed += info.memory_bytes;
    counted = roced.server().counts(0).memory_bytes - base;
    if (listed == counted) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(listed, counted);
  // Reading the events gives the room back.
  {
    Mapped<CmEventEntry> ring(fds[0], open.bytes);
    ShmConsumer<CmEventEntry> events(ring.h, kCmEventSlots);
    CmEventEntry e[kCmEventSlots];
    std::size_t read = 0;
    for (int i = 0; i < 10000 && read < static_cast<std::size_t>(ok); ++i) {
      const std::size_t k = events.pop_n(e, kCmEventSlots);
      for (std::size_t j = 0; j < k; ++j)
        EXPECT_EQ(e[j].type, 3u) << "rejected";  // client::CmEventType::kRejected
      read += k;
      if (k == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(read, static_cast<std::size_t>(ok));
  }
  for (int i = 0; i < 2000 && roced.server().counts(0).memory_bytes != held; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(roced.server().counts(0).memory_bytes, held);
  int rc = EINVAL;
  for (int i = 0; i < 200 && rc == EINVAL; ++i) {
    rc = c.cm_connect(qp, kPeerIp, 9);
    if (rc == EINVAL) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(rc, 0);
  close_all(fds);
}

// attach.cm_backlog 0 (allowed: "no events beyond the ring") refused every connect request,
// even to a listener whose ring was empty: the check counted the backlog before the event
// could go into the ring. Now only a request that would wait beyond the ring is refused.
TEST(AttachGuard, CmBacklogZeroStillDeliversToARingWithRoom) {
  Roced roced({}, 0xFFFFFFFFu, nullptr, [](AttachConfig& a) { a.cm_backlog = 0; });
  Roced peer({}, 0xFFFFFFFFu, &roced, {}, kPeerMac, kPeerIp);
  roced.teach(kPeerIp, kPeerMac);
  peer.teach(kIp, kMac);
  Raw listener(roced.socket());
  std::vector<int> fds;
  Reply open;
  ASSERT_EQ(listener.cm_open(&fds, &open), 0);
  ASSERT_EQ(listener.cm(Op::kCmListen, 0, 0, 9100), 0);
  Raw c(peer.socket());
  ASSERT_EQ(c.cm_open(), 0);
  const std::uint32_t pd = c.pd();
  std::uint32_t cq = 0, qp = 0;
  ASSERT_EQ(c.cq(16, cq), 0);
  ASSERT_EQ(c.qp(pd, cq, cq, 0, small_cap(), qp), 0);
  ASSERT_EQ(c.cm_connect(qp, kIp, 9100), 0);
  Mapped<CmEventEntry> ring(fds[0], open.bytes);
  ShmConsumer<CmEventEntry> events(ring.h, kCmEventSlots);
  CmEventEntry e[kCmEventSlots];
  std::size_t k = 0;
  for (int i = 0; i < 3000 && k == 0; ++i) {
    k = events.pop_n(e, kCmEventSlots);
    if (k == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(k, 1u) << "the connect request never reached the listener";
  EXPECT_EQ(e[0].type, 1u);  // client::CmEventType::kConnectRequest
  EXPECT_EQ(roced.server().counts(0).cm_refused, 0u);
  close_all(fds);
}

// One client with one QP held every CM slot of the port: cm_connect bound the same QP to any
// number of connections, and nothing counted a client's connections but the CM's 4096 for
// everyone (then other clients got ENOMEM and peers' REQs REJ). Now a QP with a live
// connection is refused (EINVAL, as rdma-core's rdma_create_qp refuses an id that has a QP and
// the kernel a QP's move back to INIT), and a client holds at most quotas.max_cm_conns
// connections (EDQUOT; a peer's REQ beyond it gets REJ 3 "no resources").
TEST(AttachGuard, CmConnectionsAreBoundedPerQpAndPerClient) {
  AttachQuotas q;
  q.max_cm_conns = 3;
  Roced roced(q);
  Roced peer({}, 0xFFFFFFFFu, &roced, {}, kPeerMac, kPeerIp);
  roced.teach(kPeerIp, kPeerMac);
  peer.teach(kIp, kMac);
  Raw holder(peer.socket());  // listens, never answers: the REQs stay pending
  ASSERT_EQ(holder.cm_open(), 0);
  ASSERT_EQ(holder.cm(Op::kCmListen, 0, 0, 9000), 0);
  Raw c(roced.socket());
  ASSERT_EQ(c.cm_open(), 0);
  const std::uint32_t pd = c.pd();
  std::uint32_t cq = 0;
  ASSERT_EQ(c.cq(64, cq), 0);
  std::vector<std::uint32_t> qps(5);
  for (auto& h : qps) ASSERT_EQ(c.qp(pd, cq, cq, 0, small_cap(), h), 0);
  ASSERT_EQ(c.cm_connect(qps[0], kPeerIp, 9000), 0);
  EXPECT_EQ(c.cm_connect(qps[0], kPeerIp, 9000), EINVAL) << "one QP, two connections";
  EXPECT_EQ(c.cm_connect(qps[1], kPeerIp, 9000), 0);
  EXPECT_EQ(c.cm_connect(qps[2], kPeerIp, 9000), 0);
  EXPECT_EQ(c.cm_connect(qps[3], kPeerIp, 9000), EDQUOT) << "beyond max_cm_conns";
  // Another client of the same roced is not affected.
  Raw d(roced.socket());
  ASSERT_EQ(d.cm_open(), 0);
  const std::uint32_t pd2 = d.pd();
  std::uint32_t cq2 = 0, qp2 = 0;
  ASSERT_EQ(d.cq(16, cq2), 0);
  ASSERT_EQ(d.qp(pd2, cq2, cq2, 0, small_cap(), qp2), 0);
  EXPECT_EQ(d.cm_connect(qp2, kPeerIp, 9000), 0);
}

// One client could listen on every rdma_cm port of the port (65535 of them, each a map entry in
// the CM, and every hosted service's port taken first), and on ports below 1024 too. Now a
// client listens on at most quotas.max_listens ports (EDQUOT), and below 1024 only when its
// uid is in privileged_uids (EACCES otherwise, as the kernel's rdma_cm without
// CAP_NET_BIND_SERVICE).
TEST(AttachGuard, CmListensAreBoundedAndLowPortsPrivileged) {
  AttachQuotas q;
  q.max_listens = 4;
  {
    Roced roced(q, 0xFFFFFFFFu, nullptr, [](AttachConfig& a) { a.privileged_uids.clear(); });
    Raw c(roced.socket());
    ASSERT_EQ(c.cm_open(), 0);
    EXPECT_EQ(c.cm(Op::kCmListen, 0, 0, 80), EACCES);
    EXPECT_EQ(c.cm(Op::kCmListen, 0, 0, 1023), EACCES);
    for (std::uint16_t p = 9000; p < 9004; ++p) EXPECT_EQ(c.cm(Op::kCmListen, 0, 0, p), 0);
    EXPECT_EQ(c.cm(Op::kCmListen, 0, 0, 9004), EDQUOT);
    EXPECT_EQ(c.cm(Op::kCmListen, 0, 0, 9000), 0);  // its own already: counted once
    // Another client has its own.
    Raw d(roced.socket());
    ASSERT_EQ(d.cm_open(), 0);
    EXPECT_EQ(d.cm(Op::kCmListen, 0, 0, 1024), 0);
    EXPECT_EQ(d.cm(Op::kCmListen, 0, 0, 9000), EADDRINUSE);
  }
  Roced roced(q);  // privileged_uids [0], and the test runs as root or not
  Raw c(roced.socket());
  ASSERT_EQ(c.cm_open(), 0);
  EXPECT_EQ(c.cm(Op::kCmListen, 0, 0, 80), ::getuid() == 0 ? 0 : EACCES);
}

}  // namespace
}  // namespace roce::attach
