/// @file
/// The network-attached accelerator (NAA) side of the NAAICE protocol as upstream NAAICE
/// (naa-communication-library f7b72fc) speaks it, for many hosts at once, on any Stack
/// (stack.h). Per host (one rdma_cm connection):
///
///   1. connect request -> QP created, two receives of kMaxMessageSize posted, REP (so the
///      host's first SEND never finds the receive queue empty; if it did, RNR NAK and retry)
///   2. MRSP: the host's advertisement+request (0x01) is checked against this host's NAA memory
///      (an arena of `memory_per_host` bytes, addressed by the 56-bit "FPGA address"): too many
///      regions -> error 0x03, an address beyond the arena -> 0x02, address + size beyond it ->
///      0x01. Otherwise each region is registered at its NAA address (iova) and the
///      advertisement (0x02) lists address, rkey and size of every non-internal region, in the
///      host's order. After an error the host may try again. Every answer is a SEND with the
///      Solicited Event bit (NAAICE hosts sleep until a solicited completion).
///   3. data: the host's RDMA WRITEs land in the regions; its final WRITE_WITH_IMM carries the
///      function code (Layout, mrsp.h: upstream's fncode | 0x80, or the seed's whole immediate
///      after a metadata region 0 holding the return address).
///   4. the kernel runs (kernels.h) on the regions, on a worker thread off the poll loop (which
///      keeps serving ARP, the CM and the other hosts) unless small and linear; when it is done,
///      the loop writes back the regions the host flagged OUTPUT (seed: the parameters the kernel
///      wrote, the return region last), the last as a solicited WRITE_WITH_IMM carrying the
///      status (upstream: status << 8); on an error a zero-length one. A call finding the kernel
///      queue full, or made while the host's previous call still runs, is answered at once with
///      status 0x01.
///   5. any number of calls, then the host's DREQ; the host's regions are freed.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/naa/kernels.h"
#include "apps/naa/mrsp.h"
#include "apps/naa/stack.h"

namespace roce::naa {

struct NaaConfig {
  std::uint16_t port = 12345;                   ///< rdma_cm TCP port (NAAICE's examples)
  std::uint32_t max_hosts = 16;                 ///< connections at once; more are rejected
  std::uint64_t memory_per_host = 64ull << 20;  ///< each host's NAA memory (FPGA address space)
  std::uint32_t max_regions = kMaxRegions;      ///< regions per host (<= 32)
  /// A host silent this long (no message, no call, no completion) is dropped and its memory
  /// freed: a host that vanished without a DREQ leaves nothing else to notice. 0: never.
  double host_idle_timeout = 300;
  /// Test mode: post a new host's receives this long after the REP instead of before it, so
  /// that its first SEND meets an RNR NAK and is retried (as with an NAA that is slow to post).
  double late_receives_ms = 0;
  /// Threads that run the kernels; 0: on the poll loop, as the call arrives (tests).
  std::uint32_t kernel_threads = 1;
  /// Calls queued or running at once, over every host; one more is answered with status 0x01
  /// ("socket not available": the NAA cannot take it now) without running. 0: max_hosts (a
  /// host has at most one call in flight, so then no host is turned away).
  std::uint32_t kernel_queue = 0;
  /// A linear kernel (Kernel::linear) with at most this many bytes of parameters runs on the
  /// poll loop, as the copy it resembles would (64 KiB: microseconds); 0: none.
  std::uint64_t inline_bytes = 64 * 1024;
  /// Test hook: every kernel takes at least this long, busy on its CPU (a long matmul); no
  /// kernel runs on the poll loop then.
  double kernel_delay_ms = 0;
  /// The function table: KernelRegistry::configure's "CODE=NAME,..." applied to the kernels
  /// the server is given (roce-naa --functions); empty: as given.
  std::string functions;
  bool verbose = false;
};

struct NaaStats {
  std::uint64_t hosts_accepted = 0, hosts_rejected = 0, hosts_done = 0;
  std::uint64_t mrsp_ok = 0, mrsp_malformed = 0, calls = 0, calls_failed = 0;
  std::uint64_t calls_busy = 0;  ///< answered 0x01: kernel queue full, or a call already running
  std::map<std::uint8_t, std::uint64_t> mrsp_errors;  ///< by MRSP error code
  std::map<std::uint32_t, std::uint64_t> statuses;    ///< by completion status
  std::uint64_t bytes_in = 0, bytes_out = 0, transport_errors = 0, hosts_expired = 0;
  /// Per-message log lines (call and MRSP errors) not printed: a host's budget was spent.
  std::uint64_t log_suppressed = 0;
};

/// A host's NAA memory, from the stack (Stack::alloc: shared memory when attached to a roced):
/// page-aligned (an MR registered at an iova must share the page offset of its address), zero,
/// committed only when touched. The stack must outlive it.
class Arena {
 public:
  explicit Arena(Stack& stack) : stack_(stack) {}
  ~Arena() { reset(); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  bool allocate(std::uint64_t size);  ///< false when the stack refuses
  void reset();
  std::uint8_t* get() const { return m_.addr; }
  std::uint64_t size() const { return m_.length; }

 private:
  Stack& stack_;
  Memory m_;
};

class NaaServer {
 public:
  NaaServer(Stack& stack, NaaConfig cfg, KernelRegistry kernels);
  ~NaaServer();
  NaaServer(const NaaServer&) = delete;
  NaaServer& operator=(const NaaServer&) = delete;

