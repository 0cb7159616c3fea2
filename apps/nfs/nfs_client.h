/// @file
/// An NFSv3 client over RPC-over-RDMA (transport.h): the calls roce-nfs needs, synchronous,
/// plus whole-file reads and writes that keep up to the credit limit of READs or WRITEs in
/// flight. READ data arrives through write chunks and WRITE data leaves through read chunks
/// once larger than `ddp_threshold`; READDIRPLUS offers a reply chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "apps/nfs/nfs3.h"
#include "apps/nfs/rpc.h"
#include "apps/nfs/transport.h"

namespace roce::nfs {

class NfsClient {
 public:
  explicit NfsClient(RpcTransport& t) : t_(t) {}

  /// The last error ("NFS3ERR_NOENT", "RDMA_ERROR ERR_CHUNK", ...).
  const std::string& error() const { return err_; }

  bool null();
  std::optional<v3::Fattr> getattr(const v3::Fh& fh);
  std::optional<v3::LookupRes> lookup(const v3::Fh& dir, const std::string& name);
  /// Walks "a/b/c" from `root`.
  std::optional<v3::LookupRes> walk(const v3::Fh& root, const std::string& path);
  std::optional<v3::FsinfoRes> fsinfo(const v3::Fh& fh);
  /// Every entry of `dir` (READDIRPLUS until eof).
  std::optional<std::vector<v3::DirEntry>> readdir(const v3::Fh& dir);
  std::optional<v3::CreateRes> create(const v3::Fh& dir, const std::string& name,
                                      std::uint32_t mode);
  bool remove(const v3::Fh& dir, const std::string& name);
  bool commit(const v3::Fh& fh);

  /// Reads `len` bytes at `offset` into `out`; the bytes read, or nullopt.
  std::optional<std::uint32_t> read(const v3::Fh& fh, std::uint64_t offset, std::uint8_t* out,
                                    std::uint32_t len, bool* eof = nullptr);
  std::optional<std::uint32_t> write(const v3::Fh& fh, std::uint64_t offset,
                                     std::span<const std::uint8_t> data, v3::StableHow how);

  /// The whole file (`size` bytes) in `io`-sized READs, up to `depth` at once.
  bool read_file(const v3::Fh& fh, std::uint64_t size, std::vector<std::uint8_t>& out,
                 std::uint32_t io, std::uint32_t depth);
  /// `data` into the file in UNSTABLE WRITEs of `io` bytes, up to `depth` at once, then COMMIT.
  bool write_file(const v3::Fh& fh, std::span<const std::uint8_t> data, std::uint32_t io,
                  std::uint32_t depth);

  std::uint32_t ddp_threshold = 1024;  ///< READ/WRITE payloads above this use chunks
  rpc::AuthSys auth{0, "roce-nfs", 0, 0, {}};

 private:
  std::vector<std::uint8_t> header(v3::Proc p, XdrEncoder*& e, std::vector<std::uint8_t>& buf);
  /// Sends the call and checks the RPC reply header; the decoder is left at the results.
  std::optional<RpcResult> invoke(RpcCall c);
  bool check(XdrDecoder& d, const RpcResult& r);
  RpcCall read_call(const v3::Fh& fh, std::uint64_t offset, std::uint8_t* out, std::uint32_t len);
  std::optional<std::uint32_t> read_done(const RpcResult& r, std::uint8_t* out, std::uint32_t len,
                                         bool* eof);
  RpcCall write_call(const v3::Fh& fh, std::uint64_t offset, std::span<const std::uint8_t> data,
                     v3::StableHow how);
  std::optional<std::uint32_t> write_done(const RpcResult& r);

  RpcTransport& t_;
  std::uint32_t xid_ = 0x10000000u;
  std::string err_;
};

}  // namespace roce::nfs
