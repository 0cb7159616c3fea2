/// @file
/// The NetFR host (netfr.h): listens on two rdma_cm ports (primary, secondary), serves one
/// client at a time (a second one is refused with a ServerHello "rejected" in the REJ), writes
/// frames into the smallest free buffer the client advertised that fits, and exchanges
/// datagrams both ways.
#pragma once

#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <string>

#include "apps/netfr/bench.h"
#include "apps/netfr/endpoint.h"

namespace roce::netfr {

struct RemoteBuffer {
  bool known = false, busy = false;
  unsigned channel = 0;
  std::uint64_t addr = 0, size = 0;
  std::uint32_t rkey = 0, page_size = 0;
};

struct Held {
  std::uint32_t slot;
  std::uint32_t length;
  std::uint64_t udata;
};

class Host : public Endpoint {
 public:
  Host(Fabric& f, const NFRInitOpts& o) : Endpoint(f) {
    port_ = primary_port(o);
    nonblocking_ = o.blocking == 0;
    if (o.timeoutSec > 0) timeout_s_ = o.timeoutSec;
    if (o.keepaliveSec > 0) keepalive_s_ = o.keepaliveSec;
    takes_ = o.keepaliveSec < 0 ? kExtAll & ~kExtKeepalive : kExtAll;
  }
  ~Host() override {
    close_channels();
    for (auto& m : mems_) {
      forget_memory(m.get());
      fab_.dereg_mr(m->mr);
    }
  }

  bool start() { return fab_.listen(port_) && fab_.listen(static_cast<std::uint16_t>(port_ + 1)); }

  int process() {
    pump();
    // Write callbacks run here only (as upstream's, which reads its CQ in nfrHostProcess): a
    // completion seen by any other call (nfrHostReadData, a blocking wait, another object's
    // call on the shared stack) is queued for this host's next process().
    while (!callbacks_.empty()) {
      NFRCallbackInfo c = callbacks_.front();
      callbacks_.pop_front();
      c.callback(const_cast<const void**>(c.uData));
    }
    return connected() ? 0 : -ENOTCONN;
  }
  bool connected() const { return ch_[0].up && ch_[1].up; }
  int clients(int index) const {
    if (index < 0 || index >= NETFR_CHANNEL_COUNT) return -EINVAL;
    return ch_[static_cast<unsigned>(index)].up ? 1 : 0;
  }

  int send_data(int channel, const void* data, std::uint32_t len, std::uint64_t udata) {
    if (channel < 0 || channel >= NETFR_CHANNEL_COUNT || !data || len == 0) return -EINVAL;
    if (len > NETFR_MESSAGE_MAX_PAYLOAD_SIZE) return -ENOBUFS;  // upstream's value
    const unsigned ch = static_cast<unsigned>(channel);
    if (!connected()) return -ENOTCONN;
    int r = wait_credit(ch);
    if (r) return r;
    Data m;
    m.from_host = true;
    m.channel_serial = ch_[ch].tx_channel_serial + 1;  // upstream counts from 1
    m.msg_serial = next_msg_serial(ch);
    m.udata = udata;
    m.payload = {static_cast<const std::uint8_t*>(data), len};
    std::uint8_t buf[NETFR_MESSAGE_MAX_SIZE];
    const std::size_t n = encode(buf, m);
    r = send_message(ch, buf, n, true);
    if (r == 0) {
      if (ext_ & kExtTotalOrder) ++msg_serial_;
      ++ch_[ch].tx_channel_serial;
    }
    return r;
  }

  int read_data(int channel, void* data, std::uint32_t* max_len, std::uint64_t* udata) {
    if (channel < 0 || channel >= NETFR_CHANNEL_COUNT || !max_len) return -EINVAL;
    const unsigned ch = static_cast<unsigned>(channel);
    pump();
    auto& q = held_[ch];
    if (q.empty()) return -EAGAIN;  // as upstream's, client or not (nfrHostProcess tells that)
    const Held h = q.front();
    if (*max_len < h.length || !data) {
      *max_len = h.length;
      return -ENOBUFS;
    }
    *max_len = h.length;
    std::memcpy(data, rx_slot(ch, h.slot) + kDataHeaderSize, h.length);
    if (udata) *udata = h.udata;
    q.pop_front();
    repost(ch, h.slot);
    send_ack(ch, false);
    return 0;
  }

