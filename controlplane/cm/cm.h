/// @file
/// The IB Communication Manager state machine (IBA Vol.1 ch.12, as Linux cm.c/cma.c use it over
/// RoCEv2). Pure: it knows neither the engine nor DPDK. The owner feeds it received MADs
/// (on_mad), the time (on_timer / next_deadline) and API calls (connect, listen, accept, ...);
/// it answers through callbacks: MADs to send, QP transitions to apply, and events for the
/// application. The codec is in mad.h; cm_agent.h binds the CM to an Engine's QP1.
///
/// Ordering: QP transitions are applied synchronously (the passive QP reaches RTR/RTS before
/// its REP leaves; the active QP reaches RTS before its RTU leaves). MADs and events are queued
/// and delivered, in order, when the outermost call into the Cm returns, so callbacks may call
/// back into the Cm (e.g. accept() from a connect-request event).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "controlplane/cm/mad.h"

namespace roce::cm {

using Duration = std::chrono::nanoseconds;
/// A point on the owner's monotonic clock, as a duration since its (arbitrary) epoch.
using TimePoint = std::chrono::nanoseconds;

/// Where a MAD comes from or goes to: the peer port's GID (::ffff:a.b.c.d for IPv4) and QP.
struct MadAddr {
  Ipv6Addr gid;
  Qpn qpn{Qpn::kGsi};
  friend bool operator==(const MadAddr&, const MadAddr&) = default;
};

/// Handle of a connection (or SIDR exchange): our Local Communication ID.
struct ConnId {
  std::uint32_t v = 0;
  friend auto operator<=>(const ConnId&, const ConnId&) = default;
};

/// Enhanced Connection Establishment (rdma-core's struct ibv_ece, the kernel CM's ib_cm ece):
/// a 24-bit vendor ID in the REQ/REP and an options word, which travels in the MAD header's
/// AttributeModifier. A peer whose vendor ID differs ignores the options (librdmacm's
/// init_ece), and rxe, which has no ECE, sends and expects 0 in both. All zero: no ECE, the
/// REQ/REP are byte for byte what they were without it.
struct Ece {
  std::uint32_t vendor_id = 0;  ///< 24 bits; 0: none
  std::uint32_t options = 0;
  friend bool operator==(const Ece&, const Ece&) = default;
};
/// Our vendor ID, the one ibv_query_device reports for our device (no IEEE OUI of our own).
inline constexpr std::uint32_t kEceVendorId = 0xFFFFFF;
/// Our options word: a signature in the high 16 bits (so that another stack reporting the
/// same vendor ID is not taken for us), features in the low ones.
inline constexpr std::uint32_t kEceSignature = 0x524F0000;  // "RO"
inline constexpr std::uint32_t kEceSignatureMask = 0xFFFF0000;
/// Selective repeat (docs/loss-recovery.md), a per-QP opt-in: the REQ offers it, the REP
/// accepts it with a bit of its own. The answer differs from the offer so that a REP that only
/// echoes the REQ's ECE (rdma-core's passive side returns the REQ's vendor ID, and a program
/// that copies rdma_get_remote_ece into rdma_set_local_ece returns its options too) never turns
/// it on: a standard peer would take our SACK for a malformed ACK.
inline constexpr std::uint32_t kEceSrOffer = 1u << 0;
inline constexpr std::uint32_t kEceSrAccept = 1u << 1;
inline constexpr std::uint32_t kEceSrBits = kEceSrOffer | kEceSrAccept;
/// Whether `e` is ours (vendor and signature).
constexpr bool ece_ours(const Ece& e) {
  return e.vendor_id == kEceVendorId && (e.options & kEceSignatureMask) == kEceSignature;
}
/// Whether `e` is ours and offers selective repeat (a REQ's).
constexpr bool ece_sr_offered(const Ece& e) { return ece_ours(e) && (e.options & kEceSrOffer); }
/// Whether `e` is ours and accepts selective repeat (a REP's).
constexpr bool ece_sr_accepted(const Ece& e) { return ece_ours(e) && (e.options & kEceSrAccept); }
/// The passive side's answer to a REQ whose ECE is `req`, the local side asking for `local`
/// (its program's rdma_set_local_ece / ibv_set_ece, or the agent's default) and allowed
/// selective repeat or not (roced's `transport: selective_repeat`): what the REP carries.
/// Another vendor's REQ gets none, ours the local options without the SR bits, plus the accept
/// bit only when the REQ offered it, the local side asked for it (accept bit set) and SR is
/// allowed.
constexpr Ece ece_answer(const Ece& req, const Ece& local, bool allowed) {
  if (req.vendor_id == 0 || local.vendor_id == 0 || (local.vendor_id & 0xFFFFFF) != req.vendor_id)
    return {};
  Ece rep{req.vendor_id, local.options};
  if (!ece_ours(rep)) return rep;
  rep.options &= ~kEceSrBits;
  if (allowed && ece_sr_offered(req) && (local.options & kEceSrAccept)) rep.options |= kEceSrAccept;
  return rep;
}
/// Whether selective repeat is on for a QP whose CM exchange sent `local` and received `remote`:
/// the active side offered and the passive side accepted, seen from either end. An echo of the
/// offer, a REQ that offers nothing, another vendor's options: off.
constexpr bool ece_sr_on(const Ece& local, const Ece& remote) {
  return (ece_sr_offered(local) && ece_sr_accepted(remote)) ||
         (ece_sr_accepted(local) && ece_sr_offered(remote));
}

struct CmConfig {
  std::uint64_t ca_guid = 0;  ///< Local CA GUID in REQ/REP; also identifies us to peers
  std::uint32_t hi_tid = 0;   ///< high 32 bits of the transaction IDs we originate
  /// Seeds the hash of the CM's tables (comm IDs come from a key of the kernel's CSPRNG,
  /// whatever this says).
  std::uint32_t seed = 1;
  /// Key of the comm-ID permutation; 0 (the default): 128 bits from getrandom. A test hook (a
  /// fuzz harness that must replay the same IDs); never set it in a deployment.
  std::uint64_t id_key = 0;
  std::uint8_t cm_response_timeout = 20;  ///< CMA_CM_RESPONSE_TIMEOUT (4.096 us x 2^20)
  std::uint8_t max_cm_retries = 15;       ///< CMA_MAX_CM_RETRIES
  std::uint8_t packet_life_time = 16;     ///< CMA_IBOE_PACKET_LIFETIME
  std::uint8_t ca_ack_delay = 15;         ///< our Target ACK Delay (REP) and local ACK delay
  std::uint8_t mra_service_timeout = 24;  ///< CMA_CM_MRA_SETTING: 4.096 us x 2^24 = 68.7 s
  std::uint8_t max_path_mtu = 5;          ///< REQs asking for a larger path MTU get REJ 26
  /// How long a closed connection is remembered; nullopt: 4.096 us x 2^(QP ACK timeout), as
  /// Linux's cm_enter_timewait(), at most `half_open_timeout` (the REQ sets the ACK timeout).
  std::optional<Duration> timewait;
  /// Connections and SIDR exchanges held at once, in any state. Beyond it a REQ gets REJ 3 "no
  /// resources", a SIDR_REQ a SIDR_REP "rejected", and connect()/sidr_resolve() fail
  /// (CmStats::rejected_full); the oldest answered SIDR exchange is forgotten first.
  std::uint32_t max_connections = 4096;
  /// Deadline of every exchange that has not reached established: a REQ or SIDR_REQ sent and
  /// not answered, a REQ received and not accepted, a REP sent without RTU, a DREQ without
  /// DREP. The peer's REQ chooses timeouts of up to 2^31 x 4.096 us; this bounds them all.
  Duration half_open_timeout = std::chrono::seconds(90);
  /// How long an answered SIDR_REQ is remembered, so that a repeat (our SIDR_REP was lost) is
  /// answered with the same SIDR_REP by the CM; nullopt: two REQ retransmission intervals.
  std::optional<Duration> sidr_keep;
};

/// QP attributes that result from the exchange: what the owner applies to its RC/UC QP on the
/// way to RTR and RTS (the fields of ibv_modify_qp that rdma_cm fills).
struct QpAttrs {
  Qpn local_qpn;
  Qpn remote_qpn;  ///< dest_qp_num
  /// The peer's Starting PSN: the first PSN we send. As Linux cm.c reads the field (sq_psn
  /// from the received REQ/REP, rq_psn from the sent one), each side names the PSN it expects.
  Psn sq_psn;
  Psn rq_psn;                  ///< our Starting PSN (sent in our REQ/REP): the first PSN we expect
  std::uint8_t path_mtu = 3;   ///< IB enum (3 = 1024)
  std::uint8_t timeout = 0;    ///< local ACK timeout, 4.096 us x 2^n
  std::uint8_t retry_cnt = 7;  ///< from the REQ's Retry Count (both sides)
  std::uint8_t rnr_retry = 7;  ///< what the peer asked us to use (REQ or REP RNR Retry Count)
  std::uint8_t min_rnr_timer = 0;       ///< rdma_cm uses 0 (655 ms) on both sides
  std::uint8_t max_rd_atomic = 0;       ///< = the peer's Responder Resources
  std::uint8_t max_dest_rd_atomic = 0;  ///< = the peer's Initiator Depth
  std::uint16_t pkey = 0xFFFF;
  std::uint32_t qkey = 0;  ///< UD only
  TransportType transport = TransportType::kRc;
  // Address vector of the path
  Ipv6Addr local_gid;
  Ipv6Addr remote_gid;
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;
  /// The peer's ECE: from the REQ (passive side) or the REP (active side); zero when the peer
  /// sent none, or (passive side) when our accept() did not answer the REQ's vendor.
  Ece remote_ece;
  /// Ours: what the REQ (active side) or the REP (passive side) carried; zero: none.
  Ece local_ece;
  friend bool operator==(const QpAttrs&, const QpAttrs&) = default;
};

enum class QpTransition : std::uint8_t { kRtr, kRts, kError };

/// Active side: what to put in the REQ.
struct ConnectParams {
  MadAddr peer;  ///< the passive side's GID (and QP1)
  std::uint64_t service_id = 0;
  Qpn qpn;           ///< our RC/UC QP
  Psn starting_psn;  ///< the first PSN we expect to receive (the passive side sends from it)
  TransportType transport = TransportType::kRc;
  std::uint8_t responder_resources = 1;  ///< our max_dest_rd_atomic offer
  std::uint8_t initiator_depth = 1;      ///< our max_rd_atomic offer
  std::uint8_t retry_count = 7;
  std::uint8_t rnr_retry_count = 7;  ///< what the passive side should use toward us
  std::uint8_t path_mtu = 3;
  bool srq = false;
  /// Primary path: GIDs, hop limit, traffic class, flow label. LIDs, Subnet Local and the local
  /// ACK timeout are filled in by the CM.
  CmPath path;
  std::optional<CmaHeader> cma;            ///< rdma_cm header at the start of the private data
  std::vector<std::uint8_t> private_data;  ///< <= 56 bytes with a cma header, else <= 92
  Ece ece;  ///< what the REQ announces (rdma_set_local_ece); zero: none
};

/// Passive side: what to put in the REP.
struct AcceptParams {
  Qpn qpn;
  Psn starting_psn;  ///< the first PSN we expect to receive (the active side sends from it)
  std::uint8_t responder_resources = 1;  ///< clamped to the REQ's Initiator Depth
  std::uint8_t initiator_depth = 1;      ///< clamped to the REQ's Responder Resources
  std::uint8_t rnr_retry_count = 7;      ///< what the active side should use toward us
  bool srq = false;
  std::vector<std::uint8_t> private_data;  ///< <= 196 bytes
  /// What the REP announces, sent only when the REQ carried the same vendor ID (else the REP
  /// carries none, as to rxe), with these options (rdma-core's passive side sends its own
  /// local options: librdmacm's ucma_copy_ece_param_to_kern_rep). The owner decides them
  /// (ece_answer): the CM sends them as given.
  Ece ece;
};

/// Active side of SIDR (UD service resolution, rdma_cm RDMA_PS_UDP).
struct SidrParams {
  MadAddr peer;
  std::uint64_t service_id = 0;
  std::optional<CmaHeader> cma;
  std::vector<std::uint8_t> private_data;  ///< <= 180 bytes with a cma header, else <= 216
};

enum class ConnState : std::uint8_t {
  kIdle,        ///< no such connection
  kReqSent,     ///< active: REQ out, waiting for REP
  kMraReqRcvd,  ///< active: the peer asked for more time
  kReqRcvd,     ///< passive: connect-request event out, waiting for accept/reject
  kMraReqSent,  ///< passive: duplicate REQ answered with MRA
  kRepSent,     ///< passive: REP out, waiting for RTU (or first data)
  kMraRepRcvd,  ///< passive: the peer asked for more time
  kEstablished,
  kDreqSent,
  kTimewait,
  kSidrReqSent,  ///< active SIDR
  kSidrReqRcvd,  ///< passive SIDR, waiting for sidr_accept/sidr_reject
  kSidrRepSent,  ///< passive SIDR answered: a repeated SIDR_REQ gets the same SIDR_REP
};
std::string_view to_string(ConnState s);

enum class CmEventType : std::uint8_t {
  kConnectRequest,  ///< passive: a REQ for a listened service; answer with accept()/reject()
  kEstablished,     ///< both: the QP is in RTS and the peer knows it (REP / RTU / first data)
  kRejected,        ///< REJ received (reason, private data)
  kUnreachable,     ///< retries exhausted (REQ, REP or SIDR_REQ), or half_open_timeout passed
  kConnectError,    ///< active: applying the REP's attributes failed; REJ sent
  kDisconnected,    ///< DREQ received, or our DREQ answered or timed out; QP moved to error
  kTimewaitExit,    ///< the ID is forgotten
  kSidrRequest,     ///< passive: a SIDR_REQ; answer with sidr_accept()/sidr_reject()
  kSidrReply,       ///< active: SIDR_REP received (status, QPN, Q_Key)
};
std::string_view to_string(CmEventType t);

struct CmEvent {
  CmEventType type{};
  ConnId id;
  std::uint64_t service_id = 0;
  MadAddr peer;
  QpAttrs qp;  ///< kConnectRequest: provisional (no local QPN yet); kEstablished: final
  std::optional<CmaHeader> cma;            ///< kConnectRequest / kSidrRequest of IP CM services
  std::vector<std::uint8_t> private_data;  ///< the application's part
  RejReason reason = RejReason::kConsumerDefined;  ///< kRejected
  bool remote = false;                             ///< kDisconnected: the peer sent the DREQ
  // SIDR
  SidrStatus sidr_status = SidrStatus::kSuccess;
  Qpn sidr_qpn;
  std::uint32_t sidr_qkey = 0;
};

struct CmCallbacks {
  /// Sends one 256-byte MAD to `to` (UD SEND to the peer's QP1).
  std::function<void(std::span<const std::uint8_t> mad, const MadAddr& to)> send_mad;
  std::function<void(const CmEvent&)> on_event;
  /// Moves the connection's QP; returns false if it could not. Optional (then the owner applies
  /// the attributes from the events). Must not call into the Cm.
  std::function<bool(ConnId, QpTransition, const QpAttrs&)> modify_qp;
  /// The owner's monotonic clock; used to arm timers from API calls and received MADs.
  std::function<TimePoint()> now;
};

enum class CmStatus : std::uint8_t {
  kOk,
  kNoSuchConn,
  kBadState,
  kPrivateDataTooLong,
  kInvalidParam,
  kQpTransitionFailed,
};
std::string_view to_string(CmStatus s);

struct CmStats {
  std::uint64_t mads_rx = 0;
  std::uint64_t mads_rx_bad = 0;      ///< failed to decode
  std::uint64_t mads_rx_ignored = 0;  ///< decoded, but nothing to do (stale, unknown ID, ...)
  std::uint64_t mads_tx = 0;
  std::uint64_t retransmits = 0;
  std::uint64_t duplicates = 0;         ///< duplicate REQ/REP/SIDR_REQ answered or dropped
  std::uint64_t rejected_full = 0;      ///< REQs, SIDR_REQs and API calls refused: max_connections
  std::uint64_t half_open_expired = 0;  ///< exchanges given up at half_open_timeout
  std::uint64_t sidr_forgotten = 0;     ///< answered SIDR exchanges dropped early to make room
};

/// IBA local ACK timeout from the CA's ACK delay and the path's packet life time (the rule of
/// Linux cm_ack_timeout(): about max(ack_delay, plt + 1), one more when the two are close).
std::uint8_t ack_timeout(std::uint8_t ca_ack_delay, std::uint8_t packet_life_time);
/// 4.096 us x 2^t rounded the way Linux's cm_convert_to_ms() does: 2^max(t - 8, 0) ms.
Duration iba_time(std::uint8_t t);

class Cm {
 public:
  Cm(CmConfig cfg, CmCallbacks cb);
  Cm(const Cm&) = delete;
  Cm& operator=(const Cm&) = delete;

