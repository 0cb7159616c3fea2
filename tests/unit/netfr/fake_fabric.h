// An in-memory Fabric (apps/netfr/fabric.h) for NetFR's state-machine tests: connections are
// pairs of queues in this process, SENDs land in the peer's posted receives (held, as an RNR
// retry would, while none is posted), WRITEs are copied into registered memory after the rkey
// and bounds are checked, and a channel can be held back to reorder one QP against the other.
#pragma once

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "apps/netfr/fabric.h"

namespace roce::netfr::test {

class FakeFabric : public Fabric {
 public:
  struct Conn {
    ConnId peer = 0;
    std::uint16_t port = 0;
    bool up = false, held = false, deaf = false;
    struct Recv {
      std::uint64_t wr_id;
      void* addr;
      std::uint32_t len;
    };
    std::deque<Recv> recvs;
    struct Msg {
      std::uint64_t wr_id;
      std::vector<std::uint8_t> bytes;
      bool write;
      std::uint64_t raddr;
      std::uint32_t rkey;
      bool signaled;
    };
    std::deque<Msg> in_flight;  ///< sent, not delivered yet
  };

  std::optional<MrInfo> alloc_mr(std::uint64_t length, bool remote_write) override {
    auto mem = std::make_unique<std::uint8_t[]>(length);
    std::memset(mem.get(), 0, length);
    void* addr = mem.get();
    memory_[next_key_] = std::move(mem);
    return reg(addr, length, remote_write);
  }
  std::optional<MrInfo> reg_memfd(int, void* addr, std::uint64_t length,
                                  bool remote_write) override {
    return reg(addr, length, remote_write);
  }
  void dereg_mr(const MrInfo& mr) override {
    mrs_.erase(mr.rkey);
    memory_.erase(mr.rkey);
    remote_.erase(mr.rkey);
  }
  bool listen(std::uint16_t port) override {
    ports_.push_back(port);
    return true;
  }
  bool prepare(ConnId, std::uint32_t, std::uint32_t) override { return true; }
  bool accept(ConnId c, const std::vector<std::uint8_t>& pd) override {
    conns_[c].up = conns_[conns_[c].peer].up = true;
    events_.push_back({FabricEvent::kEstablished, c, 0, {}, {}});
    const auto o = rep_override.find(conns_[c].port);
    events_.push_back({FabricEvent::kEstablished,
                       conns_[c].peer,
                       0,
                       {},
                       o == rep_override.end() ? pd : o->second});
    return true;
  }
  void reject(ConnId c, const std::vector<std::uint8_t>& pd) override {
    events_.push_back({FabricEvent::kRejected, conns_[c].peer, 0, {}, pd});
    conns_.erase(c);
  }
  std::optional<ConnId> connect(const std::string& ipv4, std::uint16_t port, std::uint32_t,
                                std::uint32_t, const std::vector<std::uint8_t>& pd) override {
    connected_to.push_back(ipv4 + ":" + std::to_string(port));
    bool listening = false;
    for (auto p : ports_) listening |= p == port;
    const ConnId a = next_++, b = next_++;
    conns_[a].peer = b;
    conns_[b].peer = a;
    conns_[a].port = conns_[b].port = port;
    if (!listening)
      events_.push_back({FabricEvent::kRejected, a, 0, {}, {}});
    else
      events_.push_back({FabricEvent::kConnectRequest, b, port, peer_ip, pd});
    return a;
  }
  void disconnect(ConnId c) override {
    auto it = conns_.find(c);
    if (it == conns_.end()) return;
    const ConnId p = it->second.peer;
    if (conns_.count(p) && conns_[p].up)
      events_.push_back({FabricEvent::kDisconnected, p, 0, {}, {}});
    conns_.erase(it);
  }
  bool post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                 std::uint32_t) override {
    if (!conns_.count(c)) return false;
    conns_[c].recvs.push_back({wr_id, addr, length});
    return true;
  }
  bool post_send(ConnId c, std::uint64_t wr_id, bool write, const void* local, std::uint32_t length,
                 std::uint32_t, std::uint64_t raddr, std::uint32_t rkey, bool signaled) override {
    if (!conns_.count(c) || !conns_[c].up) return false;
    const auto* p = static_cast<const std::uint8_t*>(local);
    conns_[c].in_flight.push_back({wr_id, {p, p + length}, write, raddr, rkey, signaled});
    ++posted;
    return true;
  }
  bool poll(std::vector<FabricEvent>& events, std::vector<FabricCompletion>& wcs) override {
    bool any = !events_.empty();
    for (auto& e : events_) events.push_back(std::move(e));
    events_.clear();
    for (auto& [id, c] : conns_) {
      if (c.held) continue;
      while (!c.in_flight.empty()) {
        auto& m = c.in_flight.front();
        auto pit = conns_.find(c.peer);
        if (pit == conns_.end()) {
          c.in_flight.clear();
          break;
        }
        if (m.write) {
          auto mr = mrs_.find(m.rkey);
          const auto base = mr == mrs_.end() ? 0 : reinterpret_cast<std::uint64_t>(mr->second.addr);
          if (mr == mrs_.end() || !remote_.count(m.rkey) || m.raddr < base ||
              m.raddr + m.bytes.size() > base + mr->second.length) {
            wcs.push_back({id, m.wr_id, false, "remote access error", FabricCompletion::kWrite, 0});
            ++bad_writes;
          } else {
            std::memcpy(reinterpret_cast<void*>(m.raddr), m.bytes.data(), m.bytes.size());
            if (m.signaled) wcs.push_back({id, m.wr_id, true, {}, FabricCompletion::kWrite, 0});
          }
        } else {
          if (pit->second.recvs.empty() || pit->second.deaf) break;  // RNR: retried later
          auto r = pit->second.recvs.front();
          pit->second.recvs.pop_front();
          std::memcpy(r.addr, m.bytes.data(), std::min<std::size_t>(r.len, m.bytes.size()));
          wcs.push_back({id, m.wr_id, true, {}, FabricCompletion::kSend, 0});
          wcs.push_back({c.peer,
                         r.wr_id,
                         true,
                         {},
                         FabricCompletion::kRecv,
                         static_cast<std::uint32_t>(m.bytes.size())});
        }
        c.in_flight.pop_front();
        any = true;
      }
    }
    return any;
  }
  void idle(double) override {}
  std::string report() const override { return "fake"; }

