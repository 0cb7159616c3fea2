/// @file
/// rsockets (rdma/rsocket.h) over our rdma_* API and libibverbs (docs/verbs-compat.md
/// "rsockets"): stream sockets whose bytes travel as RDMA WRITE WITH IMMEDIATE into the peer's
/// receive buffer, with rdma-core 44's wire protocol (rsocket_proto.h), so that an rsocket here
/// talks to one of rdma-core's. SOCK_DGRAM rsockets are not offered (EOPNOTSUPP).
///
/// An rsocket is a synchronous rdma_cm id (its own event channel; the channel's fd is the
/// rsocket's number, as in rdma-core), one CQ with a completion channel for both directions and
/// an RC QP. There are no service threads: connection requests wait on the listener's channel
/// until raccept, and CM events of a connected rsocket (the peer's DREQ) are read whenever a
/// call waits or polls. One mutex per rsocket guards its state; a blocking call drops it while
/// it sleeps in poll() on the completion channel and the CM channel.
#include <endian.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "verbs/rdmacm/rsocket_proto.h"

#define RDMACM_EXPORT extern "C" __attribute__((visibility("default")))

int roce_rdmacm_complete(rdma_cm_id* id);  // librdmacm.cc

namespace {

using namespace roce::rsockets;
using Clock = std::chrono::steady_clock;

// States, ordered as rdma-core orders them: passive, opening, connected, closed.
enum : int {
  kInit = 0,
  kBound = 0x1,
  kListening = 0x2,
  kOpening = 0x4,
  kResolvingAddr = kOpening | 0x10,
  kResolvingRoute = kOpening | 0x20,
  kConnecting = kOpening | 0x40,
  kAccepting = kOpening | 0x80,
  kConnected = 0x100,
  kWritable = 0x200,
  kReadable = 0x400,
  kConnRdWr = kConnected | kWritable | kReadable,
  kConnectError = 0x800,
  kDisconnected = 0x1000,
  kError = 0x2000,
};

constexpr std::uint64_t kRecvFlag = 1ull << 63;
constexpr std::uint64_t kSbufFlag = 1ull << 62;  ///< an IOMAP_SGL message sent from the sbuf
constexpr int kCtrlSlots = 4;                    ///< send queue entries kept for control messages
constexpr std::uint32_t kCtrlMsgSize = sizeof(Sge);
constexpr std::uint32_t kSndLowat = 2048, kOlapStart = 2048, kMaxTransfer = 65536;
constexpr std::uint32_t kQpMin = 16, kQpMax = 0xFFFE;
constexpr int kConnRetries = 6;

// rdma-core's defaults (rs_configure without /etc/rdma/rsocket files).
constexpr std::uint32_t kDefMem = 1 << 17, kDefWmem = 1 << 17;
constexpr std::uint16_t kDefSq = 384, kDefRq = 384, kDefInline = 64;

struct LocalMap {
  std::uint64_t offset;
  ibv_mr* mr;
  int index;  ///< slot in the peer's iomap area; -1: a local mapping
  bool sent;
};

struct RSocket {
  int index = -1;
  rdma_cm_id* id = nullptr;
  std::mutex mu;
  int state = kInit, err = 0, fd_flags = 0;
  std::uint64_t so_opts = 0, tcp_opts = 0, ipv6_opts = 0;
  int keepalive_time = 7200;
  Clock::time_point next_keepalive{};
  std::uint32_t sbuf_size = kDefWmem, rbuf_size = kDefMem;
  std::uint32_t sq_size = kDefSq, rq_size = kDefRq, sq_inline = kDefInline;
  std::uint32_t target_iomap_size = 0;
  std::vector<std::uint8_t> route;  ///< RDMA_ROUTE as set (kept, reported)
  sockaddr_storage dst{};
  int retries = 0;

  ibv_comp_channel* cch = nullptr;
  ibv_cq* cq = nullptr;
  bool cq_armed = false;

  std::uint8_t* sbuf = nullptr;
  ibv_mr* smr = nullptr;
  std::uint32_t sbuf_avail = 0, scur = 0;
  int sqe_avail = 0;
  std::uint32_t ctrl_seqno = 0, ctrl_max_seqno = kCtrlSlots;
  std::uint16_t sseq_no = 0, sseq_comp = 0, rseq_no = 0, rseq_comp = 0;

  std::uint8_t* target = nullptr;  ///< kSglSize Sge, then target_iomap_size IomapEntry
  std::size_t target_len = 0;
  ibv_mr* target_mr = nullptr;
  int target_sge = 0;

  std::uint8_t* rbuf = nullptr;
  ibv_mr* rmr = nullptr;
  std::uint32_t rbuf_offset = 0, rbuf_free_offset = 0, rbuf_bytes_avail = 0;
  std::vector<std::uint32_t> rmsg;  ///< lengths of the data messages not yet read
  std::uint32_t rmsg_head = 0, rmsg_tail = 0;

  Peer peer;
  std::uint32_t remote_sge = 1;
  Ledger ledger;
  std::vector<LocalMap> maps;
  bool iomap_pending = false;

