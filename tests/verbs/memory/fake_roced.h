/// @file
/// A Context that plays roced's part of memory registration for verbs/memory's unit tests:
/// register_memfd_at maps the memfd's range at an address of its own (roced's view of the
/// region), free_buffer unmaps it. Everything else is refused (ENOSYS).
#pragma once

#include <roce/client.h>
#include <sys/mman.h>

#include <cerrno>
#include <memory>
#include <vector>

namespace roce::verbs_compat::test {

class FakeRoced : public client::Context {
 public:
  struct View : client::Buffer {
    void* map = nullptr;  ///< roced's mapping of the region
    unsigned mrs = 0;
  };
  std::vector<std::unique_ptr<View>> views;
  int registrations = 0;  ///< register_memfd_at calls that succeeded

  /// As roced when its client goes: every region's mapping dropped.
  ~FakeRoced() override {
    for (auto& v : views) ::munmap(v->map, v->length);
  }
  int max_regions = 1 << 20;
  std::size_t max_length = std::size_t{1} << 40;  ///< longer regions: EDQUOT (max_memory)

  /// roced's view of the byte at `addr` (of the process), through the newest region holding it.
  unsigned char* seen_by_roced(const void* addr) {
    const auto a = reinterpret_cast<std::uintptr_t>(addr);
    for (auto it = views.rbegin(); it != views.rend(); ++it) {
      const auto s = reinterpret_cast<std::uintptr_t>((*it)->addr);
      if (a >= s && a < s + (*it)->length) return static_cast<unsigned char*>((*it)->map) + (a - s);
    }
    return nullptr;
  }

  client::Buffer* register_memfd_at(int fd, std::uint64_t offset, void* addr,
                                    std::size_t length) override {
    if (static_cast<int>(views.size()) >= max_regions || length > max_length) return fail(EDQUOT);
    void* p =
        ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
    if (p == MAP_FAILED) return fail(EINVAL);
    auto v = std::make_unique<View>();
    v->addr = addr;
    v->length = length;
    v->fd = fd;
    v->map = p;
    views.push_back(std::move(v));
    ++registrations;
    return views.back().get();
  }
  int free_buffer(client::Buffer* b) override {
    for (auto it = views.begin(); it != views.end(); ++it)
      if (it->get() == b) {
        if ((*it)->mrs != 0) return EBUSY;
        ::munmap((*it)->map, (*it)->length);
        views.erase(it);
        return 0;
      }
    return EINVAL;
  }

  const client::PortInfo& port() const override { return port_; }
  bool connected() const override { return true; }
  client::Pd* alloc_pd() override { return fail(ENOSYS); }
  int dealloc_pd(client::Pd*) override { return ENOSYS; }
  client::Buffer* alloc_buffer(std::size_t) override { return fail(ENOSYS); }
  client::Buffer* register_memfd(int, void*, std::size_t) override { return fail(ENOSYS); }
  client::Mr* reg_mr(client::Pd*, void*, std::size_t, std::uint32_t) override {
    return fail(ENOSYS);
  }
  int dereg_mr(client::Mr*) override { return ENOSYS; }
  client::Cq* create_cq(std::uint32_t) override { return fail(ENOSYS); }
  int destroy_cq(client::Cq*) override { return ENOSYS; }
  client::Srq* create_srq(client::Pd*, std::uint32_t, std::uint32_t) override {
    return fail(ENOSYS);
  }
  int destroy_srq(client::Srq*) override { return ENOSYS; }
  client::Qp* create_qp(client::Pd*, client::QpType, client::Cq*, client::Cq*, const client::QpCap&,
                        client::Srq*, bool) override {
    return fail(ENOSYS);
  }
  int destroy_qp(client::Qp*) override { return ENOSYS; }
  int modify_qp(client::Qp*, const client::QpAttr&, std::uint32_t) override { return ENOSYS; }
  int post_send(client::Qp*, const client::SendWr*, const client::SendWr**) override {
    return ENOSYS;
  }
  int post_recv(client::Qp*, const client::RecvWr*, const client::RecvWr**) override {
    return ENOSYS;
  }
  int post_srq_recv(client::Srq*, const client::RecvWr*, const client::RecvWr**) override {
    return ENOSYS;
  }
  int poll_cq(client::Cq*, int, client::Wc*) override { return -ENOSYS; }
  int wait_cq(client::Cq*, int) override { return ENOSYS; }
  int get_async_event(client::AsyncEvent&, int) override { return ENOSYS; }
  int cm_listen(std::uint16_t) override { return ENOSYS; }
  int cm_connect(client::Qp*, Ipv4Addr, std::uint16_t, const client::CmConnParam&,
                 std::uint32_t&) override {
    return ENOSYS;
  }
  int cm_accept(std::uint32_t, client::Qp*, const client::CmConnParam&) override { return ENOSYS; }
  int cm_reject(std::uint32_t, std::span<const std::uint8_t>) override { return ENOSYS; }
  int cm_disconnect(std::uint32_t) override { return ENOSYS; }
  int cm_get_event(client::CmEvent&, int) override { return ENOSYS; }

 private:
  static std::nullptr_t fail(int e) {
    errno = e;
    return nullptr;
  }
  client::PortInfo port_;
};

}  // namespace roce::verbs_compat::test
