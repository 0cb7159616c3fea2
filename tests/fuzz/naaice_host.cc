/// @file
/// Fuzz target: the NAAICE host library (apps/naa/host/naaice.c) facing a hostile NAA, on a
/// scripted transport. The input sets up a context (1-4 parameter regions of fuzzer-chosen sizes
/// and roles, 0-2 internal regions), then is a stream of the application's steps (start an MRSP,
/// start a call, the host-side error write, a non-blocking poll) and the NAA's doings: any bytes
/// as its MRSP answer with any byte count up to the posted receive, a result with any immediate
/// and length, failed completions, completions nobody asked for.
///
/// Checked on every work request the library posts: its local buffer lies inside a region it
/// registered; a receive too; a WRITE is no longer than its source region and goes to an
/// address and rkey the NAA advertised in an answer the library accepted, within that region's
/// size; sync_in covers only registered memory. ASan sees any read or write past the buffers.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <tuple>
#include <vector>

#include "apps/naa/host/naaice.h"  // C headers with their own extern "C"
#include "apps/naa/host/naaice_transport.h"
#include "tests/fuzz/fuzz_bytes.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_naaice_host: %s\n", what);
  std::abort();
}

struct Script {
  std::vector<std::pair<const std::uint8_t*, std::uint64_t>> regions;  ///< registered
  std::deque<std::pair<std::uint8_t*, std::uint32_t>> recvs;           ///< posted, in order
  std::deque<naaice_wc> wcs;
  /// (address, rkey, size) of every region the NAA advertised; the library may write there.
  std::vector<std::tuple<std::uint64_t, std::uint32_t, std::uint32_t>> advertised;
  std::uint32_t next_key = 0x1000;

  bool registered(const void* p, std::uint64_t n) const {
    const auto* a = static_cast<const std::uint8_t*>(p);
    for (const auto& [b, len] : regions)
      if (a >= b && n <= len && static_cast<std::uint64_t>(a - b) <= len - n) return true;
    return false;
  }
};
Script* g_script = nullptr;

Script& S(void* p) { return *static_cast<Script*>(p); }

int f_connect(void*, const char*, const char*, std::uint16_t, std::uint32_t, std::uint32_t,
              std::uint8_t, double) {
  return 0;
}
int f_reg_mr(void* p, void* addr, std::uint64_t length, naaice_mr_handle* out) {
  S(p).regions.push_back({static_cast<const std::uint8_t*>(addr), length});
  out->addr = addr;
  out->length = length;
  out->lkey = out->rkey = S(p).next_key++;
  out->priv = addr;
  return 0;
}
void f_dereg_mr(void*, naaice_mr_handle*) {}
int f_post_recv(void* p, std::uint64_t, void* addr, std::uint32_t length, std::uint32_t) {
  if (!S(p).registered(addr, length)) fail("a receive outside registered memory");
  S(p).recvs.push_back({static_cast<std::uint8_t*>(addr), length});
  return 0;
}
int f_post_send(void* p, naaice_op op, std::uint64_t, const void* local, std::uint32_t length,
                std::uint32_t, std::uint64_t raddr, std::uint32_t rkey, std::uint32_t, unsigned) {
  Script& s = S(p);
  if (length && !s.registered(local, length)) fail("a send or write from outside its region");
  if (op != NAAICE_OP_SEND) {
    bool named = false;
    for (const auto& [a, k, size] : s.advertised)
      if (a == raddr && k == rkey && length <= size) named = true;
    if (!named) fail("a WRITE to an address, rkey or length the NAA did not advertise");
  }
  naaice_wc w{};
  w.ok = 1;
  w.kind = op == NAAICE_OP_SEND ? NAAICE_WC_SEND : NAAICE_WC_WRITE;
  s.wcs.push_back(w);
  return 0;
}
int f_poll(void* p, naaice_wc* out, int max) {
  int n = 0;
  while (n < max && !S(p).wcs.empty()) {
    out[n++] = S(p).wcs.front();
    S(p).wcs.pop_front();
  }
  return n;
}
void f_sync_in(void* p, void* addr, std::uint64_t n) {
  if (!S(p).registered(addr, n)) fail("sync_in beyond registered memory");
}
void f_disconnect(void*) {}
void f_destroy(void* p) {
  if (g_script == p) g_script = nullptr;
  delete static_cast<Script*>(p);
}
const char* f_error(void*) { return "fuzz"; }

}  // namespace