  int write_buffer(NFRMemory* mem, std::uint64_t loff, std::uint64_t roff, std::uint64_t len,
                   std::uint64_t udata, const NFRCallbackInfo* cb) {
    if (!mem || len == 0 || loff + len > mem->size || loff + len < loff) return -EINVAL;
    // len <= mem->size <= NETFR_MAX_BUFFER_SIZE: with roff bounded first, roff + len cannot
    // wrap (a wrapped sum passed the buffer checks below and wrote before the buffer).
    if (roff > NETFR_MAX_BUFFER_SIZE || roff + len > NETFR_MAX_BUFFER_SIZE) return -EMSGSIZE;
    const unsigned ch = mem->channel;
    if (!connected()) return -ENOTCONN;
    // The smallest free buffer on this channel that holds roff + len.
    int best = -1;
    bool any_fits = false;
    for (;;) {
      for (unsigned i = 0; i < NETFR_MAX_MEM_REGIONS; ++i) {
        const RemoteBuffer& b = remote_[i];
        if (!b.known || b.channel != ch || b.size < roff + len) continue;
        any_fits = true;
        if (!b.busy && (best < 0 || b.size < remote_[static_cast<unsigned>(best)].size))
          best = static_cast<int>(i);
      }
      if (best >= 0) break;
      if (!any_fits) {
        ++too_large_;
        return -ENOBUFS;  // upstream: no buffer that fits, whether none is large enough or busy
      }
      if (nonblocking_) return -ENOBUFS;
      // Blocking: wait for the client to give a buffer back.
      if (!wait_until([&] {
            if (!connected()) return true;
            for (const auto& b : remote_)
              if (b.known && b.channel == ch && !b.busy && b.size >= roff + len) return true;
            return false;
          }))
        return -ENOBUFS;
      if (!connected()) return -ENOTCONN;
      any_fits = false;
    }
    RemoteBuffer& b = remote_[static_cast<unsigned>(best)];
    auto* src = static_cast<std::uint8_t*>(mem->mr.addr) + loff;
    if (mem->bounced()) std::memcpy(src, static_cast<const std::uint8_t*>(mem->ptr) + loff, len);
    if (!post_write(ch, src, static_cast<std::uint32_t>(len), mem->mr.lkey, b.addr + roff, b.rkey))
      return -EIO;
    BufferUpdate u;
    u.buffer_index = static_cast<std::uint32_t>(best);
    u.payload_size = static_cast<std::uint32_t>(len);
    u.payload_offset = static_cast<std::uint32_t>(roff);
    u.channel_serial = ch_[ch].tx_channel_serial + 1;
    u.write_serial = next_msg_serial(ch);
    u.udata = udata;
    std::uint8_t buf[kBufferUpdateSize];
    encode(buf, u);
    // The memory stays (free_memory: -EBUSY) until the notification behind the WRITE
    // completed or failed: until then the stack may still read it. The callback runs in
    // process() (upstream's thread for it).
    NFRCallbackInfo copy{};
    const bool has_cb = cb && cb->callback;
    if (has_cb) copy = *cb;
    std::function<void(int)> done = [this, copy, has_cb, mem](int st) {
      --mem->writes_in_flight;
      if (st == 0 && has_cb) callbacks_.push_back(copy);
    };
    ++mem->writes_in_flight;
    // Upstream's host takes no credit for a buffer update and its client acknowledges none: the
    // buffer stays busy until the client sends its buffer state again.
    const int r = send_message(ch, buf, sizeof buf, false, std::move(done));
    if (r) {
      --mem->writes_in_flight;  // not sent: send_message dropped the callback
      return r;
    }
    b.busy = true;
    if (ext_ & kExtTotalOrder) ++msg_serial_;
    ++ch_[ch].tx_channel_serial;
    ++stats_.writes;
    stats_.write_bytes += len;
    return best;
  }

  /// Benchmarks only (bench.h): a bare RDMA WRITE into buffer `index`, no notification.
  int raw_write(NFRMemory* mem, std::uint64_t len, std::uint32_t index) {
    if (!mem || len == 0 || len > mem->size || index >= NETFR_MAX_MEM_REGIONS) return -EINVAL;
    const RemoteBuffer& b = remote_[index];
    if (!connected()) return -ENOTCONN;
    if (!b.known || b.size < len || b.channel != mem->channel) return -EMSGSIZE;
    if (mem->bounced()) std::memcpy(mem->mr.addr, mem->ptr, len);
    return post_write(mem->channel, mem->mr.addr, static_cast<std::uint32_t>(len), mem->mr.lkey,
                      b.addr, b.rkey, true)
               ? 0
               : -EIO;
  }

