#include "apps/roced/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rte_telemetry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace roce::apps {

namespace {

// HELP text of the engine counters an RNIC operator looks for under another name, with that
// name after "RNIC: " (mlx5's hw_counters and congestion counters, rxe's; "~": close, not the
// same count). roce-ctl counters prints it beside the value. Review 18 finding 10.
struct RnicName {
  const char* ours;
  const char* help;
};
constexpr RnicName kRnicNames[] = {
    {"rx_ecn_ce",
     "packets of connected QPs received with ECN CE; RNIC: mlx5 np_ecn_marked_roce_packets"},
    {"cnp_sent", "CNPs sent (notification point); RNIC: mlx5 np_cnp_sent"},
    {"rx_cnp", "CNPs received; RNIC: mlx5 rp_cnp_handled + rp_cnp_ignored"},
    {"cnp_handled",
     "CNPs the reaction point took (a cut now or at the monitor period's end); RNIC: mlx5 "
     "rp_cnp_handled"},
    {"cnp_ignored",
     "CNPs refused, every reason (the four cnp_ignored_* counters); RNIC: mlx5 rp_cnp_ignored"},
    {"cnp_ignored_no_cc",
     "CNPs refused because the port runs no congestion algorithm (congestion.algorithm: none)"},
    {"cnp_ignored_unmatched",
     "CNPs refused as misaddressed or spoofed: no connected QP of that number, or not from its "
     "peer's address, or of another partition"},
    {"cnp_ignored_not_rts",
     "CNPs refused for a QP not in RTS, which has no rate yet (a responder left in RTR) or is in "
     "error"},
    {"cnp_ignored_idle",
     "CNPs refused as implausible: the QP has nothing in flight and sent nothing lately (a "
     "spoofer's, or one far too late)"},
    {"read_rerequest_bytes",
     "response bytes that READ requests sent again asked for (selective READ retry asks only "
     "from the first missing PSN)"},
    {"rx_dup_read_responses", "READ responses and atomic ACKs for data that had arrived: dropped"},
    {"retransmitted_bytes", "payload bytes of retransmitted_packets (go-back-N and selective)"},
    {"sr_sacks_sent",
     "selective repeat, responder: gap reports (SACKs) sent for packets missing below placed "
     "ones"},
    {"sr_sacks_rcvd", "selective repeat, requester: gap reports (SACKs) received"},
    {"sr_retransmits",
     "selective repeat, requester: packets sent again because a SACK named them missing"},
    {"sr_retransmit_bytes", "selective repeat: payload bytes of sr_retransmits"},
    {"sr_edge_resends",
     "selective repeat, requester: the oldest unacknowledged packet sent again, a later SACK or "
     "a probe's answer showing it lost"},
    {"sr_connections",
     "RC connections set up with selective repeat on (both ends offered and accepted it in "
     "ECE or roce-perf's exchange)"},
    {"sr_unplaced", "selective repeat, responder: SEND packets past the expected PSN not placed"},
    {"sr_forged_dropped",
     "selective repeat, responder: packets whose message index lies outside the window, "
     "dropped unanswered"},
    {"seq_err_nak_sent",
     "sequence NAKs sent for requests past a gap; RNIC: ~mlx5 out_of_sequence (with "
     "rx_drop_after_seq_nak, sr_ooo_placed), rxe out_of_seq_request"},
    {"seq_err_nak_rcvd", "sequence NAKs received; RNIC: mlx5 packet_seq_err, rxe rcvd_seq_err"},
    {"retransmit_timeouts", "local ACK timeouts; RNIC: mlx5 local_ack_timeout_err"},
    {"duplicate_requests",
     "duplicate requests received; RNIC: mlx5 duplicate_request, rxe duplicate_request"},
    {"rnr_retry_exceeded", "RNR NAK retries exhausted; RNIC: mlx5 rnr_nak_retry_err"},
    {"retry_exceeded", "transport retries exhausted; RNIC: rxe retry_exceeded_err"},
    {"rnr_nak_rcvd", "RNR NAKs received; RNIC: rxe rcvd_rnr_err"},
    {"retransmit_probes", "fast retransmissions of the probe timer; RNIC: ~mlx5 roce_adp_retrans"},
    {"read_rerequests",
     "READ requests sent again, for part or all; RNIC: ~mlx5 implied_nak_seq_err (the part a "
     "response past a gap starts)"},
    {"sr_ooo_placed",
     "selective repeat, responder: packets placed past a gap; RNIC: ~mlx5 out_of_sequence"},
};

std::string engine_help(std::string_view name) {
  for (const RnicName& r : kRnicNames)
    if (name == r.ours) return r.help;
  return "RoCE engine counter (docs/congestion.md, docs/loss-recovery.md, docs/status.md)";
}

}  // namespace

