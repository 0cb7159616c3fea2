/// @file
/// What the NetFR host and client share: the process's fabric, and per connection two channels
/// (primary, secondary), each an RC QP with kRxSlots receive slots (upstream posts 60) and
/// kTxSlots send slots of NETFR_MESSAGE_MAX_SIZE bytes in one registration each, the credits
/// as upstream keeps them (a datagram takes one, its acknowledgement gives it back, a user send
/// needs at least NETFR_RESERVED_CREDIT_COUNT left; buffer states, buffer updates, acks and
/// keepalives take none), and the negotiated keepalive.
#pragma once

#include <array>
#include <cerrno>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "apps/netfr/fabric.h"
#include "apps/netfr/protocol.h"

struct NFRMemory {
  void* ptr = nullptr;  ///< what the application sees (nfrMemoryPointer)
  std::uint64_t size = 0;
  roce::netfr::MrInfo mr;  ///< what the fabric reads and writes: at `ptr`, or a bounce buffer
  bool bounced() const { return mr.addr != ptr; }
  std::uint8_t channel = 0;
  std::uint32_t index = 0;  ///< client: the index it is advertised under
  bool host = true;
  void* owner = nullptr;  ///< the NFRHost or NFRClient
  bool has_data = false;  ///< client: written, not acknowledged yet
  /// host: buffer writes from it whose notification has not completed (the stack may still
  /// read it): nfrFreeMemory says -EBUSY meanwhile.
  std::uint32_t writes_in_flight = 0;
};

namespace roce::netfr {

/// Opens the fabric of a link text: "attach=SOCKET[,port=NAME]" attaches to the roced
/// listening on SOCKET (libroce only: no DPDK in this process); anything else is an in-process
/// link ("pmd=memif,...", netfr.h), opened by the in-process opener when the program installed
/// one (local_stack.h: use_local_stack()). nullptr and `err` when it cannot.
std::unique_ptr<Fabric> open_fabric(const std::string& link, std::string& err);
/// Installed by a program that links the in-process stack (local_stack.h).
using LocalOpener = std::unique_ptr<Fabric> (*)(const std::string& link, std::string& err);
void set_local_opener(LocalOpener f);

/// The lock every C API call takes (netfr.h, "Threads"): recursive, so that callbacks and
/// blocking waits may call in again.
std::recursive_mutex& api_mutex();
/// What every C API call holds: the API lock, and the count of calls in progress (a callback
/// calling in nests one in another).
class ApiLock {
 public:
  ApiLock();
  ~ApiLock();
  ApiLock(const ApiLock&) = delete;
  ApiLock& operator=(const ApiLock&) = delete;

