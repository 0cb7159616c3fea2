/// @file
/// The C API of the NetFR client (netfr.h) over Client (client.h), and nfrFreeMemory for both
/// roles. Every call takes the process's API lock (netfr.h, "Threads").
#include "apps/netfr/client.h"

#include <cstdio>

#include "apps/netfr/host.h"

using roce::netfr::Client;
struct NFRClient {
  std::unique_ptr<Client> c;
  std::string stats;
};

namespace {
using Lock = roce::netfr::ApiLock;
}  // namespace

extern "C" {

int nfrClientInit(const NFRInitOpts* opts, const NFRInitOpts* peerInfo, PNFRClient* result) {
  if (!opts || !result) return -EINVAL;
  // The host: ours (peer, port) where set, else upstream's (peerInfo->addrs). The client's own
  // opts->addrs name its local address, which is the link's here: not used.
  if (const int r = roce::netfr::check_upstream_opts(*opts, false)) return r;
  if (peerInfo)
    if (const int r = roce::netfr::check_upstream_opts(*peerInfo, true)) return r;
  std::string peer = peerInfo && peerInfo->peer ? peerInfo->peer : opts->peer ? opts->peer : "";
  if (peer.empty() && peerInfo) peer = roce::netfr::upstream_peer(*peerInfo);
  if (peer.empty()) return -EINVAL;
  NFRInitOpts o = *opts;
  o.port = static_cast<std::uint16_t>(peerInfo && peerInfo->port ? peerInfo->port
                                      : opts->port               ? opts->port
                                      : peerInfo ? roce::netfr::primary_port(*peerInfo)
                                                 : roce::netfr::kDefaultPort);
  Lock g;
  std::string err;
  roce::netfr::Fabric* f = roce::netfr::process_fabric(opts->link, err);
  if (!f) {
    std::fprintf(stderr, "netfr: %s\n", err.c_str());
    return -EIO;
  }
  auto* c = new NFRClient;
  c->c = std::make_unique<Client>(*f, o);
  const int r = c->c->start_connect(peer);
  if (r) {
    delete c;
    return r;
  }
  *result = c;
  return 0;
}

int nfrClientConnect(PNFRClient client) {
  if (!client) return -EINVAL;
  Lock g;
  return client->c->connect_step();
}

int nfrClientConnectWait(PNFRClient client) {
  if (!client) return -EINVAL;
  Lock g;
  return client->c->connect_wait();
}
int nfrClientProcess(PNFRClient client, int index, NFRClientEvent* evt) {
  if (!client) return -EINVAL;
  Lock g;
  return client->c->process(index, evt);
}
PNFRMemory nfrClientAttachMemory(PNFRClient client, void* buffer, uint64_t size, uint8_t index) {
  if (!client) return nullptr;  // buffer NULL: the library allocates (upstream's way)
  Lock g;
  return client->c->attach(buffer, size, index);
}
PNFRMemory nfrClientAllocMemory(PNFRClient client, uint64_t size, uint8_t index) {
  if (!client) return nullptr;
  Lock g;
  return client->c->attach(nullptr, size, index);
}
PNFRMemory nfrClientAllocDMABUF(PNFRClient client, uint64_t size, uint8_t index) {
  return nfrClientAllocMemory(client, size, index);
}
PNFRMemory nfrClientAttachMemfd(PNFRClient client, int fd, void* buffer, uint64_t size,
                                uint8_t index) {
  if (!client) return nullptr;
  Lock g;
  return client->c->attach_memfd(fd, buffer, size, index);
}
int nfrClientBufferAck(PNFRClient client, PNFRMemory mem) {
  if (!client) return -EINVAL;
  Lock g;
  if (!roce::netfr::live_memory(mem)) return -EINVAL;
  return client->c->buffer_ack(mem);
}
void nfrAckBuffer(PNFRMemory mem) {
  Lock g;
  if (!roce::netfr::live_memory(mem) || mem->host || !mem->owner) return;
  static_cast<Client*>(mem->owner)->buffer_ack(mem);
}
int nfrClientSendData(PNFRClient client, int channelID, const void* data, uint32_t length,
                      uint64_t udata) {
  if (!client) return -EINVAL;
  Lock g;
  return client->c->send_data(channelID, data, length, udata);
}
const uint64_t* nfrClientHostBufferSizes(PNFRClient client) {
  if (!client) return nullptr;
  Lock g;
  return client->c->host_sizes();
}
int nfrClientCredits(PNFRClient client, int channelID) {
  if (!client || channelID < 0 || channelID >= NETFR_CHANNEL_COUNT) return -EINVAL;
  Lock g;
  return client->c->channel(static_cast<unsigned>(channelID)).credits;
}
const char* nfrClientStats(PNFRClient client) {
  if (!client) return "";
  Lock g;
  client->stats = client->c->stats_line();
  return client->stats.c_str();
}
void nfrClientFree(PNFRClient* client) {
  if (!client || !*client) return;
  Lock g;
  NFRClient* c = *client;  // at the outermost call's end (a callback may call this)
  *client = nullptr;
  roce::netfr::at_api_exit([c] { delete c; });
}

int nfrFreeMemoryChecked(PNFRMemory* mem) {
  if (!mem) return -EINVAL;
  Lock g;
  NFRMemory* m = *mem;
  if (!roce::netfr::live_memory(m) || !m->owner) return -EINVAL;
  const int r = m->host ? static_cast<roce::netfr::Host*>(m->owner)->free_memory(m)
                        : static_cast<Client*>(m->owner)->free_memory(m);
  if (r == 0) *mem = nullptr;
  return r;
}
void nfrFreeMemory(PNFRMemory* mem) { nfrFreeMemoryChecked(mem); }
void nfrReleaseMemory(PNFRMemory* mem) { nfrFreeMemoryChecked(mem); }

}  // extern "C"
