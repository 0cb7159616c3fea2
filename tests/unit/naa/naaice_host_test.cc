// The NAAICE host library (apps/naa/host/naaice.c) on a scripted transport: what it puts on
// the wire against upstream's facts (naaice-greenhpc/naa-communication-library at f7b72fc).
// The bytes are derived from upstream's code: lib/naaice.c naaice_send_message (the
// advertisement+request as its packed structs lay it out on a little-endian host: the MR info
// word htonll'd with the flags in its top byte, INPUT 0x04, OUTPUT 0x08, SINGLESEND 0x02,
// INTERNAL 0x01; the registered length as the size; IBV_SEND_SOLICITED), naaice_write_data
// (the input regions in order, the last a WRITE_WITH_IMM with htonl(immediate | 0x80) and
// IBV_SEND_SOLICITED), naaice_handle_work_completion (return code ntohl(imm) >> 8) and
// lib/naaice_swnaa.c naaice_swnaa_send_message (the NAA's advertisement, 4 + 16 bytes per
// region). The interop test tests/interop/naa_upstream_server.sh checks the same against
// upstream's software NAA on the wire.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "apps/naa/host/naaice.h"  // C headers with their own extern "C"
#include "apps/naa/host/naaice_ap2.h"
#include "apps/naa/host/naaice_transport.h"

namespace {

struct Posted {
  naaice_op op;
  std::vector<std::uint8_t> bytes;
  std::uint64_t remote_addr;
  std::uint32_t rkey, imm;
  unsigned flags;
};

/// The transport: records what is posted, answers from a script.
struct Fake {
  std::vector<Posted> sends;
  std::deque<naaice_wc> wcs;
  std::vector<std::pair<std::uint8_t*, std::uint32_t>> recvs;
  std::vector<std::uint8_t> mrsp_answer;  // delivered into the posted receive after an AAR
  std::uint32_t result_imm = 0;           // the NAA's immediate after a call
  std::uint32_t next_rkey = 0x11223340;
  std::vector<std::pair<void*, std::uint64_t>> synced;
  std::string local_ip, remote_ip;
  bool connected = false;
  int quiet_polls = 0;  // polls that find nothing, before the completions are handed out
};
Fake* g_fake = nullptr;
std::vector<std::uint8_t> g_next_answer;  // the MRSP answer of the next transport opened

Fake& F(void* p) { return *static_cast<Fake*>(p); }

int f_connect(void* p, const char* local_ip, const char* ip, std::uint16_t, std::uint32_t,
              std::uint32_t, std::uint8_t, double) {
  F(p).connected = true;
  F(p).remote_ip = ip;
  F(p).local_ip = local_ip ? local_ip : "";
  return 0;
}
int f_reg_mr(void* p, void* addr, std::uint64_t length, naaice_mr_handle* out) {
  out->addr = addr;
  out->length = length;
  out->lkey = out->rkey = F(p).next_rkey++;
  out->priv = addr;
  return 0;
}
void f_dereg_mr(void*, naaice_mr_handle*) {}
int f_post_recv(void* p, std::uint64_t wr_id, void* addr, std::uint32_t length, std::uint32_t) {
  (void)wr_id;
  F(p).recvs.push_back({static_cast<std::uint8_t*>(addr), length});
  return 0;
}
naaice_wc wc_of(naaice_wc_kind k, std::uint32_t len = 0, std::uint32_t imm = 0) {
  naaice_wc w{};
  w.ok = 1;
  w.kind = k;
  w.byte_len = len;
  w.imm = imm;
  return w;
}
void deliver_recv(Fake& f, const std::vector<std::uint8_t>& b, naaice_wc_kind k,
                  std::uint32_t imm = 0) {
  ASSERT_FALSE(f.recvs.empty());
  auto [addr, len] = f.recvs.front();
  f.recvs.erase(f.recvs.begin());
  ASSERT_LE(b.size(), len);
  if (!b.empty()) std::memcpy(addr, b.data(), b.size());
  f.wcs.push_back(wc_of(k, static_cast<std::uint32_t>(b.size()), imm));
}
int f_post_send(void* p, naaice_op op, std::uint64_t, const void* local, std::uint32_t length,
                std::uint32_t, std::uint64_t raddr, std::uint32_t rkey, std::uint32_t imm,
                unsigned flags) {
  Fake& f = F(p);
  const auto* b = static_cast<const std::uint8_t*>(local);
  f.sends.push_back({op, std::vector<std::uint8_t>(b, b + length), raddr, rkey, imm, flags});
  f.wcs.push_back(wc_of(op == NAAICE_OP_SEND ? NAAICE_WC_SEND : NAAICE_WC_WRITE));
  if (op == NAAICE_OP_SEND && !f.mrsp_answer.empty())
    deliver_recv(f, f.mrsp_answer, NAAICE_WC_RECV);
  if (op == NAAICE_OP_WRITE_IMM && !f.recvs.empty())
    deliver_recv(f, {}, NAAICE_WC_RECV_IMM, f.result_imm);
  return 0;
}
int f_poll(void* p, naaice_wc* out, int max) {
  if (F(p).quiet_polls > 0) {
    F(p).quiet_polls--;
    return 0;
  }
  int n = 0;
  while (n < max && !F(p).wcs.empty()) {
    out[n++] = F(p).wcs.front();
    F(p).wcs.pop_front();
  }
  return n;
}
void f_sync_in(void* p, void* addr, std::uint64_t n) { F(p).synced.push_back({addr, n}); }
void f_disconnect(void*) {}
void f_destroy(void* p) {
  if (g_fake == p) g_fake = nullptr;
  delete static_cast<Fake*>(p);
}
const char* f_error(void*) { return "fake"; }

std::vector<std::uint8_t> be64(std::uint64_t v) {
  std::vector<std::uint8_t> b(8);
  for (int i = 0; i < 8; i++) b[i] = static_cast<std::uint8_t>(v >> (56 - 8 * i));
  return b;
}
std::vector<std::uint8_t> be32(std::uint32_t v) {
  return {static_cast<std::uint8_t>(v >> 24), static_cast<std::uint8_t>(v >> 16),
          static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)};
}
void append(std::vector<std::uint8_t>& to, const std::vector<std::uint8_t>& b) {
  to.insert(to.end(), b.begin(), b.end());
}