  // ---- passive side ----
  /// Accept REQs and SIDR_REQs for `service_id`. Others are rejected (REJ 8 / SIDR status 1).
  void listen(std::uint64_t service_id) { listeners_.insert(service_id); }
  void unlisten(std::uint64_t service_id) { listeners_.erase(service_id); }
  /// Moves the QP to RTR and RTS and sends the REP.
  CmStatus accept(ConnId id, const AcceptParams& p);
  /// REJ for a pending connect request (reason 28 "consumer defined" for rdma_reject()). On an
  /// active connection whose REQ is not answered yet it gives the REQ up: REJ "timeout" with
  /// our CA GUID, as Linux does when a connecting id is destroyed.
  CmStatus reject(ConnId id, RejReason reason = RejReason::kConsumerDefined,
                  std::span<const std::uint8_t> private_data = {});
  /// The first data arrived on a QP whose RTU is still outstanding (the COMM_EST event): the
  /// connection is established without the RTU.
  CmStatus notify_established(ConnId id);
  CmStatus sidr_accept(ConnId id, Qpn qpn, std::uint32_t qkey,
                       std::span<const std::uint8_t> private_data = {});
  CmStatus sidr_reject(ConnId id, SidrStatus status);

  // ---- active side ----
  /// Sends a REQ; nullopt when the parameters do not fit (private data, MTU).
  std::optional<ConnId> connect(const ConnectParams& p);
  std::optional<ConnId> sidr_resolve(const SidrParams& p);

