/// @file
/// The NetFR client (netfr.h): connects both channels with a ClientHello in the rdma_cm
/// private data, advertises its buffers, and hands the host's messages (datagrams and buffer
/// writes) to the application strictly in the host's serial order across both channels.
#pragma once

#include <cstring>
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
    port_ = o.port ? o.port : 5010;
    nonblocking_ = o.nonBlocking != 0;
    relaxed_ = o.relaxedOrder != 0;
    if (o.timeoutSec > 0) timeout_s_ = o.timeoutSec;
  }
  ~Client() override {
    close_channels();
    for (auto& m : mems_)
      if (m) fab_.dereg_mr(m->mr);
  }

  /// Connects the primary, then the secondary channel.
  int connect(const std::string& host) {
    std::uint8_t hello[kClientHelloSize];
    encode(hello, ClientHello{});
    for (unsigned ch = 0; ch < NETFR_CHANNEL_COUNT; ++ch) {
      const auto c = fab_.connect(host, static_cast<std::uint16_t>(port_ + ch), kSendDepth, kSlots,
                                  wrap_cm_data(hello));
      if (!c) return -EHOSTUNREACH;
      if (!open_channel(ch, *c)) return -EIO;
      result_ = 0;
      if (!wait_until([&] { return ch_[ch].up || result_ != 0; })) return -ETIMEDOUT;
      if (result_) return result_;
    }
    ++stats_.connects;
    return 0;
  }

  bool connected() const { return ch_[0].up && ch_[1].up && !broken_; }

  int process(NFRClientEvent* evt) {
    pump();
    if (!evt) return -EINVAL;
    // The next serial, whichever channel it came on.
    auto it = pending_.find(next_serial_);
    if (relaxed_ && it == pending_.end() && !pending_.empty()) {
      // The seed's scan: the lowest serial among what has arrived.
      it = pending_.begin();
      for (auto j = pending_.begin(); j != pending_.end(); ++j)
        if (serial_before(j->first, it->first)) it = j;
      next_serial_ = it->first;
    }
    if (it != pending_.end()) {
      const Pending p = it->second;
      pending_.erase(it);
      deliver(p, next_serial_++, evt);
      return 1;
    }
    return connected() ? 0 : -ENOTCONN;
  }

  int buffer_ack(NFRMemory* m) {
    if (!m || m->host || m->owner != this) return -EINVAL;
    m->has_data = false;
    return advertise(*m);
  }

  int send_data(int channel, const void* data, std::uint32_t len, std::uint64_t udata) {
    if (channel < 0 || channel >= NETFR_CHANNEL_COUNT || (!data && len)) return -EINVAL;
    if (len == 0 || len > NETFR_MESSAGE_MAX_PAYLOAD_SIZE) return -EMSGSIZE;
    if (!connected()) return -ENOTCONN;
    const unsigned ch = static_cast<unsigned>(channel);
    Data m;
    m.from_host = false;
    m.msg_serial = tx_serial_;
    m.channel_serial = ch_[ch].tx_channel_serial;
    m.udata = udata;
    m.payload = {static_cast<const std::uint8_t*>(data), len};
    std::uint8_t buf[NETFR_MESSAGE_MAX_SIZE];
    const int r = send_message(ch, buf, encode(buf, m), true);
    if (r == 0) {
      ++tx_serial_;
      ++ch_[ch].tx_channel_serial;
    }
    return r;
  }

  const std::uint64_t* host_sizes() const {
    return have_host_sizes_ ? host_sizes_.data() : nullptr;
  }
  std::string stats_line() const { return stats_.line() + " " + fab_.report(); }

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
    advertise(*mems_[slot]);
    return mems_[slot].get();
  }

  int advertise(const NFRMemory& m) {
    ClientBufferState s;
    s.index = m.index;
    s.page_size = 4096;
    s.addr = m.mr.iova;
    s.size = m.size;
    s.rkey = m.mr.rkey;
    std::uint8_t buf[kClientBufferStateSize];
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
    send_ack(p.channel, true);
  }

  void on_event(const FabricEvent& e) override {
    const int chi = channel_of(e.conn);
    if (chi < 0) return;
    const unsigned ch = static_cast<unsigned>(chi);
    switch (e.kind) {
      case FabricEvent::kEstablished: {
        const Decoded d = decode(unwrap_cm_data(e.private_data));
        if (d.error == DecodeError::kOk && d.type == MsgType::kServerHello &&
            std::get<ServerHello>(d.msg).status != HelloStatus::kOk) {
          result_ = -ECONNREFUSED;
          return;
        }
        ch_[ch].up = true;
        if (ch == NETFR_CHANNEL_COUNT - 1)
          for (auto& m : mems_)
            if (m && !m->has_data) advertise(*m);
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
      case MsgType::kHostData: {
        const auto& m = std::get<Data>(d.msg);
        if (!check_serials(ch, m.msg_serial, m.channel_serial)) return false;
        pending_[m.msg_serial] = Pending{ch,      slot,
                                         false,   m.channel_serial,
                                         m.udata, static_cast<std::uint32_t>(m.payload.size()),
                                         0,       0};
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
        pending_[m.write_serial] = Pending{ch,
                                           slot,
                                           true,
                                           m.channel_serial,
                                           m.udata,
                                           m.payload_size,
                                           m.payload_offset,
                                           m.buffer_index};
        return true;
      }
      case MsgType::kHostBufferState: {
        const auto& m = std::get<HostBufferState>(d.msg);
        host_sizes_.assign(m.sizes.begin(), m.sizes.end());
        host_sizes_.push_back(0);
        have_host_sizes_ = true;
        send_ack(ch, true);
        return false;
      }
      default:
        ++stats_.protocol_errors;
        on_channel_error(ch, "host sent " + std::string(to_string(d.type)));
        return false;
    }
  }

  bool check_serials(unsigned ch, std::uint32_t serial, std::uint32_t ch_serial) {
    if (ch_serial != ch_[ch].rx_channel_serial ||
        (!relaxed_ && serial_before(serial, next_serial_)) || pending_.count(serial)) {
      ++stats_.protocol_errors;
      on_channel_error(ch, "serial out of order");
      return false;
    }
    ++ch_[ch].rx_channel_serial;
    return true;
  }

  void on_channel_error(unsigned, const std::string& why) override {
    if (std::getenv("NETFR_DEBUG")) std::fprintf(stderr, "netfr client: %s\n", why.c_str());
    broken_ = true;
    close_channels();
  }

  std::uint16_t port_;
  std::array<std::unique_ptr<NFRMemory>, NETFR_MAX_MEM_REGIONS> mems_;
  std::map<std::uint32_t, Pending> pending_;  ///< by serial (a window far below 2^31)
  std::uint32_t next_serial_ = 0, tx_serial_ = 0;
  std::vector<std::uint64_t> host_sizes_;
  bool have_host_sizes_ = false, broken_ = false, relaxed_ = false;
  int result_ = 0;
};

}  // namespace roce::netfr
