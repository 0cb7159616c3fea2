/// @file
/// The NetFR client (netfr.h): connects both channels with a ClientHello in the rdma_cm
/// private data, advertises its buffers, and hands the host's messages (datagrams and buffer
/// writes) to the application in upstream's order (each channel in the order the host sent,
/// the primary channel's first), or, with the total-order extension a host of ours takes,
/// strictly in the host's connection-wide serial order across both channels.
#pragma once

#include <cstring>
#include <deque>
#include <map>
#include <string>

#include "apps/netfr/endpoint.h"

namespace roce::netfr {

struct Pending {
  unsigned channel;
  std::uint32_t slot;
  bool write;  ///< a BufferUpdate, else HostData
  std::uint32_t channel_serial;
  std::uint64_t udata;
  std::uint32_t length, offset, buffer;
};

class Client : public Endpoint {
 public:
  Client(Fabric& f, const NFRInitOpts& o) : Endpoint(f) {
    port_ = primary_port(o);
    nonblocking_ = o.blocking == 0;
    if (o.timeoutSec > 0) timeout_s_ = o.timeoutSec;
    if (o.keepaliveSec > 0) keepalive_s_ = o.keepaliveSec;
    offer_ = kExtHostSizes | (o.keepaliveSec < 0 ? 0 : kExtKeepalive) |
             (o.totalOrder ? kExtTotalOrder : 0);
  }
  ~Client() override {
    close_channels();
    for (auto& m : mems_)
      if (m) {
        forget_memory(m.get());
        fab_.dereg_mr(m->mr);
      }
  }

  /// Starts connecting both channels at once (as upstream's client does); connect_step()
  /// follows it.
  int start_connect(const std::string& host) {
    std::uint8_t hello[kClientHelloSize + 1];
    const std::size_t n = encode(hello, ClientHello{offer_});
    result_ = 0;
    for (unsigned ch = 0; ch < NETFR_CHANNEL_COUNT; ++ch) {
      const auto c = fab_.connect(host, static_cast<std::uint16_t>(port_ + ch), kSendDepth,
                                  kRxSlots, wrap_cm_data({hello, n}));
      if (!c) return -EHOSTUNREACH;
      if (!open_channel(ch, *c)) return -EIO;
    }
    connecting_ = true;
    return 0;
  }
  /// nfrClientConnect: 0 once both channels are up, -EAGAIN while connecting, else the error
  /// (-ECONNREFUSED: the host serves another client; -ENOTCONN: the connection went).
  int connect_step() {
    pump();
    return connect_state();
  }
  /// Waits (up to the time-out) until connect_step() would not say -EAGAIN.
  int connect_wait() {
    if (!wait_until([&] { return connect_state() != -EAGAIN; })) return -ETIMEDOUT;
    return connect_state();
  }
  /// Connects both channels, waiting up to the time-out.
  int connect(const std::string& host) {
    if (const int r = start_connect(host)) return r;
    return connect_wait();
  }

  bool connected() const { return ch_[0].up && ch_[1].up && !broken_; }

 private:
  int connect_state() {
    if (result_) return result_;
    if (broken_) return -ENOTCONN;
    if (!ch_[0].up || !ch_[1].up) return connecting_ ? -EAGAIN : -ENOTCONN;
    if (connecting_) {  // both up: count it, advertise what was attached meanwhile
      connecting_ = false;
      ++stats_.connects;
      for (auto& m : mems_)
        if (m && !m->has_data) advertise(*m);
    }
    return 0;
  }

 public:
  int process(int index, NFRClientEvent* evt) {
    pump();
    if (!evt || index < -1 || index >= NETFR_CHANNEL_COUNT) return -EINVAL;
    if (ext_ & kExtTotalOrder) {
      if (index >= 0) return -EINVAL;  // the total order spans both channels
      // The next serial, whichever channel it came on.
      auto it = pending_.find(next_serial_);
      if (it != pending_.end()) {
        const Pending p = it->second;
        pending_.erase(it);
        deliver(p, next_serial_++, evt);
        return 1;
      }
    } else {
      // Upstream's order: the primary channel's next message, else the secondary's.
      for (int i = 0; i < NETFR_CHANNEL_COUNT; ++i) {
        auto& q = fifo_[static_cast<unsigned>(i)];
        if (q.empty() || (index >= 0 && index != i)) continue;
        const Pending p = q.front();
        q.pop_front();
        deliver(p, p.channel_serial, evt);
        return 1;
      }
    }
    if (connected()) return 0;
    // The connection went (what had arrived was delivered above): as upstream's client, the
    // reason once (-ECONNRESET for a DREQ, a silent peer or a failed transfer), -ENOTCONN after.
    if (result_ && !result_reported_) {
      result_reported_ = true;
      return result_;
    }
    return -ENOTCONN;
  }

  /// Extensions the host took (protocol.h kExt*); 0 with upstream's host.
  std::uint8_t extensions() const { return ext_; }

  int buffer_ack(NFRMemory* m) {
    if (!m || m->host || m->owner != this) return -EINVAL;
    m->has_data = false;
    return advertise(*m);
  }

