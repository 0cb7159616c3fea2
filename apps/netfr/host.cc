/// @file
/// The C API of the NetFR host (netfr.h) over Host (host.h). Every call takes the process's API
/// lock (netfr.h, "Threads").
#include "apps/netfr/host.h"

#include <cstdio>

using roce::netfr::Host;
struct NFRHost {
  std::unique_ptr<Host> h;
  std::string stats;
};

namespace {
using Lock = roce::netfr::ApiLock;
}  // namespace

extern "C" {

int nfrHostInit(const NFRInitOpts* opts, PNFRHost* result) {
  if (!opts || !result) return -EINVAL;
  if (const int r = roce::netfr::check_upstream_opts(*opts, true)) return r;
  Lock g;
  std::string err;
  roce::netfr::Fabric* f = roce::netfr::process_fabric(opts->link, err);
  if (!f) {
    std::fprintf(stderr, "netfr: %s\n", err.c_str());
    return -EIO;
  }
  auto* h = new NFRHost;
  h->h = std::make_unique<Host>(*f, *opts);
  if (!h->h->start()) {
    delete h;
    return -EIO;
  }
  *result = h;
  return 0;
}

int nfrHostProcess(PNFRHost host) {
  if (!host) return -EINVAL;
  Lock g;
  return host->h->process();
}
int nfrHostClientsConnected(PNFRHost host, int index) {
  if (!host) return -EINVAL;
  Lock g;
  return host->h->clients(index);
}
int nfrHostSendData(PNFRHost host, int channelID, const void* data, uint32_t length,
                    uint64_t udata) {
  if (!host) return -EINVAL;
  Lock g;
  return host->h->send_data(channelID, data, length, udata);
}
int nfrHostReadData(PNFRHost host, int channelID, void* data, uint32_t* maxLength,
                    uint64_t* udata) {
  if (!host) return -EINVAL;
  Lock g;
  return host->h->read_data(channelID, data, maxLength, udata);
}
PNFRMemory nfrHostAttachMemory(PNFRHost host, void* buffer, uint64_t size, uint8_t index) {
  if (!host || !buffer) return nullptr;
  Lock g;
  return host->h->attach(buffer, size, index);
}
PNFRMemory nfrHostAllocMemory(PNFRHost host, uint64_t size, uint8_t index) {
  if (!host) return nullptr;
  Lock g;
  return host->h->attach(nullptr, size, index);
}
PNFRMemory nfrHostAttachMemfd(PNFRHost host, int fd, void* buffer, uint64_t size, uint8_t index) {
  if (!host) return nullptr;
  Lock g;
  return host->h->attach_memfd(fd, buffer, size, index);
}
int nfrHostWriteBufferUdata(PNFRMemory localMem, uint64_t localOffset, uint64_t remoteOffset,
                            uint64_t length, uint64_t udata, const NFRCallbackInfo* cbInfo) {
  // The handle is checked under the lock: another thread may be freeing it.
  Lock g;
  if (!roce::netfr::live_memory(localMem) || !localMem->host || !localMem->owner) return -EINVAL;
  return static_cast<Host*>(localMem->owner)
      ->write_buffer(localMem, localOffset, remoteOffset, length, udata, cbInfo);
}
int nfrHostWriteBuffer(PNFRMemory localMem, uint64_t localOffset, uint64_t remoteOffset,
                       uint64_t length, NFRCallbackInfo* cbInfo) {
  const int r = nfrHostWriteBufferUdata(localMem, localOffset, remoteOffset, length, 0, cbInfo);
  return r < 0 ? r : 0;  // upstream's: 0 on success (ours with udata: the buffer's index)
}
int nfrHostCredits(PNFRHost host, int channelID) {
  if (!host || channelID < 0 || channelID >= NETFR_CHANNEL_COUNT) return -EINVAL;
  Lock g;
  return host->h->channel(static_cast<unsigned>(channelID)).credits;
}
const char* nfrHostStats(PNFRHost host) {
  if (!host) return "";
  Lock g;
  host->stats = host->h->stats_line();
  return host->stats.c_str();
}
void nfrHostFree(PNFRHost* host) {
  if (!host || !*host) return;
  Lock g;
  // Not now when a callback calls it: the call that ran the callback still uses the host.
  NFRHost* h = *host;
  *host = nullptr;
  roce::netfr::at_api_exit([h] { delete h; });
}
int nfr_bench_host_raw_write(PNFRHost host, PNFRMemory mem, uint64_t length, uint32_t index) {
  if (!host) return -EINVAL;
  Lock g;
  if (!roce::netfr::live_memory(mem) || !mem->host || mem->owner != host->h.get()) return -EINVAL;
  return host->h->raw_write(mem, length, index);
}
void* nfrMemoryPointer(PNFRMemory mem) { return mem ? mem->ptr : nullptr; }
uint64_t nfrMemorySize(PNFRMemory mem) { return mem ? mem->size : 0; }

}  // extern "C"