 private:
  std::lock_guard<std::recursive_mutex> g_;
};
/// Runs `f` (under the lock) when the outermost API call in progress returns: nfrHostFree and
/// nfrClientFree from a callback must not delete the object whose call ran the callback.
void at_api_exit(std::function<void()> f);
/// The NFRMemory handles handed out and not freed yet (under api_mutex()): the C API checks a
/// handle here before it reads it, so a freed one (or one of a freed host or client) is
/// -EINVAL rather than a use after free.
void remember_memory(const NFRMemory* m);
void forget_memory(const NFRMemory* m);
bool live_memory(const NFRMemory* m);
/// nfrSetLogLevel's level (or NETFR_DEBUG set): connection events and protocol errors on stderr.
bool debug_log();

/// The process's fabric for the C API (one per process: the EAL starts once): made from `link`
/// (NULL: $NETFR_LINK) on first use, kept until exit. nullptr and `err` when it cannot start.
Fabric* process_fabric(const char* link, std::string& err);

/// The primary channel's default port (upstream's programs use it as well).
inline constexpr std::uint16_t kDefaultPort = 5010;
/// Upstream's fields of NFRInitOpts (netfr.h): 0 when this stack can follow them,
/// -EPROTONOSUPPORT for a transport but RDMA, and with `ports` (the addrs to listen on or
/// connect to) -EINVAL for a secondary port other than the primary's + 1.
int check_upstream_opts(const NFRInitOpts& o, bool ports);
/// The primary channel's port: o.port, else addrs[0]'s (upstream's way), else kDefaultPort.
std::uint16_t primary_port(const NFRInitOpts& o);
/// addrs[0]'s IPv4 address as text (upstream's way to name the host), "" when unset.
std::string upstream_peer(const NFRInitOpts& o);

/// Receives we keep posted per channel: more than upstream's kRecvDepth. What we send keeps to
/// what upstream's 60 can take (the credits); our own side posts more because an RNR NAK stalls
/// the sending QP for rdma_cm's minimum RNR timer (655 ms), and a burst of acknowledgements,
/// buffer states and keepalives on top of the credited messages would draw them.
inline constexpr std::uint32_t kRxSlots = NETFR_TOTAL_CONTEXT_COUNT;
static_assert(kRxSlots >= kRecvDepth);
/// Send slots: datagrams (<= NETFR_CREDIT_COUNT), acks (<= the peer's credits), buffer states
/// and updates (<= NETFR_MAX_MEM_REGIONS each), keepalives; beyond that a message waits in a
/// queue for a slot.
inline constexpr std::uint32_t kTxSlots = 192;
inline constexpr std::uint32_t kSendDepth = 2 * kTxSlots + 8;
/// Messages that may wait for a send slot on a channel. A live peer leaves far fewer (acks
/// within its credits, buffer states and updates within the 32 buffers, a keepalive): beyond
/// this the peer takes nothing (every SEND RNR NAKed, retried without end) and the connection
/// goes, rather than the queue growing with every datagram it sends.
inline constexpr std::uint32_t kMaxQueued = 4 * kTxSlots;

/// wr_id: channel (bits 40..47), kind (32..39), slot or cookie (0..31).
enum class WrKind : std::uint8_t { kRecv = 1, kSend = 2, kWrite = 3 };
constexpr std::uint64_t make_wr(unsigned ch, WrKind k, std::uint32_t v) {
  return (std::uint64_t{ch} << 40) | (std::uint64_t{static_cast<std::uint8_t>(k)} << 32) | v;
}

struct Stats {
  std::uint64_t sent = 0, received = 0, acks_sent = 0, acks_received = 0, writes = 0,
                write_bytes = 0, credit_waits = 0, internal_queued = 0, protocol_errors = 0,
                bad_messages = 0, connects = 0, disconnects = 0, rejected = 0, keepalives_sent = 0,
                keepalives_received = 0, peers_silent = 0;
  std::string line() const;
};

class Endpoint {
 public:
  struct Channel {
    ConnId conn = 0;
    bool open = false;  ///< QP exists and receives are posted
    bool up = false;    ///< established
    int credits = NETFR_CREDIT_COUNT;
    std::uint32_t tx_channel_serial = 0;
    std::uint32_t rx_channel_serial = 0;  ///< next expected from the peer
    MrInfo rx_mr{}, tx_mr{};              ///< the slots, in the fabric's memory
    std::vector<std::uint32_t> free_tx;
    struct Queued {
      std::vector<std::uint8_t> bytes;
      std::function<void(int)> on_done;
    };
    std::deque<Queued> internal;                   ///< waiting for a send slot
    std::uint64_t last_tx_ns = 0, last_rx_ns = 0;  ///< for the keepalive
    /// Send slots whose completion calls back (cookie -> callback).
    std::vector<std::function<void(int)>> on_done;
  };

  explicit Endpoint(Fabric& f);
  virtual ~Endpoint();

  Fabric& fabric() { return fab_; }

  /// A region of the application's on channel `index` (host: a source of buffer writes;
  /// client: advertised to the host): `buf`, copied through a bounce buffer of the stack's at
  /// each use (memory the stack did not allocate cannot be registered when attached), or, with
  /// `buf` null, memory of the stack's (zero copy; NFRMemory::ptr).
  NFRMemory* attach(void* buf, std::uint64_t size, std::uint8_t index) {
    return memory_fits(size, index) ? remember(keep_memory(new_memory(buf, size, index))) : nullptr;
  }
  /// The application's memfd `fd` mapped at `addr`, registered in place (zero copy).
  NFRMemory* attach_memfd(int fd, void* addr, std::uint64_t size, std::uint8_t index) {
    if (!addr || fd < 0 || !memory_fits(size, index)) return nullptr;
    return remember(keep_memory(new_memfd(fd, addr, size, index)));
  }
  Channel& channel(unsigned i) { return ch_[i]; }
  const Stats& stats() const { return stats_; }
  bool blocking() const { return !nonblocking_; }

