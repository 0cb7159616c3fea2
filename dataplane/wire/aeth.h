/// @file
/// ACK Extended Transport Header, 4 bytes (IBA Vol.1 9.3.5): syndrome and MSN. The syndrome's
/// bits 6..5 say ACK, RNR NAK or NAK; bits 4..0 carry a credit code, an RNR timer code or a
/// NAK code (IBA Table 44; values as in Linux ib_hdrs.h).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/psn.h"
#include "dataplane/wire/view.h"

namespace roce::wire {

enum class AckType : std::uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };

enum class NakCode : std::uint8_t {
  kPsnSeqError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};

/// "No credit information": what rxe always advertises.
inline constexpr std::uint8_t kCreditInvalid = 0x1F;

/// AETH syndrome byte with its three readings.
class Syndrome {
 public:
  constexpr explicit Syndrome(std::uint8_t raw = 0) : raw_(raw) {}
  static constexpr Syndrome ack(std::uint8_t credit_code = kCreditInvalid) {
    return Syndrome(static_cast<std::uint8_t>(credit_code & 0x1F));
  }
  static constexpr Syndrome rnr_nak(std::uint8_t timer_code) {
    return Syndrome(static_cast<std::uint8_t>(0x20 | (timer_code & 0x1F)));
  }
  static constexpr Syndrome nak(NakCode code) {
    return Syndrome(static_cast<std::uint8_t>(0x60 | static_cast<std::uint8_t>(code)));
  }
  constexpr std::uint8_t raw() const { return raw_; }
  constexpr AckType type() const { return static_cast<AckType>((raw_ >> 5) & 0x3); }
  /// Credit code (ACK), timer code (RNR NAK) or NAK code (NAK).
  constexpr std::uint8_t value() const { return raw_ & 0x1F; }
  constexpr NakCode nak_code() const { return static_cast<NakCode>(value()); }
  friend constexpr bool operator==(Syndrome, Syndrome) = default;

 private:
  std::uint8_t raw_;
};

/// Credits granted by each credit code (IBA Table 45); code 31 means "no credit information".
inline constexpr std::array<std::uint16_t, 31> kCreditTable{
    0,   1,   2,   3,   4,    6,    8,    12,   16,   24,   32,   48,    64,    96,    128,  192,
    256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768};

/// Minimum RNR delay in microseconds for each RNR timer code (IBA Table 46). Code 0 is the
/// longest (655.36 ms), not the shortest.
inline constexpr std::array<std::uint32_t, 32> kRnrTimerUs{
    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

/// The largest credit code whose credit count does not exceed `credits`.
constexpr std::uint8_t credit_code_for(std::uint32_t credits) {
  // From code 2 on, the table alternates 2^k (code 2k) and 3 * 2^(k-1) (code 2k + 1): the
  // code is twice the top bit's position plus the bit below it (every ACK asks; the binary
  // search it replaces was 74 instructions per ACK).
  if (credits < 2) return static_cast<std::uint8_t>(credits);
  if (credits >= kCreditTable.back()) return kCreditTable.size() - 1;
  const unsigned k = static_cast<unsigned>(std::bit_width(credits)) - 1;
  return static_cast<std::uint8_t>(2 * k + ((credits >> (k - 1)) & 1));
}

template <class Byte>
class BasicAethView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 4;
  using ViewBase<Byte>::ViewBase;

  Syndrome syndrome() const { return Syndrome(p_[0]); }
  Msn msn() const { return Msn{load_be32(p_) & 0xFFFFFFu}; }

  void set_syndrome(Syndrome s) requires M { p_[0] = s.raw(); }
  void set_msn(Msn m) requires M { store_be24(p_ + 1, m.raw()); }
};

using AethView = BasicAethView<std::uint8_t>;
using ConstAethView = BasicAethView<const std::uint8_t>;

}  // namespace roce::wire
