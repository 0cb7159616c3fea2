// Data through libroce-verbs.so attached to roced (ROCE_ATTACH), in a program of libibverbs
// calls whose memory comes from the attached Context (bridge.h: context_of: a Buffer of the
// Context registers as it is), and its own memory (adopted). Checks the provider's attached paths:
// SENDs with inline data and with 6 SGEs (the attachment takes registered SGEs only, at most 4:
// both are copied into the QP's bounce buffer), RDMA WRITE then READ back, completions through a
// completion channel's fd, and a channel armed for solicited completions only.
//   verbs_attached_data server PORT | client PORT HOST
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "verbs/provider/bridge.h"

namespace {

struct Peer {
  std::uint32_t qpn, rkey;
  std::uint64_t addr;
  ibv_gid gid;
};

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "FAIL: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

int tcp(bool server, const char* port, const char* host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = server ? AI_PASSIVE : 0;
  addrinfo* ai;
  if (getaddrinfo(server ? nullptr : host, port, &hints, &ai) != 0) die("getaddrinfo");
  int s = socket(ai->ai_family, ai->ai_socktype, 0);
  if (server) {
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, ai->ai_addr, ai->ai_addrlen) != 0 || listen(s, 1) != 0) die("listen");
    const int c = accept(s, nullptr, nullptr);
    close(s);
    s = c;
  } else {
    int i = 0;
    while (i < 100 && connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
      usleep(100000);
      ++i;
    }
    if (i == 100) die("connect");
  }
  freeaddrinfo(ai);
  return s;
}

void sync(int s) {
  char c = 's';
  if (write(s, &c, 1) != 1 || read(s, &c, 1) != 1) die("sync");
}

/// One completion, waiting on the channel's fd as programs do.
ibv_wc next_wc(ibv_comp_channel* ch, ibv_cq* cq) {
  ibv_wc wc{};
  for (;;) {
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
    if (ibv_req_notify_cq(cq, 0) != 0) die("ibv_req_notify_cq");
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, 20000) != 1) die("no completion in 20 s");
    ibv_cq* e;
    void* ectx;
    if (ibv_get_cq_event(ch, &e, &ectx) != 0 || e != cq) die("ibv_get_cq_event");
    ibv_ack_cq_events(cq, 1);
  }
}

void expect_ok(const ibv_wc& wc, ibv_wc_opcode op, const char* what) {
  if (wc.status != IBV_WC_SUCCESS || wc.opcode != op) {
    std::fprintf(stderr, "FAIL: %s: %s, opcode %d\n", what, ibv_wc_status_str(wc.status),
                 wc.opcode);
    std::exit(1);
  }
}