  int send_data(int channel, const void* data, std::uint32_t len, std::uint64_t udata) {
    if (channel < 0 || channel >= NETFR_CHANNEL_COUNT || !data || len == 0) return -EINVAL;
    if (len > NETFR_MESSAGE_MAX_PAYLOAD_SIZE) return -ENOBUFS;  // upstream's value
    if (!connected()) return -ENOTCONN;
    const unsigned ch = static_cast<unsigned>(channel);
    Data m;
    m.from_host = false;
    m.msg_serial = ch_[ch].tx_channel_serial + 1;  // upstream's client: per channel, from 1
    m.channel_serial = ch_[ch].tx_channel_serial + 1;
    m.udata = udata;
    m.payload = {static_cast<const std::uint8_t*>(data), len};
    std::uint8_t buf[NETFR_MESSAGE_MAX_SIZE];
    const int r = send_message(ch, buf, encode(buf, m), true);
    if (r == 0) ++ch_[ch].tx_channel_serial;
    return r;
  }

  const std::uint64_t* host_sizes() const {
    return have_host_sizes_ ? host_sizes_.data() : nullptr;
  }
  std::string stats_line() const { return stats_.line() + " " + fab_.report(); }

  /// Withdraws a buffer from the host (a buffer state of size 0) and forgets it.
  int free_memory(NFRMemory* m) {
    for (auto& slot : mems_)
      if (slot.get() == m) {
        for (auto& q : fifo_)
          for (const auto& p : q)
            if (p.write && p.buffer == m->index) return -EBUSY;  // an event not taken yet
        for (const auto& [s, p] : pending_)
          if (p.write && p.buffer == m->index) return -EBUSY;
        if (ch_[m->channel].up) {
          BufferState st;
          st.index = m->index;  // size 0: released
          std::uint8_t buf[kBufferStateSize];
          encode(buf, st);
          send_message(m->channel, buf, sizeof buf, false);
        }
        forget_memory(m);
        fab_.dereg_mr(m->mr);
        slot.reset();
        return 0;
      }
    return -EINVAL;
  }

 private:
  bool memory_fits(std::uint64_t size, std::uint8_t index) const override {
    if (size == 0 || size > NETFR_MAX_BUFFER_SIZE || index >= NETFR_CHANNEL_COUNT) return false;
    for (const auto& m : mems_)
      if (!m) return true;
    return false;
  }
  NFRMemory* keep_memory(std::unique_ptr<NFRMemory> m) override {
    if (!m) return nullptr;
    unsigned slot = 0;
    while (slot < NETFR_MAX_MEM_REGIONS && mems_[slot]) ++slot;
    m->index = slot;
    m->host = false;
    mems_[slot] = std::move(m);
    if (connected() && !connecting_) advertise(*mems_[slot]);  // else once both are up
    return mems_[slot].get();
  }

  int advertise(const NFRMemory& m) {
    BufferState s;
    s.index = m.index;
    s.page_size = 0;  // what upstream's client sends
    s.addr = m.mr.iova;
    s.size = m.size;
    s.rkey = m.mr.rkey;
    std::uint8_t buf[kBufferStateSize];
    encode(buf, s);
    if (!ch_[m.channel].up) return -ENOTCONN;
    return send_message(m.channel, buf, sizeof buf, false);
  }

  void deliver(const Pending& p, std::uint32_t serial, NFRClientEvent* evt) {
    evt->channelIndex = static_cast<std::uint8_t>(p.channel);
    evt->serial = serial;
    evt->channelSerial = p.channel_serial;
    evt->udata = p.udata;
    evt->payloadLength = p.length;
    if (p.write) {
      evt->type = NFR_CLIENT_EVENT_MEM_WRITE;
      NFRMemory* m = mems_[p.buffer].get();
      evt->memRegion = m;
      if (m->bounced())
        std::memcpy(static_cast<std::uint8_t*>(m->ptr) + p.offset,
                    static_cast<const std::uint8_t*>(m->mr.addr) + p.offset, p.length);
      evt->payloadOffset = p.offset;
    } else {
      evt->type = NFR_CLIENT_EVENT_DATA;
      evt->memRegion = nullptr;
      evt->payloadOffset = 0;
      std::memcpy(evt->inlineData, rx_slot(p.channel, p.slot) + kDataHeaderSize, p.length);
    }
    repost(p.channel, p.slot);
    if (!p.write) send_ack(p.channel, true);  // upstream acknowledges datagrams only
  }

