// The NAA server on the ConnStack (libroce's in-process backend and the connection layer) over
// the in-memory wire, a host speaking NAAICE by hand on a ConnStack of its own: the regions the
// host asks at NAA addresses are registered there (reg_mr_iova: the advertisement carries the
// requested address, the host's WRITEs land in the region), a call's result comes back, another
// connection's WRITE with the host's rkey is refused (a PD per connection), and once the host is
// gone the NAA's MRs and memory are too.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "apps/naa/conn_stack.h"
#include "apps/naa/naa_server.h"
#include "client/local/local_context.h"
#include "dataplane/engine/engine.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using naa::Completion;
using naa::ConnEvent;
using naa::ConnId;

std::string text(Ipv4Addr a) {
  const std::uint32_t be = htonl(a.v);
  char b[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &be, b, sizeof b);
  return b;
}

class NaaLoopback : public ::testing::Test {
 protected:
  NaaLoopback() {
    for (int i = 0; i < 2; ++i) {
      client::LocalOptions o;
      o.engine = &lb.side(i);
      o.progress = [this] { lb.run_until([] { return false; }, 2000); };
      engine::Engine& peer = lb.side(1 - i);
      o.resolve = [&peer](Ipv4Addr ip) -> std::optional<MacAddr> {
        if (ip == peer.config().ipv4) return peer.config().mac;
        return std::nullopt;
      };
      o.port.mac = lb.side(i).config().mac;
      o.port.ipv4 = lb.side(i).config().ipv4;
      o.port.gid = ipv4_mapped(o.port.ipv4);
      o.port.max_mtu = verbs::Mtu::k1024;
      ctx[i] = client::open_local(std::move(o));
    }
    naa::ConnStackOptions ho;
    ho.pd_per_connection = false;  // the host's regions serve all its connections
    host = std::make_unique<naa::ConnStack>(*ctx[0], ho);
    nstack = std::make_unique<naa::ConnStack>(*ctx[1]);
    naa::NaaConfig cfg;
    cfg.kernel_threads = 0;  // kernels on the poll loop
    cfg.memory_per_host = 1 << 20;
    server = std::make_unique<naa::NaaServer>(*nstack, cfg, naa::KernelRegistry::builtin());
    server->start();
  }
  ~NaaLoopback() override {
    server.reset();
    nstack.reset();
    host.reset();
  }
  /// Steps the NAA and the host until `done` (or 20000 rounds).
  bool run(const std::function<bool()>& done) {
    for (int i = 0; i < 20000; ++i) {
      server->step();
      host->poll(events, wcs);
      if (done()) return true;
    }
    return false;
  }
  bool established(ConnId c) {
    for (const auto& e : events)
      if (e.conn == c && e.kind == ConnEvent::kEstablished) return true;
    return false;
  }
  std::optional<Completion> take(ConnId c, std::uint64_t wr_id) {
    for (auto it = wcs.begin(); it != wcs.end(); ++it)
      if (it->conn == c && it->wr_id == wr_id) {
        const Completion w = *it;
        wcs.erase(it);
        return w;
      }
    return std::nullopt;
  }
  ConnId connect() {
    const auto c = host->connect(text(lb.side(1).config().ipv4), 12345, naa::QpSizes{16, 8});
    EXPECT_TRUE(c.has_value());
    EXPECT_TRUE(run([&] { return established(*c); }));
    return *c;
  }
  naa::MrInfo reg(naa::Memory m) {
    const auto mr = host->reg_mr(0, m.addr, m.length, std::nullopt);
    EXPECT_TRUE(mr.has_value());
    return *mr;
  }

  Loopback lb;
  std::unique_ptr<client::Context> ctx[2];
  std::unique_ptr<naa::ConnStack> host, nstack;
  std::unique_ptr<naa::NaaServer> server;
  std::vector<ConnEvent> events;
  std::vector<Completion> wcs;
};