  // ---- both ----
  /// Moves the QP to error and sends a DREQ (retransmitted until DREP).
  CmStatus disconnect(ConnId id, std::span<const std::uint8_t> private_data = {});

  // ---- inputs ----
  /// A MAD received on QP1 from `from`. Returns why it was not decoded, or kOk.
  MadError on_mad(std::span<const std::uint8_t> mad, const MadAddr& from);
  /// Runs every timer due at `now` (retransmissions, timeouts, timewait).
  void on_timer(TimePoint now);
  /// The earliest pending timer, if any.
  std::optional<TimePoint> next_deadline() const;

  // ---- introspection ----
  ConnState state(ConnId id) const;
  std::optional<QpAttrs> qp_attrs(ConnId id) const;
  /// The peer's comm ID (from its REQ or REP; 0 before), which a blind forger does not know
  /// (new_id): with ours, what selective repeat's index bases come from (sr_index_base).
  std::optional<std::uint32_t> remote_comm_id(ConnId id) const;
  std::size_t size() const { return conns_.size(); }
  /// Connections whose DREQ is not answered yet.
  std::size_t disconnecting() const;
  /// Sends every unanswered DREQ again now (counted as retransmissions), for a process about to
  /// exit: its timers go with it, where a kernel CM would keep retransmitting. Returns how many.
  std::size_t resend_dreqs();
  const CmStats& stats() const { return stats_; }