  /// Starts listening.
  void start();
  /// Polls the stack once and serves what happened; true if anything did.
  bool step();

  const NaaStats& stats() const { return stats_; }
  std::size_t hosts() const { return hosts_.size(); }
  const NaaConfig& config() const { return cfg_; }
  /// Calls queued or running on the kernel threads.
  std::size_t kernels_in_flight() const;
  /// Waits until no kernel is queued or running, then serves their results (tests).
  void drain_kernels();
  /// Serves until `stop` is set, `exit_after` hosts (if not 0) have come and gone, or `timeout`
  /// seconds (if not 0) pass (then false). `on_idle` runs after a few polls with nothing to do
  /// (to yield the CPU).
  bool run(const volatile std::sig_atomic_t& stop, std::uint64_t exit_after, double timeout,
           const std::function<void()>& on_idle);
  /// One line per counter, for the log at exit.
  std::string report() const;

 private:
  struct Region {
    AdvReqEntry req;
    std::uint64_t offset = 0;  ///< in the arena (= FPGA address)
    MrInfo mr;                 ///< non-internal regions only
    bool registered = false;
  };
  struct Host {
    ConnId conn = 0;
    std::string peer;
    bool established = false;
    Memory msg;                  ///< the receive slots, then the send buffer
    std::uint8_t* rx = nullptr;  ///< kRxSlots receive slots
    std::uint8_t* tx = nullptr;  ///< the send buffer
    MrInfo rx_mr, tx_mr;
    std::shared_ptr<Arena> arena;       ///< shared with a kernel that runs on it
    bool running = false;               ///< a call of this host is on the kernel threads
    Layout layout = Layout::kUpstream;  ///< of its last advertisement+request
    std::vector<Region> regions;        ///< as advertised by the host
    std::vector<std::size_t> data;      ///< indexes of the non-internal regions, in order
    std::uint64_t calls = 0;
    std::uint64_t last_active_ns = 0;
    std::uint64_t receives_due_ns = 0;  ///< late_receives_ms: when to post them
    std::uint64_t log_window_ns = 0;    ///< log_often: when this host's window began
    std::uint32_t logged = 0;           ///< lines in the window
    std::uint64_t suppressed = 0;       ///< lines not printed in the window
  };

  void on_event(const ConnEvent& e);
  void on_completion(const Completion& c);
  void on_mrsp(Host& h, std::span<const std::uint8_t> msg);
  /// The host's WRITE_WITH_IMM: `imm` as a number (ntohl of the wire's).
  void on_call(Host& h, std::uint32_t imm);
  /// Answers a call with its result: by the host's layout, the regions that go back and the
  /// final WRITE_WITH_IMM of the status (seed: to the return region `ret`, an index into
  /// Host::data, 0 being the metadata region).
  void answer(Host& h, std::uint32_t fncode, const KernelResult& r, std::size_t ret);
  /// Posts the WRITEs of `writes` (indexes into Host::data), then the solicited WRITE_WITH_IMM
  /// of `imm` to region `target`, with its contents when `target_data`, else of no bytes.
  void post_results(Host& h, const std::vector<std::size_t>& writes, std::size_t target,
                    bool target_data, std::uint32_t imm);
  void collect_kernels();
  void send_mrsp(Host& h, std::size_t len);
  void free_regions(Host& h);
  /// The host's message buffers and their MRs.
  void free_messages(Host& h);
  void drop_host(ConnId c, const std::string& why);
  bool post_rx(Host& h, unsigned slot);
  void log(const Host& h, const std::string& msg) const;
  /// A line about one of the host's messages (a call's error, an MRSP error): each is a packet
  /// of the host's, so at most a few lines per host and window; the rest are counted.
  void log_often(Host& h, const std::string& msg);
  void expire_idle();
  void post_late_receives();
  std::uint64_t last_expiry_check_ns_ = 0;

  Stack& stack_;
  NaaConfig cfg_;
  KernelRegistry kernels_;
  std::map<ConnId, std::unique_ptr<Host>> hosts_;
  NaaStats stats_;
  std::vector<ConnEvent> events_;
  std::vector<Completion> completions_;
  struct KernelPool;
  std::unique_ptr<KernelPool> pool_;
};

}  // namespace roce::naa
