/// @file
/// The test frames of NetFR's frame source (host_service.h) and of the consumers that check
/// them (lg_consumer.cc): what Looking Glass sends, reduced to what a check needs. A frame is
/// a 64-byte header in the manner of KVMFRFrame (magic, sequence number, geometry) followed by
/// width x height RGBA pixels whose every 64-bit word depends on the sequence number and its
/// offset, so a stale, misplaced or foreign byte shows. After each frame a cursor datagram on
/// the secondary channel names the frame it follows; after the last (when the source sends a
/// fixed number) an end datagram on the primary channel gives the count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace roce::netfr::frames {

inline constexpr std::uint32_t kFrameMagic = 0x5246564Bu;   // "KVFR"
inline constexpr std::uint32_t kCursorMagic = 0x5543564Bu;  // "KVCU"
inline constexpr std::uint32_t kEndMagic = 0x4E45564Bu;     // "KVEN"
/// The udata of each kind of message.
enum : std::uint64_t { kUdataFrame = 1, kUdataCursor = 2, kUdataEnd = 3 };

struct FrameHeader {
  std::uint32_t magic = kFrameMagic, version = 1;
  std::uint64_t seq = 0;
  std::uint32_t width = 0, height = 0, stride = 0, format = 0;  ///< format 0: RGBA
  std::uint64_t payload = 0;                                    ///< bytes after the header
  std::uint8_t pad[24] = {};
};
static_assert(sizeof(FrameHeader) == 64);

struct Cursor {
  std::uint32_t magic = kCursorMagic, pad = 0;
  std::uint64_t frame_seq = 0;
  std::int32_t x = 0, y = 0;
};
struct End {
  std::uint32_t magic = kEndMagic, pad = 0;
  std::uint64_t frames = 0;
};

inline std::uint64_t frame_bytes(std::uint32_t width, std::uint32_t height) {
  return sizeof(FrameHeader) + std::uint64_t{width} * 4 * height;
}

inline std::uint64_t word(std::uint64_t seq, std::uint64_t i) {
  return (seq << 40) ^ (i * 0x9E3779B97F4A7C15ull) ^ 0x5bd1e995ull;
}

/// Writes frame `seq` (frame_bytes(width, height) bytes) at `dst`.
inline void render(void* dst, std::uint64_t seq, std::uint32_t width, std::uint32_t height) {
  FrameHeader h;
  h.seq = seq;
  h.width = width;
  h.height = height;
  h.stride = width * 4;
  h.payload = std::uint64_t{width} * 4 * height;
  auto* b = static_cast<std::uint8_t*>(dst);
  std::memcpy(b, &h, sizeof h);
  b += sizeof h;
  for (std::uint64_t i = 0; i < h.payload; i += 8) {  // the payload is a multiple of 4 bytes
    const std::uint64_t w = word(seq, i);
    std::memcpy(b + i, &w, h.payload - i >= 8 ? 8 : 4);
  }
}

/// Checks that [src, src + len) is frame `seq`; the first wrong thing in `why`.
inline bool verify(const void* src, std::uint64_t len, std::uint64_t seq, const char** why) {
  FrameHeader h;
  if (len < sizeof h) return *why = "shorter than a header", false;
  std::memcpy(&h, src, sizeof h);
  if (h.magic != kFrameMagic) return *why = "bad magic", false;
  if (h.seq != seq) return *why = "wrong sequence number", false;
  if (h.stride != h.width * 4 || h.payload != std::uint64_t{h.stride} * h.height ||
      len != sizeof h + h.payload)
    return *why = "geometry does not match the length", false;
  const auto* b = static_cast<const std::uint8_t*>(src) + sizeof h;
  for (std::uint64_t i = 0; i < h.payload; i += 8) {
    const std::uint64_t w = word(seq, i);
    if (std::memcmp(b + i, &w, h.payload - i >= 8 ? 8 : 4) != 0)
      return *why = "pixel data differs", false;
  }
  return true;
}

/// The cursor position after frame `seq`.
inline Cursor cursor_after(std::uint64_t seq) {
  Cursor c;
  c.frame_seq = seq;
  c.x = static_cast<std::int32_t>((seq * 7) % 1920);
  c.y = static_cast<std::int32_t>((seq * 5) % 1080);
  return c;
}

}  // namespace roce::netfr::frames
