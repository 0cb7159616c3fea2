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
    case MsgType::kHostBufferState:
      return "HostBufferState";
    case MsgType::kBufferUpdate:
      return "BufferUpdate";
    case MsgType::kClientBufferState:
      return "ClientBufferState";
    case MsgType::kClientData:
      return "ClientData";
    case MsgType::kClientDataAck:
      return "ClientDataAck";
    case MsgType::kHostData:
      return "HostData";
    case MsgType::kHostDataAck:
      return "HostDataAck";
    case MsgType::kClientSubscribe:
      return "ClientSubscribe";
    case MsgType::kClientUnsubscribe:
      return "ClientUnsubscribe";
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

std::size_t encode(std::uint8_t* out, const ClientHello&) {
  header(out, MsgType::kClientHello, kClientHelloSize);
  return kClientHelloSize;
}

std::size_t encode(std::uint8_t* out, const ServerHello& m) {
  header(out, MsgType::kServerHello, kServerHelloSize);
  out[10] = static_cast<std::uint8_t>(m.status);
  return kServerHelloSize;
}

std::size_t encode(std::uint8_t* out, const BufferUpdate& m) {
  header(out, MsgType::kBufferUpdate, kBufferUpdateSize);
  put32(out + 12, m.buffer_index);
  put32(out + 16, m.payload_size);
  put32(out + 20, m.payload_offset);
  put32(out + 24, m.write_serial);
  put32(out + 28, m.channel_serial);
  put64(out + 32, m.udata);
  return kBufferUpdateSize;
}

std::size_t encode(std::uint8_t* out, const ClientBufferState& m) {
  header(out, MsgType::kClientBufferState, kClientBufferStateSize);
  put32(out + 12, m.index);
  put32(out + 16, m.page_size);
  put64(out + 24, m.addr);
  put64(out + 32, m.size);
  put64(out + 40, m.rkey);
  return kClientBufferStateSize;
}

std::size_t encode(std::uint8_t* out, const HostBufferState& m) {
  header(out, MsgType::kHostBufferState, kHostBufferStateSize);
  const std::size_t n = std::min<std::size_t>(m.sizes.size(), NETFR_MAX_MEM_REGIONS);
  for (std::size_t i = 0; i < n; ++i) put64(out + 16 + 8 * i, m.sizes[i]);
  return kHostBufferStateSize;  // the array ends with a 0 (always room for it)
}

std::size_t encode(std::uint8_t* out, const Data& m) {
  const std::size_t len = std::min<std::size_t>(m.payload.size(), NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
  header(out, m.from_host ? MsgType::kHostData : MsgType::kClientData, kDataHeaderSize);
  put32(out + 12, static_cast<std::uint32_t>(len));
  put32(out + 16, m.msg_serial);
  put32(out + 20, m.channel_serial);
  put64(out + 24, m.udata);
  if (len) std::memcpy(out + kDataHeaderSize, m.payload.data(), len);
  return kDataHeaderSize + len;
}

std::size_t encode(std::uint8_t* out, const Ack& m) {
  header(out, m.host_data ? MsgType::kHostDataAck : MsgType::kClientDataAck, kAckSize);
  return kAckSize;
}

std::size_t encode(std::uint8_t* out, const Subscribe& m) {
  header(out, m.subscribe ? MsgType::kClientSubscribe : MsgType::kClientUnsubscribe,
         kSubscribeSize);
  put32(out + 12, m.queue_id);
  return kSubscribeSize;
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
  if (b[9] == 0 || b[9] >= kMsgTypeMax) return fail(DecodeError::kBadType);
  d.type = static_cast<MsgType>(b[9]);
  const std::uint8_t* p = b.data();
  // Fixed-size messages: at least their size (a sender may pad a SEND), at most the maximum.
  auto need = [&](std::size_t n) { return b.size() >= n; };
  switch (d.type) {
    case MsgType::kClientHello:
      d.msg = ClientHello{};
      return d;
    case MsgType::kServerHello: {
      if (!need(kServerHelloSize)) return fail(DecodeError::kTooShort);
      ServerHello m;
      if (p[10] == 0 || p[10] > 3) return fail(DecodeError::kBadField);
      m.status = static_cast<HelloStatus>(p[10]);
      d.msg = m;
      return d;
    }
    case MsgType::kBufferUpdate: {
      if (!need(kBufferUpdateSize)) return fail(DecodeError::kTooShort);
      BufferUpdate m;
      m.buffer_index = get32(p + 12);
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
    case MsgType::kClientBufferState: {
      if (!need(kClientBufferStateSize)) return fail(DecodeError::kTooShort);
      ClientBufferState m;
      m.index = get32(p + 12);
      m.page_size = get32(p + 16);
      m.addr = get64(p + 24);
      m.size = get64(p + 32);
      m.rkey = get64(p + 40);
      if (m.index >= NETFR_MAX_MEM_REGIONS || m.size == 0 || m.size > NETFR_MAX_BUFFER_SIZE ||
          m.rkey > 0xFFFFFFFFu || m.addr + m.size < m.addr)
        return fail(DecodeError::kBadField);
      d.msg = m;
      return d;
    }
    case MsgType::kHostBufferState: {
      if (!need(kHostBufferStateSize)) return fail(DecodeError::kTooShort);
      HostBufferState m;
      for (std::size_t i = 0; i <= NETFR_MAX_MEM_REGIONS; ++i) {
        const std::uint64_t s = get64(p + 16 + 8 * i);
        if (s == 0) break;
        if (i == NETFR_MAX_MEM_REGIONS) return fail(DecodeError::kBadField);  // no terminator
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
      const std::uint32_t len = get32(p + 12);
      if (len == 0 || len > NETFR_MESSAGE_MAX_PAYLOAD_SIZE || kDataHeaderSize + len > b.size())
        return fail(DecodeError::kBadLength);
      m.msg_serial = get32(p + 16);
      m.channel_serial = get32(p + 20);
      m.udata = get64(p + 24);
      m.payload = b.subspan(kDataHeaderSize, len);
      d.msg = m;
      return d;
    }
    case MsgType::kClientDataAck:
    case MsgType::kHostDataAck:
      d.msg = Ack{d.type == MsgType::kHostDataAck};
      return d;
    case MsgType::kClientSubscribe:
    case MsgType::kClientUnsubscribe: {
      if (!need(kSubscribeSize)) return fail(DecodeError::kTooShort);
      d.msg = Subscribe{d.type == MsgType::kClientSubscribe, get32(p + 12)};
      return d;
    }
  }
  return fail(DecodeError::kBadType);
}

}  // namespace roce::netfr
