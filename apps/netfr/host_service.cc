/// @file
/// NetFR's frame source as a service (host_service.h).
#include "apps/netfr/host_service.h"

#include <chrono>
#include <stdexcept>

#include "apps/netfr/context_fabric.h"
#include "apps/netfr/frames.h"
#include "apps/netfr/host.h"

namespace roce::netfr {

namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::uint64_t number(const std::string& k, const std::string& v, std::uint64_t max) {
  std::size_t end = 0;
  std::uint64_t n = 0;
  try {
    n = std::stoull(v, &end, 0);
  } catch (const std::exception&) {
    end = 0;
  }
  if (end != v.size() || v.empty() || n > max)
    throw std::invalid_argument(k + ": not a number up to " + std::to_string(max) + ": " + v);
  return n;
}

}  // namespace

HostServiceOptions HostServiceOptions::from_args(const std::vector<std::string>& args) {
  HostServiceOptions o;
  for (std::size_t i = 0; i < args.size(); i += 2) {
    const std::string& k = args[i];
    if (i + 1 >= args.size()) throw std::invalid_argument(k + ": needs a value");
    const std::string& v = args[i + 1];
    if (k == "--port")
      o.port = static_cast<std::uint16_t>(number(k, v, 65534));
    else if (k == "--width")
      o.width = static_cast<std::uint32_t>(number(k, v, 8192));
    else if (k == "--height")
      o.height = static_cast<std::uint32_t>(number(k, v, 8192));
    else if (k == "--frames")
      o.frames = number(k, v, ~std::uint64_t{0});
    else if (k == "--fps") {
      try {
        o.fps = std::stod(v);
      } catch (const std::exception&) {
        o.fps = -1;
      }
      if (o.fps < 0) throw std::invalid_argument("--fps: not a rate: " + v);
    } else
      throw std::invalid_argument("unknown option " + k);
  }
  if (o.width == 0 || o.height == 0 ||
      frames::frame_bytes(o.width, o.height) > NETFR_MAX_BUFFER_SIZE)
    throw std::invalid_argument("--width x --height: a frame must be 1 pixel .. 256 MiB");
  return o;
}

HostService::HostService(client::Context& ctx, const HostServiceOptions& o) : o_(o) {
  fab_ = std::make_unique<ContextFabric>(ctx);
  NFRInitOpts io{};
  io.port = o_.port;
  io.blocking = 0;
  host_ = std::make_unique<Host>(*fab_, io);
  if (!host_->start())
    throw std::runtime_error("netfr: cannot listen on rdma_cm ports " + std::to_string(o_.port) +
                             " and " + std::to_string(o_.port + 1));
  bytes_ = frames::frame_bytes(o_.width, o_.height);
  mem_ = host_->attach(nullptr, bytes_, NETFR_CHANNEL_PRIMARY);
  if (mem_ == nullptr) throw std::runtime_error("netfr: no memory for a frame");
}

HostService::~HostService() {
  host_.reset();  // before the fabric it stands on
  fab_.reset();
}

void HostService::on_written(const void** uData) {
  auto* s = static_cast<HostService*>(const_cast<void*>(uData[0]));
  s->writing_ = false;  // the notification went: the frame's memory may be rendered again
}

void HostService::end_session() {
  if (in_session_ && end_sent_) ++sessions_;
  in_session_ = writing_ = rendered_ = cursor_due_ = end_sent_ = false;
  seq_ = 0;
}

bool HostService::poll() {
  if (host_->process() == -ENOTCONN) {
    if (in_session_) end_session();
    return false;
  }
  if (!in_session_) {
    in_session_ = true;
    next_due_ns_ = now_ns();
  }
  if (cursor_due_) {  // the cursor of the frame just written, before the next frame
    const frames::Cursor c = frames::cursor_after(seq_ - 1);
    const int r = host_->send_data(NETFR_CHANNEL_SECONDARY, &c, sizeof c, frames::kUdataCursor);
    if (r == -EAGAIN) return false;
    if (r != 0) ++errors_;
    cursor_due_ = false;
    return true;
  }
  if (o_.frames != 0 && seq_ >= o_.frames) {
    if (end_sent_ || writing_) return false;
    frames::End e;
    e.frames = seq_;
    const int r = host_->send_data(NETFR_CHANNEL_PRIMARY, &e, sizeof e, frames::kUdataEnd);
    if (r == -EAGAIN) return false;
    if (r != 0) ++errors_;
    end_sent_ = true;
    return true;
  }
  if (writing_) return false;  // one frame in flight: its memory is still being read
  if (o_.fps > 0 && now_ns() < next_due_ns_) return false;
  if (!rendered_) {
    frames::render(mem_->ptr, seq_, o_.width, o_.height);
    rendered_ = true;
  }
  NFRCallbackInfo cb{};
  cb.callback = &HostService::on_written;
  cb.uData[0] = this;
  writing_ = true;
  const int r = host_->write_buffer(mem_, 0, 0, bytes_, frames::kUdataFrame, &cb);
  if (r < 0) {
    writing_ = false;
    if (r == -ENOBUFS || r == -EAGAIN)
      ++busy_;  // the client holds every buffer or has not advertised one yet
    else
      ++errors_;
    return false;
  }
  rendered_ = false;
  ++seq_;
  ++frames_total_;
  cursor_due_ = true;
  if (o_.fps > 0) next_due_ns_ += static_cast<std::uint64_t>(1e9 / o_.fps);
  return true;
}

bool HostService::connected() const { return host_->connected(); }

std::string HostService::report() const {
  return "netfr source: sessions " + std::to_string(sessions_) + " frames " +
         std::to_string(frames_total_) + " busy " + std::to_string(busy_) + " errors " +
         std::to_string(errors_) + " " + host_->stats_line();
}

}  // namespace roce::netfr
