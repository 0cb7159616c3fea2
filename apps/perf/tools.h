/// @file
/// roce-perf's tests. Each runs one whole test (exchange, traffic, report) on an Env and
/// returns the process exit status; the options are the union of the tools' flags.
#pragma once

#include <string>

#include "runtime/env.h"
#include "runtime/oob.h"

namespace roce::perf {

enum class Verb { kWrite, kRead, kSend, kAtomic };
enum class Mode { kBw, kLat };

struct Opts {
  runtime::LinkOptions link;
  std::string server;  ///< empty: we are the server
  std::string json;
  unsigned port = 18515;
  double timeout_s = 60;
  // rdma-core pingpong flags
  unsigned size = 4096, iters = 1000, mtu = 1024, rx_depth = 500, num_qp = 16;
  bool num_qp_given = false, cq_mod_given = false, size_given = false, iters_given = false,
       mtu_given = false, rx_depth_given = false;
  // perftest flags
  bool all_sizes = false;        ///< -a: 2 .. 2^23 bytes
  unsigned tx_depth = 0;         ///< -t (0: the tool's default)
  unsigned cq_mod = 100;         ///< -Q
  unsigned duration = 0;         ///< -D seconds (0: iterations)
  unsigned out_reads = 0;        ///< -o (0: the default)
  unsigned inline_size = 0;      ///< -I
  bool report_gbits = false;     ///< --report_gbits
  bool cmp_and_swap = false;     ///< -A CMP_AND_SWAP (default FETCH_AND_ADD)
  std::string version = "6.06";  ///< what we announce in the version exchange
  bool rdma_cm = false;          ///< -R: exchange and QP connections through rdma_cm
  std::string attach;            ///< --attach SOCKET: run on roced's dataplane through libroce
  std::string attach_port;       ///< --attach-port NAME (empty: roced's first port)
  bool events = false;           ///< -e: sleep on CQ events (attached)
  /// --selective-repeat: offer selective repeat to the peer (perftest's tools; only another
  /// roce-perf or roced takes it: perftest_proto.h SrMark, and rdma_cm's ECE with -R).
  bool selective_repeat = false;
  // Coyote's benchmark (coyote.cc): its flags
  bool coyote_write = false;          ///< -o 1: WRITE, -o 0: READ
  unsigned coyote_min = 64;           ///< -x
  unsigned coyote_max = 1024 * 1024;  ///< -X
  unsigned coyote_runs = 10;          ///< -r
  unsigned coyote_batch = 64;         ///< --batch: operations per throughput run
  int coyote_fid = -1;                ///< --fid: frame as the seed's cLib (client), -1: newer
};

/// ibv_rc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong.
enum class Pingpong { kRc, kUd, kSrq };
int run_pingpong(const Opts& o, Pingpong kind);
/// The same on an existing dataplane and exchange connection (roced's services).
int run_pingpong(runtime::Env& env, runtime::Oob& oob, const Opts& o, Pingpong kind);

/// ib_{write,read,send,atomic}_{bw,lat}.
int run_perftest(const Opts& o, Verb verb, Mode mode);
int run_perftest(runtime::Env& env, runtime::Exchange& oob, const Opts& o, Verb verb, Mode mode);
/// The same attached to roced (o.attach), on libroce; the exchange on TCP.
int run_perftest_attached(const Opts& o, Verb verb, Mode mode);

/// Coyote's RDMA benchmark (its examples/08_perf_rdma), both roles (apps/perf/coyote.cc).
int run_coyote(const Opts& o);
int run_coyote(runtime::Env& env, runtime::Exchange& oob, const Opts& o);
int run_coyote_attached(const Opts& o);

std::string hex_gid(const wire::Ipv6Addr& g);  ///< 32 hex digits, bytes in order
/// A peer's message for an error text: up to `n` bytes or the first NUL, non-printable bytes
/// shown as '.'.
std::string printable(const char* p, std::size_t n);

// ---- rdma_cm tools (apps/perf/rping.cc): their own flags, connected by the CM, no TCP ----
/// librdmacm's rping, both roles; argv[1] is "rping".
int rping_main(int argc, char** argv);
/// librdmacm's ucmatose, both roles; argv[1] is "ucmatose".
int ucmatose_main(int argc, char** argv);
/// librdmacm's udaddy (UD over SIDR), both roles; argv[1] is "udaddy".
int udaddy_main(int argc, char** argv);

}  // namespace roce::perf