void Metrics::publish(const std::vector<PortCounters>& ports) {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) ports_ = ports;
}

std::vector<CounterSample> Metrics::snapshot() const {
  std::vector<PortCounters> ports;
  {
    std::lock_guard lock(mu_);
    ports = ports_;
  }
  std::vector<CounterSample> out;
  for (const auto& p : ports) {
    for (std::size_t c = 0; c < engine::kCounterCount; ++c) {
      const std::string_view n = to_string(static_cast<engine::Counter>(c));
      out.push_back({std::string(n), p.name, p.engine.c[c], engine_help(n)});
    }
    for (std::size_t v = 1; v < wire::kVerdictCount; ++v)
      out.push_back({"rx_verdict_" + std::string(to_string(static_cast<wire::Verdict>(v))), p.name,
                     p.engine.verdicts[v]});
    if (p.fpga_on)
      for (std::size_t i = 0; i < fpga::kDevCounters; ++i) {
        std::string n = "fpga_";
        for (const char ch : fpga::kDevCounterNames[i])
          n += ch == ' ' ? '_' : static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
        out.push_back({n, p.name, p.fpga[i]});
      }
    out.push_back({"port_rx_frames", p.name, p.port.rx_frames});
    out.push_back({"port_tx_frames", p.name, p.port.tx_frames});
    // Every frame lost on the way out: in the port (oversize ones included) or in the PMD.
    out.push_back({"port_tx_dropped", p.name,
                   p.port.tx_dropped + p.port.tx_alloc_failed + p.port.tx_pmd_dropped});
    out.push_back({"port_tx_oversize", p.name, p.port.tx_oversize});
    out.push_back({"port_tx_pmd_dropped", p.name, p.port.tx_pmd_dropped});
    // Lost on the way in: the NIC's imissed, net_af_packet's ring full (the kernel's drops).
    out.push_back({"port_rx_missed", p.name, p.port.rx_missed});
    out.push_back({"port_rx_ip_checksum_good", p.name, p.port.rx_ip_checksum_good});
    out.push_back({"port_rx_ip_checksum_bad", p.name, p.port.rx_ip_checksum_bad});
    out.push_back({"port_tx_ip_checksum_offloaded", p.name, p.port.tx_ip_checksum_offloaded});
    out.push_back({"port_tx_zero_copy", p.name, p.port.tx_zero_copy});
    out.push_back({"port_tx_multiseg", p.name, p.port.tx_multiseg});
    out.push_back({"port_tx_vlan_inserted", p.name, p.port.tx_vlan_inserted});
    out.push_back({"port_rx_vlan_stripped", p.name, p.port.rx_vlan_stripped});
    out.push_back({"port_rx_vlan_dropped", p.name, p.port.rx_vlan_dropped});
    out.push_back({"arp_requests_answered", p.name, p.neighbour.arp_requests_answered});
    out.push_back({"arp_replies_learned", p.name, p.neighbour.arp_replies_learned});
    out.push_back({"icmp_echo_answered", p.name, p.neighbour.icmp_echo_answered});
    out.push_back({"nd_solicitations_answered", p.name, p.neighbour.nd_solicitations_answered});
    out.push_back({"nd_advertisements_learned", p.name, p.neighbour.nd_advertisements_learned});
    out.push_back({"arp_unsolicited", p.name, p.neighbour.arp_unsolicited});
    out.push_back({"arp_not_for_us", p.name, p.neighbour.arp_not_for_us});
    out.push_back({"arp_conflicts", p.name, p.neighbour.arp_conflicts});
    out.push_back({"arp_malformed", p.name, p.neighbour.arp_malformed});
    out.push_back({"nd_unsolicited", p.name, p.neighbour.nd_unsolicited});
    out.push_back({"nd_not_for_us", p.name, p.neighbour.nd_not_for_us});
    out.push_back({"nd_conflicts", p.name, p.neighbour.nd_conflicts});
    out.push_back({"nd_malformed", p.name, p.neighbour.nd_malformed});
    out.push_back({"neighbour_cache_full", p.name, p.neighbour.neighbour_cache_full});
    out.push_back({"neighbour_evicted", p.name, p.neighbour.neighbour_evicted});
    out.push_back({"arp_entries", p.name, p.neighbour.arp_entries});
    out.push_back({"nd_entries", p.name, p.neighbour.nd_entries});
    out.push_back({"qps", p.name, p.qps});
    out.push_back({"mrs", p.name, p.mrs});
    if (p.cc_on)
      out.push_back({"cc_limited_qps_now", p.name, p.cc_limited_qps,
                     "QPs congestion control holds below their maximum rate (docs/congestion.md)",
                     true});
    out.push_back({"sr_qps_now", p.name, p.sr_qps,
                   "connected QPs running selective repeat (docs/loss-recovery.md)", true});
    if (p.attach_on) {
      out.push_back({"attach_clients", p.name, p.attach_clients});
      out.push_back({"attach_clients_total", p.name, p.attach_clients_total});
      out.push_back({"attach_clients_lost", p.name, p.attach_clients_lost});
      out.push_back({"attach_qps", p.name, p.attach_qps});
      out.push_back({"attach_mrs", p.name, p.attach_mrs});
      out.push_back({"attach_cqs", p.name, p.attach_cqs});
      out.push_back({"attach_memory_bytes", p.name, p.attach_memory_bytes});
      out.push_back({"attach_bad_requests", p.name, p.attach_bad_requests});
      out.push_back({"attach_alloc_failures", p.name, p.attach_alloc_failures});
      out.push_back({"attach_refused_wrs", p.name, p.attach_refused_wrs});
      out.push_back({"attach_broken_rings", p.name, p.attach_broken_rings});
      out.push_back({"attach_refused", p.name, p.attach_refused});
      out.push_back({"attach_silent_closed", p.name, p.attach_silent});
      out.push_back({"attach_out_of_fds", p.name, p.attach_out_of_fds});
      out.push_back({"attach_cm_refused", p.name, p.attach_cm_refused});
    }
    const std::size_t first_service = out.size();
    for (const auto& sv : p.services) {
      // Two services of a port with the same counter: one series, their sum.
      bool merged = false;
      for (std::size_t k = first_service; k < out.size() && !merged; ++k)
        if (out[k].name == sv.name) {
          out[k].value += sv.value;
          merged = true;
        }
      if (!merged) out.push_back({sv.name, p.name, sv.value, sv.help, sv.gauge});
    }
    if (p.faults_on) {
      out.push_back({"fault_dropped", p.name, p.faults.dropped});
      out.push_back({"fault_duplicated", p.name, p.faults.duplicated});
      out.push_back({"fault_reordered", p.name, p.faults.reordered});
      out.push_back({"fault_corrupted", p.name, p.faults.corrupted});
    }
  }
  return out;
}