 private:
  struct Conn {
    ConnId id;
    bool active = false;
    ConnState state = ConnState::kIdle;
    std::uint32_t remote_comm_id = 0;
    std::uint64_t remote_ca_guid = 0;
    std::uint64_t service_id = 0;
    MadAddr peer;
    std::uint64_t req_tid = 0;  ///< TID of the REQ / SIDR_REQ (REP, MRA, REJ, RTU reuse it)
    QpAttrs qp;
    ReqMsg req;  ///< passive: the REQ, until accepted
    // Retransmission of the outstanding MAD (REQ, REP, DREQ or SIDR_REQ)
    MadBuf retx{};
    unsigned retries_left = 0;
    std::uint8_t max_cm_retries = 15;
    Duration base_interval{};           ///< per exchange: REQ from our timeouts, REP from the REQ's
    Duration interval{};                ///< base_interval, or longer after an MRA
    std::optional<TimePoint> deadline;  ///< retransmission, timewait or SIDR keep
    std::optional<TimePoint> expires;   ///< half_open_timeout, until established
    std::optional<TimePoint> timer;     ///< min(deadline, expires) as filed in timers_
    MadBuf last_reply{};  ///< REP, RTU, MRA or SIDR_REP to repeat when a duplicate arrives
  };
  /// Seeded hash of the indexes: the peer chooses comm IDs, QPNs and GIDs.
  struct Hash {
    std::uint64_t seed;
    static std::uint64_t mix(std::uint64_t x);
    std::size_t operator()(std::uint32_t k) const { return mix(k ^ seed); }
    std::size_t operator()(const std::pair<std::uint32_t, std::uint64_t>& k) const {
      return mix(mix(k.second ^ seed) ^ k.first);
    }
    std::size_t operator()(const std::pair<std::uint32_t, MadAddr>& k) const;
  };

