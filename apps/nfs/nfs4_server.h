/// @file
/// An NFSv4.1 server (RFC 8881, a minimal one) over the same export as the NFSv3 server: RPC
/// calls of program 100003 version 4 in, replies out, no transport (the RPC-over-RDMA transport
/// of server_transport.h carries it as it carries v3, RFC 8267's reduced READ data included).
///
/// File handles, their checks (beneath the export's root, MAC'd, persistent) and each call's
/// identity are the v3 server's (NfsServer::resolve, handle_in, run_as): one export, one kind of
/// handle. State (clients, sessions, slots and their reply cache, opens, locks) is this server's
/// alone, bounded by v4::Limits. No delegations, no backchannel yet: CREATE_SESSION does not
/// grant CONN_BACK_CHAN, OPEN answers OPEN_DELEGATE_NONE.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>

#include "apps/nfs/nfs4.h"
#include "apps/nfs/nfs4_state.h"
#include "apps/nfs/nfs_server.h"

namespace roce::nfs {

struct Nfs4Stats {
  std::uint64_t compounds = 0, ops = 0, errors = 0, garbage = 0, replays = 0;
  std::uint64_t resource = 0;  ///< NFS4ERR_RESOURCE answers: a table was full
  std::map<std::uint32_t, std::uint64_t> by_op;
};

class Nfs4Server {
 public:
  explicit Nfs4Server(NfsServer& files, v4::Limits limits = {});
  Nfs4Server(const Nfs4Server&) = delete;
  Nfs4Server& operator=(const Nfs4Server&) = delete;

  /// One call of the NFS program version 4 (NULL or COMPOUND).
  void handle(const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& out);
  /// Whether `call` is an RPC call of program 100003 version 4 (for the transport's dispatch).
  static bool is_v4(std::span<const std::uint8_t> call);

  Nfs4Stats stats() const {
    std::lock_guard g(mu_);
    return st_;
  }
  /// The counts and the tables' sizes without waiting (for a poll loop): false, and nothing
  /// read, while a COMPOUND holds the server.
  bool try_stats(Nfs4Stats& s, std::size_t& clients, std::size_t& sessions,
                 std::size_t& states) const {
    std::unique_lock g(mu_, std::try_to_lock);
    if (!g.owns_lock()) return false;
    s = st_;
    clients = clients_.size();
    sessions = sessions_.size();
    states = states_.size();
    return true;
  }
  std::size_t clients() const {
    std::lock_guard g(mu_);
    return clients_.size();
  }
  std::size_t sessions() const {
    std::lock_guard g(mu_);
    return sessions_.size();
  }
  std::size_t states() const {
    std::lock_guard g(mu_);
    return states_.size();
  }
  /// Seconds of a monotonic clock (leases); tests replace it.
  std::function<std::int64_t()> now;
  std::uint32_t max_io = 1u << 20;  ///< maxread, maxwrite

 private:
  struct Compound;
  using Other = std::array<std::uint8_t, 12>;
  void compound(Compound& c, XdrDecoder& d, XdrEncoder& e, RpcReply& out);
  v4::Status op(Compound& c, std::uint32_t op, XdrDecoder& d, XdrEncoder& e, RpcReply& out,
                bool last);
  // Sessions and clients.
  v4::Status exchange_id(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status create_session(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status sequence(Compound& c, XdrDecoder& d, XdrEncoder& e, std::uint32_t nops);
  v4::Status destroy_session(Compound& c, XdrDecoder& d);
  v4::Status destroy_clientid(Compound& c, XdrDecoder& d);
  void forget_client(std::uint64_t clientid);
  /// Whether a client record holds state or a live lease (another principal may not take it).
  bool in_use(const v4::Client& cl) const;
  /// Counts `delta` bytes of state to the client (and the total); room(): whether `more` fit.
  void charge(std::uint64_t clientid, std::ptrdiff_t delta);
  bool room(const v4::Client& cl, std::size_t more) const;
  /// Forgets clients whose lease ran out (a courteous server keeps them until room is needed).
  void reap_expired();
  // Files.
  v4::Status current(Compound& c, NfsServer::Resolved& r);
  v4::Status getattr(Compound& c, XdrDecoder& d, XdrEncoder& e);
  void encode_attrs(XdrEncoder& e, const v4::Bitmap& want, const NfsServer::Resolved& r,
                    const v3::Fh* fh, std::uint32_t rdattr_error = 0);
  v4::Status lookup(Compound& c, XdrDecoder& d);
  v4::Status lookupp(Compound& c);
  v4::Status access(Compound& c, XdrDecoder& d, XdrEncoder& e);
  // Opens, I/O and the name space.
  struct SetAttrs;
  v4::Status decode_sattr(XdrDecoder& d, SetAttrs& a);
  v4::Status apply(const NfsServer::Resolved& r, const SetAttrs& a, v4::Bitmap& set);
  /// The state `sid` names for I/O on `file` (nullptr for the anonymous and bypass stateids).
  v4::Status check_stateid(Compound& c, v4::Stateid sid, const NfsServer::Resolved* file,
                           v4::State** out);
  v4::Stateid new_state(v4::State st);
  void drop_state(const Other& o);
  /// Forgets the client holding a conflicting range when its lease ran out (a courteous
  /// server keeps an expired client's locks only until somebody else wants them).
  bool expired_holder(const v4::Owner& holder);
  v4::Status open(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status close(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status open_downgrade(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status read(Compound& c, XdrDecoder& d, XdrEncoder& e, RpcReply& out, bool last);
  v4::Status write(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status commit(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status create(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status remove(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status rename(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status link(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status readdir(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status readlink(Compound& c, XdrEncoder& e);
  v4::Status setattr(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status lock(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status lockt(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status locku(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status free_stateid(Compound& c, XdrDecoder& d);
  v4::Status test_stateid(Compound& c, XdrDecoder& d, XdrEncoder& e);

  NfsServer& files_;
  v4::Limits lim_;
  mutable std::mutex mu_;
  Nfs4Stats st_;
  std::map<std::uint64_t, v4::Client> clients_;
  std::map<v4::SessionId, v4::Session> sessions_;
  std::map<Other, v4::State> states_;
  std::map<v4::FileKey, v4::FileLocks> locks_;
  /// The stateids of each file (OPEN, LOCK and CLOSE look at one file's, not every state).
  std::multimap<v4::FileKey, Other> by_file_;
  std::size_t bytes_ = 0;   ///< every client's charged state bytes
  std::uint64_t boot_ = 0;  ///< the high half of client ids: this server instance
  std::uint32_t next_client_ = 1, next_session_ = 1;
  std::uint64_t next_state_ = 1;
  v4::Verifier boot_verf_{};
  std::uint64_t root_dev_ = 0, root_ino_ = 0;  ///< the export's root
};

}  // namespace roce::nfs