/// The NAA's advertisement for `n` regions, as upstream's software NAA sends it.
std::vector<std::uint8_t> advertisement(unsigned n, std::uint32_t size) {
  std::vector<std::uint8_t> m = {0x02, static_cast<std::uint8_t>(n), 0x00, 0x00};
  for (unsigned i = 0; i < n; i++) {
    append(m, be64(0x5555000000001000ull * (i + 1)));
    append(m, be32(0xA0000000u + i));
    append(m, be32(size));
  }
  return m;
}

class NaaiceHost : public ::testing::Test {
 protected:
  static constexpr unsigned kN = 3;
  std::vector<std::uint8_t> buf[kN];
  char* params[kN];
  size_t sizes[kN] = {1024, 100, 8};
  naaice_communication_context* ctx = nullptr;

  void SetUp() override {
    for (unsigned i = 0; i < kN; i++) {
      buf[i].assign(sizes[i], static_cast<std::uint8_t>(10 + i));
      params[i] = reinterpret_cast<char*>(buf[i].data());
    }
  }
  void TearDown() override {
    if (ctx) naaice_disconnect_and_cleanup(ctx);
  }
  Fake& fake() { return *static_cast<Fake*>(ctx->transport->priv); }
  /// A context: region 0 input and single send, 1 input and output, 2 output.
  void open(std::uint8_t fncode = 1, std::vector<size_t> internal = {}) {
    ASSERT_EQ(naaice_init_communication_context(
                  &ctx, 0, sizes, params, kN, static_cast<unsigned>(internal.size()),
                  internal.empty() ? nullptr : internal.data(), fncode, "192.0.2.2", "192.0.2.1",
                  SERVER_CONNECTION_PORT),
              0);
    ctx->timeout = 2;
    ASSERT_EQ(naaice_setup_connection(ctx), 0);
    EXPECT_EQ(fake().local_ip, "192.0.2.2");
    ASSERT_EQ(naaice_set_singlesend_mr(ctx, 0), 0);  // also an input
    ASSERT_EQ(naaice_set_input_mr(ctx, 1), 0);
    ASSERT_EQ(naaice_set_output_mr(ctx, 1), 0);
    ASSERT_EQ(naaice_set_output_mr(ctx, 2), 0);
    ASSERT_EQ(naaice_register_mrs(ctx), 0);
  }
  void mrsp() {
    fake().mrsp_answer = advertisement(kN, 4096);
    ASSERT_EQ(naaice_do_mrsp(ctx), 0);
    ASSERT_EQ(ctx->state, NAAICE_MRSP_DONE);
  }
};

}  // namespace