  void on_event(const FabricEvent& e) override {
    const int chi = channel_of(e.conn);
    if (chi < 0) return;
    const unsigned ch = static_cast<unsigned>(chi);
    switch (e.kind) {
      case FabricEvent::kEstablished: {
        const Decoded d = decode(unwrap_cm_data(e.private_data));
        const bool hello = d.error == DecodeError::kOk && d.type == MsgType::kServerHello;
        if (hello && std::get<ServerHello>(d.msg).status != HelloStatus::kOk) {
          result_ = -ECONNREFUSED;
          return;
        }
        // The extensions the host took (upstream's host answers without: none); both
        // channels' answers carry the same, else events would wait in the other order's queue.
        const std::uint8_t ext = hello ? std::get<ServerHello>(d.msg).ext & offer_ : 0;
        if (ch_[ch ^ 1u].up) {
          if (ext != ext_) {
            ++stats_.protocol_errors;
            on_channel_error(ch, "the channels' hellos name different extensions");
            return;
          }
        } else {
          ext_ = ext;
          if (ext_ & kExtTotalOrder) next_serial_ = 1;
        }
        ch_[ch].up = true;
        if (connected()) connect_state();  // both up: advertise the buffers
        break;
      }
      case FabricEvent::kRejected: {
        const Decoded d = decode(unwrap_cm_data(e.private_data));
        const bool refused = d.error == DecodeError::kOk && d.type == MsgType::kServerHello &&
                             std::get<ServerHello>(d.msg).status == HelloStatus::kRejected;
        result_ = refused ? -ECONNREFUSED : -ECONNABORTED;
        fab_.disconnect(e.conn);
        ch_[ch].conn = 0;
        ch_[ch].open = false;
        break;
      }
      case FabricEvent::kUnreachable:
        result_ = -EHOSTUNREACH;
        broken_ = true;
        break;
      default:
        result_ = -ECONNRESET;
        broken_ = true;
        ++stats_.disconnects;
        break;
    }
  }

  bool on_message(unsigned ch, std::uint32_t slot, const Decoded& d) override {
    switch (d.type) {
      case MsgType::kHostData:
      case MsgType::kClientData: {  // upstream's nfrHostSendData sends type 6 (ClientData)
        const auto& m = std::get<Data>(d.msg);
        if (m.payload.empty()) {  // upstream's client refuses these too
          ++stats_.protocol_errors;
          on_channel_error(ch, "empty datagram");
          return false;
        }
        if (!check_serials(ch, m.msg_serial, m.channel_serial)) return false;
        queue(Pending{ch, slot, false, m.channel_serial, m.udata,
                      static_cast<std::uint32_t>(m.payload.size()), 0, 0},
              m.msg_serial);
        return true;
      }
      case MsgType::kBufferUpdate: {
        const auto& m = std::get<BufferUpdate>(d.msg);
        const NFRMemory* mem = mems_[m.buffer_index].get();
        if (!mem || mem->channel != ch ||
            std::uint64_t{m.payload_offset} + m.payload_size > mem->size) {
          ++stats_.protocol_errors;
          on_channel_error(ch, "buffer update outside an advertised buffer");
          return false;
        }
        if (!check_serials(ch, m.write_serial, m.channel_serial)) return false;
        mems_[m.buffer_index]->has_data = true;
        queue(Pending{ch, slot, true, m.channel_serial, m.udata, m.payload_size, m.payload_offset,
                      m.buffer_index},
              m.write_serial);
        return true;
      }
      case MsgType::kHostBufferSizes: {
        if (!(ext_ & kExtHostSizes)) break;
        const auto& m = std::get<HostBufferSizes>(d.msg);
        host_sizes_.assign(m.sizes.begin(), m.sizes.end());
        host_sizes_.push_back(0);
        have_host_sizes_ = true;
        return false;
      }
      default:
        break;
    }
    ++stats_.protocol_errors;
    on_channel_error(ch, "host sent " + std::string(to_string(d.type)));
    return false;
  }

  void queue(const Pending& p, std::uint32_t serial) {
    if (ext_ & kExtTotalOrder)
      pending_[serial] = p;
    else
      fifo_[p.channel].push_back(p);
  }

  /// With the total-order extension (a host of ours): each channel's serial the next one, the
  /// connection-wide serial new and not behind. Upstream's host leaves a buffer update's serials
  /// unset (whatever its send slot held): nothing to check without the extension.
  bool check_serials(unsigned ch, std::uint32_t serial, std::uint32_t ch_serial) {
    if (!(ext_ & kExtTotalOrder)) return true;
    if (ch_serial != ch_[ch].rx_channel_serial + 1 || serial_before(serial, next_serial_) ||
        pending_.count(serial)) {
      ++stats_.protocol_errors;
      on_channel_error(ch, "serial out of order");
      return false;
    }
    ++ch_[ch].rx_channel_serial;
    return true;
  }

  void on_channel_error(unsigned, const std::string& why) override {
    if (debug_log()) std::fprintf(stderr, "netfr client: %s\n", why.c_str());
    if (!result_ && !connecting_) result_ = -ECONNRESET;
    broken_ = true;
    close_channels();
  }

  std::uint16_t port_;
  std::array<std::unique_ptr<NFRMemory>, NETFR_MAX_MEM_REGIONS> mems_;
  std::map<std::uint32_t, Pending> pending_;  ///< total order: by serial (a window << 2^31)
  std::array<std::deque<Pending>, NETFR_CHANNEL_COUNT> fifo_;  ///< upstream's order
  std::uint32_t next_serial_ = 1;
  std::uint8_t offer_ = 0;
  std::vector<std::uint64_t> host_sizes_;
  bool have_host_sizes_ = false, broken_ = false, connecting_ = false, result_reported_ = false;
  int result_ = 0;
};

}  // namespace roce::netfr
