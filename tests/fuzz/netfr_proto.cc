/// @file
/// Fuzz target: NetFR's messages (apps/netfr/protocol.cc) from a peer that may send anything:
/// the first byte picks a SEND (decode) or CM private data (unwrap_cm_data, then decode), the
/// rest is the message, copied to a buffer of its exact size (the codec must not look past it).
/// An accepted message must survive re-encoding with the same fields.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <variant>
#include <vector>

#include "apps/netfr/protocol.h"
#include "tests/fuzz/fuzz_target.h"

using namespace roce::netfr;

namespace {

bool same(const Message& a, const Message& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<ClientHello>(&a)) return x->ext == std::get<ClientHello>(b).ext;
  if (const auto* x = std::get_if<ServerHello>(&a)) {
    const auto& y = std::get<ServerHello>(b);
    return x->status == y.status && x->ext == y.ext;
  }
  if (const auto* x = std::get_if<BufferUpdate>(&a)) {
    const auto& y = std::get<BufferUpdate>(b);
    return x->buffer_index == y.buffer_index && x->payload_size == y.payload_size &&
           x->payload_offset == y.payload_offset && x->write_serial == y.write_serial &&
           x->channel_serial == y.channel_serial && x->udata == y.udata;
  }
  if (const auto* x = std::get_if<BufferState>(&a)) {
    const auto& y = std::get<BufferState>(b);
    return x->index == y.index && x->page_size == y.page_size && x->addr == y.addr &&
           x->size == y.size && x->rkey == y.rkey;
  }
  if (const auto* x = std::get_if<HostBufferSizes>(&a))
    return x->sizes == std::get<HostBufferSizes>(b).sizes;
  if (const auto* x = std::get_if<Data>(&a)) {
    const auto& y = std::get<Data>(b);
    return x->from_host == y.from_host && x->msg_serial == y.msg_serial &&
           x->channel_serial == y.channel_serial && x->udata == y.udata &&
           x->payload.size() == y.payload.size() &&
           (x->payload.empty() ||
            std::memcmp(x->payload.data(), y.payload.data(), x->payload.size()) == 0);
  }
  if (const auto* x = std::get_if<Ack>(&a)) return x->host_data == std::get<Ack>(b).host_data;
  return true;  // Keepalive
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > 1 + NETFR_MESSAGE_MAX_SIZE + 16) return 0;
  std::vector<std::uint8_t> m(data + 1, data + size);  // exact size
  std::span<const std::uint8_t> msg(m);
  if (data[0] & 1) {
    msg = unwrap_cm_data(msg);
    if (msg.size() > NETFR_CM_MESSAGE_MAX_SIZE) std::abort();
    if (!msg.empty() && (msg.data() < m.data() || msg.data() + msg.size() > m.data() + m.size()))
      std::abort();
  }
  const Decoded d = decode(msg);
  if (d.error != DecodeError::kOk) return 0;
  std::vector<std::uint8_t> out(NETFR_MESSAGE_MAX_SIZE);
  const std::size_t n = std::visit([&](const auto& x) { return encode(out.data(), x); }, d.msg);
  if (n == 0 || n > NETFR_MESSAGE_MAX_SIZE) std::abort();
  out.resize(n);
  const Decoded again = decode(out);
  if (again.error != DecodeError::kOk || again.type != d.type || !same(d.msg, again.msg))
    std::abort();
  return 0;
}