extern "C" naaice_transport* naaice_transport_open(void) {
  auto* t = static_cast<naaice_transport*>(std::calloc(1, sizeof(naaice_transport)));
  g_fake = new Fake;
  g_fake->mrsp_answer = g_next_answer;
  t->priv = g_fake;
  t->connect = f_connect;
  t->reg_mr = f_reg_mr;
  t->dereg_mr = f_dereg_mr;
  t->post_recv = f_post_recv;
  t->post_send = f_post_send;
  t->poll = f_poll;
  t->sync_in = f_sync_in;
  t->disconnect = f_disconnect;
  t->destroy = f_destroy;
  t->error = f_error;
  return t;
}

namespace {

TEST_F(NaaiceHost, AdvertiseRequestAsUpstreamLaysItOut) {
  open(3, {5000});
  fake().mrsp_answer = advertisement(kN, 4096);
  ASSERT_EQ(naaice_do_mrsp(ctx), 0);
  ASSERT_EQ(fake().sends.size(), 1u);
  const Posted& s = fake().sends[0];
  EXPECT_EQ(s.op, NAAICE_OP_SEND);
  // Upstream's NAA arms its CQ for solicited completions only: the request must carry SE.
  EXPECT_EQ(s.flags & NAAICE_SEND_SOLICITED, unsigned{NAAICE_SEND_SOLICITED});
  // Header: type 0x01, count 3 parameters + 1 internal region, padding.
  std::vector<std::uint8_t> want = {0x01, 0x04, 0x00, 0x00};
  // Requested NAA addresses: sequential from addr_offset 0, 4 KiB aligned, internal first
  // (5000 bytes: 0..8191), then the parameters at 8192, 12288, 16384.
  const std::uint8_t flags[kN] = {0x06, 0x0c, 0x08};  // INPUT|SINGLESEND, INPUT|OUTPUT, OUTPUT
  const std::uint64_t naa[kN] = {8192, 12288, 16384};
  for (unsigned i = 0; i < kN; i++) {
    append(want, be64(std::uint64_t{flags[i]} << 56 | naa[i]));
    append(want, be64(reinterpret_cast<std::uintptr_t>(params[i])));
    append(want, be32(0x11223340 + i));  // the fake's rkeys, in registration order
    append(want, be32(static_cast<std::uint32_t>(sizes[i])));
  }
  append(want, be64(std::uint64_t{0x01} << 56 | 0));  // INTERNAL at NAA address 0
  append(want, be64(0));                              // no host address
  append(want, be32(0));                              // no rkey
  append(want, be32(5000));
  EXPECT_EQ(s.bytes, want);
  // The NAA's advertisement replaced the requested addresses.
  EXPECT_EQ(ctx->mr_peer_data[1].addr, 0x5555000000001000ull * 2);
  EXPECT_EQ(ctx->mr_peer_data[1].rkey, 0xA0000001u);
}

TEST_F(NaaiceHost, CallWritesInputsImmediateWithStartBitAndSolicited) {
  open(2);
  mrsp();
  std::uint8_t imm[3] = {0xAA, 0xBB, 0xCC};
  ASSERT_EQ(naaice_set_immediate(ctx, imm), 0);
  EXPECT_EQ(ctx->immediate, 0xCCBBAA02u);
  EXPECT_EQ(ctx->immediate_bytearr[0], 2);  // upstream's layout: the function code first
  fake().sends.clear();
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);
  EXPECT_EQ(ctx->state, NAAICE_FINISHED);
  ASSERT_EQ(fake().sends.size(), 2u);  // regions 0 and 1; 2 is output only
  const Posted& w0 = fake().sends[0];
  const Posted& w1 = fake().sends[1];
  EXPECT_EQ(w0.op, NAAICE_OP_WRITE);
  EXPECT_EQ(w0.bytes.size(), 1024u);
  EXPECT_EQ(w0.remote_addr, 0x5555000000001000ull);
  EXPECT_EQ(w0.rkey, 0xA0000000u);
  EXPECT_EQ(w1.op, NAAICE_OP_WRITE_IMM);
  EXPECT_EQ(w1.bytes.size(), 100u);
  // htonl(immediate | 0x80): the NAA takes the function code as imm & 0x7f.
  EXPECT_EQ(w1.imm, 0xCCBBAA82u);
  EXPECT_EQ(w1.imm & 0x7f, 2u);
  EXPECT_EQ(w1.flags & NAAICE_SEND_SOLICITED, unsigned{NAAICE_SEND_SOLICITED});
  // Only the output regions are synced back.
  ASSERT_EQ(fake().synced.size(), 2u);
  EXPECT_EQ(fake().synced[0].first, params[1]);
  EXPECT_EQ(fake().synced[1].first, params[2]);
}

