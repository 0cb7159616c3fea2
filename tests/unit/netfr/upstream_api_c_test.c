/* A program written against upstream NetFR's C API (telescope-proj/netfr 45b215f: netfr.h,
 * netfr_host.h, netfr_client.h, netfr_constants.h, as Looking Glass and upstream's test/host and
 * test/client use it) compiles against ours unchanged and links our library: compiled as C with
 * upstream's own warning flags (-Wall -Werror -Wstrict-prototypes). Every function is taken
 * with upstream's exact signature (a function pointer of upstream's type: any difference is an
 * incompatible-pointer error), the structs with upstream's field names and types, the constants
 * with upstream's values. At run time (no stack needed): upstream's addressing checked where
 * ours cannot follow it. */
#include <stdio.h>

#include "netfr/netfr_client.h"
#include "netfr/netfr_constants.h"
#include "netfr/netfr_host.h"

/* upstream's netfr_constants.h values */
_Static_assert(NETFR_VERSION == 1, "version");
_Static_assert(NETFR_CALLBACK_USER_DATA_COUNT == 8, "callback words");
_Static_assert(NETFR_NUM_CHANNELS == 2, "channels");
_Static_assert(NETFR_MAX_MEM_REGIONS == 32, "regions");
_Static_assert(NETFR_TOTAL_CONTEXT_COUNT == 128, "contexts");
_Static_assert(NETFR_CM_MESSAGE_MAX_SIZE == 16, "cm data");
_Static_assert(NETFR_MESSAGE_MAX_SIZE == 4096, "message");
_Static_assert(NETFR_MESSAGE_MAX_PAYLOAD_SIZE == 4064, "payload");
_Static_assert(NETFR_MAX_BUFFER_SIZE == (1 << 28), "buffer");
_Static_assert(NETFR_CREDIT_COUNT == 60, "credits");
_Static_assert(NETFR_RESERVED_CREDIT_COUNT == 8, "reserved");
_Static_assert(NFR_LOG_LEVEL_TRACE == 0 && NFR_LOG_LEVEL_OFF == 6, "log levels");
_Static_assert(NFR_TRANSPORT_TCP == 1 && NFR_TRANSPORT_RDMA == 2, "transports");
_Static_assert(NFR_CLIENT_EVENT_MEM_WRITE == 1 && NFR_CLIENT_EVENT_DATA == 2, "events");
_Static_assert(FI_VERSION(1, 18) == 0x10012, "libfabric's FI_VERSION");
_Static_assert(sizeof(((struct NFRClientEvent*)0)->inlineData) == NETFR_MESSAGE_MAX_PAYLOAD_SIZE,
               "inline data");

static int failures;
static void expect(int ok, const char* what) {
  if (!ok) {
    printf("FAIL %s\n", what);
    ++failures;
  }
}

static int calls;
static void onWritten(const void** uData) { calls += (int)(uintptr_t)uData[0]; }

