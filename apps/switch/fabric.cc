/// @file
/// The incast fabric (fabric.h).
#include "apps/switch/fabric.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "dataplane/engine/engine.h"

namespace roce::fabric {

using namespace roce::engine;

namespace {

struct Host {
  std::unique_ptr<Engine> eng;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<std::uint8_t> mem;
  Mr* mr = nullptr;
  std::unique_ptr<OutputQueue> uplink;  ///< the host's link to the switch
};

Mtu mtu_of(std::uint32_t bytes) {
  switch (bytes) {
    case 256:
      return Mtu::k256;
    case 512:
      return Mtu::k512;
    case 1024:
      return Mtu::k1024;
    case 2048:
      return Mtu::k2048;
    case 4096:
      return Mtu::k4096;
    default:
      throw std::invalid_argument("mtu must be 256, 512, 1024, 2048 or 4096");
  }
}

void bring_up(Engine& me, Qp* qp, const Engine& peer, std::uint32_t peer_qpn, Mtu mtu,
              std::uint32_t my_psn, std::uint32_t peer_psn) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  if (me.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
    throw std::runtime_error("INIT failed");
  a.qp_state = QpState::kRtr;
  a.path_mtu = mtu;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = peer_psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 1;
  a.ah.dmac = peer.config().mac;
  a.ah.dgid = wire::ipv4_mapped(peer.config().ipv4);
  if (me.modify_qp(qp, a,
                   kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                       kQpMinRnrTimer) != kOk)
    throw std::runtime_error("RTR failed");
  a.qp_state = QpState::kRts;
  a.sq_psn = my_psn;
  a.timeout = 14;  // perftest's
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  if (me.modify_qp(
          qp, a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic) !=
      kOk)
    throw std::runtime_error("RTS failed");
}

double jain_index(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) {
    s += v;
    s2 += v * v;
  }
  return s2 > 0 ? s * s / (double(x.size()) * s2) : 0;
}

}  // namespace

