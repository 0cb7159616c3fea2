/// @file
/// The C API of the NetFR client (netfr.h) over Client (client.h).
#include "apps/netfr/client.h"

#include <cstdio>

using roce::netfr::Client;
struct NFRClient {
  std::unique_ptr<Client> c;
  std::string stats;
};

extern "C" {

int nfrClientInit(const NFRInitOpts* opts, PNFRClient* result) {
  if (!opts || !result || !opts->peer) return -EINVAL;
  std::string err;
  roce::netfr::Fabric* f = roce::netfr::process_fabric(opts->link, err);
  if (!f) {
    std::fprintf(stderr, "netfr: %s\n", err.c_str());
    return -EIO;
  }
  auto* c = new NFRClient;
  c->c = std::make_unique<Client>(*f, *opts);
  const int r = c->c->connect(opts->peer);
  if (r) {
    delete c;
    return r;
  }
  *result = c;
  return 0;
}

int nfrClientProcess(PNFRClient client, NFRClientEvent* evt) {
  return client ? client->c->process(evt) : -EINVAL;
}
PNFRMemory nfrClientAttachMemory(PNFRClient client, void* buffer, uint64_t size, uint8_t index) {
  return client && buffer ? client->c->attach(buffer, size, index) : nullptr;
}
PNFRMemory nfrClientAllocMemory(PNFRClient client, uint64_t size, uint8_t index) {
  return client ? client->c->attach(nullptr, size, index) : nullptr;
}
PNFRMemory nfrClientAttachMemfd(PNFRClient client, int fd, void* buffer, uint64_t size,
                                uint8_t index) {
  return client ? client->c->attach_memfd(fd, buffer, size, index) : nullptr;
}
int nfrClientBufferAck(PNFRClient client, PNFRMemory mem) {
  return client ? client->c->buffer_ack(mem) : -EINVAL;
}
int nfrClientSendData(PNFRClient client, int channelID, const void* data, uint32_t length,
                      uint64_t udata) {
  return client ? client->c->send_data(channelID, data, length, udata) : -EINVAL;
}
const uint64_t* nfrClientHostBufferSizes(PNFRClient client) {
  return client ? client->c->host_sizes() : nullptr;
}
const char* nfrClientStats(PNFRClient client) {
  if (!client) return "";
  client->stats = client->c->stats_line();
  return client->stats.c_str();
}
void nfrClientFree(PNFRClient* client) {
  if (!client || !*client) return;
  delete *client;
  *client = nullptr;
}

}  // extern "C"