  // Scope of one call into the Cm: queued MADs and events go out when the outermost ends.
  class Batch {
   public:
    explicit Batch(Cm& cm) : cm_(cm) { ++cm_.depth_; }
    ~Batch() { cm_.leave(); }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

   private:
    Cm& cm_;
  };
  struct OutMad {
    MadBuf bytes;
    MadAddr to;
  };
  void leave();

  TimePoint now() const {
    if (timer_now_) return *timer_now_;
    return cb_.now ? cb_.now() : last_now_;
  }
  ConnId new_id();
  std::uint64_t new_tid() { return (std::uint64_t{cfg_.hi_tid} << 32) | ++tid_seq_; }
  Conn* find(ConnId id);
  const Conn* find(ConnId id) const;
  Conn* find_remote(std::uint32_t remote_comm_id, std::uint64_t remote_ca_guid);
  /// A MAD about a connection counts only from its peer's address (the GRH's or IP source):
  /// an off-path host naming our comm ID is not heard.
  static bool from_peer(const Conn& c, const MadAddr& from) { return from.gid == c.peer.gid; }
  /// find(id), when `from` is its peer.
  Conn* find_from(ConnId id, const MadAddr& from);

  MadBuf send(const MadAddr& to, std::uint64_t tid, const CmMsg& msg, std::uint32_t attr_mod = 0);
  void emit(CmEvent ev) { outbox_.emplace_back(std::move(ev)); }
  CmEvent event(CmEventType t, const Conn& c) const;
  bool modify(const Conn& c, QpTransition t);
  void arm(Conn& c, const MadBuf& mad, Duration interval);
  void disarm(Conn& c) {
    c.deadline.reset();
    schedule(c);
  }
  void set_deadline(Conn& c, std::optional<TimePoint> t) {
    c.deadline = t;
    schedule(c);
  }
  /// Files the connection's next timer (min of deadline and expires) in timers_.
  void schedule(Conn& c);
  /// Room for one more connection (forgets the oldest answered SIDR exchange if it must).
  bool make_room();
  Conn& store(Conn&& c);
  void give_up(Conn& c);
  void answered_sidr(Conn& c, const MadBuf& rep);
  void enter_timewait(Conn& c);
  void erase(Conn& c);
  Duration timewait_of(const Conn& c) const;
  void send_rej(const MadAddr& to, std::uint64_t tid, std::uint32_t local, std::uint32_t remote,
                MsgKind kind, RejReason reason, std::span<const std::uint8_t> pd = {});

