/// @file
/// A tiny application hosted in roced: every message a peer sends on an rdma_cm connection comes
/// back to it unchanged. It is the walkthrough of docs/new-application.md: one folder, one
/// HostedService (runtime/service.h) written on libroce (<roce/client.h>) and the connection
/// layer (<roce/conn.h>), registered under the kind `echo` with three keys of its own:
///
///   services:
///     - kind: echo
///       port: p0
///       listen_port: 7471        # the rdma_cm port (the default)
///       max_connections: 16      # at once; requests beyond are rejected
///       message_size: 4096       # the largest message echoed
///       selective_repeat: false  # accept a client's offer (ECE; transport.selective_repeat)
///
/// Each connection gets kDepth receive buffers of message_size bytes in one registered region;
/// a message received is sent back from the buffer it arrived in, which is posted again once
/// the SEND completes.
#include <roce/client.h>
#include <roce/conn.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/service.h"

namespace roce::echo {

namespace {

constexpr std::uint32_t kDepth = 4;  ///< receives posted per connection

class EchoService final : public runtime::HostedService {
 public:
  explicit EchoService(runtime::ServiceEnv& env)
      : env_(env),
        max_connections_(env.config.option_uint("max_connections", 16, 1, 1024)),
        message_size_(env.config.option_uint("message_size", 4096, 64, 1 << 20)),
        selective_repeat_(env.config.option_bool("selective_repeat", false)) {}
  ~EchoService() override { stop(); }

  void start() override {
    ctx_ = env_.open_context();
    conn::Options o;
    o.max_connections = max_connections_;
    o.selective_repeat = selective_repeat_;  // accept a client's offer (ECE)
    ep_ = std::make_unique<conn::Endpoint>(*ctx_, o);
    if (const int rc = ep_->listen(env_.config.listen_port); rc != 0)
      throw std::runtime_error("rdma_cm port " + std::to_string(env_.config.listen_port) + ": " +
                               std::strerror(rc));
    // One region: kDepth buffers for each connection the service may have.
    const std::size_t bytes = max_connections_ * kDepth * message_size_;
    buf_ = ctx_->alloc_buffer(bytes);
    if (buf_ == nullptr) throw std::runtime_error("no memory for the buffers");
    mr_ = ctx_->reg_mr(ep_->pd(), buf_->addr, bytes, verbs::kAccessLocalWrite);
    if (mr_ == nullptr) throw std::runtime_error("cannot register the buffers");
    slots_.assign(max_connections_, Slot{});
    std::printf(
        "  service echo: rdma_cm port %u on port %s, %zu connections of %zu-byte messages\n",
        env_.config.listen_port, env_.port_name.c_str(), max_connections_, message_size_);
    std::fflush(stdout);
  }

  bool poll() override {
    events_.clear();
    wcs_.clear();
    if (!ep_->poll(events_, wcs_)) return false;
    for (const conn::Event& e : events_) on_event(e);
    for (const conn::Completion& c : wcs_) on_completion(c);
    return true;
  }

  void stop() override {
    ep_.reset();  // disconnects every peer (their DREQs answered) and destroys the QPs
    if (mr_ != nullptr) ctx_->dereg_mr(mr_);
    if (buf_ != nullptr) ctx_->free_buffer(buf_);
    mr_ = nullptr;
    buf_ = nullptr;
    ctx_.reset();
  }

  void counters(std::vector<runtime::ServiceCounter>& out) const override {
    out.push_back({"echo_connections_now", "echo connections open", open_, true});
    out.push_back({"echo_connections", "echo connections accepted", accepted_, false});
    out.push_back(
        {"echo_rejected", "echo connection requests refused (max_connections)", rejected_, false});
    out.push_back({"echo_messages", "messages echoed", messages_, false});
    out.push_back({"echo_bytes", "bytes echoed", bytes_, false});
  }

  std::string report() const override {
    return "  service echo: " + std::to_string(accepted_) + " connections, " +
           std::to_string(messages_) + " messages (" + std::to_string(bytes_) + " bytes) echoed, " +
           std::to_string(rejected_) + " refused, " + std::to_string(errors_) + " errors\n";
  }

 private:
  // Slot group g (one per connection) holds buffers g * kDepth .. g * kDepth + kDepth - 1.
  std::uint8_t* buffer(std::uint64_t b) const {
    return static_cast<std::uint8_t*>(buf_->addr) + b * message_size_;
  }
  int post_recv(conn::ConnId c, std::uint64_t b) {
    client::Sge sge{reinterpret_cast<std::uintptr_t>(buffer(b)),
                    static_cast<std::uint32_t>(message_size_), mr_->lkey};
    client::RecvWr wr;
    wr.wr_id = b;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ep_->post_recv(c, wr);
  }
  std::optional<std::size_t> group_of(conn::ConnId c) const {
    for (std::size_t g = 0; g < slots_.size(); ++g)
      if (slots_[g].conn == c) return g;
    return std::nullopt;
  }

