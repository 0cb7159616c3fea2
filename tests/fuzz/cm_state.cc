/// @file
/// Fuzz target: the CM state machine (controlplane/cm/cm.cc) fed MADs from a peer that says
/// whatever it likes, with timers and API calls in between. Input: records, each a kind byte
/// (modulo 6) and its fields:
///   0 MAD      from u8 (which of 4 peers), patch u8, length u16 (at most 256), the bytes.
///              patch bit 0: the Remote Comm ID (data offset 4) is the Local Comm ID of the
///              last MAD we sent, bit 1: the TID is that MAD's, so answers can match
///   1 time     step u32 in microseconds, then on_timer()
///   2 connect  service u8, private data length u8, SIDR when bit 7 of the service byte
///   3 disconnect  which connection u8 (of those seen in events)
///   4 decide   what u8 to do with the oldest pending connect/SIDR request: accept, reject,
///              establish early (notify_established), or leave it
///   5 listen   service u8 (toggles)
/// Every MAD the CM sends must decode (our own encoder, our own decoder).
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <vector>

#include "controlplane/cm/cm.h"
#include "tests/fuzz/fuzz_bytes.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace roce::cm;
using roce::fuzz::Reader;

void check(bool ok) {
  if (!ok) std::abort();
}

std::uint64_t service(std::uint8_t v) {
  return service_id(v & 1 ? PortSpace::kUdp : PortSpace::kTcp,
                    static_cast<std::uint16_t>(7170 + (v & 15)));
}

MadAddr peer(std::uint8_t v) {
  MadAddr a;
  a.gid = roce::wire::ipv4_mapped(roce::wire::Ipv4Addr{0xC0000210u + (v & 3)});
  return a;
}

struct World {
  std::chrono::nanoseconds now{std::chrono::seconds(1000)};
  MadBuf last_sent{};
  std::vector<ConnId> ids;
  std::deque<CmEvent> pending;  // connect and SIDR requests waiting for a decision
  bool modify_ok = true;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader in(data, size);
  World w;
  CmConfig cfg;
  cfg.ca_guid = 0x02005EFFFE000201ull;
  cfg.seed = 7;
  cfg.id_key = 7;  // the same comm IDs on every run of an input
  cfg.timewait = std::chrono::milliseconds(500);
  CmCallbacks cb;
  cb.send_mad = [&](std::span<const std::uint8_t> m, const MadAddr&) {
    check(m.size() == kMadSize);
    check(decode(m).ok());
    std::copy(m.begin(), m.end(), w.last_sent.begin());
  };
  cb.on_event = [&](const CmEvent& e) {
    if (e.id.v != 0) w.ids.push_back(e.id);
    if (e.type == CmEventType::kConnectRequest || e.type == CmEventType::kSidrRequest)
      w.pending.push_back(e);
  };
  cb.modify_qp = [&](ConnId, QpTransition t, const QpAttrs&) {
    return w.modify_ok || t == QpTransition::kError;
  };
  cb.now = [&] { return w.now; };
  Cm cm(cfg, cb);
  cm.listen(service(0));
  cm.listen(service(1));

  for (unsigned n = 0; n < 128 && !in.empty(); ++n) {
    switch (in.u8() % 6) {
      case 0: {
        const MadAddr from = peer(in.u8());
        const std::uint8_t patch = in.u8();
        const auto b = in.bytes(std::min<std::size_t>(in.u16(), kMadSize));
        std::vector<std::uint8_t> mad(b.begin(), b.end());
        if ((patch & 1) && mad.size() >= 32)
          std::copy_n(w.last_sent.begin() + 24, 4, mad.begin() + 28);
        if ((patch & 2) && mad.size() >= 16)
          std::copy_n(w.last_sent.begin() + 8, 8, mad.begin() + 8);
        cm.on_mad(mad, from);
        break;
      }
      case 1:
        w.now += std::chrono::microseconds(in.u32());
        cm.on_timer(w.now);
        break;
      case 2: {
        const std::uint8_t sv = in.u8();
        std::vector<std::uint8_t> pd(in.u8() % 240, 0x5A);
        const auto cma = CmaHeader::ipv4(roce::wire::Ipv4Addr{0xC0000201}, 40000,
                                         roce::wire::Ipv4Addr{0xC0000210});
        if (sv & 0x80) {
          SidrParams p;
          p.peer = peer(sv);
          p.service_id = service(sv);
          p.cma = cma;
          p.private_data = pd;
          if (const auto id = cm.sidr_resolve(p)) w.ids.push_back(*id);
        } else {
          ConnectParams p;
          p.peer = peer(sv);
          p.service_id = service(sv);
          p.qpn = roce::wire::Qpn(0x100 + sv);
          p.starting_psn = roce::wire::Psn(0xFFFFF0);
          p.path_mtu = static_cast<std::uint8_t>(1 + sv % 6);
          p.cma = cma;
          p.private_data = pd;
          if (const auto id = cm.connect(p)) w.ids.push_back(*id);
        }
        break;
      }
      case 3: {
        const std::uint8_t i = in.u8();
        if (!w.ids.empty()) cm.disconnect(w.ids[i % w.ids.size()]);
        break;
      }
      case 4: {
        const std::uint8_t what = in.u8();
        w.modify_ok = !(what & 0x10);
        if (w.pending.empty()) break;
        const CmEvent e = w.pending.front();
        w.pending.pop_front();
        const bool sidr = e.type == CmEventType::kSidrRequest;
        switch (what % 4) {
          case 0:
            if (sidr) {
              cm.sidr_accept(e.id, roce::wire::Qpn(0x200), 0x01234567);
            } else {
              AcceptParams a;
              a.qpn = roce::wire::Qpn(0x300);
              a.starting_psn = roce::wire::Psn(0xFFFFFE);
              a.responder_resources = what >> 5;
              a.initiator_depth = what >> 5;
              a.private_data.assign(what % 200, 0xA5);
              cm.accept(e.id, a);
            }
            break;
          case 1:
            if (sidr) {
              cm.sidr_reject(e.id, SidrStatus::kReject);
            } else {
              cm.reject(e.id);
            }
            break;
          case 2:
            cm.notify_established(e.id);
            break;
          default:
            break;
        }
        break;
      }
      case 5: {
        const std::uint64_t s = service(in.u8());
        if (in.u8() & 1) {
          cm.listen(s);
        } else {
          cm.unlisten(s);
        }
        break;
      }
    }
    // The API must hold together whatever was received: every known ID answers.
    for (const ConnId id : w.ids) {
      (void)to_string(cm.state(id));
      (void)cm.qp_attrs(id);
    }
    if (const auto d = cm.next_deadline()) check(d->count() > 0);
  }
  return 0;
}