TEST_F(NaaiceHost, ReturnCodeIsTheImmediateAboveItsLowestByte) {
  open(1);
  mrsp();
  fake().result_imm = 0x00001300;              // return code 0x13, as upstream's host decodes it
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);  // a call the NAA answered: 0, as upstream
  EXPECT_EQ(ctx->naa_returncode, 0x13);
  EXPECT_EQ(ctx->naa_immediate, 0x00001300u);
  fake().result_imm = 0;  // upstream's software NAA: htonl(0)
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);
  EXPECT_EQ(ctx->naa_returncode, 0);
  fake().result_imm = 0x00000013;  // a code in the lowest byte is not one (upstream: >> 8)
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);
  EXPECT_EQ(ctx->naa_returncode, 0);
  EXPECT_EQ(ctx->no_rpc_calls, 3u);
}

TEST_F(NaaiceHost, SingleSendRegionGoesWithTheFirstCallOnly) {
  open(1);
  mrsp();
  fake().sends.clear();
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);
  ASSERT_EQ(fake().sends.size(), 2u);
  fake().sends.clear();
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);
  ASSERT_EQ(fake().sends.size(), 1u);  // region 1 alone, with the immediate
  EXPECT_EQ(fake().sends[0].op, NAAICE_OP_WRITE_IMM);
  EXPECT_EQ(fake().sends[0].bytes.size(), 100u);
  EXPECT_EQ(fake().sends[0].imm, 0x81u);
}

TEST_F(NaaiceHost, BytesToSendShortensAWriteNotTheAdvertisedSize) {
  open(1);
  ASSERT_EQ(naaice_set_bytes_to_send(ctx, 0, 2), 0);
  EXPECT_EQ(naaice_set_bytes_to_send(ctx, 0, 1025), -1);
  mrsp();
  EXPECT_EQ(fake().sends[0].bytes[4 + 20 + 2], 0x04);  // region 0's size: 1024 = 0x400
  fake().sends.clear();
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);
  EXPECT_EQ(fake().sends[0].bytes.size(), 2u);
  ASSERT_EQ(naaice_set_bytes_to_send(ctx, 0, -1), 0);
  EXPECT_EQ(ctx->mr_local_data[0].size, 1024u);
}

TEST_F(NaaiceHost, MrspErrorFailsWithTheCode) {
  open(1);
  fake().mrsp_answer = {0x00, 0x01, 0x00, 0x00};  // upstream's NAA: MSG_MR_ERR, code 1
  EXPECT_EQ(naaice_do_mrsp(ctx), -1);
  EXPECT_EQ(ctx->mrsp_error, 0x01);
  // Another request on the same connection is allowed (this library's addition).
  fake().mrsp_answer = advertisement(kN, 4096);
  EXPECT_EQ(naaice_do_mrsp(ctx), 0);
}