TEST_F(NaaLoopback, RegionsAtTheirNaaAddressesCallAndPdPerConnection) {
  const std::size_t mrs0 = lb.side(1).mr_count();
  const ConnId c = connect();
  const naa::Memory meta = *host->alloc(4096), param = *host->alloc(4096),
                    msg = *host->alloc(16384);
  const naa::MrInfo meta_mr = reg(meta), param_mr = reg(param), msg_mr = reg(msg);
  std::uint8_t* rx = msg.addr + 8192;
  ASSERT_TRUE(host->post_recv(c, 1, rx, 8192, msg_mr.lkey));

  // MRSP: the metadata anywhere, the parameter at NAA address 0x3000.
  naa::AdvertiseRequest rq;
  rq.regions.push_back({0, 0, meta_mr.iova, meta_mr.rkey, 8});
  rq.regions.push_back({0, 0x3000, param_mr.iova, param_mr.rkey, 64});
  std::vector<std::uint8_t> out;
  ASSERT_GT(naa::encode(rq, out), 0u);
  std::memcpy(msg.addr, out.data(), out.size());
  naa::WorkRequest send;
  send.wr_id = 2;
  send.local = msg_mr.iova;
  send.length = static_cast<std::uint32_t>(out.size());
  send.lkey = msg_mr.lkey;
  ASSERT_TRUE(host->post_send(c, send));
  std::optional<Completion> got;
  ASSERT_TRUE(run([&] { return (got = take(c, 1)).has_value(); }));
  ASSERT_TRUE(got->ok) << got->status;
  const auto d = naa::decode({rx, got->byte_len});
  ASSERT_TRUE(d.ok()) << d.detail;
  const auto& adv = std::get<naa::Advertise>(d.message());
  ASSERT_EQ(adv.regions.size(), 2u);
  EXPECT_EQ(adv.regions[1].addr, 0x3000u);  // registered at the requested NAA address
  EXPECT_EQ(adv.regions[0].addr % 4096, 0u);

  // The call: the parameter and the metadata (return address: the parameter), then the
  // WRITE_WITH_IMM of the function code.
  for (int i = 0; i < 64; ++i) param.addr[i] = static_cast<std::uint8_t>(i);
  for (int k = 0; k < 8; ++k)
    meta.addr[k] = static_cast<std::uint8_t>(param_mr.iova >> (56 - 8 * k));
  ASSERT_TRUE(host->post_recv(c, 3, rx, 8192, msg_mr.lkey));
  const auto write = [&](std::uint64_t id, naa::Op op, const naa::MrInfo& mr, std::uint32_t len,
                         const naa::AdvEntry& to, std::uint32_t imm) {
    naa::WorkRequest w;
    w.wr_id = id;
    w.op = op;
    w.local = mr.iova;
    w.length = len;
    w.lkey = mr.lkey;
    w.remote_addr = to.addr;
    w.rkey = to.rkey;
    w.imm = imm;
    return host->post_send(c, w);
  };
  ASSERT_TRUE(write(4, naa::Op::kWrite, param_mr, 64, adv.regions[1], 0));
  ASSERT_TRUE(write(5, naa::Op::kWriteImm, meta_mr, 8, adv.regions[0], naa::kFnIncrement));
  ASSERT_TRUE(run([&] { return (got = take(c, 3)).has_value(); }));
  ASSERT_TRUE(got->ok) << got->status;
  EXPECT_EQ(got->kind, Completion::kRecvImm);
  EXPECT_EQ(got->imm, naa::kRpcSuccess);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(param.addr[i], static_cast<std::uint8_t>(i + 1));

  // A second connection of the host: its WRITE with the first one's rkey is refused (the NAK
  // fails it, or the NAA drops that connection first), and the first's NAA memory is unchanged.
  const ConnId c2 = connect();
  const naa::Memory evil = *host->alloc(4096);
  const naa::MrInfo evil_mr = reg(evil);
  std::memset(evil.addr, 0xEE, 64);
  naa::WorkRequest w;
  w.wr_id = 6;
  w.op = naa::Op::kWrite;
  w.local = evil_mr.iova;
  w.length = 64;
  w.lkey = evil_mr.lkey;
  w.remote_addr = adv.regions[1].addr;
  w.rkey = adv.regions[1].rkey;
  ASSERT_TRUE(host->post_send(c2, w));
  const auto ended = [&](ConnId x) {
    for (const auto& e : events)
      if (e.conn == x && e.kind == ConnEvent::kDisconnected) return true;
    return false;
  };
  ASSERT_TRUE(run([&] { return (got = take(c2, 6)).has_value() || ended(c2); }));
  if (got) {
    EXPECT_FALSE(got->ok);
  }
  // A call on the NAA's copy alone (no new data): increment again, i + 2.
  ASSERT_TRUE(host->post_recv(c, 7, rx, 8192, msg_mr.lkey));
  ASSERT_TRUE(write(8, naa::Op::kWriteImm, meta_mr, 8, adv.regions[0], naa::kFnIncrement));
  ASSERT_TRUE(run([&] { return (got = take(c, 7)).has_value(); }));
  ASSERT_TRUE(got->ok) << got->status;
  EXPECT_EQ(got->imm, naa::kRpcSuccess);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(param.addr[i], static_cast<std::uint8_t>(i + 2));

  // The host goes: the NAA frees its regions, its messages' memory and the connections' PDs.
  host->disconnect(c);
  host->disconnect(c2);
  ASSERT_TRUE(run([&] { return server->hosts() == 0; }));
  EXPECT_EQ(lb.side(1).mr_count(), mrs0);
  EXPECT_EQ(server->stats().calls, 2u);
}

}  // namespace
}  // namespace roce::test
