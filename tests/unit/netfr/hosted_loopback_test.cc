// NetFR's frame source (apps/netfr/host_service.h) as roced hosts it: on an in-process
// Context over an engine it does not own, stepped by non-blocking poll() calls from the loop
// that owns the engine. The far side is NetFR's client on the connection layer over the other
// engine of the in-memory wire; it takes the frames as Looking Glass would (buffers of the
// stack's memory, each frame checked in place and given back, cursors after their frames,
// connection serials strictly increasing), then a second client is served after the first.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "apps/netfr/client.h"
#include "apps/netfr/context_fabric.h"
#include "apps/netfr/frames.h"
#include "apps/netfr/host_service.h"
#include "client/local/local_context.h"
#include "dataplane/engine/engine.h"
#include "tests/support/loopback.h"

namespace roce::netfr {
namespace {

std::string text(Ipv4Addr a) {
  return std::to_string(a.v >> 24) + "." + std::to_string((a.v >> 16) & 0xFF) + "." +
         std::to_string((a.v >> 8) & 0xFF) + "." + std::to_string(a.v & 0xFF);
}

class Rig {
 public:
  explicit Rig(const HostServiceOptions& o) {
    for (int i = 0; i < 2; ++i) {
      client::LocalOptions lo;
      lo.engine = &lb.side(i);
      // The client's side also steps the hosted service, as roced's loop would between polls.
      lo.progress = [this, i] {
        lb.run_until([] { return false; }, 2000);
        if (i == 1 && svc && !in_svc) {
          in_svc = true;
          svc->poll();
          in_svc = false;
        }
      };
      engine::Engine& peer = lb.side(1 - i);
      lo.resolve = [&peer](Ipv4Addr ip) -> std::optional<MacAddr> {
        if (ip == peer.config().ipv4) return peer.config().mac;
        return std::nullopt;
      };
      lo.port.mac = lb.side(i).config().mac;
      lo.port.ipv4 = lb.side(i).config().ipv4;
      lo.port.gid = ipv4_mapped(lo.port.ipv4);
      lo.port.max_mtu = verbs::Mtu::k1024;
      ctx[i] = client::open_local(std::move(lo));
    }
    svc = std::make_unique<HostService>(*ctx[0], o);
    fab = std::make_unique<ContextFabric>(*ctx[1]);
  }
  ~Rig() {
    fab.reset();
    svc.reset();
  }
  std::string host_ip() { return text(lb.side(0).config().ipv4); }

  test::Loopback lb;
  std::unique_ptr<client::Context> ctx[2];
  std::unique_ptr<HostService> svc;
  bool in_svc = false;
  std::unique_ptr<ContextFabric> fab;
};

/// One Looking Glass-like session: `frames` frames checked; false with a message otherwise.
::testing::AssertionResult consume(Rig& r, const HostServiceOptions& o) {
  NFRInitOpts io{};
  io.port = o.port;
  io.blocking = 0;
  io.timeoutSec = 10;
  io.totalOrder = 1;
  Client c(*r.fab, io);
  if (const int rc = c.connect(r.host_ip()))
    return ::testing::AssertionFailure() << "connect: " << rc;
  const std::uint64_t bytes = frames::frame_bytes(o.width, o.height);
  for (int i = 0; i < 2; ++i)
    if (!c.attach(nullptr, bytes, NETFR_CHANNEL_PRIMARY))
      return ::testing::AssertionFailure() << "attach";
  auto ev = std::make_unique<NFRClientEvent>();
  std::uint64_t seen = 0, cursors = 0, serial = 1;
  for (int round = 0; round < 2000000; ++round) {
    const int rc = c.process(-1, ev.get());
    if (rc < 0) return ::testing::AssertionFailure() << "process: " << rc;
    if (rc == 0) continue;
    if (ev->serial != serial++) return ::testing::AssertionFailure() << "serial " << ev->serial;
    if (ev->type == NFR_CLIENT_EVENT_MEM_WRITE) {
      // In place: the region is the stack's memory the host wrote.
      if (ev->memRegion->bounced()) return ::testing::AssertionFailure() << "bounced";
      const char* why = "";
      const auto* p = static_cast<const std::uint8_t*>(ev->memRegion->ptr) + ev->payloadOffset;
      if (!frames::verify(p, ev->payloadLength, seen, &why))
        return ::testing::AssertionFailure() << "frame " << seen << ": " << why;
      ++seen;
      c.buffer_ack(ev->memRegion);
    } else if (ev->udata == frames::kUdataCursor) {
      frames::Cursor cur;
      std::memcpy(&cur, ev->inlineData, sizeof cur);
      if (seen == 0 || cur.frame_seq != seen - 1 || cur.x != frames::cursor_after(seen - 1).x)
        return ::testing::AssertionFailure() << "cursor for frame " << cur.frame_seq;
      ++cursors;
    } else if (ev->udata == frames::kUdataEnd) {
      frames::End e;
      std::memcpy(&e, ev->inlineData, sizeof e);
      if (e.frames != seen || seen != o.frames || cursors != seen)
        return ::testing::AssertionFailure()
               << "end: " << e.frames << " frames, seen " << seen << ", cursors " << cursors;
      return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure() << "no end after " << seen << " frames";
}

TEST(NetfrHosted, FramesToTwoClientsOneAfterTheOther) {
  HostServiceOptions o = HostServiceOptions::from_args(
      {"--port", "5010", "--width", "64", "--height", "32", "--frames", "12"});
  Rig r(o);
  EXPECT_TRUE(consume(r, o));
  EXPECT_TRUE(consume(r, o));  // the second client, once the first has gone
  for (int i = 0; i < 2000 && r.svc->sessions() < 2; ++i) r.svc->poll();
  EXPECT_EQ(r.svc->sessions(), 2u);
  EXPECT_EQ(r.svc->frames_sent(), 24u);
}

TEST(NetfrHosted, OptionsFromArgs) {
  EXPECT_THROW(HostServiceOptions::from_args({"--width"}), std::invalid_argument);
  EXPECT_THROW(HostServiceOptions::from_args({"--bogus", "1"}), std::invalid_argument);
  EXPECT_THROW(HostServiceOptions::from_args({"--port", "x"}), std::invalid_argument);
  EXPECT_THROW(HostServiceOptions::from_args({"--width", "0"}), std::invalid_argument);
  EXPECT_THROW(HostServiceOptions::from_args({"--width", "8192", "--height", "8192"}),
               std::invalid_argument);  // 256 MiB and a header
  const auto o = HostServiceOptions::from_args({"--fps", "30", "--port", "6000"});
  EXPECT_EQ(o.port, 6000);
  EXPECT_EQ(o.fps, 30);
}

TEST(NetfrHosted, PortsTakenIsAnError) {
  HostServiceOptions o;
  Rig r(o);
  // A second service on the same engine (another Context, the same CM): its ports are taken.
  client::LocalOptions lo;
  lo.engine = &r.lb.side(0);
  lo.port.mac = r.lb.side(0).config().mac;
  lo.port.ipv4 = r.lb.side(0).config().ipv4;
  lo.port.gid = ipv4_mapped(lo.port.ipv4);
  auto other = client::open_local(std::move(lo));
  EXPECT_THROW(HostService second(*other, o), std::runtime_error);
  o.port = 6000;
  EXPECT_NO_THROW(HostService third(*other, o));
}

}  // namespace
}  // namespace roce::netfr