TEST_F(NaaiceHost, MalformedAdvertisementsAreRefused) {
  open(1);
  fake().mrsp_answer = advertisement(kN - 1, 4096);  // fewer regions than asked for
  EXPECT_EQ(naaice_do_mrsp(ctx), -1);
  auto m = advertisement(kN, 4096);
  m.pop_back();  // truncated
  fake().mrsp_answer = m;
  EXPECT_EQ(naaice_do_mrsp(ctx), -1);
  fake().mrsp_answer = advertisement(kN, 8);  // regions smaller than ours
  EXPECT_EQ(naaice_do_mrsp(ctx), -1);
  fake().mrsp_answer = {0x07, 0x00, 0x00, 0x00};  // unknown type
  EXPECT_EQ(naaice_do_mrsp(ctx), -1);
}

TEST_F(NaaiceHost, ArgumentsUpstreamRefuses) {
  size_t s = 8;
  char* p = params[0];
  EXPECT_EQ(naaice_init_communication_context(&ctx, 0, &s, &p, 1, 0, nullptr, 0, nullptr,
                                              "192.0.2.1", 12345),
            -1);  // function code 0
  ASSERT_EQ(ctx, nullptr);
  open(1);
  EXPECT_EQ(naaice_set_input_mr(ctx, kN), -1);
  EXPECT_EQ(naaice_set_output_mr(ctx, kN), -1);
  EXPECT_EQ(naaice_set_singlesend_mr(ctx, kN), -1);
}

// The NAA takes the function code as imm & 0x7f: 128 arrives as function 0, which upstream's
// host would send and no NAA runs (upstream's software NAA answers it unchanged, roce-naa not
// at all). Refused here; 129 is function 1 on every NAA and goes out as upstream sends it.
TEST_F(NaaiceHost, FunctionCodeWithoutFunctionBitsIsRefused) {
  size_t s = 8;
  char* p = params[0];
  EXPECT_EQ(naaice_init_communication_context(&ctx, 0, &s, &p, 1, 0, nullptr, 128, nullptr,
                                              "192.0.2.1", 12345),
            -1);
  ASSERT_EQ(ctx, nullptr);
  open(1);
  mrsp();
  ctx->fncode = 128;
  std::uint8_t imm[3] = {0, 0, 0};
  ASSERT_EQ(naaice_set_immediate(ctx, imm), 0);
  fake().sends.clear();
  EXPECT_EQ(naaice_do_data_transfer(ctx), -1);
  EXPECT_TRUE(fake().sends.empty());
  ctx->fncode = 129;
  ASSERT_EQ(naaice_set_immediate(ctx, imm), 0);
  ctx->state = NAAICE_MRSP_DONE;
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);
  EXPECT_EQ(fake().sends.back().imm, 0x81u);
}

// Upstream waits without a limit when the timeout is not positive: naaice_do_mrsp and
// naaice_do_data_transfer check `timeout > 0 && elapsed > timeout`, naaice_poll_cq_blocking
// arms alarm((int)timeout), and alarm(0) arms nothing.
TEST_F(NaaiceHost, TimeoutZeroWaitsWithoutLimit) {
  open(1);
  ctx->timeout = 0;
  fake().mrsp_answer = advertisement(kN, 4096);
  fake().quiet_polls = 50;
  ASSERT_EQ(naaice_do_mrsp(ctx), 0);
  fake().quiet_polls = 50;
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);
  EXPECT_EQ(ctx->state, NAAICE_FINISHED);
  ASSERT_EQ(naaice_init_data_transfer(ctx), 0);
  fake().quiet_polls = 50;
  ASSERT_EQ(naaice_poll_cq_blocking(ctx), 0);
  EXPECT_EQ(ctx->state, NAAICE_FINISHED);
  ASSERT_EQ(naaice_init_data_transfer(ctx), 0);
  fake().quiet_polls = 50;
  ASSERT_EQ(naaice_poll_cq_busy(ctx), 0);
  ctx->timeout = -1;
  fake().quiet_polls = 50;
  ASSERT_EQ(naaice_do_data_transfer(ctx), 0);
  // A positive timeout still ends a wait the NAA does not answer.
  ctx->timeout = 0.05;
  fake().quiet_polls = 1 << 30;
  EXPECT_EQ(naaice_do_data_transfer(ctx), -1);
}