  void on_event(const conn::Event& e) {
    switch (e.kind) {
      case conn::Event::kConnectRequest: {
        const auto g = group_of(0);  // a free group
        if (!g) {
          ++rejected_;
          ep_->reject(e.conn);
          return;
        }
        conn::QpSizes s;
        s.send = kDepth;
        s.recv = kDepth;
        if (ep_->prepare(e.conn, s) != 0) {
          ++errors_;
          ep_->reject(e.conn);
          return;
        }
        slots_[*g] = Slot{e.conn, false};
        for (std::uint32_t k = 0; k < kDepth; ++k) post_recv(e.conn, *g * kDepth + k);
        if (ep_->accept(e.conn) != 0) {
          ++errors_;
          release(*g);
          ep_->reject(e.conn);
        }
        return;
      }
      case conn::Event::kEstablished:
        if (const auto g = group_of(e.conn)) {
          slots_[*g].up = true;
          ++accepted_;
          ++open_;
        }
        return;
      case conn::Event::kDisconnected:
      case conn::Event::kRejected:      // a REJ to our REP (the peer gave the connection up)
      case conn::Event::kUnreachable:   // no RTU: the peer went before the connection was up
      case conn::Event::kConnectError:  // every way a connection ends gives its slot back
        if (const auto g = group_of(e.conn)) release(*g);
        return;
    }
  }
  void release(std::size_t g) {
    if (slots_[g].up) --open_;
    slots_[g] = Slot{};
  }

  void on_completion(const conn::Completion& c) {
    const std::uint64_t b = c.wc.wr_id;
    const auto g = group_of(c.conn);
    if (!g) return;  // a connection let go earlier in this batch
    if (!c.ok()) {
      // Flushed: the peer disconnected and its QP went to the error state before the CM
      // event reached us (kDisconnected follows). Anything else (a message beyond
      // message_size, retries exceeded) ends the connection: its QP is in the error state and
      // a peer that then stays silent would hold the slot for good.
      if (c.wc.status != verbs::WcStatus::kWrFlushErr) {
        ++errors_;
        ep_->disconnect(c.conn);  // no event follows
        release(*g);
      }
      return;
    }
    if (c.wc.opcode == client::WcOpcode::kRecv) {
      // Back to the sender, from the buffer it arrived in.
      client::Sge sge{reinterpret_cast<std::uintptr_t>(buffer(b)) + c.wc.offset, c.wc.byte_len,
                      mr_->lkey};
      client::SendWr wr;
      wr.wr_id = b;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = client::WrOpcode::kSend;
      wr.send_flags = verbs::kSendSignaled;
      if (ep_->post_send(c.conn, wr) != 0) {
        ++errors_;
        return;
      }
      ++messages_;
      bytes_ += c.wc.byte_len;
    } else if (c.wc.opcode == client::WcOpcode::kSend) {
      post_recv(c.conn, b);  // the buffer is free again
    }
  }

  runtime::ServiceEnv& env_;
  const std::size_t max_connections_, message_size_;
  const bool selective_repeat_;
  std::unique_ptr<client::Context> ctx_;
  std::unique_ptr<conn::Endpoint> ep_;
  client::Buffer* buf_ = nullptr;
  client::Mr* mr_ = nullptr;
  struct Slot {
    conn::ConnId conn = 0;  ///< 0: free
    bool up = false;        ///< established (counted in open_)
  };
  std::vector<Slot> slots_;  ///< the connection of each slot group
  std::vector<conn::Event> events_;
  std::vector<conn::Completion> wcs_;
  std::uint64_t open_ = 0, accepted_ = 0, rejected_ = 0, messages_ = 0, bytes_ = 0, errors_ = 0;
};

// The kind: its name in `services[i].kind`, its own keys (the configuration reader refuses any
// other), how roced --check checks an entry, and how roced makes one.
const runtime::RegisterService kEcho{{
    .name = "echo",
    .description = "sends every message of an rdma_cm connection back (docs/new-application.md)",
    .keys = {{"max_connections", "connections at once, 1..1024 (16)"},
             {"message_size", "the largest message echoed, 64..1048576 bytes (4096)"},
             {"selective_repeat",
              "accept a client's selective repeat offer (ECE; needs transport.selective_repeat: "
              "true) (false)"}},
    .default_port = 7471,
    .blocking = false,
    .check =
        [](const ctl::ServiceConfig& sc) {
          sc.option_uint("max_connections", 16, 1, 1024);
          sc.option_uint("message_size", 4096, 64, 1 << 20);
          sc.option_bool("selective_repeat", false);
          if (!sc.args.empty()) throw std::runtime_error("echo takes no args (its keys instead)");
        },
    .make = [](runtime::ServiceEnv& env) -> std::unique_ptr<runtime::HostedService> {
      return std::make_unique<EchoService>(env);
    },
}};

}  // namespace

}  // namespace roce::echo
