/// @file
/// roce-nfs's and roce-nfsd's link (link.h).
#include "apps/nfs/link.h"

#include <unistd.h>

#include <stdexcept>

#include "controlplane/address.h"

namespace roce::nfs {

LinkHolder::LinkHolder(const NfsLink& l) {
  if (l.memif_socket.empty()) {
    env_ = std::make_unique<perf::Env>(l.opts);
    return;
  }
  const auto ip = ctl::parse_ipv4(l.opts.ip);
  const auto mac = ctl::parse_mac(l.opts.mac);
  if (!ip || !mac) throw std::runtime_error("bad IPv4 or MAC address");
  if (l.memif_role != "server" && l.memif_role != "client")
    throw std::runtime_error("memif role must be server or client");
  port::eal_init({"--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--log-level=*:error",
                  "--file-prefix=rocenfs" + std::to_string(getpid()), port::main_lcore_arg(-1),
                  "--vdev=net_memif0,role=" + l.memif_role +
                      ",id=0,socket-abstract=no,socket=" + l.memif_socket});
  engine::EngineConfig ec;
  ec.mac = *mac;
  ec.ipv4 = *ip;
  ec.advertise_credits = false;
  eng_ = std::make_unique<engine::Engine>(ec);
  port::PortSpec ps;
  ps.device = "net_memif0";
  ps.mac = *mac;
  ps.mbufs = 8192;
  dev_ = std::make_unique<port::DpdkPort>(ps);
  loop_ = std::make_unique<port::PollLoop>(*dev_, *eng_, l.opts.tx_faults, l.opts.rx_faults);
  env_ = std::make_unique<perf::Env>(*eng_, *loop_, *ip, nullptr);
  if (!l.opts.pcap.empty()) {
    env_->capture = std::make_unique<apps::PcapWriter>(l.opts.pcap);
    loop_->tap = [this](std::span<const std::uint8_t> f, bool) {
      env_->capture->write(f, port::now_ns());
    };
  }
  if (l.memif_role == "client") env_->until([&] { return dev_->link_up(); }, 30);
}

LinkHolder::~LinkHolder() {
  if (loop_) loop_->tap = nullptr;
  env_.reset();
  loop_.reset();
  dev_.reset();
  eng_.reset();
}

}  // namespace roce::nfs
