/// @file
/// roce-netfr-lg: a Looking Glass-like consumer of a NetFR frame source (frames.h), attached
/// to a running roced: libroce and NetFR's client only, no DPDK, no engine, no root. It takes
/// the frames as Looking Glass's client does: buffers of the stack's shared memory advertised
/// on the primary channel, each MEM_WRITE event's frame read in place and its buffer handed
/// back (nfrClientBufferAck), cursor datagrams on the secondary channel. It checks that the
/// events come in strictly increasing connection serials, the frames in sequence with every
/// byte right, each cursor after the frame it names, and the end datagram's count.
/// With --memfd the buffers are memfds of the program's own, mapped and registered in place
/// (nfrClientAttachMemfd), as Looking Glass's shared frame memory would be.
///   roce-netfr-lg --attach SOCKET [--attach-port NAME] HOST_IP [--port N] [--width N]
///                 [--height N] [--buffers N] [--memfd] [--timeout S]
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "apps/netfr/frames.h"
#include "apps/netfr/include/netfr/netfr.h"

namespace {

namespace fr = roce::netfr::frames;

unsigned long long U(std::uint64_t v) { return v; }

int fail(const char* what, unsigned long long a = 0, unsigned long long b = 0) {
  std::printf("FAIL netfr-lg: %s (%llu, %llu)\n", what, a, b);
  return 1;
}

int usage(const char* argv0, int status) {
  std::fprintf(status == 0 ? stdout : stderr,
               "usage: %s --attach SOCKET [--attach-port NAME] HOST_IP [--port N] [--width N] "
               "[--height N] [--buffers N] [--memfd] [--timeout S]\n",
               argv0);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::string attach, attach_port, host;
  unsigned port = 5010, width = 320, height = 180, buffers = 2;
  double timeout = 60;
  bool memfd = false;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k.rfind("-", 0) != 0) {
      host = k;
      continue;
    }
    if (k == "--help" || k == "-h") return usage(argv[0], 0);
    if (k == "--memfd") {
      memfd = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", k.c_str());
      return usage(argv[0], 2);
    }
    const char* v = argv[++i];
    if (k == "--attach")
      attach = v;
    else if (k == "--attach-port")
      attach_port = v;
    else if (k == "--port")
      port = static_cast<unsigned>(std::atoi(v));
    else if (k == "--width")
      width = static_cast<unsigned>(std::atoi(v));
    else if (k == "--height")
      height = static_cast<unsigned>(std::atoi(v));
    else if (k == "--buffers")
      buffers = static_cast<unsigned>(std::atoi(v));
    else if (k == "--timeout")
      timeout = std::atof(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (attach.empty() || host.empty() || buffers == 0 || width == 0 || height == 0)
    return usage(argv[0], 2);
  const std::string link = "attach=" + attach + (attach_port.empty() ? "" : ",port=" + attach_port);
  NFRInitOpts o{};
  o.link = link.c_str();
  o.peer = host.c_str();
  o.port = static_cast<std::uint16_t>(port);
  o.timeoutSec = 30;
  o.totalOrder = 1;  // the checks below: strictly increasing connection serials
  PNFRClient c = nullptr;
  if (int r = nfrClientInit(&o, nullptr, &c); r != 0 || (r = nfrClientConnectWait(c)) != 0)
    return fail("nfrClientInit", U(-r));
  std::printf("netfr-lg: connected to %s:%u through %s\n", host.c_str(), port, attach.c_str());
  const std::uint64_t bytes = fr::frame_bytes(width, height);
  for (unsigned i = 0; i < buffers; ++i) {
    if (!memfd) {
      if (!nfrClientAllocMemory(c, bytes, NETFR_CHANNEL_PRIMARY))
        return fail("nfrClientAllocMemory");
      continue;
    }
    const int fd = memfd_create("netfr-lg-frame", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("memfd", U(errno));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return fail("mmap", U(errno));
    PNFRMemory m = nfrClientAttachMemfd(c, fd, p, bytes, NETFR_CHANNEL_PRIMARY);
    if (!m || nfrMemoryPointer(m) != p) return fail("nfrClientAttachMemfd");
  }

  auto* ev = new NFRClientEvent;
  std::uint64_t frames = 0, cursors = 0, next_serial = 1;
  std::int64_t last_frame = -1;
  bool end = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  while (!end) {
    if (std::chrono::steady_clock::now() > deadline)
      return fail("timeout: frames, cursors", frames, cursors);
    const int r = nfrClientProcess(c, -1, ev);
    if (r < 0) return fail("the host went away: frames, cursors", frames, cursors);
    if (r == 0) continue;
    if (ev->serial != next_serial)
      return fail("serial out of order: got, expected", ev->serial, next_serial);
    ++next_serial;
    if (ev->type == NFR_CLIENT_EVENT_MEM_WRITE) {
      if (ev->channelIndex != NETFR_CHANNEL_PRIMARY)
        return fail("a frame on the secondary channel");
      const auto* p =
          static_cast<const std::uint8_t*>(nfrMemoryPointer(ev->memRegion)) + ev->payloadOffset;
      const char* why = "";
      if (!fr::verify(p, ev->payloadLength, frames, &why)) {
        std::printf("netfr-lg: frame %llu: %s\n", U(frames), why);
        return fail("frame corrupt or out of sequence", frames);
      }
      last_frame = static_cast<std::int64_t>(frames++);
      if (nfrClientBufferAck(c, ev->memRegion) != 0) return fail("nfrClientBufferAck");
    } else if (ev->type == NFR_CLIENT_EVENT_DATA && ev->udata == fr::kUdataCursor) {
      fr::Cursor cur;
      if (ev->channelIndex != NETFR_CHANNEL_SECONDARY || ev->payloadLength != sizeof cur)
        return fail("cursor: channel, length", ev->channelIndex, ev->payloadLength);
      std::memcpy(&cur, ev->inlineData, sizeof cur);
      const fr::Cursor want = fr::cursor_after(static_cast<std::uint64_t>(last_frame));
      if (last_frame < 0 || cur.magic != fr::kCursorMagic || cur.frame_seq != want.frame_seq ||
          cur.x != want.x || cur.y != want.y)
        return fail("cursor does not follow its frame: cursor's, last frame", cur.frame_seq,
                    U(static_cast<std::uint64_t>(last_frame)));
      ++cursors;
    } else if (ev->type == NFR_CLIENT_EVENT_DATA && ev->udata == fr::kUdataEnd) {
      fr::End e;
      if (ev->payloadLength != sizeof e) return fail("end: length", ev->payloadLength);
      std::memcpy(&e, ev->inlineData, sizeof e);
      if (e.magic != fr::kEndMagic || e.frames != frames)
        return fail("end: count, seen", e.frames, frames);
      end = true;
    } else {
      return fail("unexpected event: type, udata", ev->type, ev->udata);
    }
  }
  if (cursors != frames) return fail("cursors, frames", cursors, frames);
  std::printf(
      "netfr-lg: %llu frames of %ux%u (%llu bytes) checked in %s, %llu cursors, serials "
      "0..%llu in order\n",
      U(frames), width, height, U(bytes), memfd ? "memfds of its own" : "the stack's memory",
      U(cursors), U(next_serial - 1));
  std::printf("netfr-lg: %s\n", nfrClientStats(c));
  delete ev;
  nfrClientFree(&c);
  std::printf("PASS netfr-lg\n");
  return 0;
}