  void on_req(const MadHeader& h, const ReqMsg& m, const MadAddr& from);
  void on_mra(const MraMsg& m, const MadAddr& from);
  void on_rej(const RejMsg& m, const MadAddr& from);
  void on_rep(const MadHeader& h, const RepMsg& m, const MadAddr& from);
  void on_rtu(const RtuMsg& m, const MadAddr& from);
  void on_dreq(const MadHeader& h, const DreqMsg& m, const MadAddr& from);
  void on_drep(const DrepMsg& m, const MadAddr& from);
  void on_sidr_req(const MadHeader& h, const SidrReqMsg& m, const MadAddr& from);
  void on_sidr_rep(const SidrRepMsg& m, const MadAddr& from);
  void establish(Conn& c);
  void expire(Conn& c);

  CmConfig cfg_;
  CmCallbacks cb_;
  Hash hash_;
  std::unordered_map<std::uint32_t, Conn, Hash> conns_;  ///< by local comm ID
  /// Passive connections by the peer's (comm ID, CA GUID): duplicate REQs.
  std::unordered_map<std::pair<std::uint32_t, std::uint64_t>, std::uint32_t, Hash> by_remote_;
  /// Connections by the peer's (QPN, CA GUID): stale REQs.
  std::unordered_multimap<std::pair<std::uint32_t, std::uint64_t>, std::uint32_t, Hash> by_qp_;
  /// Passive SIDR exchanges by (request ID, sender).
  std::unordered_map<std::pair<std::uint32_t, MadAddr>, std::uint32_t, Hash> sidr_;
  std::deque<std::uint32_t> sidr_answered_;               ///< kSidrRepSent, oldest first
  std::set<std::pair<TimePoint, std::uint32_t>> timers_;  ///< every armed connection
  std::set<std::uint64_t> listeners_;
  std::deque<std::variant<OutMad, CmEvent>> outbox_;
  unsigned depth_ = 0;
  std::array<std::uint64_t, 2> id_key_;  ///< new_id()'s permutation (from getrandom)
  std::uint32_t id_ctr_;                 ///< what new_id() permutes next
  std::uint32_t tid_seq_ = 0;
  TimePoint last_now_{};                ///< the latest on_timer() time
  std::optional<TimePoint> timer_now_;  ///< set while on_timer() runs
  CmStats stats_;
};

}  // namespace roce::cm