// Upstream resolves the NAA's address with getaddrinfo in naaice_init_communication_context
// (a host name works; one that does not resolve fails there). The transports are given the
// IPv4 address (the appliance's stack takes nothing else).
TEST(NaaiceConnect, NaaAddressMayBeAHostName) {
  std::vector<std::uint8_t> r(64);
  char* p = reinterpret_cast<char*>(r.data());
  size_t s = r.size();
  naaice_communication_context* ctx = nullptr;
  ASSERT_EQ(naaice_init_communication_context(&ctx, 0, &s, &p, 1, 0, nullptr, 1, nullptr,
                                              "localhost", SERVER_CONNECTION_PORT),
            0);
  ASSERT_EQ(naaice_setup_connection(ctx), 0);
  EXPECT_EQ(static_cast<Fake*>(ctx->transport->priv)->remote_ip, "127.0.0.1");
  naaice_disconnect_and_cleanup(ctx);
  ctx = nullptr;
  EXPECT_EQ(naaice_init_communication_context(&ctx, 0, &s, &p, 1, 0, nullptr, 1, nullptr,
                                              "no-such-naa.invalid", SERVER_CONNECTION_PORT),
            -1);
  EXPECT_EQ(ctx, nullptr);
}

// The connection loop upstream's header offers beside naaice_setup_connection.
TEST(NaaiceConnect, PollAndHandleConnectionEventConnects) {
  std::vector<std::uint8_t> r(64);
  char* p = reinterpret_cast<char*>(r.data());
  size_t s = r.size();
  naaice_communication_context* ctx = nullptr;
  ASSERT_EQ(naaice_init_communication_context(&ctx, 0, &s, &p, 1, 0, nullptr, 1, nullptr,
                                              "192.0.2.1", SERVER_CONNECTION_PORT),
            0);
  for (int i = 0; i < 10 && ctx->state < NAAICE_CONNECTED; i++)
    ASSERT_EQ(naaice_poll_and_handle_connection_event(ctx), 0);
  EXPECT_EQ(ctx->state, NAAICE_CONNECTED);
  EXPECT_TRUE(static_cast<Fake*>(ctx->transport->priv)->connected);
  EXPECT_EQ(naaice_poll_and_handle_connection_event(ctx), 0);  // connected: nothing to do
  EXPECT_EQ(naaice_setup_connection(ctx), 0);                  // upstream: returns at once
  naaice_disconnect_and_cleanup(ctx);
}

TEST_F(NaaiceHost, HostSideErrorIsAZeroLengthWriteWithImmediateZero) {
  open(1);
  mrsp();
  fake().sends.clear();
  ASSERT_EQ(naaice_write_data(ctx, 0), 0);
  ASSERT_EQ(fake().sends.size(), 1u);
  EXPECT_EQ(fake().sends[0].op, NAAICE_OP_WRITE_IMM);
  EXPECT_EQ(fake().sends[0].bytes.size(), 0u);
  EXPECT_EQ(fake().sends[0].imm, 0u);
}

// Upstream's software NAA's answers as captured on the wire (interop_naa_upstream_server:
// examples/naaice_server at f7b72fc on Linux 6.1 rxe, our host on the appliance, 2026-11-28;
// both SENDs had SE set). The advertisement for a request of four regions of 64, 1024, 513 and
// 8 bytes (naaice_client -U -k add1 -s 1024), and its MRSP error when an internal region of
// 4 GiB - 4 KiB cannot be allocated.
std::vector<std::uint8_t> hex(const std::string& h) {
  std::vector<std::uint8_t> b;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2)
    b.push_back(static_cast<std::uint8_t>(std::stoul(h.substr(i, 2), nullptr, 16)));
  return b;
}
const char* const kCapturedAdvertisement =
    "02040000"
    "00007f2948000cb0000008c400000040"
    "00007f2948000d400000093600000400"
    "00007f294800119000000a2e00000201"
    "00007f29480013e000000bc500000008";
const char* const kCapturedError = "00010000";

