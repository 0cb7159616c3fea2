/// @file
/// A fake Context for roce_lnet's unit tests (no network): memory from malloc, QPs that are
/// numbers, a CQ the test feeds (a completion for a posted receive is a message arriving).
#pragma once

#include <roce/client.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace roce::lnet {

/// Enough of a Context for a Tm: memory from malloc, a CQ the test feeds, posted receives kept.
class FakeContext : public client::Context {
 public:
  struct FBuf : client::Buffer {
    std::vector<std::uint8_t> mem;
  };
  struct FCq : client::Cq {};
  std::mutex mu;
  std::deque<client::Wc> cq;
  std::vector<std::uint64_t> recvs;  ///< wr_ids posted to the SRQ, oldest first
  client::PortInfo port_;
  std::vector<std::unique_ptr<client::Mr>> mrs;
  struct PostedRecv {
    std::uint32_t qpn;
    std::uint64_t wr_id, addr;
    std::uint32_t length;
  };
  std::vector<PostedRecv> qp_recvs;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> sends;  ///< (qpn, wr_id)
  std::uint32_t next_qpn = 0x100;
  int live_qps = 0;
  std::atomic<bool> fail_modify{false};
  /// An ARP that never answers: a modify_qp towards a GID ::ffff:a.b.c.d with a.b.c.d in
  /// [slow_from, slow_to) waits `slow_ms`, then fails EHOSTUNREACH (roced's resolve_timeout_ms).
  std::atomic<std::uint32_t> slow_from{0}, slow_to{0};
  std::atomic<int> slow_ms{0};
  /// alloc_buffer fails EDQUOT when `max_buffers` (>= 0) are live: roced's max_regions.
  int max_buffers = -1;
  int live_buffers = 0;
  int max_qps = -1;  ///< create_qp fails EDQUOT when this many (>= 0) are live: roced's quota
  /// Sends complete at once (a successful completion on the CQ), as if the peer took them.
  std::atomic<bool> complete_sends{false};
  std::deque<client::AsyncEvent> async;  ///< what get_async_event hands out
  client::Cq* last_cq = nullptr;         ///< the CQ created last (a Tm's)

  FakeContext() { port_.ipv4.v = 0xC0000201; }  // 192.0.2.1
  void deliver(std::uint64_t wr_id, std::uint32_t len, std::uint32_t offset, bool still,
               std::uint32_t qpn = 0) {
    std::lock_guard<std::mutex> g(mu);
    client::Wc wc;
    wc.qp_num = qpn;
    wc.wr_id = wr_id;
    wc.opcode = client::WcOpcode::kRecv;
    wc.byte_len = len;
    wc.offset = offset;
    wc.wc_flags = still ? std::uint32_t{verbs::kWcStillQueued} : 0u;
    cq.push_back(wc);
    if (!still) std::erase(recvs, wr_id);
  }
  std::uint64_t oldest_recv() {
    std::lock_guard<std::mutex> g(mu);
    return recvs.empty() ? 0 : recvs.front();
  }