extern "C" naaice_transport* naaice_transport_open(void) {
  auto* t = static_cast<naaice_transport*>(std::calloc(1, sizeof(naaice_transport)));
  g_script = new Script;
  t->priv = g_script;
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

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  roce::fuzz::Reader in(data, size);
  const unsigned n = 1 + in.u8() % 4;
  const unsigned internal = in.u8() % 3;
  std::vector<std::vector<char>> bufs(n);
  std::vector<char*> params(n);
  std::vector<std::size_t> sizes(n);
  for (unsigned i = 0; i < n; ++i) {
    sizes[i] = 1 + in.u8();
    bufs[i].assign(sizes[i], static_cast<char>(i));
    params[i] = bufs[i].data();
  }
  std::size_t internal_sizes[2] = {4096, 100};
  naaice_communication_context* c = nullptr;
  if (naaice_init_communication_context(&c, 0, sizes.data(), params.data(), n, internal,
                                        internal_sizes, 1 + in.u8() % 127, nullptr, "192.0.2.1",
                                        12345) != 0)
    return 0;
  Script* s = g_script;
  const std::uint8_t roles = in.u8();
  if (naaice_setup_connection(c) == 0) {
    for (unsigned i = 0; i < n; ++i) {
      if (roles & (1u << i)) naaice_set_input_mr(c, i);
      if (roles & (0x10u << i)) naaice_set_output_mr(c, i);
    }
    if (roles & 0x80) naaice_set_singlesend_mr(c, 0);
    naaice_register_mrs(c);
    if (roles & 0x40) naaice_set_bytes_to_send(c, 0, static_cast<int>(sizes[0] / 2));
    for (unsigned ops = 0; !in.empty() && ops < 48; ++ops) {
      switch (in.u8() % 8) {
        case 0:
          naaice_init_mrsp(c);
          break;
        case 1:
          naaice_init_data_transfer(c);
          break;
        case 2: {  // the NAA's SEND: an advertisement from fields, or any bytes
          if (s->recvs.empty()) break;
          auto [addr, len] = s->recvs.front();
          s->recvs.pop_front();
          std::vector<std::uint8_t> m;
          if (in.u8() & 1) {
            const unsigned count = in.u8() % 8;
            m = {0x02, static_cast<std::uint8_t>(count), 0, 0};
            for (unsigned i = 0; i < count; ++i) {
              const std::uint64_t a = 0x100000ull * (i + 1);
              const std::uint32_t k = 0x500 + i, sz = in.u16();
              for (int b = 7; b >= 0; --b) m.push_back(static_cast<std::uint8_t>(a >> (8 * b)));
              for (int b = 3; b >= 0; --b) m.push_back(static_cast<std::uint8_t>(k >> (8 * b)));
              for (int b = 3; b >= 0; --b) m.push_back(static_cast<std::uint8_t>(sz >> (8 * b)));
            }
          } else {
            const auto b = in.bytes(in.u16());
            m.assign(b.begin(), b.end());
          }
          const std::size_t put = std::min<std::size_t>(m.size(), len);
          if (put) std::memcpy(addr, m.data(), put);
          naaice_wc w{};
          w.ok = 1;
          w.kind = NAAICE_WC_RECV;
          // A NIC reports what arrived: the message, cut to the receive (a real NIC fails a
          // message longer than the receive; a shorter count would leave old bytes behind it).
          w.byte_len = static_cast<std::uint32_t>(put);
          s->wcs.push_back(w);
          // What the NAA offered in the bytes that arrived: the library may use these, or none.
          const std::size_t seen = std::min<std::size_t>(put, w.byte_len);
          if (seen >= 4 && m[0] == 0x02)
            for (std::size_t i = 0, at = 4; i < m[1] && at + 16 <= seen; ++i, at += 16) {
              std::uint64_t a = 0;
              std::uint32_t k = 0, sz = 0;
              for (int b = 0; b < 8; ++b) a = a << 8 | m[at + b];
              for (int b = 0; b < 4; ++b) k = k << 8 | m[at + 8 + b];
              for (int b = 0; b < 4; ++b) sz = sz << 8 | m[at + 12 + b];
              s->advertised.emplace_back(a, k, sz);
            }
          break;
        }
        case 3: {  // the NAA's WRITE_WITH_IMM
          if (s->recvs.empty()) break;
          s->recvs.pop_front();
          naaice_wc w{};
          w.ok = 1;
          w.kind = NAAICE_WC_RECV_IMM;
          w.imm = in.u32();
          w.byte_len = in.u32();
          s->wcs.push_back(w);
          break;
        }
        case 4: {  // a failed completion
          naaice_wc w{};
          w.ok = 0;
          w.kind = static_cast<naaice_wc_kind>(in.u8() % 4);
          std::snprintf(w.status, sizeof w.status, "remote access error");
          s->wcs.push_back(w);
          break;
        }
        case 5: {  // a completion nobody asked for
          naaice_wc w{};
          w.ok = 1;
          w.kind = static_cast<naaice_wc_kind>(in.u8() % 2);
          s->wcs.push_back(w);
          break;
        }
        case 6:  // the host-side error write (the application's, after an MRSP)
          if (c->state == NAAICE_MRSP_DONE || c->state == NAAICE_FINISHED) naaice_write_data(c, 0);
          break;
        default:
          naaice_poll_cq_nonblocking(c);
          break;
      }
    }
  }
  naaice_disconnect_and_cleanup(c);
  return 0;
}