TEST(NaaiceCaptured, UpstreamAdvertisementAndError) {
  std::vector<std::uint8_t> r[4] = {std::vector<std::uint8_t>(64), std::vector<std::uint8_t>(1024),
                                    std::vector<std::uint8_t>(513), std::vector<std::uint8_t>(8)};
  char* params[4];
  size_t sizes[4];
  for (int i = 0; i < 4; i++) {
    params[i] = reinterpret_cast<char*>(r[i].data());
    sizes[i] = r[i].size();
  }
  naaice_communication_context* ctx = nullptr;
  ASSERT_EQ(naaice_init_communication_context(&ctx, 0, sizes, params, 4, 0, nullptr, 1, nullptr,
                                              "192.0.2.1", 12345),
            0);
  ctx->timeout = 2;
  ASSERT_EQ(naaice_setup_connection(ctx), 0);
  ASSERT_EQ(naaice_set_singlesend_mr(ctx, 0), 0);
  ASSERT_EQ(naaice_set_input_mr(ctx, 1), 0);
  ASSERT_EQ(naaice_set_output_mr(ctx, 1), 0);
  ASSERT_EQ(naaice_set_output_mr(ctx, 2), 0);
  ASSERT_EQ(naaice_set_input_mr(ctx, 3), 0);
  ASSERT_EQ(naaice_register_mrs(ctx), 0);
  Fake& f = *static_cast<Fake*>(ctx->transport->priv);
  f.mrsp_answer = hex(kCapturedError);
  EXPECT_EQ(naaice_do_mrsp(ctx), -1);
  EXPECT_EQ(ctx->mrsp_error, NAAICE_MRSP_NOT_ENOUGH_MEMORY);
  f.mrsp_answer = hex(kCapturedAdvertisement);
  ASSERT_EQ(f.mrsp_answer.size(), 4u + 4 * 16);
  ASSERT_EQ(naaice_do_mrsp(ctx), 0);
  EXPECT_EQ(ctx->mr_peer_data[0].addr, 0x00007f2948000cb0ull);
  EXPECT_EQ(ctx->mr_peer_data[0].rkey, 0x8c4u);
  EXPECT_EQ(ctx->mr_peer_data[2].addr, 0x00007f2948001190ull);
  EXPECT_EQ(ctx->mr_peer_data[2].rkey, 0xa2eu);
  EXPECT_EQ(ctx->mr_peer_data[2].size, 513u);
  EXPECT_EQ(ctx->mr_peer_data[3].size, 8u);
  // Our request in that capture: regions 0..3 flagged 0x06, 0x0c, 0x08, 0x04 at NAA addresses
  // 0, 0x1000, 0x2000, 0x3000.
  const auto& m = f.sends.back().bytes;
  ASSERT_EQ(m.size(), 4u + 4 * 24);
  const std::uint8_t flags[4] = {0x06, 0x0c, 0x08, 0x04};
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(m[4 + 24 * i], flags[i]);
    EXPECT_EQ(m[4 + 24 * i + 6], static_cast<std::uint8_t>(0x10 * i)) << i;
  }
  naaice_disconnect_and_cleanup(ctx);
}

