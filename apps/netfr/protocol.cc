/// @file
/// NetFR message codec (protocol.h).
#include "apps/netfr/protocol.h"

#include <algorithm>
#include <cstring>

namespace roce::netfr {
namespace {

void put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t get64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

/// Header at 0: magic[8], version at 8, type at 9. Padding bytes up to the first field are 0.
void header(std::uint8_t* out, MsgType t, std::size_t size) {
  std::memset(out, 0, size);
  std::memcpy(out, NETFR_MAGIC, 8);
  out[8] = NETFR_VERSION;
  out[9] = static_cast<std::uint8_t>(t);
}

}  // namespace

std::string_view to_string(MsgType t) {
  switch (t) {
    case MsgType::kClientHello:
      return "ClientHello";
    case MsgType::kServerHello:
      return "ServerHello";
    case MsgType::kBufferHint:
      return "BufferHint";
    case MsgType::kBufferUpdate:
      return "BufferUpdate";
    case MsgType::kBufferState:
      return "BufferState";
    case MsgType::kClientData:
      return "ClientData";
    case MsgType::kClientDataAck:
      return "ClientDataAck";
    case MsgType::kHostData:
      return "HostData";
    case MsgType::kHostDataAck:
      return "HostDataAck";
    case MsgType::kHostBufferSizes:
      return "HostBufferSizes";
    case MsgType::kKeepalive:
      return "Keepalive";
  }
  return "?";
}

std::string_view to_string(DecodeError e) {
  switch (e) {
    case DecodeError::kOk:
      return "ok";
    case DecodeError::kTooShort:
      return "too short";
    case DecodeError::kTooLong:
      return "too long";
    case DecodeError::kBadMagic:
      return "bad magic";
    case DecodeError::kBadVersion:
      return "bad version";
    case DecodeError::kBadType:
      return "bad type";
    case DecodeError::kBadLength:
      return "bad length";
    case DecodeError::kBadField:
      return "bad field";
  }
  return "?";
}

std::size_t encode(std::uint8_t* out, const ClientHello& m) {
  const std::size_t n = kClientHelloSize + (m.ext ? 1 : 0);
  header(out, MsgType::kClientHello, n);
  if (m.ext) out[10] = m.ext;
  return n;
}

std::size_t encode(std::uint8_t* out, const ServerHello& m) {
  const std::size_t n = kServerHelloSize + (m.ext ? 1 : 0);
  header(out, MsgType::kServerHello, n);
  out[10] = static_cast<std::uint8_t>(m.status);
  if (m.ext) out[11] = m.ext;
  return n;
}

std::size_t encode(std::uint8_t* out, const BufferUpdate& m) {
  header(out, MsgType::kBufferUpdate, kBufferUpdateSize);
  out[10] = static_cast<std::uint8_t>(m.buffer_index);  // then 5 bytes of padding
  put32(out + 16, m.payload_size);
  put32(out + 20, m.payload_offset);
  put32(out + 24, m.write_serial);
  put32(out + 28, m.channel_serial);
  put64(out + 32, m.udata);
  return kBufferUpdateSize;
}

std::size_t encode(std::uint8_t* out, const BufferState& m) {
  header(out, MsgType::kBufferState, kBufferStateSize);
  put32(out + 10, m.page_size);
  put64(out + 14, m.addr);
  put64(out + 22, m.size);
  put64(out + 30, m.rkey);
  out[38] = static_cast<std::uint8_t>(m.index);
  return kBufferStateSize;
}

std::size_t encode(std::uint8_t* out, const HostBufferSizes& m) {
  header(out, MsgType::kHostBufferSizes, kHostBufferSizesSize);
  const std::size_t n = std::min<std::size_t>(m.sizes.size(), NETFR_MAX_MEM_REGIONS);
  for (std::size_t i = 0; i < n; ++i) put64(out + 16 + 8 * i, m.sizes[i]);
  return kHostBufferSizesSize;  // the array ends with a 0 (always room for it)
}

std::size_t encode(std::uint8_t* out, const Data& m) {
  const std::size_t len = std::min<std::size_t>(m.payload.size(), NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
  header(out, m.from_host ? MsgType::kHostData : MsgType::kClientData, kDataHeaderSize);
  put32(out + 10, static_cast<std::uint32_t>(len));
  put64(out + 14, m.udata);
  put32(out + 22, m.msg_serial);
  put32(out + 26, m.channel_serial);  // then 2 bytes of padding
  if (len) std::memcpy(out + kDataHeaderSize, m.payload.data(), len);
  return kDataHeaderSize + len;
}

std::size_t encode(std::uint8_t* out, const Ack& m) {
  header(out, m.host_data ? MsgType::kHostDataAck : MsgType::kClientDataAck, kAckSize);
  return kAckSize;
}

std::size_t encode(std::uint8_t* out, const Keepalive&) {
  header(out, MsgType::kKeepalive, kKeepaliveSize);
  return kKeepaliveSize;
}

std::vector<std::uint8_t> wrap_cm_data(std::span<const std::uint8_t> msg) {
  std::vector<std::uint8_t> v(1 + msg.size());
  v[0] = static_cast<std::uint8_t>(msg.size());
  for (std::size_t i = 0; i < msg.size(); ++i) v[1 + i] = msg[i];
  return v;
}

std::span<const std::uint8_t> unwrap_cm_data(std::span<const std::uint8_t> pd) {
  if (pd.size() >= 1 + kHeaderSize && pd[0] >= kHeaderSize && pd[0] <= NETFR_CM_MESSAGE_MAX_SIZE &&
      pd.size() >= 1u + pd[0] && std::memcmp(pd.data() + 1, NETFR_MAGIC, 8) == 0)
    return pd.subspan(1, pd[0]);
  if (pd.size() >= kHeaderSize && std::memcmp(pd.data(), NETFR_MAGIC, 8) == 0)
    return pd.first(std::min<std::size_t>(pd.size(), NETFR_CM_MESSAGE_MAX_SIZE));
  return {};
}

Decoded decode(std::span<const std::uint8_t> b) {
  Decoded d;
  auto fail = [&](DecodeError e) {
    d.error = e;
    return d;
  };
  if (b.size() < kHeaderSize) return fail(DecodeError::kTooShort);
  if (b.size() > NETFR_MESSAGE_MAX_SIZE) return fail(DecodeError::kTooLong);
  if (std::memcmp(b.data(), NETFR_MAGIC, 8) != 0) return fail(DecodeError::kBadMagic);
  if (b[8] != NETFR_VERSION) return fail(DecodeError::kBadVersion);
  d.type = static_cast<MsgType>(b[9]);
  const std::uint8_t* p = b.data();
  // Fixed-size messages: at least their size (a sender may pad a SEND), at most the maximum.
  auto need = [&](std::size_t n) { return b.size() >= n; };
  switch (d.type) {
    case MsgType::kClientHello:
      d.msg = ClientHello{b.size() > kClientHelloSize ? p[10] : std::uint8_t{0}};
      return d;
    case MsgType::kServerHello: {
      if (!need(kServerHelloSize)) return fail(DecodeError::kTooShort);
      ServerHello m;
      if (p[10] == 0 || p[10] > 3) return fail(DecodeError::kBadField);
      m.status = static_cast<HelloStatus>(p[10]);
      m.ext = b.size() > kServerHelloSize ? p[11] : std::uint8_t{0};
      d.msg = m;
      return d;
    }
    case MsgType::kBufferUpdate: {
      if (!need(kBufferUpdateSize)) return fail(DecodeError::kTooShort);
      BufferUpdate m;
      m.buffer_index = p[10];
      m.payload_size = get32(p + 16);
      m.payload_offset = get32(p + 20);
      m.write_serial = get32(p + 24);
      m.channel_serial = get32(p + 28);
      m.udata = get64(p + 32);
      if (m.buffer_index >= NETFR_MAX_MEM_REGIONS || m.payload_size > NETFR_MAX_BUFFER_SIZE)
        return fail(DecodeError::kBadField);
      d.msg = m;
      return d;
    }
    case MsgType::kBufferState: {
      if (!need(kBufferStateSize)) return fail(DecodeError::kTooShort);
      BufferState m;
      m.page_size = get32(p + 10);
      m.addr = get64(p + 14);
      m.size = get64(p + 22);
      m.rkey = get64(p + 30);
      m.index = p[38];
      if (m.index >= NETFR_MAX_MEM_REGIONS ||
          (m.size != 0 &&
           (m.size > NETFR_MAX_BUFFER_SIZE || m.rkey > 0xFFFFFFFFu || m.addr + m.size < m.addr)))
        return fail(DecodeError::kBadField);
      d.msg = m;
      return d;
    }
    case MsgType::kHostBufferSizes: {
      if (!need(kHostBufferSizesSize)) return fail(DecodeError::kTooShort);
      HostBufferSizes m;
      for (std::size_t i = 0; i <= NETFR_MAX_MEM_REGIONS; ++i) {
        const std::uint64_t s = get64(p + 16 + 8 * i);
        if (s == 0) break;
        if (i == NETFR_MAX_MEM_REGIONS) return fail(DecodeError::kBadField);  // no terminator
        if (s > NETFR_MAX_BUFFER_SIZE) return fail(DecodeError::kBadField);   // no such memory
        m.sizes.push_back(s);
      }
      d.msg = std::move(m);
      return d;
    }
    case MsgType::kClientData:
    case MsgType::kHostData: {
      if (!need(kDataHeaderSize)) return fail(DecodeError::kTooShort);
      Data m;
      m.from_host = d.type == MsgType::kHostData;
      const std::uint32_t len = get32(p + 10);
      if (len > NETFR_MESSAGE_MAX_PAYLOAD_SIZE || kDataHeaderSize + len > b.size())
        return fail(DecodeError::kBadLength);
      m.udata = get64(p + 14);
      m.msg_serial = get32(p + 22);
      m.channel_serial = get32(p + 26);
      m.payload = b.subspan(kDataHeaderSize, len);
      d.msg = m;
      return d;
    }
    case MsgType::kClientDataAck:
    case MsgType::kHostDataAck:
      d.msg = Ack{d.type == MsgType::kHostDataAck};
      return d;
    case MsgType::kKeepalive:
      d.msg = Keepalive{};
      return d;
    case MsgType::kBufferHint:  // upstream defines no layout and never sends it
      break;
  }
  return fail(DecodeError::kBadType);
}

}  // namespace roce::netfr