  volatile Sge* tsgl() { return reinterpret_cast<volatile Sge*>(target); }
  volatile IomapEntry* tiomap() {
    return reinterpret_cast<volatile IomapEntry*>(target + sizeof(Sge) * kSglSize);
  }
};

using Lock = std::unique_lock<std::mutex>;
using Ptr = std::shared_ptr<RSocket>;

std::mutex reg_mu;
std::map<int, Ptr>& registry() {
  static auto* m = new std::map<int, Ptr>;  // never destroyed: calls may come at exit
  return *m;
}

Ptr lookup(int fd) {
  std::lock_guard lk(reg_mu);
  auto it = registry().find(fd);
  return it == registry().end() ? nullptr : it->second;
}

void insert(const Ptr& rs) {
  std::lock_guard lk(reg_mu);
  registry()[rs->index] = rs;
}

int fail(int e) {
  errno = e;
  return -1;
}

int set_nonblock(int fd, bool on) {
  const int f = fcntl(fd, F_GETFL);
  if (f < 0) return -1;
  return fcntl(fd, F_SETFL, on ? (f | O_NONBLOCK) : (f & ~O_NONBLOCK));
}

std::uint8_t* alloc_buf(std::size_t len) {
  const std::size_t n = (len + 4095) & ~std::size_t{4095};
  void* p = nullptr;
  if (posix_memalign(&p, 4096, n)) return nullptr;
  std::memset(p, 0, n);
  return static_cast<std::uint8_t*>(p);
}

Sge read_sge(volatile Sge* s) {
  Sge v;
  v.addr = s->addr;
  v.key = s->key;
  v.length = s->length;
  return v;
}

// ---- work requests -------------------------------------------------------------------------

int post_recv(RSocket& rs) {
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = kRecvFlag;
  return ibv_post_recv(rs.id->qp, &wr, &bad);
}

/// A message without payload: credits or a control message (zero-length WRITE WITH IMM).
int post_msg(RSocket& rs, std::uint32_t msg) {
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = msg;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htobe32(msg);
  wr.wr.rdma.remote_addr = rs.peer.sgl_addr;
  wr.wr.rdma.rkey = rs.peer.sgl_key;
  return ibv_post_send(rs.id->qp, &wr, &bad);
}

int post_write(RSocket& rs, ibv_sge* sgl, int n, std::uint64_t wr_id, std::uint32_t imm,
               bool with_imm, unsigned flags, std::uint64_t addr, std::uint32_t rkey) {
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = sgl;
  wr.num_sge = n;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = flags;
  if (with_imm) wr.imm_data = htobe32(imm);
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  return ibv_post_send(rs.id->qp, &wr, &bad);
}

/// Copies `len` bytes (from `copy`) into the send buffer at its cursor, wrapping: the 1 or 2
/// SGEs that hold them.
template <typename Copy>
int stage(RSocket& rs, std::uint32_t len, ibv_sge* sge, Copy copy) {
  const std::uint32_t left = rs.sbuf_size - rs.scur;
  if (len <= left) {
    copy(rs.sbuf + rs.scur, 0, len);
    sge[0] = {reinterpret_cast<std::uintptr_t>(rs.sbuf + rs.scur), len, rs.smr->lkey};
    rs.scur = len < left ? rs.scur + len : 0;
    return 1;
  }
  copy(rs.sbuf + rs.scur, 0, left);
  copy(rs.sbuf, left, len - left);
  sge[0] = {reinterpret_cast<std::uintptr_t>(rs.sbuf + rs.scur), left, rs.smr->lkey};
  sge[1] = {reinterpret_cast<std::uintptr_t>(rs.sbuf), len - left, rs.smr->lkey};
  rs.scur = len - left;
  return 2;
}

/// The peer broke the protocol (or the QP failed): the rsocket ends with `e`.
void protocol_error(RSocket& rs, int e) {
  if (!(rs.state & kConnected)) return;
  rs.state = kError;
  rs.err = e;
  if (rs.id && rs.id->qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(rs.id->qp, &a, IBV_QP_STATE);
  }
}

// ---- credits -------------------------------------------------------------------------------

bool ctrl_avail(const RSocket& rs) { return rs.ctrl_seqno != rs.ctrl_max_seqno; }

void send_credits(RSocket& rs) {
  ++rs.ctrl_seqno;
  rs.rseq_comp = static_cast<std::uint16_t>(rs.rseq_no + (rs.rq_size >> 1));
  const std::uint32_t grant = static_cast<std::uint16_t>(rs.rseq_no + rs.rq_size);
  const std::uint32_t half = rs.rbuf_size >> 1;
  if (rs.rbuf_bytes_avail >= half) {
    // The next free half of our receive buffer, in the peer's byte order.
    Sge s{reinterpret_cast<std::uintptr_t>(rs.rbuf + rs.rbuf_free_offset), rs.rmr->rkey, half};
    if (rs.peer.swap) {
      s.addr = __builtin_bswap64(s.addr);
      s.key = __builtin_bswap32(s.key);
      s.length = __builtin_bswap32(s.length);
    }
    ibv_sge sge{};
    unsigned flags = 0;
    if (rs.sq_inline >= sizeof s) {
      sge = {reinterpret_cast<std::uintptr_t>(&s), sizeof s, 0};
      flags = IBV_SEND_INLINE;
    } else {
      std::uint8_t* slot = rs.sbuf + rs.sbuf_size + kCtrlMsgSize * (rs.ctrl_seqno % kCtrlSlots);
      std::memcpy(slot, &s, sizeof s);
      sge = {reinterpret_cast<std::uintptr_t>(slot), sizeof s, rs.smr->lkey};
    }
    const std::uint32_t msg = make_msg(kOpSgl, grant);
    post_write(rs, &sge, 1, msg, msg, true, flags, rs.peer.sgl_addr + rs.remote_sge * sizeof(Sge),
               rs.peer.sgl_key);
    rs.ledger.granted();
    rs.rbuf_bytes_avail -= half;
    rs.rbuf_free_offset += half;
    if (rs.rbuf_free_offset >= rs.rbuf_size) rs.rbuf_free_offset = 0;
    if (++rs.remote_sge == rs.peer.sgl_count) rs.remote_sge = 0;
  } else {
    post_msg(rs, make_msg(kOpSgl, grant));
  }
}

void update_credits(RSocket& rs) {
  const bool due = rs.rbuf_bytes_avail >= (rs.rbuf_size >> 1) ||
                   static_cast<std::int16_t>(rs.rseq_no - rs.rseq_comp) >= 0;
  if (due && ctrl_avail(rs) && (rs.state & kConnected)) send_credits(rs);
}

// ---- completions ---------------------------------------------------------------------------

/// Takes every completion of the CQ; 0, or -1 with errno when receives cannot be reposted.
int poll_cq(RSocket& rs) {
  if (rs.cq == nullptr) return 0;
  ibv_wc wc[16];
  int n, reposts = 0;
  while ((n = ibv_poll_cq(rs.cq, 16, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      const ibv_wc& w = wc[i];
      if (w.wr_id & kRecvFlag) {
        if (w.status != IBV_WC_SUCCESS) continue;  // flushed
        ++reposts;
        if (!(w.wc_flags & IBV_WC_WITH_IMM)) {
          protocol_error(rs, EPROTO);
          continue;
        }
        if (rs.state & kError) continue;
        Ledger::Effect e;
        if (rs.ledger.accept(be32toh(w.imm_data), rs.sseq_no, e)) {
          protocol_error(rs, EPROTO);
          continue;
        }
        switch (e.kind) {
          case Ledger::Effect::kData:
            rs.rmsg[rs.rmsg_tail] = e.value;
            if (++rs.rmsg_tail == rs.rmsg.size()) rs.rmsg_tail = 0;
            break;
          case Ledger::Effect::kCredits: {
            rs.sseq_comp = static_cast<std::uint16_t>(e.value);
            for (int k = 0; k < kSglSize; ++k)
              if (!rs.ledger.target_ok(read_sge(&rs.tsgl()[k]))) protocol_error(rs, EPROTO);
            break;
          }
          case Ledger::Effect::kDisconnect:
            if (rs.state & kConnected) rs.state = kDisconnected;
            break;
          case Ledger::Effect::kShutdown:
            if (rs.state & kWritable)
              rs.state &= ~kReadable;
            else if (rs.state & kConnected)
              rs.state = kDisconnected;
            break;
          default:
            break;
        }
      } else {
        const auto msg = static_cast<std::uint32_t>(w.wr_id);
        switch (msg_op(msg)) {
          case kOpSgl:
          case kOpCtrl:
            ++rs.ctrl_max_seqno;
            if (msg_op(msg) == kOpCtrl && msg_data(msg) == kCtrlDisconnect &&
                (rs.state & kConnected))
              rs.state = kDisconnected;
            break;
          case kOpIomapSgl:
            ++rs.sqe_avail;
            rs.sbuf_avail += sizeof(IomapEntry);
            break;
          default:
            ++rs.sqe_avail;
            rs.sbuf_avail += msg_data(msg);
            break;
        }
        if (w.status != IBV_WC_SUCCESS && (rs.state & kConnected)) protocol_error(rs, ECONNRESET);
      }
    }
  }
  if (rs.state & kConnected) {
    while (reposts-- > 0)
      if (post_recv(rs)) {
        protocol_error(rs, errno ? errno : ENOMEM);
        return -1;
      }
  }
  return 0;
}

void drain_cq_events(RSocket& rs) {
  if (rs.cch == nullptr) return;
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  while (ibv_get_cq_event(rs.cch, &cq, &ctx) == 0) {
    ibv_ack_cq_events(cq, 1);
    rs.cq_armed = false;
  }
}

int do_connect(RSocket& rs);

/// A CM event of a connected rsocket: the peer's disconnect.
void cm_event(RSocket& rs) {
  if (rs.state & kOpening) {
    do_connect(rs);
    return;
  }
  if (roce_rdmacm_complete(rs.id) == 0 && rs.id->event &&
      rs.id->event->event == RDMA_CM_EVENT_DISCONNECTED && (rs.state & kConnected))
    rs.state = kDisconnected;
}

/// Sleeps (lock dropped) until the CQ or the CM channel has something, at most `ms` (-1:
/// unbounded).
void wait_events(RSocket& rs, Lock& lk, int ms) {
  pollfd p[2] = {{rs.cch ? rs.cch->fd : -1, POLLIN, 0}, {rs.index, POLLIN, 0}};
  lk.unlock();
  const int n = poll(p, 2, ms);
  lk.lock();
  if (n <= 0) return;
  if (p[0].revents) drain_cq_events(rs);
  if (p[1].revents) cm_event(rs);
}

using Test = bool (*)(RSocket&);

/// rdma-core's rs_process_cq/rs_get_comp: polls until `test` holds; 0, or -1 with errno
/// (EWOULDBLOCK when `nonblock`, ETIMEDOUT past `deadline_ms`).
int process(RSocket& rs, Lock& lk, bool nonblock, Test test, int deadline_ms = -1) {
  const auto end = Clock::now() + std::chrono::milliseconds(deadline_ms);
  if (rs.cq == nullptr) return fail(ENOTCONN);  // never connected
  for (;;) {
    update_credits(rs);
    const int ret = poll_cq(rs);
    if (test(rs)) {
      update_credits(rs);
      return 0;
    }
    if (ret) return ret;
    if (nonblock) {
      // A program spinning on EAGAIN would otherwise keep the port's lock (every poll of the
      // CQ takes it) from the in-process engine's thread, which must move the data.
      sched_yield();
      return fail(EWOULDBLOCK);
    }
    if (!rs.cq_armed) {
      ibv_req_notify_cq(rs.cq, 0);
      rs.cq_armed = true;
      continue;
    }
    int ms = -1;
    if (deadline_ms >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      if (left.count() <= 0) return fail(ETIMEDOUT);
      ms = static_cast<int>(left.count());
    }
    wait_events(rs, lk, ms);
  }
}

bool can_send(RSocket& rs) {
  return rs.sqe_avail > 0 && rs.sbuf_avail >= kSndLowat && rs.sseq_no != rs.sseq_comp &&
         rs.tsgl()[rs.target_sge].length != 0;
}
bool conn_can_send(RSocket& rs) { return can_send(rs) || !(rs.state & kWritable); }
bool conn_can_send_ctrl(RSocket& rs) { return ctrl_avail(rs) || !(rs.state & kConnected); }
bool have_rdata(const RSocket& rs) { return rs.rmsg_head != rs.rmsg_tail; }
bool conn_have_rdata(RSocket& rs) { return have_rdata(rs) || !(rs.state & kReadable); }
bool all_sends_done(RSocket& rs) {
  return (static_cast<int>(rs.ctrl_max_seqno - rs.ctrl_seqno) + rs.sqe_avail ==
          static_cast<int>(rs.sq_size)) ||
         !(rs.state & kConnected);
}

// ---- keepalive -----------------------------------------------------------------------------

/// SO_KEEPALIVE, as rdma-core's service thread: every TCP_KEEPIDLE seconds a zero-length RDMA
/// WRITE (no immediate: the peer's program never sees it) on a connected rsocket that has a
/// control slot free, so that a peer gone silent fails the QP (its completion in error ends the
/// rsocket at the next call). One thread for the process, started by the first SO_KEEPALIVE.
void send_keepalive(RSocket& rs) {
  if (!(rs.state & kConnected) || !ctrl_avail(rs)) return;
  ++rs.ctrl_seqno;
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = make_msg(kOpCtrl, kCtrlKeepalive);
  wr.opcode = IBV_WR_RDMA_WRITE;
  ibv_post_send(rs.id->qp, &wr, &bad);
}

void keepalive_loop() {
  for (;;) {
    std::vector<Ptr> all;
    {
      std::lock_guard lk(reg_mu);
      for (auto& [fd, rs] : registry()) all.push_back(rs);
    }
    const auto now = Clock::now();
    for (auto& rs : all) {
      Lock lk(rs->mu);
      if (!rs->id || !rs->id->qp || !((rs->so_opts >> SO_KEEPALIVE) & 1) ||
          !(rs->state & kConnected))
        continue;
      if (rs->next_keepalive == Clock::time_point{})
        rs->next_keepalive = now + std::chrono::seconds(rs->keepalive_time);
      if (now >= rs->next_keepalive) {
        send_keepalive(*rs);
        rs->next_keepalive = now + std::chrono::seconds(rs->keepalive_time);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

void start_keepalive() {
  static std::once_flag once;
  std::call_once(once, [] { std::thread(keepalive_loop).detach(); });
}

// ---- endpoints -----------------------------------------------------------------------------

void free_ep(RSocket& rs) {
  if (rs.id && rs.id->qp) rdma_destroy_qp(rs.id);
  for (auto& m : rs.maps) ibv_dereg_mr(m.mr);
  rs.maps.clear();
  if (rs.smr) ibv_dereg_mr(rs.smr);
  if (rs.rmr) ibv_dereg_mr(rs.rmr);
  if (rs.target_mr) ibv_dereg_mr(rs.target_mr);
  rs.smr = rs.rmr = rs.target_mr = nullptr;
  if (rs.cq) ibv_destroy_cq(rs.cq);
  if (rs.cch) ibv_destroy_comp_channel(rs.cch);
  rs.cq = nullptr;
  rs.cch = nullptr;
  if (rs.id) {
    rs.id->send_cq = rs.id->recv_cq = nullptr;
    rs.id->send_cq_channel = rs.id->recv_cq_channel = nullptr;
  }
  std::free(rs.sbuf);
  std::free(rs.rbuf);
  std::free(rs.target);
  rs.sbuf = rs.rbuf = rs.target = nullptr;
}

/// CQ, QP, buffers and posted receives of a connecting or accepted rsocket: 0 or an errno.
int create_ep(RSocket& rs) {
  ibv_device_attr da{};
  std::uint32_t max = kQpMax;
  if (ibv_query_device(rs.id->verbs, &da) == 0 && da.max_qp_wr > 0)
    max = std::min<std::uint32_t>(max, static_cast<std::uint32_t>(da.max_qp_wr));
  rs.sq_size = std::clamp(rs.sq_size, kQpMin, max);
  rs.rq_size = std::clamp(rs.rq_size, kQpMin, max);
  rs.rbuf_size = std::clamp<std::uint32_t>(rs.rbuf_size & ~1u, 2 * kSndLowat, 1u << 28);
  rs.sbuf_size = std::clamp<std::uint32_t>(rs.sbuf_size, 2 * kSndLowat, 1u << 28);

  rs.cch = ibv_create_comp_channel(rs.id->verbs);
  if (rs.cch == nullptr) return errno ? errno : ENOMEM;
  set_nonblock(rs.cch->fd, true);
  rs.cq = ibv_create_cq(rs.id->verbs, static_cast<int>(rs.sq_size + rs.rq_size), &rs, rs.cch, 0);
  if (rs.cq == nullptr) return errno ? errno : ENOMEM;
  rs.id->send_cq = rs.id->recv_cq = rs.cq;
  rs.id->send_cq_channel = rs.id->recv_cq_channel = rs.cch;

  ibv_qp_init_attr qa{};
  qa.qp_context = &rs;
  qa.send_cq = qa.recv_cq = rs.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 1;
  qa.cap.max_send_wr = rs.sq_size;
  qa.cap.max_recv_wr = rs.rq_size;
  qa.cap.max_send_sge = 2;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = rs.sq_inline;
  if (rdma_create_qp(rs.id, nullptr, &qa)) return errno ? errno : ENOMEM;
  rs.sq_inline = qa.cap.max_inline_data;
  ibv_pd* pd = rs.id->qp->pd;

  rs.rmsg.assign(rs.rq_size + 1, 0);
  rs.sbuf = alloc_buf(rs.sbuf_size + kCtrlMsgSize * kCtrlSlots);
  rs.target_len = sizeof(Sge) * kSglSize + sizeof(IomapEntry) * rs.target_iomap_size;
  rs.target = alloc_buf(rs.target_len);
  rs.rbuf = alloc_buf(rs.rbuf_size);
  if (!rs.sbuf || !rs.target || !rs.rbuf) return ENOMEM;
  rs.smr =
      ibv_reg_mr(pd, rs.sbuf, rs.sbuf_size + kCtrlMsgSize * kCtrlSlots, IBV_ACCESS_LOCAL_WRITE);
  rs.target_mr =
      ibv_reg_mr(pd, rs.target, rs.target_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  rs.rmr = ibv_reg_mr(pd, rs.rbuf, rs.rbuf_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!rs.smr || !rs.target_mr || !rs.rmr) return errno ? errno : ENOMEM;

  rs.sbuf_avail = rs.sbuf_size;
  rs.rbuf_free_offset = rs.rbuf_size >> 1;
  rs.rbuf_bytes_avail = rs.rbuf_size >> 1;
  rs.sqe_avail = static_cast<int>(rs.sq_size) - static_cast<int>(rs.ctrl_max_seqno);
  rs.rseq_comp = static_cast<std::uint16_t>(rs.rq_size >> 1);
  for (std::uint32_t i = 0; i < rs.rq_size; ++i)
    if (post_recv(rs)) return errno ? errno : ENOMEM;
  return 0;
}

ConnData our_conn(RSocket& rs) {
  return format_conn(reinterpret_cast<std::uintptr_t>(rs.target), rs.target_mr->rkey,
                     static_cast<int>(rs.target_iomap_size),
                     reinterpret_cast<std::uintptr_t>(rs.rbuf), rs.rmr->rkey, rs.rbuf_size,
                     static_cast<std::uint16_t>(rs.rq_size));
}

void save_conn(RSocket& rs, const Peer& p) {
  rs.peer = p;
  rs.remote_sge = 1 % p.sgl_count;
  volatile Sge* t = rs.tsgl();
  t[0].addr = p.first_buf.addr;
  t[0].key = p.first_buf.key;
  t[0].length = p.first_buf.length;
  rs.sseq_comp = p.credits;
  rs.ledger.reset(rs.rbuf_size >> 1, rs.rq_size, rs.target_iomap_size, p.credits,
                  p.first_buf.length);
}

/// The connected state reached: the CM channel no longer blocks anyone.
void connected(RSocket& rs) {
  rs.state = kConnRdWr;
  set_nonblock(rs.index, true);
}

/// rdma-core's rs_do_connect: moves an opening rsocket on as far as its events allow.
/// 0 when connected; -1 with EINPROGRESS while under way, else the failure.
int do_connect(RSocket& rs) {
  int ret = 0;
  auto errnum = [](int rc) {
    errno = rc;
    return rc ? -1 : 0;
  };
  switch (rs.state) {
    case kInit:
    case kBound:
    resolve_addr:
      ret = rdma_resolve_addr(rs.id, nullptr, reinterpret_cast<sockaddr*>(&rs.dst),
                              1000 << rs.retries++);
      if (!ret) goto resolve_route;
      if (errno == EAGAIN || errno == EWOULDBLOCK) rs.state = kResolvingAddr;
      break;
    case kResolvingAddr:
      ret = errnum(roce_rdmacm_complete(rs.id));
      if (ret) {
        if (errno == ETIMEDOUT && rs.retries <= kConnRetries) goto resolve_addr;
        break;
      }
      rs.retries = 0;
    resolve_route:
      ret = rdma_resolve_route(rs.id, 1000 << rs.retries++);
      if (!ret) goto connect;
      if (errno == EAGAIN || errno == EWOULDBLOCK) rs.state = kResolvingRoute;
      break;
    case kResolvingRoute:
      ret = errnum(roce_rdmacm_complete(rs.id));
      if (ret) {
        if (errno == ETIMEDOUT && rs.retries <= kConnRetries) goto resolve_route;
        break;
      }
    connect : {
      if (const int rc = create_ep(rs)) {
        ret = errnum(rc);
        break;
      }
      ConnData c = our_conn(rs);
      rdma_conn_param param{};
      param.private_data = &c;
      param.private_data_len = sizeof c;
      param.flow_control = 1;
      param.retry_count = 7;
      param.rnr_retry_count = 7;
      param.responder_resources = param.initiator_depth = 1;
      rs.retries = 0;
      ret = rdma_connect(rs.id, &param);
      if (!ret) goto established;
      if (errno == EAGAIN || errno == EWOULDBLOCK) rs.state = kConnecting;
      break;
    }
    case kConnecting:
      ret = errnum(roce_rdmacm_complete(rs.id));
      if (ret) break;
    established : {
      Peer p;
      const rdma_cm_event* e = rs.id->event;
      const int rc =
          e ? parse_conn(e->param.conn.private_data, e->param.conn.private_data_len, p) : EPROTO;
      if (rc) {
        ret = errnum(rc);
        break;
      }
      save_conn(rs, p);
      connected(rs);
      break;
    }
    case kAccepting:
      ret = errnum(roce_rdmacm_complete(rs.id));
      if (ret) break;
      connected(rs);
      break;
    case kConnectError:
    case kDisconnected:
    case kError:
      return fail(ENOTCONN);
    default:
      return (rs.state & kConnected) ? 0 : fail(EINVAL);
  }
  if (ret) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      errno = EINPROGRESS;
    } else {
      const int e = errno;
      rs.state = kConnectError;
      rs.err = e;
      errno = e;
    }
  }
  return ret;
}

bool nonblocking(const RSocket& rs, int flags) {
  return (rs.fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

/// The error a call on a closed connection gets.
int closed_errno(const RSocket&) { return ECONNRESET; }  // as rdma-core, whatever ended it

// ---- data ----------------------------------------------------------------------------------

/// A cursor over the caller's iovecs.
struct Src {
  const iovec* iov;
  int cnt;
  int i = 0;
  std::size_t off = 0;
  const std::uint8_t* here() const {
    return static_cast<const std::uint8_t*>(iov[i].iov_base) + off;
  }
  std::size_t contiguous() const { return iov[i].iov_len - off; }
  void copy(std::uint8_t* dst, std::size_t n) {
    while (n) {
      while (off == iov[i].iov_len) {
        ++i;
        off = 0;
      }
      const std::size_t k = std::min(n, iov[i].iov_len - off);
      std::memcpy(dst, here(), k);
      dst += k;
      off += k;
      n -= k;
    }
  }
  void skip_empty() {
    while (i < cnt && off == iov[i].iov_len) {
      ++i;
      off = 0;
    }
  }
};

int send_iomaps(RSocket& rs, Lock& lk, int flags);

/// 0 once a send may go (a credit and room at the peer), else -1 with errno: the rsocket no
/// longer writable (ECONNRESET), or nothing free and `flags`/the rsocket non-blocking (EAGAIN).
int wait_to_send(RSocket& rs, Lock& lk, int flags) {
  if (!(rs.state & kWritable)) return fail(closed_errno(rs));
  if (!can_send(rs)) {
    if (process(rs, lk, nonblocking(rs, flags), conn_can_send)) return -1;
    if (!(rs.state & kWritable)) return fail(closed_errno(rs));
  }
  return 0;
}

ssize_t sendv(RSocket& rs, Lock& lk, const iovec* iov, int cnt, int flags) {
  if (rs.state & kOpening) {
    if (do_connect(rs)) {
      if (errno == EINPROGRESS) errno = EAGAIN;
      return -1;
    }
  }
  if (!(rs.state & kConnected) && !(rs.state & kDisconnected) && !(rs.state & kError))
    return fail(ENOTCONN);
  std::size_t total = 0;
  for (int k = 0; k < cnt; ++k) total += iov[k].iov_len;
  int ret = 0;
  if (rs.iomap_pending && (ret = send_iomaps(rs, lk, flags))) return -1;
  Src src{iov, cnt};
  std::size_t left = total;
  std::uint32_t olen = kOlapStart;
  while (left) {
    if ((ret = wait_to_send(rs, lk, flags))) break;
    Sge t = read_sge(&rs.tsgl()[rs.target_sge]);
    if (!rs.ledger.target_ok(t)) {
      protocol_error(rs, EPROTO);
      ret = fail(ECONNRESET);
      break;
    }
    std::uint32_t xfer;
    if (olen < left) {
      xfer = olen;
      if (olen < kMaxTransfer) olen <<= 1;
    } else {
      xfer = static_cast<std::uint32_t>(left);
    }
    xfer = std::min({xfer, rs.sbuf_avail, t.length});
    src.skip_empty();
    ibv_sge sge[2];
    int n;
    unsigned sflags = 0;
    if (xfer <= rs.sq_inline && src.contiguous() >= xfer) {
      sge[0] = {reinterpret_cast<std::uintptr_t>(src.here()), xfer, 0};
      src.off += xfer;
      n = 1;
      sflags = IBV_SEND_INLINE;
    } else {
      n = stage(rs, xfer, sge,
                [&](std::uint8_t* d, std::uint32_t, std::uint32_t k) { src.copy(d, k); });
    }
    // Take the target before posting: the peer may refill the entry once it is used up.
    ++rs.sseq_no;
    --rs.sqe_avail;
    rs.sbuf_avail -= xfer;
    volatile Sge* e = &rs.tsgl()[rs.target_sge];
    e->addr = t.addr + xfer;
    e->length = t.length - xfer;
    if (t.length == xfer && ++rs.target_sge == kSglSize) rs.target_sge = 0;
    const std::uint32_t msg = make_msg(kOpData, xfer);
    if (post_write(rs, sge, n, msg, msg, true, sflags, t.addr, t.key)) {
      ret = -1;
      break;
    }
    left -= xfer;
  }
  return (ret && left == total) ? -1 : static_cast<ssize_t>(total - left);
}

ssize_t recv_into(RSocket& rs, Lock& lk, std::uint8_t* buf, std::size_t len, int flags) {
  if (rs.state & kOpening) {
    if (do_connect(rs)) {
      if (errno == EINPROGRESS) errno = EAGAIN;
      return -1;
    }
  }
  if (rs.state == kInit || rs.state == kBound || rs.state == kListening ||
      rs.state == kConnectError)
    return fail(ENOTCONN);
  std::size_t left = len;
  int ret = 0;
  do {
    if (!have_rdata(rs)) {
      ret = process(rs, lk, nonblocking(rs, flags), conn_have_rdata);
      if (ret) break;
      if (!have_rdata(rs) && (rs.state & kError) && len) {
        ret = fail(ECONNRESET);
        break;
      }
    }
    std::uint32_t head = rs.rmsg_head, off = rs.rbuf_offset;
    const bool peek = flags & MSG_PEEK;
    while (left && head != rs.rmsg_tail) {
      std::uint32_t size = rs.rmsg[head];
      bool whole = true;
      if (left < size) {
        size = static_cast<std::uint32_t>(left);
        whole = false;
      }
      const std::uint32_t end = rs.rbuf_size - off;
      std::uint8_t* out = buf + (len - left);
      if (size > end) {
        std::memcpy(out, rs.rbuf + off, end);
        std::memcpy(out + end, rs.rbuf, size - end);
        off = size - end;
      } else {
        std::memcpy(out, rs.rbuf + off, size);
        off += size;
      }
      left -= size;
      if (peek) {
        if (whole && ++head == rs.rmsg.size()) head = 0;
        if (!whole) break;
        continue;
      }
      rs.rbuf_bytes_avail += size;
      if (whole) {
        ++rs.rseq_no;
        rs.ledger.consumed();
        if (++head == rs.rmsg.size()) head = 0;
      } else {
        rs.rmsg[head] -= size;
      }
    }
    if (!peek) {
      rs.rmsg_head = head;
      rs.rbuf_offset = off == rs.rbuf_size ? 0 : off;
    }
    if (peek) break;
  } while (left && (flags & MSG_WAITALL) && (rs.state & kReadable));
  if (left != len && !(flags & MSG_PEEK)) update_credits(rs);
  return (ret && left == len) ? -1 : static_cast<ssize_t>(len - left);
}

ssize_t recvv(RSocket& rs, Lock& lk, const iovec* iov, int cnt, int flags) {
  ssize_t got = 0;
  for (int k = 0; k < cnt; ++k) {
    if (iov[k].iov_len == 0) continue;
    const ssize_t n = recv_into(rs, lk, static_cast<std::uint8_t*>(iov[k].iov_base), iov[k].iov_len,
                                got ? (flags | MSG_DONTWAIT) & ~MSG_WAITALL : flags);
    if (n < 0) return got ? got : -1;
    got += n;
    if (static_cast<std::size_t>(n) < iov[k].iov_len) break;
  }
  return got;
}

// ---- iomaps --------------------------------------------------------------------------------

int send_iomaps(RSocket& rs, Lock& lk, int flags) {
  for (auto& m : rs.maps) {
    if (m.index < 0 || m.sent) continue;
    if (wait_to_send(rs, lk, flags)) return -1;
    IomapEntry e{m.offset,
                 {reinterpret_cast<std::uintptr_t>(m.mr->addr), m.mr->rkey,
                  static_cast<std::uint32_t>(m.mr->length)}};
    if (rs.peer.swap) {
      e.offset = __builtin_bswap64(e.offset);
      e.sge.addr = __builtin_bswap64(e.sge.addr);
      e.sge.key = __builtin_bswap32(e.sge.key);
      e.sge.length = __builtin_bswap32(e.sge.length);
    }
    ibv_sge sge[2];
    int n = 1;
    unsigned sflags = 0;
    if (rs.sq_inline >= sizeof e) {
      sge[0] = {reinterpret_cast<std::uintptr_t>(&e), sizeof e, 0};
      sflags = IBV_SEND_INLINE;
    } else {
      const auto* b = reinterpret_cast<const std::uint8_t*>(&e);
      n = stage(rs, sizeof e, sge, [&](std::uint8_t* d, std::uint32_t at, std::uint32_t k) {
        std::memcpy(d, b + at, k);
      });
    }
    ++rs.sseq_no;
    --rs.sqe_avail;
    rs.sbuf_avail -= sizeof e;
    const std::uint32_t msg = make_msg(kOpIomapSgl, static_cast<std::uint32_t>(m.index));
    if (post_write(rs, sge, n, msg, msg, true, sflags,
                   rs.peer.iomap_addr + m.index * sizeof(IomapEntry), rs.peer.sgl_key))
      return -1;
    m.sent = true;
  }
  rs.iomap_pending = false;
  return 0;
}

}  // namespace

// ---- the C API -----------------------------------------------------------------------------

// The rsocket of `fd`, locked; EBADF for no rsocket, or one closed by another thread meanwhile.
#define WITH_RS(fd)                \
  Ptr rs_ptr = lookup(fd);         \
  if (!rs_ptr) return fail(EBADF); \
  RSocket& rs = *rs_ptr;           \
  Lock lk(rs.mu);                  \
  if (rs.id == nullptr) return fail(EBADF)

RDMACM_EXPORT int rsocket(int domain, int type, int protocol) {
  if (domain != AF_INET && domain != AF_INET6) return fail(EAFNOSUPPORT);
  if (type == SOCK_DGRAM) return fail(EOPNOTSUPP);  // udp rsockets are not offered
  if (type != SOCK_STREAM || (protocol && protocol != IPPROTO_TCP)) return fail(EOPNOTSUPP);
  auto rs = std::make_shared<RSocket>();
  if (rdma_create_id(nullptr, &rs->id, rs.get(), RDMA_PS_TCP)) return -1;
  rs->id->route.addr.src_addr.sa_family = static_cast<sa_family_t>(domain);
  rs->index = rs->id->channel->fd;
  insert(rs);
  return rs->index;
}

RDMACM_EXPORT int rbind(int socket, const struct sockaddr* addr, socklen_t addrlen) {
  WITH_RS(socket);
  if (addr == nullptr || addrlen < sizeof(sockaddr_in)) return fail(EINVAL);
  if (rs.state != kInit) return fail(EINVAL);
  if (rdma_bind_addr(rs.id, const_cast<sockaddr*>(addr))) return -1;
  rs.state = kBound;
  return 0;
}

RDMACM_EXPORT int rlisten(int socket, int backlog) {
  WITH_RS(socket);
  if (rs.state == kListening) return 0;
  if (rdma_listen(rs.id, backlog)) return -1;
  rs.state = kListening;
  return 0;
}

RDMACM_EXPORT int raccept(int socket, struct sockaddr* addr, socklen_t* addrlen) {
  Ptr lp = lookup(socket);
  if (!lp) return fail(EBADF);
  RSocket& l = *lp;
  for (;;) {
    Lock lk(l.mu);
    if (l.id == nullptr) return fail(EBADF);
    if (l.state != kListening) return fail(EINVAL);
    const bool nb = l.fd_flags & O_NONBLOCK;
    set_nonblock(l.index, nb);
    rdma_cm_id* cid = nullptr;
    if (rdma_get_request(l.id, &cid)) return -1;  // EAGAIN when non-blocking and none waits
    auto rs = std::make_shared<RSocket>();
    rs->id = cid;
    cid->context = rs.get();
    rs->index = cid->channel->fd;
    rs->sbuf_size = l.sbuf_size;
    rs->rbuf_size = l.rbuf_size;
    rs->sq_inline = l.sq_inline;
    rs->sq_size = l.sq_size;
    rs->rq_size = l.rq_size;
    rs->target_iomap_size = l.target_iomap_size;
    rs->fd_flags = l.fd_flags;
    rs->so_opts = l.so_opts;
    rs->tcp_opts = l.tcp_opts;
    rs->keepalive_time = l.keepalive_time;
    Peer p;
    const rdma_cm_event* e = cid->event;
    int rc = e ? parse_conn(e->param.conn.private_data, e->param.conn.private_data_len, p) : EPROTO;
    if (rc == 0) rc = create_ep(*rs);
    if (rc == 0) {
      save_conn(*rs, p);
      ConnData c = our_conn(*rs);
      rdma_conn_param param = e->param.conn;
      param.private_data = &c;
      param.private_data_len = sizeof c;
      set_nonblock(rs->index, nb);
      if (rdma_accept(cid, &param) == 0)
        connected(*rs);
      else if (errno == EAGAIN || errno == EWOULDBLOCK)
        rs->state = kAccepting;
      else
        rc = errno ? errno : ECONNABORTED;
    }
    if (rc) {
      rdma_reject(cid, nullptr, 0);
      free_ep(*rs);
      rdma_destroy_id(cid);
      if (nb) return fail(EAGAIN);
      continue;
    }
    insert(rs);
    if (addr && addrlen) rgetpeername(rs->index, addr, addrlen);
    return rs->index;
  }
}

RDMACM_EXPORT int rconnect(int socket, const struct sockaddr* addr, socklen_t addrlen) {
  WITH_RS(socket);
  if (addr == nullptr || addrlen < sizeof(sockaddr_in) || addrlen > sizeof rs.dst)
    return fail(EINVAL);
  if (rs.state == kInit || rs.state == kBound) {
    std::memcpy(&rs.dst, addr, addrlen);
    set_nonblock(rs.index, rs.fd_flags & O_NONBLOCK);
  } else if (rs.state & kConnected) {
    return fail(EISCONN);
  } else if (rs.state & kOpening) {
    if (!(rs.fd_flags & O_NONBLOCK)) return do_connect(rs);
    return fail(EALREADY);
  }
  return do_connect(rs);
}

RDMACM_EXPORT ssize_t rrecv(int socket, void* buf, size_t len, int flags) {
  WITH_RS(socket);
  return recv_into(rs, lk, static_cast<std::uint8_t*>(buf), len, flags);
}

RDMACM_EXPORT ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags,
                                struct sockaddr* src_addr, socklen_t* addrlen) {
  const ssize_t n = rrecv(socket, buf, len, flags);
  if (n > 0 && src_addr && addrlen) rgetpeername(socket, src_addr, addrlen);
  return n;
}

RDMACM_EXPORT ssize_t rrecvmsg(int socket, struct msghdr* msg, int flags) {
  if (msg == nullptr) return fail(EINVAL);
  if (msg->msg_control && msg->msg_controllen) return fail(EOPNOTSUPP);
  WITH_RS(socket);
  return recvv(rs, lk, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
}

RDMACM_EXPORT ssize_t rread(int socket, void* buf, size_t count) {
  return rrecv(socket, buf, count, 0);
}

RDMACM_EXPORT ssize_t rreadv(int socket, const struct iovec* iov, int iovcnt) {
  if (iovcnt < 0 || (iovcnt && !iov)) return fail(EINVAL);
  WITH_RS(socket);
  return recvv(rs, lk, iov, iovcnt, 0);
}

RDMACM_EXPORT ssize_t rsend(int socket, const void* buf, size_t len, int flags) {
  WITH_RS(socket);
  iovec v{const_cast<void*>(buf), len};
  return sendv(rs, lk, &v, 1, flags);
}

RDMACM_EXPORT ssize_t rsendto(int socket, const void* buf, size_t len, int flags,
                              const struct sockaddr* dest_addr, socklen_t addrlen) {
  if (dest_addr || addrlen) return fail(EISCONN);
  return rsend(socket, buf, len, flags);
}

RDMACM_EXPORT ssize_t rsendmsg(int socket, const struct msghdr* msg, int flags) {
  if (msg == nullptr) return fail(EINVAL);
  if (msg->msg_control && msg->msg_controllen) return fail(EOPNOTSUPP);
  WITH_RS(socket);
  return sendv(rs, lk, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
}

RDMACM_EXPORT ssize_t rwrite(int socket, const void* buf, size_t count) {
  return rsend(socket, buf, count, 0);
}

RDMACM_EXPORT ssize_t rwritev(int socket, const struct iovec* iov, int iovcnt) {
  if (iovcnt < 0 || (iovcnt && !iov)) return fail(EINVAL);
  WITH_RS(socket);
  return sendv(rs, lk, iov, iovcnt, 0);
}

namespace {

/// What poll would report on `rs` now (rdma-core's rs_poll_rs), progressing it without
/// waiting.
short poll_rs(RSocket& rs, Lock& lk, short events) {
  if (rs.state & kOpening) {
    if (do_connect(rs) && errno == EINPROGRESS) return 0;
  }
  if ((rs.state & kConnected) || rs.state == kDisconnected || (rs.state & kError)) {
    process(rs, lk, true, [](RSocket&) { return false; });
    short rev = 0;
    if ((events & POLLIN) && conn_have_rdata(rs)) rev |= POLLIN;
    if ((events & POLLOUT) && can_send(rs)) rev |= POLLOUT;
    // Hang-up only once the peer's last bytes are read: with them still queued, as TCP, a
    // reader sees POLLIN (the disconnect often arrives with the data it follows).
    if (!(rs.state & kConnected) && !have_rdata(rs))
      rev |= rs.state == kDisconnected ? POLLHUP : POLLERR;
    return rev;
  }
  if (rs.state == kListening) {
    pollfd p{rs.index, POLLIN, 0};
    return poll(&p, 1, 0) > 0 ? static_cast<short>(p.revents & (events | POLLERR)) : 0;
  }
  if (rs.state == kConnectError) return static_cast<short>((events & (POLLIN | POLLOUT)) | POLLERR);
  return 0;
}

}  // namespace

RDMACM_EXPORT int rpoll(struct pollfd* fds, nfds_t nfds, int timeout) {
  const auto end = Clock::now() + std::chrono::milliseconds(timeout);
  std::vector<Ptr> rss(nfds);
  for (nfds_t k = 0; k < nfds; ++k) rss[k] = fds[k].fd >= 0 ? lookup(fds[k].fd) : nullptr;
  std::vector<pollfd> real;
  std::vector<int> map;  // real[] index -> fds index (-1-k: rsocket k's CQ channel)
  for (;;) {
    // Check every entry now; rsockets get their CQs armed for the wait.
    int cnt = 0;
    real.clear();
    map.clear();
    for (nfds_t k = 0; k < nfds; ++k) {
      fds[k].revents = 0;
      if (!rss[k]) {
        real.push_back({fds[k].fd, fds[k].events, 0});
        map.push_back(static_cast<int>(k));
        continue;
      }
      RSocket& rs = *rss[k];
      Lock lk(rs.mu);
      if (rs.id == nullptr) {  // closed by another thread meanwhile
        fds[k].revents = POLLNVAL;
        ++cnt;
        continue;
      }
      fds[k].revents = poll_rs(rs, lk, fds[k].events);
      if (!fds[k].revents && rs.cq && !rs.cq_armed && (rs.state & kConnected)) {
        ibv_req_notify_cq(rs.cq, 0);
        rs.cq_armed = true;
        fds[k].revents = poll_rs(rs, lk, fds[k].events);  // what came before the arming
      }
      if (fds[k].revents) ++cnt;
      if (rs.cch) {
        real.push_back({rs.cch->fd, POLLIN, 0});
        map.push_back(-1 - static_cast<int>(k));
      }
      real.push_back({rs.index, POLLIN, 0});
      map.push_back(-1 - static_cast<int>(k));
    }
    int wait = 0;
    if (!cnt && timeout < 0) {
      wait = -1;
    } else if (!cnt && timeout > 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      wait = left > 0 ? static_cast<int>(left) : 0;
    }
    const int n = poll(real.data(), real.size(), wait);
    if (n < 0) return -1;
    for (std::size_t j = 0; j < real.size(); ++j) {
      if (map[j] >= 0) {
        fds[map[j]].revents = real[j].revents;
        if (real[j].revents) ++cnt;
      }
    }
    if (cnt) return cnt;
    if (wait == 0) return 0;
    // Something of an rsocket woke us: take its CQ events and CM events, then check again.
    for (std::size_t j = 0; j < real.size(); ++j) {
      if (map[j] >= 0 || !real[j].revents) continue;
      RSocket& rs = *rss[-1 - map[j]];
      Lock lk(rs.mu);
      if (rs.id == nullptr) continue;
      if (rs.cch && real[j].fd == rs.cch->fd)
        drain_cq_events(rs);
      else if (rs.state != kListening)
        cm_event(rs);
    }
  }
}

RDMACM_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                          struct timeval* timeout) {
  if (nfds < 0 || nfds > FD_SETSIZE) return fail(EINVAL);
  std::vector<pollfd> p;
  for (int fd = 0; fd < nfds; ++fd) {
    short ev = 0;
    if (readfds && FD_ISSET(fd, readfds)) ev |= POLLIN;
    if (writefds && FD_ISSET(fd, writefds)) ev |= POLLOUT;
    if (exceptfds && FD_ISSET(fd, exceptfds)) ev |= POLLPRI;
    if (ev) p.push_back({fd, ev, 0});
  }
  const int ms = timeout ? static_cast<int>(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
  const int n = rpoll(p.data(), p.size(), ms);
  if (n < 0) return n;
  if (readfds) FD_ZERO(readfds);
  if (writefds) FD_ZERO(writefds);
  if (exceptfds) FD_ZERO(exceptfds);
  int cnt = 0;
  for (const pollfd& q : p) {
    if (readfds && (q.revents & (POLLIN | POLLHUP | POLLERR))) {
      FD_SET(q.fd, readfds);
      ++cnt;
    }
    if (writefds && (q.revents & (POLLOUT | POLLERR))) {
      FD_SET(q.fd, writefds);
      ++cnt;
    }
    if (exceptfds && (q.revents & POLLPRI)) {
      FD_SET(q.fd, exceptfds);
      ++cnt;
    }
  }
  return cnt;
}

namespace {

int shutdown_locked(RSocket& rs, Lock& lk, int how) {
  int ret = 0;
  if (rs.state & kConnected) {
    std::uint32_t ctrl;
    if (how == SHUT_RDWR) {
      ctrl = kCtrlDisconnect;
      rs.state &= ~(kReadable | kWritable);
    } else if (how == SHUT_WR) {
      rs.state &= ~kWritable;
      ctrl = (rs.state & kReadable) ? kCtrlShutdown : kCtrlDisconnect;
    } else {
      rs.state &= ~kReadable;
      if (rs.state & kWritable) return 0;
      ctrl = kCtrlDisconnect;
    }
    if (!ctrl_avail(rs) && process(rs, lk, false, conn_can_send_ctrl, 2000)) return -1;
    if ((rs.state & kConnected) && ctrl_avail(rs)) {
      ++rs.ctrl_seqno;
      ret = post_msg(rs, make_msg(kOpCtrl, ctrl));
    }
  }
  // Wait (bounded: the peer may be gone) for what is under way to complete.
  if (rs.state & kConnected) process(rs, lk, false, all_sends_done, 2000);
  if ((rs.state & kDisconnected) && rs.id && rs.id->qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(rs.id->qp, &a, IBV_QP_STATE);
  }
  return ret;
}

}  // namespace

RDMACM_EXPORT int rshutdown(int socket, int how) {
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return fail(EINVAL);
  WITH_RS(socket);
  if (!(rs.state & kConnected) && rs.state != kDisconnected && !(rs.state & kError))
    return fail(ENOTCONN);
  return shutdown_locked(rs, lk, how);
}

RDMACM_EXPORT int rclose(int socket) {
  Ptr rs_ptr;
  {
    std::lock_guard lk(reg_mu);
    auto it = registry().find(socket);
    if (it == registry().end()) return fail(EBADF);
    rs_ptr = it->second;
    registry().erase(it);
  }
  RSocket& rs = *rs_ptr;
  Lock lk(rs.mu);
  if (rs.state & kConnected) shutdown_locked(rs, lk, SHUT_RDWR);
  free_ep(rs);
  if (rs.id) rdma_destroy_id(rs.id);
  rs.id = nullptr;
  return 0;
}

namespace {
void copy_addr(struct sockaddr* dst, const sockaddr* src, socklen_t* len) {
  socklen_t size = src->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(dst, src, std::min(*len, size));
  *len = size;
}
}  // namespace

RDMACM_EXPORT int rgetpeername(int socket, struct sockaddr* addr, socklen_t* addrlen) {
  if (!addr || !addrlen) return fail(EFAULT);
  WITH_RS(socket);
  if (!(rs.state & (kConnected | kDisconnected | kError | kOpening))) return fail(ENOTCONN);
  copy_addr(addr, &rs.id->route.addr.dst_addr, addrlen);
  return 0;
}

RDMACM_EXPORT int rgetsockname(int socket, struct sockaddr* addr, socklen_t* addrlen) {
  if (!addr || !addrlen) return fail(EFAULT);
  WITH_RS(socket);
  copy_addr(addr, &rs.id->route.addr.src_addr, addrlen);
  return 0;
}

RDMACM_EXPORT int rsetsockopt(int socket, int level, int optname, const void* optval,
                              socklen_t optlen) {
  WITH_RS(socket);
  if (optval == nullptr) return fail(EFAULT);
  auto need = [&](socklen_t n) { return optlen >= n; };
  auto ival = [&] {
    int v = 0;
    std::memcpy(&v, optval, sizeof v);
    return v;
  };
  std::uint64_t* opts = nullptr;
  bool on = false;
  switch (level) {
    case SOL_SOCKET:
      opts = &rs.so_opts;
      switch (optname) {
        case SO_REUSEADDR:
          if (!need(sizeof(int))) return fail(EINVAL);
          // The CM takes it before binding only; after, as rdma-core on a RoCE device, no error.
          if (rs.state == kInit)
            rdma_set_option(rs.id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
                            const_cast<void*>(optval), optlen);
          on = ival() != 0;
          break;
        case SO_RCVBUF:
          if (!need(sizeof(int))) return fail(EINVAL);
          if (!rs.rbuf) rs.rbuf_size = static_cast<std::uint32_t>(ival()) << 1;
          return 0;
        case SO_SNDBUF:
          if (!need(sizeof(int))) return fail(EINVAL);
          if (!rs.sbuf) rs.sbuf_size = static_cast<std::uint32_t>(ival()) << 1;
          if (rs.sbuf_size < kSndLowat) rs.sbuf_size = kSndLowat << 1;
          return 0;
        case SO_LINGER: {
          if (!need(sizeof(linger))) return fail(EINVAL);
          linger l;
          std::memcpy(&l, optval, sizeof l);
          on = !l.l_onoff;  // stored inverted: the default (0) means on, as rdma-core
          break;
        }
        case SO_KEEPALIVE:
          if (!need(sizeof(int))) return fail(EINVAL);
          on = ival() != 0;
          rs.next_keepalive = {};
          if (on) start_keepalive();
          break;
        case SO_OOBINLINE:
          if (!need(sizeof(int))) return fail(EINVAL);
          on = ival() != 0;
          break;
        default:
          return fail(ENOTSUP);
      }
      break;
    case IPPROTO_TCP:
      opts = &rs.tcp_opts;
      switch (optname) {
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL:
        case TCP_MAXSEG:
          return 0;  // nothing to tune on a reliable connection
        case TCP_KEEPIDLE:
          if (!need(sizeof(int)) || ival() <= 0) return fail(EINVAL);
          rs.keepalive_time = ival();
          rs.next_keepalive = {};
          return 0;
        case TCP_NODELAY:
          if (!need(sizeof(int))) return fail(EINVAL);
          on = ival() != 0;
          break;
        default:
          return fail(ENOTSUP);
      }
      break;
    case IPPROTO_IPV6:
      opts = &rs.ipv6_opts;
      if (optname != IPV6_V6ONLY) return fail(ENOTSUP);
      if (!need(sizeof(int))) return fail(EINVAL);
      if (rdma_set_option(rs.id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, const_cast<void*>(optval),
                          optlen))
        return -1;
      on = ival() != 0;
      break;
    case SOL_RDMA:
      if (rs.state >= kOpening) return fail(EINVAL);
      if (optname == RDMA_ROUTE) {
        const auto* b = static_cast<const std::uint8_t*>(optval);
        rs.route.assign(b, b + optlen);
        return 0;
      }
      if (!need(sizeof(int))) return fail(EINVAL);
      switch (optname) {
        case RDMA_SQSIZE:
          rs.sq_size = std::min<std::uint32_t>(static_cast<std::uint32_t>(ival()), kQpMax);
          return 0;
        case RDMA_RQSIZE:
          rs.rq_size = std::min<std::uint32_t>(static_cast<std::uint32_t>(ival()), kQpMax);
          return 0;
        case RDMA_INLINE:
          rs.sq_inline = std::min<std::uint32_t>(static_cast<std::uint32_t>(ival()), kQpMax);
          return 0;
        case RDMA_IOMAPSIZE:
          rs.target_iomap_size = static_cast<std::uint32_t>(
              scale_to_value(static_cast<std::uint8_t>(value_to_scale(ival(), 8)), 8));
          return 0;
        default:
          return fail(ENOTSUP);
      }
    default:
      return fail(ENOTSUP);
  }
  if (optname < 64) {
    if (on)
      *opts |= 1ull << optname;
    else
      *opts &= ~(1ull << optname);
  }
  return 0;
}

RDMACM_EXPORT int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) {
  if (!optval || !optlen) return fail(EFAULT);
  WITH_RS(socket);
  auto put = [&](int v) {
    if (*optlen < sizeof(int)) return fail(EINVAL);
    std::memcpy(optval, &v, sizeof v);
    *optlen = sizeof v;
    return 0;
  };
  switch (level) {
    case SOL_SOCKET:
      switch (optname) {
        case SO_REUSEADDR:
        case SO_KEEPALIVE:
        case SO_OOBINLINE:
          return put((rs.so_opts >> optname) & 1);
        case SO_RCVBUF:
          return put(static_cast<int>(rs.rbuf_size));
        case SO_SNDBUF:
          return put(static_cast<int>(rs.sbuf_size));
        case SO_LINGER: {
          if (*optlen < sizeof(linger)) return fail(EINVAL);
          linger l{!((rs.so_opts >> SO_LINGER) & 1), 0};
          std::memcpy(optval, &l, sizeof l);
          *optlen = sizeof l;
          return 0;
        }
        case SO_ERROR: {
          const int e = rs.err;
          rs.err = 0;
          return put(e);
        }
        default:
          return fail(ENOTSUP);
      }
    case IPPROTO_TCP:
      switch (optname) {
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL:
          return put(1);
        case TCP_KEEPIDLE:
          return put(rs.keepalive_time);
        case TCP_NODELAY:
          return put((rs.tcp_opts >> TCP_NODELAY) & 1);
        case TCP_MAXSEG:
          return put(rs.id->route.num_paths ? 1 << (7 + rs.id->route.path_rec->mtu) : 2048);
        default:
          return fail(ENOTSUP);
      }
    case IPPROTO_IPV6:
      if (optname != IPV6_V6ONLY) return fail(ENOTSUP);
      return put((rs.ipv6_opts >> IPV6_V6ONLY) & 1);
    case SOL_RDMA:
      switch (optname) {
        case RDMA_SQSIZE:
          return put(static_cast<int>(rs.sq_size));
        case RDMA_RQSIZE:
          return put(static_cast<int>(rs.rq_size));
        case RDMA_INLINE:
          return put(static_cast<int>(rs.sq_inline));
        case RDMA_IOMAPSIZE:
          return put(static_cast<int>(rs.target_iomap_size));
        case RDMA_ROUTE: {
          // The path record of the route (rdma-core converts it to ibv_path_data).
          if (!rs.route.empty()) {
            if (*optlen < rs.route.size()) return fail(EINVAL);
            std::memcpy(optval, rs.route.data(), rs.route.size());
            *optlen = static_cast<socklen_t>(rs.route.size());
            return 0;
          }
          if (*optlen < sizeof(ibv_path_data)) return fail(EINVAL);
          socklen_t len = 0;
          for (int k = 0; k < rs.id->route.num_paths && len + sizeof(ibv_path_data) <= *optlen;
               ++k) {
            ibv_path_data d{};
            d.flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL;
            const ibv_sa_path_rec& r = rs.id->route.path_rec[k];
            std::memcpy(&d.path.dgid, r.dgid.raw, 16);
            std::memcpy(&d.path.sgid, r.sgid.raw, 16);
            d.path.dlid = r.dlid;
            d.path.slid = r.slid;
            d.path.pkey = r.pkey;
            d.path.mtu = static_cast<std::uint8_t>(r.mtu | (r.mtu_selector << 6));
            std::memcpy(static_cast<std::uint8_t*>(optval) + len, &d, sizeof d);
            len += sizeof d;
          }
          *optlen = len;
          return 0;
        }
        default:
          return fail(ENOTSUP);
      }
    default:
      return fail(ENOTSUP);
  }
}

RDMACM_EXPORT int rfcntl(int socket, int cmd, ...) {
  WITH_RS(socket);
  va_list ap;
  va_start(ap, cmd);
  int ret = 0;
  switch (cmd) {
    case F_GETFL:
      ret = rs.fd_flags;
      break;
    case F_SETFL: {
      const int arg = va_arg(ap, int);
      // Before the connection the CM channel follows O_NONBLOCK; once connected it never
      // blocks (the completion channel never does: we poll it).
      if (!(rs.state & (kConnected | kDisconnected | kError)))
        set_nonblock(rs.index, arg & O_NONBLOCK);
      rs.fd_flags = arg;
      break;
    }
    default:
      ret = fail(ENOTSUP);
      break;
  }
  va_end(ap);
  return ret;
}

RDMACM_EXPORT off_t riomap(int socket, void* buf, size_t len, int prot, int flags, off_t offset) {
  (void)flags;
  WITH_RS(socket);
  if (!rs.id->qp || (prot & ~(PROT_WRITE | PROT_NONE)) || !buf || !len) return fail(EINVAL);
  int index = -1;
  int access = IBV_ACCESS_LOCAL_WRITE;
  if (prot & PROT_WRITE) {
    std::vector<bool> used(rs.peer.iomap_count);
    for (const auto& m : rs.maps)
      if (m.index >= 0) used[static_cast<std::size_t>(m.index)] = true;
    for (std::uint32_t k = 0; k < rs.peer.iomap_count && index < 0; ++k)
      if (!used[k]) index = static_cast<int>(k);
    if (index < 0) return fail(ENOMEM);  // the peer's iomap area is full (or it has none)
    access |= IBV_ACCESS_REMOTE_WRITE;
  }
  ibv_mr* mr = ibv_reg_mr(rs.id->qp->pd, buf, len, access);
  if (!mr) return -1;
  if (offset == -1) offset = static_cast<off_t>(reinterpret_cast<std::uintptr_t>(buf));
  rs.maps.push_back({static_cast<std::uint64_t>(offset), mr, index, false});
  if (index >= 0) rs.iomap_pending = true;
  return offset;
}

RDMACM_EXPORT int riounmap(int socket, void* buf, size_t len) {
  WITH_RS(socket);
  for (auto it = rs.maps.begin(); it != rs.maps.end(); ++it) {
    if (it->mr->addr == buf && it->mr->length == len) {
      ibv_dereg_mr(it->mr);
      rs.maps.erase(it);
      return 0;
    }
  }
  return fail(EINVAL);
}

RDMACM_EXPORT size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) {
  Ptr rs_ptr = lookup(socket);
  if (!rs_ptr) return static_cast<size_t>(fail(EBADF));
  RSocket& rs = *rs_ptr;
  Lock lk(rs.mu);
  if (rs.id == nullptr) return static_cast<size_t>(fail(EBADF));
  if (!(rs.state & kConnected)) return static_cast<size_t>(fail(ENOTCONN));
  if (rs.iomap_pending && send_iomaps(rs, lk, flags)) return static_cast<size_t>(-1);
  const auto* src = static_cast<const std::uint8_t*>(buf);
  std::size_t left = count;
  std::uint32_t olen = kOlapStart;
  int ret = 0;
  auto off = static_cast<std::uint64_t>(offset);
  while (left) {
    // The peer's mapping holding `off` (it wrote these entries into our target area).
    IomapEntry m{};
    bool found = false;
    for (std::uint32_t k = 0; k < rs.target_iomap_size && !found; ++k) {
      volatile IomapEntry* e = &rs.tiomap()[k];
      m.offset = e->offset;
      m.sge = read_sge(&e->sge);
      found = m.sge.length && off >= m.offset && off - m.offset < m.sge.length;
    }
    if (!found) {
      if (left == count) ret = fail(EINVAL);
      break;
    }
    if ((ret = wait_to_send(rs, lk, flags))) break;
    std::uint32_t xfer;
    if (olen < left) {
      xfer = olen;
      if (olen < kMaxTransfer) olen <<= 1;
    } else {
      xfer = static_cast<std::uint32_t>(std::min<std::size_t>(left, 1u << 28));
    }
    xfer = static_cast<std::uint32_t>(
        std::min<std::uint64_t>({xfer, rs.sbuf_avail, m.offset + m.sge.length - off}));
    ibv_sge sge[2];
    int n = 1;
    unsigned sflags = 0;
    if (xfer <= rs.sq_inline) {
      sge[0] = {reinterpret_cast<std::uintptr_t>(src), xfer, 0};
      sflags = IBV_SEND_INLINE;
    } else {
      n = stage(rs, xfer, sge, [&](std::uint8_t* d, std::uint32_t at, std::uint32_t k) {
        std::memcpy(d, src + at, k);
      });
    }
    --rs.sqe_avail;
    rs.sbuf_avail -= xfer;
    const std::uint32_t msg = make_msg(kOpWrite, xfer);
    if (post_write(rs, sge, n, msg, 0, false, sflags, m.sge.addr + (off - m.offset), m.sge.key)) {
      ret = -1;
      break;
    }
    src += xfer;
    off += xfer;
    left -= xfer;
  }
  return (ret && left == count) ? static_cast<size_t>(-1) : count - left;
}