// AP2 (upstream's naaice_ap2.c): the NAA from NAA_SPEC by function code, the inputs then the
// outputs that are not inputs, flagged; a call and its status.
TEST(NaaiceAp2, CreateInvokeWait) {
  std::vector<std::uint8_t> a(64, 1), b(32, 2), c(16, 3);
  naa_param_t in[] = {{a.data(), a.size(), true}, {b.data(), b.size(), false}};
  naa_param_t out[] = {{b.data(), b.size(), false}, {c.data(), c.size(), false}};
  naa_handle h;
  ::setenv("NAA_SPEC", "192.0.2.9:4711:5:2,192.0.2.1::7:2", 1);
  EXPECT_EQ(naa_create(9, in, 2, out, 2, &h), -1);  // no NAA for function code 9
  EXPECT_EQ(naa_create(7, in, 1, out, 2, &h), -1);  // that NAA takes 2 inputs
  g_next_answer = advertisement(3, 4096);
  ASSERT_EQ(naa_create(7, in, 2, out, 2, &h), 0);
  Fake& f = *static_cast<Fake*>(h.comm_ctx->transport->priv);
  ASSERT_EQ(f.sends.size(), 1u);
  const auto& m = f.sends[0].bytes;
  ASSERT_EQ(m.size(), 4u + 3 * 24);
  EXPECT_EQ(m[1], 3);                  // a, b, c: b is input and output, registered once
  EXPECT_EQ(m[4], 0x06);               // a: INPUT | SINGLESEND
  EXPECT_EQ(m[4 + 24], 0x0c);          // b: INPUT | OUTPUT
  EXPECT_EQ(m[4 + 48], 0x08);          // c: OUTPUT
  EXPECT_EQ(h.comm_ctx->port, 12345);  // the spec's empty port
  f.result_imm = 0x00001100;
  ASSERT_EQ(naa_invoke(&h), 0);
  EXPECT_EQ(f.sends.back().imm, 0x87u);  // function code 7 | 0x80
  naa_status st{};
  ASSERT_EQ(naa_wait(&h, &st), 0);
  EXPECT_EQ(st.state, NAAICE_FINISHED);
  EXPECT_EQ(st.naa_error, 0x11);
  ASSERT_EQ(naa_invoke(&h), 0);
  bool done = false;
  for (int i = 0; i < 10 && !done; i++) ASSERT_EQ(naa_test(&h, &done, &st), 0);
  EXPECT_TRUE(done);
  EXPECT_EQ(naa_finalize(&h), 0);
  g_next_answer.clear();
}

// Upstream's naa_create takes the first NAA_SPEC entry for the function code that no handle
// holds (get_naa_for_function_code: `handle == NULL && fn_code == fn_code`): two entries of one
// function code serve two handles, one each; a third finds none. (Upstream never frees an
// entry; this library frees it with naa_finalize.)
TEST(NaaiceAp2, EachSpecEntryServesOneHandle) {
  std::vector<std::uint8_t> a(64, 1), b(64, 2);
  naa_param_t in[] = {{a.data(), a.size(), false}};
  naa_param_t out[] = {{b.data(), b.size(), false}};
  ::setenv("NAA_SPEC", "192.0.2.11:4711:6:1,192.0.2.12:4712:6:1", 1);
  g_next_answer = advertisement(2, 4096);
  naa_handle h1, h2, h3;
  ASSERT_EQ(naa_create(6, in, 1, out, 1, &h1), 0);
  ASSERT_EQ(naa_create(6, in, 1, out, 1, &h2), 0);
  EXPECT_STREQ(h1.comm_ctx->remote_ip, "192.0.2.11");
  EXPECT_EQ(h1.comm_ctx->port, 4711);
  EXPECT_STREQ(h2.comm_ctx->remote_ip, "192.0.2.12");
  EXPECT_EQ(h2.comm_ctx->port, 4712);
  EXPECT_EQ(naa_create(6, in, 1, out, 1, &h3), -1);  // both NAAs taken
  EXPECT_EQ(naa_finalize(&h1), 0);
  ASSERT_EQ(naa_create(6, in, 1, out, 1, &h3), 0);  // the first is free again
  EXPECT_STREQ(h3.comm_ctx->remote_ip, "192.0.2.11");
  EXPECT_EQ(naa_finalize(&h2), 0);
  EXPECT_EQ(naa_finalize(&h3), 0);
  // An entry whose NAA cannot be reached is held (upstream) until naa_finalize frees it.
  ::setenv("NAA_SPEC", "no-such-naa.invalid::6:1", 1);
  EXPECT_EQ(naa_create(6, in, 1, out, 1, &h1), -1);
  EXPECT_EQ(naa_create(6, in, 1, out, 1, &h2), -1);  // taken by h1
  EXPECT_EQ(naa_finalize(&h1), -1);                  // nothing to disconnect; the entry freed
  ::setenv("NAA_SPEC", "192.0.2.11::6:1", 1);
  ASSERT_EQ(naa_create(6, in, 1, out, 1, &h2), 0);
  EXPECT_EQ(naa_finalize(&h2), 0);
  g_next_answer.clear();
}

}  // namespace
