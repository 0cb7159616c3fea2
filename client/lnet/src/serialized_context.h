/// @file
/// A Context that serialises every call on one mutex, for backends that are single threaded
/// (client::open_local: the engine and its poll loop belong to one thread) when roce_lnet's
/// threads (event, listener, provisioning, application) share them. wait_cq never holds the
/// mutex for longer than one turn of the poll loop, so posts from other threads get in.
#pragma once

#include <roce/client.h>

#include <mutex>

namespace roce::lnet {

class SerializedContext final : public client::Context {
 private:
  template <class F>
  auto locked(F f) -> decltype(f()) {
    std::lock_guard<std::mutex> g(mu_);
    return f();
  }

 public:
  explicit SerializedContext(client::Context& inner) : in_(inner) {}

  const client::PortInfo& port() const override { return in_.port(); }
  bool connected() const override {
    std::lock_guard<std::mutex> g(mu_);
    return in_.connected();
  }
  client::Pd* alloc_pd() override {
    return locked([&] { return in_.alloc_pd(); });
  }
  int dealloc_pd(client::Pd* pd) override {
    return locked([&] { return in_.dealloc_pd(pd); });
  }
  client::Buffer* alloc_buffer(std::size_t n) override {
    return locked([&] { return in_.alloc_buffer(n); });
  }
  client::Buffer* register_memfd(int fd, void* addr, std::size_t n) override {
    return locked([&] { return in_.register_memfd(fd, addr, n); });
  }
  int free_buffer(client::Buffer* b) override {
    return locked([&] { return in_.free_buffer(b); });
  }
  client::Mr* reg_mr(client::Pd* pd, void* addr, std::size_t n, std::uint32_t access) override {
    return locked([&] { return in_.reg_mr(pd, addr, n, access); });
  }
  int dereg_mr(client::Mr* mr) override {
    return locked([&] { return in_.dereg_mr(mr); });
  }
  client::Cq* create_cq(std::uint32_t depth) override {
    return locked([&] { return in_.create_cq(depth); });
  }
  int destroy_cq(client::Cq* cq) override {
    return locked([&] { return in_.destroy_cq(cq); });
  }
  client::Srq* create_srq(client::Pd* pd, std::uint32_t wr, std::uint32_t sge) override {
    return locked([&] { return in_.create_srq(pd, wr, sge); });
  }
  int destroy_srq(client::Srq* s) override {
    return locked([&] { return in_.destroy_srq(s); });
  }
  client::Qp* create_qp(client::Pd* pd, client::QpType t, client::Cq* scq, client::Cq* rcq,
                        const client::QpCap& cap, client::Srq* srq, bool sig_all) override {
    return locked([&] { return in_.create_qp(pd, t, scq, rcq, cap, srq, sig_all); });
  }
  int destroy_qp(client::Qp* qp) override {
    return locked([&] { return in_.destroy_qp(qp); });
  }
  int modify_qp(client::Qp* qp, const client::QpAttr& a, std::uint32_t mask) override {
    return locked([&] { return in_.modify_qp(qp, a, mask); });
  }
  int post_send(client::Qp* qp, const client::SendWr* wr, const client::SendWr** bad) override {
    return locked([&] { return in_.post_send(qp, wr, bad); });
  }
  int post_recv(client::Qp* qp, const client::RecvWr* wr, const client::RecvWr** bad) override {
    return locked([&] { return in_.post_recv(qp, wr, bad); });
  }
  int post_srq_recv(client::Srq* s, const client::RecvWr* wr, const client::RecvWr** bad) override {
    return locked([&] { return in_.post_srq_recv(s, wr, bad); });
  }
  int poll_cq(client::Cq* cq, int max, client::Wc* out) override {
    return locked([&] { return in_.poll_cq(cq, max, out); });
  }
  int wait_cq(client::Cq* cq, int timeout_ms) override;
  int get_async_event(client::AsyncEvent& ev, int timeout_ms) override;
  int cm_listen(std::uint16_t port) override {
    return locked([&] { return in_.cm_listen(port); });
  }
  int cm_connect(client::Qp* qp, Ipv4Addr dst, std::uint16_t port, const client::CmConnParam& p,
                 std::uint32_t& id) override {
    return locked([&] { return in_.cm_connect(qp, dst, port, p, id); });
  }
  int cm_accept(std::uint32_t id, client::Qp* qp, const client::CmConnParam& p) override {
    return locked([&] { return in_.cm_accept(id, qp, p); });
  }
  int cm_reject(std::uint32_t id, std::span<const std::uint8_t> pd) override {
    return locked([&] { return in_.cm_reject(id, pd); });
  }
  int cm_disconnect(std::uint32_t id) override {
    return locked([&] { return in_.cm_disconnect(id); });
  }
  int cm_get_event(client::CmEvent& ev, int timeout_ms) override;

 private:
  client::Context& in_;
  mutable std::mutex mu_;
};

}  // namespace roce::lnet