  const client::PortInfo& port() const override { return port_; }
  bool connected() const override { return true; }
  client::Pd* alloc_pd() override { return new client::Pd; }
  int dealloc_pd(client::Pd* pd) override {
    delete pd;
    return 0;
  }
  client::Buffer* alloc_buffer(std::size_t length) override {
    {
      std::lock_guard<std::mutex> g(mu);
      if (max_buffers >= 0 && live_buffers >= max_buffers) {
        errno = EDQUOT;
        return nullptr;
      }
      ++live_buffers;
    }
    auto* b = new FBuf;
    b->mem.resize(length);
    b->addr = b->mem.data();
    b->length = length;
    return b;
  }
  client::Buffer* register_memfd(int, void*, std::size_t) override { return nullptr; }
  int free_buffer(client::Buffer* b) override {
    {
      std::lock_guard<std::mutex> g(mu);
      --live_buffers;
    }
    delete b;
    return 0;
  }
  client::Mr* reg_mr(client::Pd*, void* addr, std::size_t length, std::uint32_t) override {
    std::lock_guard<std::mutex> g(mu);
    auto mr = std::make_unique<client::Mr>();
    mr->addr = addr;
    mr->length = length;
    mr->lkey = mr->rkey = static_cast<std::uint32_t>(mrs.size() + 1);
    mr->iova = reinterpret_cast<std::uint64_t>(addr);
    mrs.push_back(std::move(mr));
    return mrs.back().get();
  }
  int dereg_mr(client::Mr*) override { return 0; }
  client::Cq* create_cq(std::uint32_t depth) override {
    auto* c = new FCq;
    c->depth = depth;
    std::lock_guard<std::mutex> g(mu);
    last_cq = c;
    return c;
  }
  int destroy_cq(client::Cq* c) override {
    delete c;
    return 0;
  }
  client::Srq* create_srq(client::Pd*, std::uint32_t, std::uint32_t) override {
    return new client::Srq;
  }
  int destroy_srq(client::Srq* s) override {
    delete s;
    return 0;
  }
  /// QPs: numbered, counted; modify_qp fails while `fail_modify` is set.
  client::Qp* create_qp(client::Pd*, client::QpType, client::Cq*, client::Cq*, const client::QpCap&,
                        client::Srq*, bool) override {
    std::lock_guard<std::mutex> g(mu);
    if (max_qps >= 0 && live_qps >= max_qps) {  // roced's quota
      errno = EDQUOT;
      return nullptr;
    }
    auto* q = new client::Qp;
    q->qp_num = next_qpn++;
    ++live_qps;
    return q;
  }
  int destroy_qp(client::Qp* q) override {
    std::lock_guard<std::mutex> g(mu);
    --live_qps;
    std::erase_if(qp_recvs, [&](const PostedRecv& r) { return r.qpn == q->qp_num; });
    delete q;
    return 0;
  }
  int modify_qp(client::Qp*, const client::QpAttr& a, std::uint32_t) override {
    if (fail_modify.load()) return EINVAL;
    const Ipv6Addr zero{};
    if (a.ah.dgid != zero) {
      std::uint32_t ip = 0;
      for (int i = 12; i < 16; ++i) ip = ip << 8 | a.ah.dgid.b[i];
      if (ip >= slow_from.load() && ip < slow_to.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms.load()));
        return EHOSTUNREACH;
      }
    }
    return 0;
  }
  int buffers() {
    std::lock_guard<std::mutex> g(mu);
    return live_buffers;
  }
  int post_send(client::Qp* q, const client::SendWr* wr, const client::SendWr**) override {
    std::lock_guard<std::mutex> g(mu);
    for (; wr; wr = wr->next) {
      sends.push_back({q->qp_num, wr->wr_id});
      if (complete_sends.load()) {
        client::Wc wc;
        wc.wr_id = wr->wr_id;
        wc.opcode = client::WcOpcode::kSend;
        wc.qp_num = q->qp_num;
        cq.push_back(wc);
      }
    }
    return 0;
  }
  /// Receives posted on a QP (the control QPs): the test "receives" a message into one.
  int post_recv(client::Qp* q, const client::RecvWr* wr, const client::RecvWr**) override {
    std::lock_guard<std::mutex> g(mu);
    for (; wr; wr = wr->next)
      qp_recvs.push_back({q->qp_num, wr->wr_id, wr->sg_list[0].addr, wr->sg_list[0].length});
    return 0;
  }
  /// A SEND from the peer on QP `qpn`: `bytes` land in its oldest posted receive. False if none.
  bool arrive(std::uint32_t qpn, std::span<const std::uint8_t> bytes) {
    std::lock_guard<std::mutex> g(mu);
    auto it = std::find_if(qp_recvs.begin(), qp_recvs.end(),
                           [&](const PostedRecv& r) { return r.qpn == qpn; });
    if (it == qp_recvs.end() || bytes.size() > it->length) return false;
    std::memcpy(reinterpret_cast<void*>(it->addr), bytes.data(), bytes.size());
    client::Wc wc;
    wc.wr_id = it->wr_id;
    wc.opcode = client::WcOpcode::kRecv;
    wc.byte_len = static_cast<std::uint32_t>(bytes.size());
    wc.qp_num = qpn;
    cq.push_back(wc);
    qp_recvs.erase(it);
    return true;
  }
  int qps() {
    std::lock_guard<std::mutex> g(mu);
    return live_qps;
  }
  int post_srq_recv(client::Srq*, const client::RecvWr* wr, const client::RecvWr**) override {
    std::lock_guard<std::mutex> g(mu);
    for (; wr; wr = wr->next) recvs.push_back(wr->wr_id);
    return 0;
  }
  int poll_cq(client::Cq*, int max, client::Wc* out) override {
    std::lock_guard<std::mutex> g(mu);
    int n = 0;
    for (; n < max && !cq.empty(); ++n) {
      out[n] = cq.front();
      cq.pop_front();
    }
    return n;
  }
  int wait_cq(client::Cq*, int timeout_ms) override {
    {
      std::lock_guard<std::mutex> g(mu);
      if (!cq.empty()) return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 2)));
    return ETIMEDOUT;
  }
  int get_async_event(client::AsyncEvent& ev, int) override {
    std::lock_guard<std::mutex> g(mu);
    if (async.empty()) return ETIMEDOUT;
    ev = async.front();
    async.pop_front();
    return 0;
  }
  void raise(client::AsyncEvent ev) {
    std::lock_guard<std::mutex> g(mu);
    async.push_back(ev);
  }
  int cm_listen(std::uint16_t) override { return EOPNOTSUPP; }
  int cm_connect(client::Qp*, Ipv4Addr, std::uint16_t, const client::CmConnParam&,
                 std::uint32_t&) override {
    return EOPNOTSUPP;
  }
  int cm_accept(std::uint32_t, client::Qp*, const client::CmConnParam&) override {
    return EOPNOTSUPP;
  }
  int cm_reject(std::uint32_t, std::span<const std::uint8_t>) override { return EOPNOTSUPP; }
  int cm_disconnect(std::uint32_t) override { return EOPNOTSUPP; }
  int cm_get_event(client::CmEvent&, int) override { return ETIMEDOUT; }
};

}  // namespace roce::lnet