  std::string stats_line() const {
    return stats_.line() + " too_large " + std::to_string(too_large_) + " " + fab_.report();
  }

  /// Forgets one of the host's regions (nfrFreeMemory).
  int free_memory(NFRMemory* m) {
    for (auto it = mems_.begin(); it != mems_.end(); ++it)
      if (it->get() == m) {
        if (m->writes_in_flight) return -EBUSY;  // the stack may still read it
        forget_memory(m);
        fab_.dereg_mr(m->mr);
        mems_.erase(it);
        if (connected()) send_host_buffer_state();
        return 0;
      }
    return -EINVAL;
  }

 private:
  bool memory_fits(std::uint64_t size, std::uint8_t index) const override {
    return size != 0 && size <= NETFR_MAX_BUFFER_SIZE && index < NETFR_CHANNEL_COUNT &&
           mems_.size() < NETFR_MAX_MEM_REGIONS;
  }
  NFRMemory* keep_memory(std::unique_ptr<NFRMemory> m) override {
    if (!m) return nullptr;
    m->host = true;
    mems_.push_back(std::move(m));
    if (connected()) send_host_buffer_state();
    return mems_.back().get();
  }

  /// The message serial: connection-wide with the total-order extension, else the channel's
  /// (upstream's host counts msgSerial per channel).
  std::uint32_t next_msg_serial(unsigned ch) const {
    return (ext_ & kExtTotalOrder) ? msg_serial_ + 1 : ch_[ch].tx_channel_serial + 1;
  }

  int wait_credit(unsigned ch) {
    Channel& c = ch_[ch];
    auto ready = [&] { return c.credits >= NETFR_RESERVED_CREDIT_COUNT && !c.free_tx.empty(); };
    if (ready()) return 0;
    if (nonblocking_) return -EAGAIN;
    ++stats_.credit_waits;
    if (!wait_until([&] { return !connected() || ready(); })) return -ETIMEDOUT;
    return connected() ? 0 : -ENOTCONN;
  }

  /// Our extension: the sizes of the host's memory, to a client that asked for them.
  void send_host_buffer_state() {
    if (!(ext_ & kExtHostSizes)) return;
    HostBufferSizes s;
    for (auto& m : mems_) s.sizes.push_back(m->size);
    std::uint8_t buf[kHostBufferSizesSize];
    encode(buf, s);
    send_message(0, buf, sizeof buf, false);
  }

  void reset_client(const char* why) {
    if (ch_[0].conn || ch_[1].conn) {
      ++stats_.disconnects;
      if (debug_log()) std::fprintf(stderr, "netfr host: client gone: %s\n", why);
    }
    close_channels();
    for (auto& b : remote_) b = RemoteBuffer{};
    for (auto& q : held_) q.clear();
    msg_serial_ = 0;
    ext_ = 0;
    client_ip_.clear();
  }

  bool listens() const override { return true; }