IncastResult run_incast(const IncastOptions& o) {
  if (o.senders == 0 || o.senders > 64) throw std::invalid_argument("senders: 1..64");
  if (o.message == 0 || o.queue_depth == 0) throw std::invalid_argument("message, queue_depth");
  const std::size_t n = o.senders + 1;  // host n-1 receives
  const std::size_t rx = o.senders;
  const Mtu mtu = mtu_of(o.mtu);
  QueueConfig swc = o.sw;
  swc.rate_mbps = o.link_mbps;
  Switch sw(n, swc, o.seed);
  QueueConfig up;  // a host's link: the NIC's rate, a deep transmit queue, no marking
  up.rate_mbps = o.link_mbps;
  up.depth_bytes = 1ull << 32;
  up.ecn = false;
  up.delay_ns = swc.delay_ns;
  up.hist_bucket_bytes = 1ull << 20;
  std::vector<Host> hosts(n);
  const std::size_t slot_bytes = o.message;
  // WRITE: each sender's queue of sources, the receiver's one destination per sender. READ:
  // the receiver's queue of destinations per sender, each sender's one source.
  const std::size_t sender_slots = o.read ? 1 : o.queue_depth;
  const std::size_t rx_slots = o.read ? std::size_t{o.senders} * o.queue_depth : o.senders;
  for (std::size_t h = 0; h < n; ++h) {
    EngineConfig c;
    c.mac = wire::MacAddr{{0x02, 0x00, 0x00, 0x00, 0x01, static_cast<std::uint8_t>(h + 1)}};
    c.ipv4 = wire::Ipv4Addr{0xC6120000u + 1 + static_cast<std::uint32_t>(h)};  // 198.18.0.x
    c.max_qps = 128;
    c.max_mrs = 16;
    c.tx_slots = o.tx_slots;
    c.seed = o.seed * 1000 + h + 1;
    c.congestion = o.cc;
    c.sr_bdp_cap = o.sr_bdp_cap;
    c.congestion.line_rate_mbps = static_cast<std::uint32_t>(o.link_mbps);  // the host link's
    Host& x = hosts[h];
    x.eng = std::make_unique<Engine>(c);
    x.pd = x.eng->alloc_pd();
    x.cq = x.eng->create_cq(65536);
    x.mem.assign(slot_bytes * (h == rx ? rx_slots : sender_slots), static_cast<std::uint8_t>(h));
    x.mr = x.eng->reg_mr(x.pd, x.mem.data(), x.mem.size(),
                         kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
    x.uplink = std::make_unique<OutputQueue>(up, o.seed + 100 + h);
    sw.set_mac(h, c.mac);
  }
  // Sender i's QP and its peer on the receiver.
  std::vector<Qp*> sq(o.senders), rq(o.senders);
  const QpCap cap{std::max<std::uint32_t>(o.queue_depth * 2, 16), 16, 1, 1, 0};
  for (std::uint32_t i = 0; i < o.senders; ++i) {
    sq[i] = hosts[i].eng->create_qp(hosts[i].pd, QpType::kRc, hosts[i].cq, hosts[i].cq, cap);
    rq[i] = hosts[rx].eng->create_qp(hosts[rx].pd, QpType::kRc, hosts[rx].cq, hosts[rx].cq, cap);
    if (!sq[i] || !rq[i]) throw std::runtime_error("create_qp failed");
    if (o.selective_repeat &&
        (hosts[i].eng->set_selective_repeat(sq[i], true, {1000 + i, 9000 + i}) != kOk ||
         hosts[rx].eng->set_selective_repeat(rq[i], true, {9000 + i, 1000 + i}) != kOk))
      throw std::runtime_error("selective repeat refused");
    bring_up(*hosts[i].eng, sq[i], *hosts[rx].eng, rq[i]->qpn, mtu, 100 + i, 5000 + i);
    bring_up(*hosts[rx].eng, rq[i], *hosts[i].eng, sq[i]->qpn, mtu, 5000 + i, 100 + i);
  }
  std::uint64_t now = 1'000'000;
  const std::uint64_t t0 = now;
  const std::uint64_t measure_from = t0 + o.warmup_ns, end = t0 + o.duration_ns;
  std::vector<std::uint64_t> posted(o.senders, 0), done_bytes(o.senders, 0),
      interval_bytes(o.senders, 0);
  std::vector<bool> started(o.senders, false);
  IncastResult r;
  // One signaled, single-SGE RDMA WR of `o.message` bytes: the READ and WRITE rows differ only
  // in the opcode, the posting side and which host's memory is local or remote.
  const auto post_rdma = [&](Engine& eng, Qp* qp, std::uint32_t i, WrOpcode op, Host& local,
                             std::uint64_t local_off, Host& remote, std::uint64_t remote_off) {
    Sge sge{reinterpret_cast<std::uint64_t>(local.mem.data()) + local_off, o.message,
            local.mr->key};
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = kSendSignaled;
    wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(remote.mem.data()) + remote_off;
    wr.rdma.rkey = remote.mr->key;
    if (eng.post_send(qp, &wr, nullptr) == kOk) ++posted[i];
  };
  const auto post = [&](std::uint32_t i, std::uint64_t k) {
    if (o.read) {
      // The receiver READs the sender's source into its k-th slot for that sender.
      const std::uint64_t slot = std::uint64_t{i} * o.queue_depth + k % o.queue_depth;
      post_rdma(*hosts[rx].eng, rq[i], i, WrOpcode::kRead, hosts[rx], slot * slot_bytes, hosts[i],
                0);
      return;
    }
    post_rdma(*hosts[i].eng, sq[i], i, WrOpcode::kWrite, hosts[i], (k % o.queue_depth) * slot_bytes,
              hosts[rx], std::uint64_t{i} * slot_bytes);
  };
  std::uint64_t next_sample = t0 + o.sample_ns;
  bool measuring = false;
  std::vector<std::uint8_t> copy;
  Wc wc[64];
  while (now < end) {
    for (std::uint32_t i = 0; i < o.senders; ++i) {
      if (!started[i] && (i + 1 < o.senders || now >= t0 + o.join_at_ns)) {
        started[i] = true;
        for (std::uint32_t k = 0; k < o.queue_depth; ++k) post(i, k);
      }
    }
    for (std::size_t h = 0; h < n; ++h) {
      Host& x = hosts[h];
      x.eng->run(now);
      // The NIC takes frames while its FIFO has room (a NIC's transmit ring applies back
      // pressure; the engine's ring holds the rest, and the scheduler stops when it is full).
      while (x.eng->tx_pending() != 0 && x.uplink->depth(now) < o.nic_fifo_bytes)
        x.eng->drain_tx(
            [&](std::span<const std::uint8_t> f) {
              x.uplink->enqueue(std::vector<std::uint8_t>(f.begin(), f.end()), now);
            },
            1);
    }
    for (std::size_t h = 0; h < n; ++h)
      hosts[h].uplink->deliver(
          now, [&](std::span<const std::uint8_t> f, std::uint64_t at) { sw.receive(h, f, at); });
    for (std::size_t h = 0; h < n; ++h)
      sw.deliver(h, now, [&](std::span<const std::uint8_t> f) { hosts[h].eng->receive(f, now); });
    // Completions: each sender's WRITEs on its own CQ, or every READ on the receiver's (wr_id:
    // the sender). The other CQs have nothing, but are kept empty anyway.
    const auto on_wc = [&](const Wc& c) {
      if (c.status != WcStatus::kSuccess) {
        ++r.errors;
        return;
      }
      const auto i = static_cast<std::uint32_t>(c.wr_id);
      if (now >= measure_from) done_bytes[i] += o.message;
      interval_bytes[i] += o.message;
      post(i, posted[i]);
    };
    for (std::size_t h = 0; h < n; ++h) {
      int k;
      while ((k = hosts[h].eng->poll_cq(hosts[h].cq, 64, wc)) > 0)
        for (int j = 0; j < k; ++j) on_wc(wc[j]);
    }
    if (!measuring && now >= measure_from) {
      // The queue depth percentiles describe the steady state: after the warmup (the
      // counters of frames, marks and drops keep the whole run).
      measuring = true;
      sw.output(rx).clear_histogram();
    }
    if (now >= next_sample) {
      IncastSample s;
      s.t_ns = now - t0;
      for (std::uint32_t i = 0; i < o.senders; ++i) {
        // The rate counter (roce-ctl rates): the QP is listed while held below its maximum.
        Engine::QpRate listed[1];
        const double rate =
            hosts[i].eng->cc_rates(listed) != 0 ? listed[0].rate_mbps : double(o.link_mbps);
        s.rate_mbps.push_back(started[i] ? rate : 0);
        s.goodput_mbps.push_back(double(interval_bytes[i]) * 8000.0 / double(o.sample_ns));
        interval_bytes[i] = 0;
      }
      s.depth = sw.output(rx).depth(now);
      r.samples.push_back(std::move(s));
      next_sample += o.sample_ns;
    }
    now += o.tick_ns;
  }
  const double secs = double(end - measure_from) / 1e9;
  for (std::uint32_t i = 0; i < o.senders; ++i) {
    const double mbps = double(done_bytes[i]) * 8 / secs / 1e6;
    r.sender_mbps.push_back(mbps);
    r.goodput_mbps += mbps;
    const Stats& st = hosts[i].eng->stats();
    r.cnp_handled += st.get(Counter::kCnpHandled);
    if (o.selective_repeat) {
      // The data's requester: the sender's QP, or the receiver's for READ.
      const std::uint32_t b =
          o.read ? hosts[rx].eng->sr_bdp_psns(rq[i]) : hosts[i].eng->sr_bdp_psns(sq[i]);
      const std::uint64_t m = (o.read ? hosts[rx] : hosts[i]).eng->min_rtt_ns();
      r.sr_bdp_min = i == 0 ? b : std::min(r.sr_bdp_min, b);
      r.sr_bdp_max = std::max(r.sr_bdp_max, b);
      if (m != 0 && (r.min_rtt_ns == 0 || m < r.min_rtt_ns)) r.min_rtt_ns = m;
    }
    if (o.read) continue;  // the READ requester retransmits (below)
    r.retransmitted += st.get(Counter::kRetransmittedPackets);
    r.timeouts += st.get(Counter::kRetransmitTimeouts);
    r.probes += st.get(Counter::kRetransmitProbes);
  }
  if (o.read) {
    // Its READs sent again (go-back-N or selective) and the response packets they asked for.
    const Stats& st = hosts[rx].eng->stats();
    r.read_rerequests = st.get(Counter::kReadReRequests);
    r.retransmitted = st.get(Counter::kReadReRequestBytes) / o.mtu;
    r.timeouts = st.get(Counter::kRetransmitTimeouts);
    r.probes = st.get(Counter::kRetransmitProbes);
  }
  r.jain = jain_index(r.sender_mbps);
  r.of_output = r.goodput_mbps / double(o.link_mbps);
  // A full packet's payload over its bytes on the wire (Ethernet, IPv4, UDP, BTH, ICRC, the
  // preamble, FCS and gap), RETH once per message (a READ's responses: AETH in the first and
  // the last).
  const double pkts = std::ceil(double(o.message) / o.mtu);
  const double wire =
      double(o.message) + pkts * (14 + 20 + 8 + 12 + 4 + 24) + (o.read ? (pkts > 1 ? 8 : 4) : 16);
  r.of_payload_max = r.goodput_mbps / (double(o.link_mbps) * double(o.message) / wire);
  const auto& q = sw.output(rx);
  r.drops = q.counters().dropped;
  r.marks = q.counters().marked;
  r.p50_depth = q.depth_percentile(0.5);
  r.p99_depth = q.depth_percentile(0.99);
  r.max_depth = q.counters().max_depth;
  r.cnp_sent = hosts[rx].eng->stats().get(Counter::kCnpSent);
  r.switch_json = sw.json();
  return r;
}

std::string to_json(const IncastOptions& o, const IncastResult& r, bool samples) {
  std::ostringstream j;
  j << "{\"options\":{\"senders\":" << o.senders << ",\"op\":\"" << (o.read ? "read" : "write")
    << "\",\"message\":" << o.message << ",\"queue_depth\":" << o.queue_depth
    << ",\"mtu\":" << o.mtu << ",\"link_mbps\":" << o.link_mbps << ",\"algorithm\":\""
    << (o.cc.algorithm == engine::cc::Algorithm::kDcqcn   ? "dcqcn"
        : o.cc.algorithm == engine::cc::Algorithm::kDelay ? "delay"
                                                          : "none")
    << "\",\"queue_bytes\":" << o.sw.depth_bytes << ",\"kmin\":" << o.sw.kmin_bytes
    << ",\"kmax\":" << o.sw.kmax_bytes << ",\"pmax\":" << o.sw.pmax
    << ",\"duration_ns\":" << o.duration_ns << ",\"warmup_ns\":" << o.warmup_ns
    << ",\"join_at_ns\":" << o.join_at_ns << ",\"seed\":" << o.seed
    << (o.selective_repeat ? ",\"selective_repeat\":true" : "");
  if (o.selective_repeat) {
    j << ",\"sr_bdp_cap\":";
    if (o.sr_bdp_cap == ~std::uint64_t{0})
      j << "\"auto\"";
    else
      j << o.sr_bdp_cap;
  }
  j << "},";
  j << "\"goodput_mbps\":" << r.goodput_mbps << ",\"of_output\":" << r.of_output
    << ",\"of_payload_max\":" << r.of_payload_max << ",\"jain\":" << r.jain
    << ",\"drops\":" << r.drops << ",\"marks\":" << r.marks << ",\"p50_depth\":" << r.p50_depth
    << ",\"p99_depth\":" << r.p99_depth << ",\"max_depth\":" << r.max_depth
    << ",\"cnp_sent\":" << r.cnp_sent << ",\"cnp_handled\":" << r.cnp_handled
    << ",\"retransmitted\":" << r.retransmitted << ",\"timeouts\":" << r.timeouts
    << ",\"probes\":" << r.probes << ",\"read_rerequests\":" << r.read_rerequests
    << ",\"errors\":" << r.errors;
  if (o.selective_repeat)
    j << ",\"sr_bdp_psns_min\":" << r.sr_bdp_min << ",\"sr_bdp_psns_max\":" << r.sr_bdp_max
      << ",\"min_rtt_ns\":" << r.min_rtt_ns;
  j << ",\"sender_mbps\":[";
  for (std::size_t i = 0; i < r.sender_mbps.size(); ++i) j << (i ? "," : "") << r.sender_mbps[i];
  j << "],\"switch\":" << r.switch_json;
  if (samples) {
    j << ",\"samples\":[";
    for (std::size_t k = 0; k < r.samples.size(); ++k) {
      const auto& s = r.samples[k];
      j << (k ? "," : "") << "{\"t_us\":" << s.t_ns / 1000 << ",\"depth\":" << s.depth
        << ",\"rate\":[";
      for (std::size_t i = 0; i < s.rate_mbps.size(); ++i)
        j << (i ? "," : "") << std::lround(s.rate_mbps[i]);
      j << "],\"goodput\":[";
      for (std::size_t i = 0; i < s.goodput_mbps.size(); ++i)
        j << (i ? "," : "") << std::lround(s.goodput_mbps[i]);
      j << "]}";
    }
    j << "]";
  }
  j << "}";
  return j.str();
}

}  // namespace roce::fabric
