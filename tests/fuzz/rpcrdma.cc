/// @file
/// Fuzz target: what an RPC-over-RDMA peer sends us (apps/nfs): the transport header decoder,
/// the RPC call header that follows it, and the NFSv3 argument and result decoders the client
/// and server run on it. A header the decoder accepts must encode back to the bytes it came
/// from (the header's XDR has one encoding); nothing may read past the input.
#include "apps/nfs/rpcrdma.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "apps/nfs/nfs3.h"
#include "apps/nfs/rpc.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace roce::nfs;
  const std::span<const std::uint8_t> in(data, size);
  rdma::Header h;
  std::size_t len = 0;
  const auto e = rdma::decode(in, h, len);
  (void)rdma::to_string(e);
  if (e == rdma::DecodeError::kOk) {
    if (len > size) std::abort();
    std::vector<std::uint8_t> again;
    if (rdma::encode(h, again) != len || std::memcmp(again.data(), data, len) != 0) std::abort();
    const auto body = in.subspan(len);
    XdrDecoder d(body);
    rpc::CallHeader call;
    if (rpc::decode(d, call)) (void)rpc::parse_auth_sys(call.cred);
    XdrDecoder r(body);
    rpc::ReplyHeader reply;
    if (rpc::decode(r, reply)) (void)rpc::to_string(reply);
  }
  // The NFS result decoders on the raw bytes.
  {
    XdrDecoder d(in);
    v3::decode_readdirplus(d);
  }
  {
    XdrDecoder d(in);
    v3::decode_lookup(d);
  }
  {
    XdrDecoder d(in);
    v3::decode_read_head(d);
  }
  {
    XdrDecoder d(in);
    v3::decode_write(d);
  }
  {
    XdrDecoder d(in);
    v3::decode_create(d);
  }
  {
    XdrDecoder d(in);
    v3::decode_fsinfo(d);
  }
  {
    XdrDecoder d(in);
    v3::decode_mount(d);
  }
  {
    XdrDecoder d(in);
    v3::decode_sattr(d);
  }
  (void)rdma::decode_private(in);
  return 0;
}
