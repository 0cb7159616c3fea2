// A hostile rsockets peer (tests/integration/rsocket_hostile.sh): connects to an rsocket
// server with rdma_cm and libibverbs, then breaks the protocol in one way (MODE), so that the
// server's rsocket must end with an error instead of corrupting memory or crashing.
//   rsocket_hostile SERVER_IP PORT MODE
// MODE: version (private data of version 2: the server must refuse the connection),
// overrun (a data message longer than the buffer the server granted), huge (the largest length
// an immediate can say), badop (a reserved operation), credits (more credits than the server's
// receive queue), iomap (an iomap index outside the server's area).
// Exit 0 when the step went as planned (refused, or the bad message delivered), else 1.
#include <endian.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "verbs/rdmacm/rsocket_proto.h"

using namespace roce::rsockets;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: rsocket_hostile SERVER_IP PORT MODE\n");
    return 2;
  }
  const std::string mode = argv[3];
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  if (rdma_getaddrinfo(argv[1], argv[2], &hints, &res)) {
    std::perror("rdma_getaddrinfo");
    return 1;
  }
  ibv_qp_init_attr attr{};
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 16;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 1;
  rdma_cm_id* id = nullptr;
  if (rdma_create_ep(&id, res, nullptr, &attr)) {
    std::perror("rdma_create_ep");
    return 1;
  }
  static std::uint8_t target[4096], rbuf[1 << 16];
  ibv_mr* tmr = rdma_reg_write(id, target, sizeof target);
  ibv_mr* rmr = rdma_reg_write(id, rbuf, sizeof rbuf);
  if (!tmr || !rmr) {
    std::perror("rdma_reg_write");
    return 1;
  }
  for (int i = 0; i < 16; ++i) {
    ibv_recv_wr wr{}, *bad = nullptr;
    if (ibv_post_recv(id->qp, &wr, &bad)) {
      std::perror("ibv_post_recv");
      return 1;
    }
  }
  ConnData c = format_conn(reinterpret_cast<std::uintptr_t>(target), tmr->rkey, 0,
                           reinterpret_cast<std::uintptr_t>(rbuf), rmr->rkey, sizeof rbuf, 16);
  if (mode == "version") c.version = 2;
  rdma_conn_param p{};
  p.private_data = &c;
  p.private_data_len = sizeof c;
  p.responder_resources = p.initiator_depth = 1;
  p.retry_count = p.rnr_retry_count = 7;
  if (rdma_connect(id, &p)) {
    const int e = errno;
    std::printf("rdma_connect: %s\n", std::strerror(e));
    return mode == "version" && e == ECONNREFUSED ? 0 : 1;
  }
  if (mode == "version") {
    std::printf("FAIL: connected with private data of version 2\n");
    return 1;
  }
  Peer peer;
  const rdma_cm_event* ev = id->event;
  if (!ev || parse_conn(ev->param.conn.private_data, ev->param.conn.private_data_len, peer)) {
    std::printf("FAIL: the server's private data does not parse\n");
    return 1;
  }
  std::uint32_t imm;
  if (mode == "overrun")
    imm = make_msg(kOpData, peer.first_buf.length + 1);
  else if (mode == "huge")
    imm = make_msg(kOpData, 0x1FFFFFFF);
  else if (mode == "badop")
    imm = make_msg(kOpRsvd, 1);
  else if (mode == "credits")
    imm = make_msg(kOpSgl, peer.credits + 100);
  else if (mode == "iomap")
    imm = make_msg(kOpIomapSgl, 200);
  else {
    std::printf("unknown mode %s\n", mode.c_str());
    return 2;
  }
  // The bytes land where the server allowed (its first buffer); the immediate lies.
  std::memset(rbuf, 0xA5, 16);
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(rbuf), 16, rmr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htobe32(imm);
  wr.wr.rdma.remote_addr = peer.first_buf.addr;
  wr.wr.rdma.rkey = peer.first_buf.key;
  if (ibv_post_send(id->qp, &wr, &bad)) {
    std::perror("ibv_post_send");
    return 1;
  }
  ibv_wc wc{};
  if (rdma_get_send_comp(id, &wc) <= 0) {
    std::perror("rdma_get_send_comp");
    return 1;
  }
  std::printf("sent %s: %s\n", mode.c_str(), ibv_wc_status_str(wc.status));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return wc.status == IBV_WC_SUCCESS ? 0 : 1;
}