/// A receive queue of 4 takes 4 WRs, then ENOMEM (bad_wr the first past it) until
/// completions are polled: flushed ones here (rdma-core's tests/utils.py full_rq_bad_flow).
/// Attached, roced drains the ring as it goes, so the provider counts. The QP is UD, in INIT.
const char* full_rq(ibv_context* ctx, ibv_pd* pd, char* mem, std::uint32_t lkey) {
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_UD;
  ibv_qp* qp = cq != nullptr ? ibv_create_qp(pd, &ia) : nullptr;
  if (qp == nullptr) return "create";
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = 0x11111111;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return "INIT";
  ibv_qp_attr got{};
  ibv_qp_init_attr gi{};
  if (ibv_query_qp(qp, &got, IBV_QP_CAP, &gi) != 0) return "query";
  const std::uint32_t n = got.cap.max_recv_wr;
  ibv_sge sge{reinterpret_cast<std::uint64_t>(mem), 256, lkey};
  std::vector<ibv_recv_wr> wrs(n + 2);
  for (std::size_t i = 0; i < wrs.size(); ++i)
    wrs[i] = {i, i + 1 < wrs.size() ? &wrs[i + 1] : nullptr, &sge, 1};
  ibv_recv_wr* bad = nullptr;
  wrs[n].next = nullptr;  // n + 1 WRs: the last one does not fit
  if (ibv_post_recv(qp, wrs.data(), &bad) != ENOMEM || bad != &wrs[n]) return "WR n+1 taken";
  usleep(50000);  // roced has taken the ring's WRs into its queue by now: no room still
  if (ibv_post_recv(qp, &wrs[n + 1], &bad) != ENOMEM || bad != &wrs[n + 1]) return "taken later";
  a = {};
  a.qp_state = IBV_QPS_ERR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return "ERR";
  std::uint32_t flushed = 0;
  for (int i = 0; i < 2000 && flushed < n; ++i) {
    ibv_wc wc[8];
    const int k = ibv_poll_cq(cq, 8, wc);
    if (k < 0) return "poll";
    for (int j = 0; j < k; ++j) flushed += wc[j].status == IBV_WC_WR_FLUSH_ERR ? 1 : 0;
    if (k == 0) usleep(1000);
  }
  if (flushed != n) return "flushes";
  if (ibv_post_recv(qp, &wrs[n + 1], &bad) != 0) return "no room after the flushes were polled";
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s server PORT | client PORT HOST\n", argv[0]);
    return 2;
  }
  const bool server = std::strcmp(argv[1], "server") == 0;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n < 1) die("no device");
  ibv_context* ctx = ibv_open_device(list[n - 1]);
  if (ctx == nullptr) die("ibv_open_device");
  roce::client::Context* rc = roce::verbs_compat::context_of(ctx);
  if (rc == nullptr) die("not an appliance device");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 32, nullptr, ch, 0);
  if (pd == nullptr || ch == nullptr || cq == nullptr) die("pd/channel/cq");

  // The program's own memory: its pages adopted (verbs/memory); shared memory that is not
  // the Context's stays EOPNOTSUPP (its sharing with a file or process would be cut).
  std::vector<char> own(4096);
  errno = 0;
  ibv_mr* own_mr = ibv_reg_mr(pd, own.data(), own.size(), IBV_ACCESS_LOCAL_WRITE);
  std::printf("ibv_reg_mr of the program's own memory: %s\n",
              own_mr != nullptr ? "registered" : std::strerror(errno));
  if (own_mr == nullptr) die("ibv_reg_mr of own memory");
  // ibv_rereg_mr to other memory of the program: adopted too, the old range released, the
  // keys kept (attach protocol 8's kReregMr).
  std::vector<char> other(8192);
  const std::uint32_t own_lkey = own_mr->lkey, own_rkey = own_mr->rkey;
  if (ibv_rereg_mr(own_mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, other.data(), other.size(),
                   0) != 0)
    die("ibv_rereg_mr to other own memory");
  std::printf("ibv_rereg_mr to other own memory: %s\n",
              own_mr->addr == other.data() && own_mr->length == other.size() ? "moved" : "WRONG");
  std::printf("ibv_rereg_mr keys: %s\n",
              own_mr->lkey == own_lkey && own_mr->rkey == own_rkey ? "kept" : "changed");
  // Write access for a read-only mapping: EFAULT, as ibv_reg_mr, and the MR stays as it was.
  void* ro = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ro == MAP_FAILED) die("mmap");
  errno = 0;
  const int refused =
      ibv_rereg_mr(own_mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, nullptr,
                   ro, 4096, IBV_ACCESS_LOCAL_WRITE);
  std::printf("ibv_rereg_mr to read-only memory with write access: %s\n",
              refused != 0 && own_mr->addr == other.data() ? "refused" : "WRONG");
  munmap(ro, 4096);
  if (ibv_dereg_mr(own_mr) != 0) die("ibv_dereg_mr of own memory");
  void* shm = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shm == MAP_FAILED) die("mmap");
  errno = 0;
  ibv_mr* shm_mr = ibv_reg_mr(pd, shm, 4096, IBV_ACCESS_LOCAL_WRITE);
  std::printf("ibv_reg_mr of shared anonymous memory: %s\n",
              shm_mr != nullptr ? "registered" : std::strerror(errno));
  if (shm_mr != nullptr || errno != EOPNOTSUPP) die("ibv_reg_mr of shared memory: not EOPNOTSUPP");
  munmap(shm, 4096);

  constexpr std::size_t kLen = 65536;
  roce::client::Buffer* buf;
  {
    std::lock_guard<std::mutex> g(roce::verbs_compat::lock_of(ctx));
    buf = rc->alloc_buffer(kLen);
  }
  if (buf == nullptr) die("alloc_buffer");
  auto* mem = static_cast<char*>(buf->addr);
  ibv_mr* mr = ibv_reg_mr(
      pd, mem, kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (mr == nullptr) die("ibv_reg_mr of a Buffer");
  const char* frq = full_rq(ctx, pd, mem, mr->lkey);
  std::printf("full receive queue: %s\n", frq == nullptr ? "ENOMEM past max_recv_wr" : frq);

  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.cap.max_send_wr = 16;
  ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = 8;
  ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = 64;
  ia.qp_type = IBV_QPT_RC;
  ibv_qp* qp = ibv_create_qp(pd, &ia);
  if (qp == nullptr) die("ibv_create_qp");

  Peer me{qp->qp_num, mr->rkey, reinterpret_cast<std::uint64_t>(mem), {}}, them{};
  if (ibv_query_gid(ctx, 1, 0, &me.gid) != 0) die("ibv_query_gid");
  const int s = tcp(server, argv[2], argc > 3 ? argv[3] : nullptr);
  if (write(s, &me, sizeof me) != sizeof me || read(s, &them, sizeof them) != sizeof them)
    die("exchange");

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("INIT");
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = them.qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = them.gid;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("RTR");
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS");

  const std::string inline_msg = "inline data, copied at post time";
  int bad = 0;
  if (server) {
    for (int i = 0; i < 2; ++i) {
      ibv_sge sge{reinterpret_cast<std::uint64_t>(mem + i * 1024), 1024, mr->lkey};
      ibv_recv_wr rw{};
      rw.wr_id = 100 + i;
      rw.sg_list = &sge;
      rw.num_sge = 1;
      ibv_recv_wr* b;
      if (ibv_post_recv(qp, &rw, &b) != 0) die("ibv_post_recv");
    }
    sync(s);  // receives posted
    ibv_wc w1 = next_wc(ch, cq), w2 = next_wc(ch, cq);
    expect_ok(w1, IBV_WC_RECV, "inline SEND");
    expect_ok(w2, IBV_WC_RECV, "6-SGE SEND");
    const bool in_ok = w1.byte_len == inline_msg.size() &&
                       std::memcmp(mem, inline_msg.data(), inline_msg.size()) == 0;
    bool sg_ok = w2.byte_len == 600;
    for (int i = 0; i < 600; ++i) sg_ok &= mem[1024 + i] == static_cast<char>('A' + i / 100);
    std::printf("SEND with inline data: %u bytes, %s\n", w1.byte_len, in_ok ? "intact" : "WRONG");
    std::printf("SEND of 6 SGEs: %u bytes, %s\n", w2.byte_len, sg_ok ? "intact" : "WRONG");
    bad = !in_ok || !sg_ok;
    sync(s);  // the client's WRITE and READ are done
    bool w_ok = true;
    for (int i = 0; i < 4096; ++i) w_ok &= mem[8192 + i] == static_cast<char>(i * 7);
    std::printf("RDMA WRITE into our memory: %s\n", w_ok ? "intact" : "WRONG");
    bad |= !w_ok;
  } else {
    sync(s);
    // SEND 1: inline, from a stack buffer (not registered: inline needs no key)
    char stack_msg[64];
    std::memcpy(stack_msg, inline_msg.data(), inline_msg.size());
    ibv_sge isge{reinterpret_cast<std::uint64_t>(stack_msg),
                 static_cast<std::uint32_t>(inline_msg.size()), 0};
    ibv_send_wr w{};
    w.wr_id = 1;
    w.sg_list = &isge;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
    ibv_send_wr* b;
    if (ibv_post_send(qp, &w, &b) != 0) die("post inline SEND");
    std::memset(stack_msg, 0, sizeof stack_msg);  // the data was taken at post time
    expect_ok(next_wc(ch, cq), IBV_WC_SEND, "inline SEND");
    // SEND 2: 6 SGEs of 100 bytes, scattered in the registered buffer
    ibv_sge sg[6];
    for (int i = 0; i < 6; ++i) {
      char* p = mem + 2048 + i * 512;
      std::memset(p, 'A' + i, 100);
      sg[i] = {reinterpret_cast<std::uint64_t>(p), 100, mr->lkey};
    }
    w = {};
    w.wr_id = 2;
    w.sg_list = sg;
    w.num_sge = 6;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_send(qp, &w, &b) != 0) die("post 6-SGE SEND");
    expect_ok(next_wc(ch, cq), IBV_WC_SEND, "6-SGE SEND");
    // RDMA WRITE of 4 KiB, then READ it back
    for (int i = 0; i < 4096; ++i) mem[12288 + i] = static_cast<char>(i * 7);
    ibv_sge ws{reinterpret_cast<std::uint64_t>(mem + 12288), 4096, mr->lkey};
    w = {};
    w.wr_id = 3;
    w.sg_list = &ws;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = them.addr + 8192;
    w.wr.rdma.rkey = them.rkey;
    if (ibv_post_send(qp, &w, &b) != 0) die("post WRITE");
    expect_ok(next_wc(ch, cq), IBV_WC_RDMA_WRITE, "WRITE");
    ibv_sge rs{reinterpret_cast<std::uint64_t>(mem + 20480), 4096, mr->lkey};
    w.wr_id = 4;
    w.sg_list = &rs;
    w.opcode = IBV_WR_RDMA_READ;
    if (ibv_post_send(qp, &w, &b) != 0) die("post READ");
    expect_ok(next_wc(ch, cq), IBV_WC_RDMA_READ, "READ");
    const bool r_ok = std::memcmp(mem + 20480, mem + 12288, 4096) == 0;
    std::printf("RDMA WRITE then READ back: %s\n", r_ok ? "intact" : "WRONG");
    bad = !r_ok;
    sync(s);
  }
  // Solicited-only arming (ibv_req_notify_cq(cq, 1)): the server's channel fires for the
  // client's SEND with IBV_SEND_SOLICITED, not for the unsolicited one 400 ms before it.
  if (server) {
    for (int i = 0; i < 2; ++i) {
      ibv_sge sge{reinterpret_cast<std::uint64_t>(mem + 32768 + i * 1024), 1024, mr->lkey};
      ibv_recv_wr rw{};
      rw.wr_id = 200 + i;
      rw.sg_list = &sge;
      rw.num_sge = 1;
      ibv_recv_wr* b;
      if (ibv_post_recv(qp, &rw, &b) != 0) die("ibv_post_recv");
    }
    if (ibv_req_notify_cq(cq, 1) != 0) die("ibv_req_notify_cq(solicited only)");
    sync(s);  // armed
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, 20000) != 1) die("no event in 20 s");
    ibv_cq* e;
    void* ectx;
    if (ibv_get_cq_event(ch, &e, &ectx) != 0 || e != cq) die("ibv_get_cq_event");
    ibv_ack_cq_events(cq, 1);
    // Woken by the solicited SEND, both are there, in order; woken by the first, only it.
    ibv_wc wc[4];
    const int got = ibv_poll_cq(cq, 4, wc);
    const bool ok = got == 2 && wc[0].wr_id == 200 && wc[1].wr_id == 201 &&
                    wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS;
    std::printf(
        "solicited-only arming: woken with %d completion(s) polled%s\n", got,
        ok ? ", the solicited SEND's last, in order" : " (WRONG: woken before the solicited SEND)");
    bad |= !ok;
  } else {
    sync(s);  // the server armed
    ibv_sge sge{reinterpret_cast<std::uint64_t>(mem + 2048), 64, mr->lkey};
    ibv_send_wr w{};
    w.wr_id = 5;
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* b;
    if (ibv_post_send(qp, &w, &b) != 0) die("post unsolicited SEND");
    expect_ok(next_wc(ch, cq), IBV_WC_SEND, "unsolicited SEND");
    usleep(400000);
    w.wr_id = 6;
    w.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
    if (ibv_post_send(qp, &w, &b) != 0) die("post solicited SEND");
    expect_ok(next_wc(ch, cq), IBV_WC_SEND, "solicited SEND");
  }
  sync(s);
  close(s);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  {
    std::lock_guard<std::mutex> g(roce::verbs_compat::lock_of(ctx));
    rc->free_buffer(buf);
  }
  ibv_destroy_cq(cq);
  ibv_destroy_comp_channel(ch);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  std::printf("%s\n", bad ? "FAIL" : "OK");
  return bad;
}