int main(void) {
  /* upstream's functions, with upstream's types */
  void (*releaseMemory)(PNFRMemory*) = nfrReleaseMemory;
  void (*ackBuffer)(PNFRMemory) = nfrAckBuffer;
  void (*freeMemory)(PNFRMemory*) = nfrFreeMemory;
  void (*setLogLevel)(int) = nfrSetLogLevel;
  PNFRMemory (*clientAttach)(PNFRClient, void*, uint64_t, uint8_t) = nfrClientAttachMemory;
  PNFRMemory (*clientDmabuf)(PNFRClient, uint64_t, uint8_t) = nfrClientAllocDMABUF;
  int (*clientProcess)(PNFRClient, int, struct NFRClientEvent*) = nfrClientProcess;
  int (*clientConnect)(PNFRClient) = nfrClientConnect;
  int (*clientInit)(const struct NFRInitOpts*, const struct NFRInitOpts*, PNFRClient*) =
      nfrClientInit;
  void (*clientFree)(PNFRClient*) = nfrClientFree;
  int (*clientSend)(struct NFRClient*, int, const void*, uint32_t, uint64_t) = nfrClientSendData;
  int (*hostRead)(struct NFRHost*, int, void*, uint32_t*, uint64_t*) = nfrHostReadData;
  int (*hostSend)(PNFRHost, int, const void*, uint32_t, uint64_t) = nfrHostSendData;
  int (*hostProcess)(PNFRHost) = nfrHostProcess;
  int (*hostInit)(const struct NFRInitOpts*, PNFRHost*) = nfrHostInit;
  int (*hostClients)(PNFRHost, int) = nfrHostClientsConnected;
  int (*hostWrite)(PNFRMemory, uint64_t, uint64_t, uint64_t, struct NFRCallbackInfo*) =
      nfrHostWriteBuffer;
  PNFRMemory (*hostAttach)(PNFRHost, void*, uint64_t, uint8_t) = nfrHostAttachMemory;
  void (*hostFree)(PNFRHost*) = nfrHostFree;
  const void* all[] = {
      (const void*)releaseMemory, (const void*)ackBuffer,    (const void*)freeMemory,
      (const void*)clientAttach,  (const void*)clientDmabuf, (const void*)clientProcess,
      (const void*)clientConnect, (const void*)clientInit,   (const void*)clientFree,
      (const void*)clientSend,    (const void*)hostRead,     (const void*)hostSend,
      (const void*)hostProcess,   (const void*)hostInit,     (const void*)hostClients,
      (const void*)hostWrite,     (const void*)hostAttach,   (const void*)hostFree};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) expect(all[i] != NULL, "function");

  /* upstream's log level variable */
  setLogLevel(NFR_LOG_LEVEL_WARNING);
  expect(nfr_LogLevel == NFR_LOG_LEVEL_WARNING, "nfr_LogLevel follows nfrSetLogLevel");
  setLogLevel(NFR_LOG_LEVEL_OFF);

  /* upstream's callback and event structs, by field */
  struct NFRCallbackInfo cbInfo;
  NFRCallback cb = onWritten;
  cbInfo.callback = cb;
  cbInfo.uData[0] = (void*)(uintptr_t)2;
  cbInfo.callback((const void**)cbInfo.uData);
  expect(calls == 2, "callback");
  struct NFRClientEvent evt;
  memset(&evt, 0, sizeof(evt));
  strcpy(evt.inlineData, "text"); /* char, as upstream's */
  const char* text = evt.inlineData;
  PNFRMemory region = evt.memRegion;
  uint64_t udata = evt.udata;
  uint32_t words = evt.serial + evt.payloadOffset + evt.payloadLength;
  uint8_t bytes = (uint8_t)(evt.type + evt.channelIndex);
  expect(strlen(text) == 4 && !region && !udata && !words && !bytes, "event fields");

  /* upstream's options, filled as upstream's test programs and Looking Glass fill them */
  struct NFRInitOpts opts;
  memset(&opts, 0, sizeof(opts));
  opts.apiVersion = FI_VERSION(1, 18);
  opts.flags = 0;
  for (int i = 0; i < NETFR_NUM_CHANNELS; ++i) {
    opts.addrs[i].sin_family = AF_INET;
    opts.addrs[i].sin_addr.s_addr = inet_addr("192.0.2.1");
    opts.addrs[i].sin_port = htons(5010 + i);
    opts.transportTypes[i] = NFR_TRANSPORT_RDMA;
  }
  PNFRHost host = NULL;
  PNFRClient client = NULL;
  /* A secondary channel not on the primary's port + 1: ours cannot listen there. */
  opts.addrs[1].sin_port = htons(6000);
  expect(hostInit(&opts, &host) == -EINVAL && !host, "secondary port not primary + 1: -EINVAL");
  expect(clientInit(&opts, &opts, &client) == -EINVAL && !client,
         "secondary port not primary + 1: -EINVAL (client)");
  opts.addrs[1].sin_port = htons(5011);
  /* libfabric's TCP provider: this stack is RDMA only. */
  opts.transportTypes[0] = NFR_TRANSPORT_TCP;
  expect(hostInit(&opts, &host) == -EPROTONOSUPPORT && !host, "TCP transport: -EPROTONOSUPPORT");
  expect(clientInit(&opts, &opts, &client) == -EPROTONOSUPPORT && !client,
         "TCP transport: -EPROTONOSUPPORT (client)");

  if (failures) return 1;
  printf("PASS netfr_upstream_api_c_test\n");
  return 0;
}
