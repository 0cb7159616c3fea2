/// @file
/// The rsockets wire format and the checks of a peer's messages (rsocket_proto.h).
#include "verbs/rdmacm/rsocket_proto.h"

#include <endian.h>

#include <cerrno>
#include <cstring>

namespace roce::rsockets {

int value_to_scale(int value, int bits) {
  const int half = 1 << (bits - 1);
  return value <= half ? value : half | (value >> bits);
}

int scale_to_value(int value, int bits) {
  const int half = 1 << (bits - 1);
  return value <= half ? value : (value & ~half) << bits;
}

int parse_conn(const void* data, std::size_t len, Peer& out) {
  if (data == nullptr || len < sizeof(ConnData)) return EPROTO;
  ConnData c;
  std::memcpy(&c, data, sizeof c);
  if (c.version != kVersion) return ENOTSUP;
  Peer p;
  p.sgl_addr = be64toh(c.target_sgl.addr);
  p.sgl_key = be32toh(c.target_sgl.key);
  p.sgl_count = be32toh(c.target_sgl.length);
  p.credits = be16toh(c.credits);
  p.first_buf = {be64toh(c.data_buf.addr), be32toh(c.data_buf.key), be32toh(c.data_buf.length)};
  p.swap = ((c.flags & kFlagNet) != 0) != host_is_net();
  if (c.flags & kFlagIomap) {
    p.iomap_addr = p.sgl_addr + sizeof(Sge) * p.sgl_count;
    p.iomap_count = static_cast<std::uint32_t>(scale_to_value(c.iomap_scale, 8));
  }
  // A data message's length has 29 bits; no SGL entry, no credit or no buffer: nothing could
  // ever be sent.
  if (p.credits == 0 || p.sgl_count == 0 || p.sgl_count > 0xFFFF || p.first_buf.length == 0 ||
      p.first_buf.length > (1u << 29) - 1)
    return EPROTO;
  out = p;
  return 0;
}

ConnData format_conn(std::uint64_t target_addr, std::uint32_t target_rkey, int iomap_entries,
                     std::uint64_t rbuf_addr, std::uint32_t rbuf_rkey, std::uint32_t rbuf_size,
                     std::uint16_t rq_size) {
  ConnData c{};
  c.version = kVersion;
  c.flags = kFlagIomap | (host_is_net() ? kFlagNet : 0);
  c.credits = htobe16(rq_size);
  c.iomap_scale = static_cast<std::uint8_t>(value_to_scale(iomap_entries, 8));
  c.target_sgl = {htobe64(target_addr), htobe32(target_rkey), htobe32(kSglSize)};
  c.data_buf = {htobe64(rbuf_addr), htobe32(rbuf_rkey), htobe32(rbuf_size >> 1)};
  return c;
}

void Ledger::reset(std::uint32_t first_grant, std::uint32_t rq_size, std::uint32_t iomap_entries,
                   std::uint16_t peer_rq, std::uint32_t peer_chunk) {
  region_ = left_ = first_grant;
  regions_ = 0;
  unread_ = 0;
  rq_ = rq_size;
  iomap_ = iomap_entries;
  peer_rq_ = peer_rq;
  peer_chunk_ = peer_chunk;
}

int Ledger::accept(std::uint32_t imm, std::uint16_t sseq_no, Effect& out) {
  const std::uint32_t d = msg_data(imm);
  out = {};
  switch (msg_op(imm)) {
    case kOpData:
      if (unread_ >= rq_) return EPROTO;
      if (left_ == 0 && regions_ > 0 && d > 0) {  // the region is full: the next one starts
        --regions_;
        left_ = region_;
      }
      if (d > left_) return EPROTO;
      left_ -= d;
      ++unread_;
      out = {Effect::kData, d};
      return 0;
    case kOpSgl: {
      // The sequence up to which we may send: the peer's messages read plus its queue depth,
      // so never more than its depth ahead of what we sent (16 bits, as rsocket.c keeps it).
      const auto comp = static_cast<std::uint16_t>(d);
      if (static_cast<std::uint16_t>(comp - sseq_no) > peer_rq_) return EPROTO;
      out = {Effect::kCredits, comp};
      return 0;
    }
    case kOpIomapSgl:
      if ((d & 0xFFFF) >= iomap_) return EPROTO;
      out = {Effect::kIomap, d & 0xFFFF};
      return 0;
    case kOpCtrl:
      if (d == kCtrlDisconnect)
        out.kind = Effect::kDisconnect;
      else if (d == kCtrlShutdown)
        out.kind = Effect::kShutdown;
      else if (d != kCtrlKeepalive)
        return EPROTO;
      return 0;
    default:  // reserved operations and kOpWrite, which never carries an immediate
      return EPROTO;
  }
}

}  // namespace roce::rsockets
