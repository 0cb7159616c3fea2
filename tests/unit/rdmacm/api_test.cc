// Our librdmacm.so.1's C API without the provider (linked directly, so these calls are ours,
// not Debian's): what needs no device works as rdma-core's, and what needs one fails with
// rdma-core's errno instead of crashing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace {

TEST(RdmaCmApi, EventStrNamesEveryEvent) {
  EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_ADDR_RESOLVED), "RDMA_CM_EVENT_ADDR_RESOLVED");
  EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
  EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
  EXPECT_STREQ(rdma_event_str(static_cast<rdma_cm_event_type>(99)), "UNKNOWN EVENT");
}

TEST(RdmaCmApi, GetaddrinfoAsRdmaCore) {
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("192.0.2.7", "7471", &hints, &res), 0);
  ASSERT_NE(res, nullptr);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
  EXPECT_EQ(res->ai_src_addr, nullptr);
  ASSERT_EQ(res->ai_dst_len, sizeof(sockaddr_in));
  const auto* d = reinterpret_cast<const sockaddr_in*>(res->ai_dst_addr);
  EXPECT_EQ(ntohs(d->sin_port), 7471);
  EXPECT_EQ(ntohl(d->sin_addr.s_addr), 0xC0000207u);
  rdma_freeaddrinfo(res);

  hints.ai_flags = RAI_PASSIVE;
  hints.ai_family = AF_INET;
  hints.ai_port_space = RDMA_PS_UDP;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, "7174", &hints, &res), 0);
  EXPECT_EQ(res->ai_flags & RAI_PASSIVE, RAI_PASSIVE);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_UD);
  ASSERT_NE(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_dst_addr, nullptr);
  rdma_freeaddrinfo(res);

  EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), -1);
  EXPECT_EQ(errno, EINVAL);
  hints = {};
  hints.ai_flags = RAI_NUMERICHOST;
  EXPECT_NE(rdma_getaddrinfo("not an address", "1", &hints, &res), 0);  // an EAI_* code
}

TEST(RdmaCmApi, WithoutTheProviderThereAreNoDevices) {
  int n = -1;
  ibv_context** list = rdma_get_devices(&n);
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(list[0], nullptr);
  rdma_free_devices(list);

  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  pollfd p{ch->fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);  // a pollable fd with nothing queued
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(id->channel, ch);
  EXPECT_EQ(id->verbs, nullptr);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0xC0000201);
  EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  EXPECT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&a), 100), -1);
  EXPECT_EQ(errno, ENODEV);
  EXPECT_EQ(rdma_resolve_route(id, 100), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_connect(id, nullptr), -1);  // no QP: program-managed QPs are not offered
  EXPECT_EQ(errno, ENOSYS);
  ibv_qp_init_attr attr{};
  EXPECT_EQ(rdma_create_qp(id, nullptr, &attr), -1);  // no device yet
  EXPECT_EQ(errno, EINVAL);
  std::uint8_t tos = 8;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos), 0);
  EXPECT_EQ(rdma_join_multicast(id, reinterpret_cast<sockaddr*>(&a), nullptr), -1);
  EXPECT_EQ(errno, ENOSYS);
  // rdma_resolve_addr bound the id first, as the kernel does: an ephemeral port.
  EXPECT_GE(ntohs(rdma_get_src_port(id)), 32768);
  EXPECT_EQ(rdma_get_dst_port(id), 0);
  // An id on the channel: the channel stays.
  rdma_destroy_event_channel(ch);
  EXPECT_EQ(fcntl(ch->fd, F_GETFD), FD_CLOEXEC);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);

  rdma_cm_id* bad = nullptr;
  EXPECT_EQ(rdma_create_id(nullptr, &bad, nullptr, static_cast<rdma_port_space>(5)), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_create_id(nullptr, &bad, nullptr, RDMA_PS_IB), -1);
  EXPECT_EQ(errno, ENOSYS);
  EXPECT_EQ(rdma_get_cm_event(nullptr, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