 protected:
  /// Registers the channel's slots (once) and posts every receive on `conn`.
  bool open_channel(unsigned ch, ConnId conn);
  /// Forgets both channels' connections (disconnects what is up), calls pending callbacks
  /// with -ECONNRESET, resets credits and serials.
  void close_channels();
  /// Sends `msg` (encoded) on `ch`. user (a datagram): takes a credit and needs at least the
  /// reserve left (else waits, or -EAGAIN non-blocking); anything else takes none and waits in
  /// a queue when no send slot is free. on_done: called when the SEND completed (or failed).
  int send_message(unsigned ch, const std::uint8_t* msg, std::size_t len, bool user,
                   std::function<void(int)> on_done = {});
  int send_ack(unsigned ch, bool host_data);
  /// RDMA WRITE (unsignaled) on `ch`; the SEND after it tells its completion.
  bool post_write(unsigned ch, const void* local, std::uint32_t len, std::uint32_t lkey,
                  std::uint64_t raddr, std::uint32_t rkey, bool signaled = false);
  void repost(unsigned ch, std::uint32_t slot);
  std::uint8_t* rx_slot(unsigned ch, std::uint32_t slot) {
    return static_cast<std::uint8_t*>(ch_[ch].rx_mr.addr) +
           std::size_t{slot} * NETFR_MESSAGE_MAX_SIZE;
  }
  std::uint8_t* tx_slot(unsigned ch, std::uint32_t slot) {
    return static_cast<std::uint8_t*>(ch_[ch].tx_mr.addr) +
           std::size_t{slot} * NETFR_MESSAGE_MAX_SIZE;
  }
  /// One round: polls the fabric, hands events and received messages to the role.
  int pump();
  /// Polls until `done()` (true) or the timeout (false).
  bool wait_until(const std::function<bool()>& done);
  /// The role's memory limits, and where it keeps (and announces) a new region.
  virtual bool memory_fits(std::uint64_t size, std::uint8_t index) const = 0;
  virtual NFRMemory* keep_memory(std::unique_ptr<NFRMemory> m) = 0;

  /// The role's handlers. on_message: return true to keep the receive slot (the role reposts it
  /// later), false to repost it now.
  virtual void on_event(const FabricEvent& e) = 0;
  virtual bool on_message(unsigned ch, std::uint32_t slot, const Decoded& d) = 0;
  virtual void on_channel_error(unsigned ch, const std::string& why) = 0;
  /// Hosts take connect requests.
  virtual bool listens() const { return false; }
  /// Clients advertise their memory to the peer, which writes it: only theirs is registered
  /// for remote writes (the slots and the host's memory are not).
  virtual bool advertises() const { return !listens(); }
  /// Called at every pump (after the keepalive's turn): the role's timers.
  virtual void on_tick() {}

 public:
  /// The channel of a connection, or -1.
  int channel_of(ConnId c) const;

 protected:
  Fabric& fab_;
  std::array<Channel, NETFR_CHANNEL_COUNT> ch_;
  Stats stats_;
  bool nonblocking_ = false;
  double timeout_s_ = 10;
  /// Negotiated extensions (protocol.h kExt*): 0 with an upstream peer.
  std::uint8_t ext_ = 0;
  double keepalive_s_ = 1;  ///< a keepalive after this long without a send; silent 10x: gone

 private:
  void keepalive_tick();
  static NFRMemory* remember(NFRMemory* m) {
    if (m) remember_memory(m);
    return m;
  }

 protected:
 private:
  std::unique_ptr<NFRMemory> new_memory(void* user, std::uint64_t size, std::uint8_t channel);
  std::unique_ptr<NFRMemory> new_memfd(int fd, void* addr, std::uint64_t size,
                                       std::uint8_t channel);
  void flush_internal(unsigned ch);
  void on_completion(const FabricCompletion& c);
};

}  // namespace roce::netfr