  /// A client with one channel and not the other (never connected, or its RTU never came)
  /// holds the host's one slot and gets nothing: dropped after the time-out, so that the next
  /// client is served. (The keepalive runs on a whole connection only.)
  void on_tick() override {
    if ((!ch_[0].conn && !ch_[1].conn) || connected()) {
      half_since_ns_ = 0;
      return;
    }
    const auto now =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now().time_since_epoch())
                                       .count());
    if (!half_since_ns_) {
      half_since_ns_ = now;
    } else if (now - half_since_ns_ > static_cast<std::uint64_t>(timeout_s_ * 1e9)) {
      half_since_ns_ = 0;
      ++stats_.protocol_errors;
      reset_client("one channel only, the other did not come within the time-out");
    }
  }

  void on_event(const FabricEvent& e) override {
    if (e.kind == FabricEvent::kConnectRequest) {
      on_request(e);
      return;
    }
    const int ch = channel_of(e.conn);
    if (ch < 0) return;
    switch (e.kind) {
      case FabricEvent::kEstablished:
        if (ch_[static_cast<unsigned>(ch)].up) break;  // already, by its first message
        ch_[static_cast<unsigned>(ch)].up = true;
        if (connected()) {
          ++stats_.connects;
          send_host_buffer_state();
        }
        break;
      default:
        reset_client("disconnected");
        break;
    }
  }

  void on_request(const FabricEvent& e) {
    std::uint8_t reply[kServerHelloSize + 1];
    const Decoded d = decode(unwrap_cm_data(e.private_data));
    const bool hello_ok = d.error == DecodeError::kOk && d.type == MsgType::kClientHello;
    const int ch = e.port == port_ ? 0 : e.port == port_ + 1 ? 1 : -1;
    HelloStatus st = HelloStatus::kOk;
    // One client at a time. Upstream's client starts both channels at once, so either may come
    // first: a channel is taken when it is free and the other is free or the same client's.
    const unsigned other = ch == 1 ? 0u : 1u;
    if (!hello_ok || ch < 0)
      st = HelloStatus::kError;
    else if (ch_[static_cast<unsigned>(ch)].conn || (ch_[other].conn && e.peer != client_ip_))
      st = HelloStatus::kRejected;
    if (st != HelloStatus::kOk) {
      const std::size_t n = encode(reply, ServerHello{st});
      fab_.reject(e.conn, wrap_cm_data({reply, n}));
      ++stats_.rejected;
      return;
    }
    const unsigned c = static_cast<unsigned>(ch);
    if (!fab_.prepare(e.conn, kSendDepth, kRxSlots) || !open_channel(c, e.conn)) {
      const std::size_t n = encode(reply, ServerHello{HelloStatus::kError});
      fab_.reject(e.conn, wrap_cm_data({reply, n}));
      ch_[c].conn = 0;
      ch_[c].open = false;
      return;
    }
    // Extensions: what the client offered and we take, fixed by its first channel.
    const std::uint8_t offered = std::get<ClientHello>(d.msg).ext;
    if (!ch_[other].conn) {
      client_ip_ = e.peer;
      ext_ = offered & takes_;
    }
    const std::size_t n = encode(reply, ServerHello{HelloStatus::kOk, ext_});
    if (!fab_.accept(e.conn, wrap_cm_data({reply, n}))) reset_client("accept failed");
  }

  bool on_message(unsigned ch, std::uint32_t slot, const Decoded& d) override {
    switch (d.type) {
      case MsgType::kClientData: {
        const auto& m = std::get<Data>(d.msg);
        if (m.channel_serial != ch_[ch].rx_channel_serial + 1) ++stats_.protocol_errors;
        ch_[ch].rx_channel_serial = m.channel_serial;
        held_[ch].push_back(Held{slot, static_cast<std::uint32_t>(m.payload.size()), m.udata});
        return true;  // acknowledged when read
      }
      case MsgType::kBufferState: {
        // Upstream's host neither takes a credit for it nor acknowledges it. Size 0: released.
        const auto& m = std::get<BufferState>(d.msg);
        RemoteBuffer& b = remote_[m.index];
        if (m.size == 0) {
          b = RemoteBuffer{};
          return false;
        }
        b.known = true;
        b.busy = false;
        b.channel = ch;
        b.addr = m.addr;
        b.size = m.size;
        b.rkey = static_cast<std::uint32_t>(m.rkey);
        b.page_size = m.page_size;
        return false;
      }
      default:
        ++stats_.protocol_errors;
        on_channel_error(ch, "client sent " + std::string(to_string(d.type)));
        return false;
    }
  }

  void on_channel_error(unsigned, const std::string& why) override { reset_client(why.c_str()); }

  std::uint16_t port_;
  std::vector<std::unique_ptr<NFRMemory>> mems_;
  std::array<RemoteBuffer, NETFR_MAX_MEM_REGIONS> remote_{};
  std::array<std::deque<Held>, NETFR_CHANNEL_COUNT> held_;
  std::deque<NFRCallbackInfo> callbacks_;  ///< writes done, callbacks for process() to run
  std::uint32_t msg_serial_ = 0;
  std::uint8_t takes_ = kExtAll;  ///< extensions this host takes when a client offers them
  std::string client_ip_;
  std::uint64_t too_large_ = 0;
  std::uint64_t half_since_ns_ = 0;  ///< since when one channel is connected, not both
};

}  // namespace roce::netfr