std::string Metrics::prometheus(const std::string& appliance) const {
  const auto s = snapshot();
  std::map<std::string, std::vector<const CounterSample*>> by_name;
  for (const auto& c : s) by_name[c.name].push_back(&c);
  std::ostringstream os;
  // Levels, not counts: Prometheus must not take rate() of them.
  static const std::set<std::string> kGauges = {
      "qps",        "mrs",        "arp_entries", "nd_entries",         "attach_clients",
      "attach_qps", "attach_mrs", "attach_cqs",  "attach_memory_bytes"};
  for (const auto& [name, list] : by_name) {
    const bool gauge = kGauges.count(name) != 0 || list.front()->gauge ||
                       (name.size() > 4 && name.compare(name.size() - 4, 4, "_now") == 0);
    if (!list.front()->help.empty())
      os << "# HELP roce_" << name << ' ' << list.front()->help << '\n';
    os << "# TYPE roce_" << name << (gauge ? " gauge\n" : " counter\n");
    for (const auto* c : list)
      os << "roce_" << name << "{appliance=\"" << appliance << "\",port=\"" << c->port << "\"} "
         << c->value << '\n';
  }
  // Each QP congestion control holds below its maximum rate, the lowest kQpRateSeries per port.
  std::vector<PortCounters> ports;
  {
    std::lock_guard lock(mu_);
    ports = ports_;
  }
  bool rate_header = false;
  for (const auto& p : ports)
    for (std::size_t i = 0; i < p.cc_rates_n; ++i) {
      if (!rate_header) {
        os << "# HELP roce_cc_qp_rate_mbps the rate a QP is paced at now, for QPs below their "
              "maximum (docs/congestion.md)\n# TYPE roce_cc_qp_rate_mbps gauge\n";
        rate_header = true;
      }
      os << "roce_cc_qp_rate_mbps{appliance=\"" << appliance << "\",port=\"" << p.name
         << "\",qpn=\"" << p.cc_rates[i].qpn << "\"} " << p.cc_rates[i].rate_mbps << '\n';
    }
  // Each QP running selective repeat (the first kQpRateSeries per port): roce-ctl sr.
  bool sr_header = false;
  for (const auto& p : ports)
    for (std::size_t i = 0; i < p.sr_qpns_n; ++i) {
      if (!sr_header) {
        os << "# HELP roce_sr_qp a QP running selective repeat, negotiated in the CM's ECE "
              "(docs/loss-recovery.md)\n# TYPE roce_sr_qp gauge\n";
        sr_header = true;
      }
      os << "roce_sr_qp{appliance=\"" << appliance << "\",port=\"" << p.name << "\",qpn=\""
         << p.sr_qpns[i] << "\"} 1\n";
    }
  if (clients) {
    // One gauge per resource, a series per client.
    const auto list = clients();
    const std::pair<const char*, std::uint64_t ClientSample::*> kinds[] = {
        {"qps", &ClientSample::qps},
        {"mrs", &ClientSample::mrs},
        {"cqs", &ClientSample::cqs},
        {"memory_bytes", &ClientSample::memory_bytes}};
    for (const auto& [kind, field] : kinds) {
      os << "# TYPE roce_attach_client_" << kind << " gauge\n";
      for (const auto& c : list)
        os << "roce_attach_client_" << kind << "{appliance=\"" << appliance << "\",port=\""
           << c.port << "\",client=\"" << c.id << "\",pid=\"" << c.pid << "\",uid=\"" << c.uid
           << "\",lcore=\"" << c.lcore << "\"} " << c.*field << '\n';
    }
  }
  return os.str();
}

std::pair<std::string, std::uint16_t> split_host_port(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 == s.size())
    throw std::invalid_argument("'" + s + "' is not host:port");
  const std::string port = s.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoul(port) > 65535)
    throw std::invalid_argument("'" + s + "' has a bad port number");
  return {s.substr(0, colon), static_cast<std::uint16_t>(std::stoul(port))};
}

namespace {
const Metrics* g_metrics = nullptr;

int telemetry_counters(const char*, const char*, struct rte_tel_data* d) {
  rte_tel_data_start_dict(d);
  if (g_metrics == nullptr) return 0;
  for (const auto& c : g_metrics->snapshot()) {
    const std::string key = c.port + "." + c.name;
    rte_tel_data_add_dict_u64(d, key.c_str(), c.value);
  }
  return 0;
}
}  // namespace

void register_telemetry(const Metrics* m) {
  g_metrics = m;
  rte_telemetry_register_cmd("/roce/counters", telemetry_counters,
                             "Appliance counters per port. No parameters");
}

}  // namespace roce::apps
