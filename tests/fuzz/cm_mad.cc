/// @file
/// Fuzz target: the CM MAD codec (controlplane/cm/mad.cc). Input: one MAD (256 bytes when
/// well-formed; any length is tried). A MAD that decodes must encode again to bytes that
/// decode to the same header and message (the codec loses nothing it keeps); the cma header of
/// a REQ's or SIDR_REQ's private data is decoded too, and re-encoded when valid.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "controlplane/cm/mad.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace roce::cm;

void check(bool ok) {
  if (!ok) std::abort();
}

template <class Msg>
void cma_roundtrip(const Msg& m) {
  std::span<const std::uint8_t, kCmaHeaderSize> in(m.private_data.data(), kCmaHeaderSize);
  if (const auto h = decode_cma_header(in)) {
    std::array<std::uint8_t, kCmaHeaderSize> out{};
    encode_cma_header(*h, out);
    const auto again = decode_cma_header(out);
    check(again && *again == *h);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> mad(data, data + size);  // exact size, for ASan
  MadHeader hdr;
  const MadError herr = decode_header(mad, hdr);
  const DecodedMad d = decode(mad);
  if (herr != MadError::kOk) check(d.error == herr);
  if (!d.ok()) return 0;
  (void)to_string(attr_id_of(d.msg));
  if (const auto* req = std::get_if<ReqMsg>(&d.msg)) cma_roundtrip(*req);
  if (const auto* sreq = std::get_if<SidrReqMsg>(&d.msg)) cma_roundtrip(*sreq);
  const MadBuf again = encode(d.hdr, d.msg);
  const DecodedMad d2 = decode(again);
  check(d2.ok());
  check(d2.hdr == d.hdr);
  check(d2.msg == d.msg);
  return 0;
}