  /// Holds back (or releases) what the active side's connection to `port` sends... and the
  /// passive side's: both directions of that channel.
  void hold(std::uint16_t port, bool h) {
    for (auto& [id, c] : conns_)
      if (c.port == port) c.held = h;
  }
  /// Injects raw bytes as a SEND from the passive side of the channel on `port`.
  void inject_from_host(std::uint16_t port, std::vector<std::uint8_t> bytes) {
    for (auto& [id, c] : conns_)
      if (c.port == port && id % 2 == 0) {  // passive ids are even (b = a + 1, a odd)
        c.in_flight.push_back({~0ull, std::move(bytes), false, 0, 0, false});
        return;
      }
  }
  /// Injects raw bytes as a SEND from the active side (the client) of the channel on `port`.
  void inject_from_client(std::uint16_t port, std::vector<std::uint8_t> bytes) {
    for (auto& [id, c] : conns_)
      if (c.port == port && id % 2 == 1 && c.up) {
        c.in_flight.push_back({~0ull, std::move(bytes), false, 0, 0, false});
        return;
      }
  }
  /// The active side (the client) of the channel on `port` takes no SEND any more, as a peer
  /// answering each with an RNR NAK (retried without end): what is sent to it waits.
  void deafen_client(std::uint16_t port) {
    for (auto& [id, c] : conns_)
      if (c.port == port && id % 2 == 1) c.deaf = true;
  }
  std::size_t connections() const { return conns_.size(); }
  /// Every connect(): "ADDRESS:PORT".
  std::vector<std::string> connected_to;
  std::uint64_t posted = 0, bad_writes = 0;
  std::string peer_ip = "192.0.2.2";  ///< the address connect requests come from
  /// The REP's private data the active side sees on a port, instead of the host's (a lying host).
  std::map<std::uint16_t, std::vector<std::uint8_t>> rep_override;

 private:
  std::optional<MrInfo> reg(void* addr, std::uint64_t length, bool remote_write) {
    MrInfo m{addr, length, next_key_, next_key_, reinterpret_cast<std::uint64_t>(addr), next_key_};
    if (remote_write) remote_.insert(next_key_);
    mrs_[next_key_++] = m;
    return m;
  }
  std::map<std::uint32_t, std::unique_ptr<std::uint8_t[]>> memory_;  ///< alloc_mr's, by key
  std::map<ConnId, Conn> conns_;
  std::map<std::uint32_t, MrInfo> mrs_;
  std::set<std::uint32_t> remote_;  ///< keys registered for remote writes
  std::vector<std::uint16_t> ports_;
  std::vector<FabricEvent> events_;
  ConnId next_ = 1;
  std::uint32_t next_key_ = 0x100;
};

}  // namespace roce::netfr::test
