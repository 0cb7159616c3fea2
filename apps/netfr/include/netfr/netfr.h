/* NetFR, the network frame relay of Looking Glass, on the appliance's RoCEv2 stack: the C API.
 *
 * A host streams large buffers (frames) into memory its client advertised, by RDMA WRITE
 * followed by a SEND that names the buffer (nfrHostWriteBuffer), and exchanges small reliable
 * ordered datagrams with it both ways (nfr*SendData, nfrHostReadData, nfrClientProcess). A
 * connection has NETFR_CHANNEL_COUNT channels, each an RC QP set up with rdma_cm: channel 0,
 * primary (frames), and channel 1, secondary (cursor). Every message from the host carries a
 * connection-wide serial and a channel serial; the client delivers strictly in connection
 * serial order across both channels. docs/netfr.md describes the protocol.
 *
 * Return values: 0 (or a count) on success, a negative errno value on failure: -EAGAIN no credit
 * (non-blocking mode) or nothing to do, -ENOTCONN no peer, -ENOBUFS no advertised buffer fits,
 * -EMSGSIZE message or buffer too large, -EINVAL bad argument, -ETIMEDOUT, -ECONNREFUSED the
 * host refused us (it already serves a client), -EPROTO the peer broke the protocol. */
#ifndef NETFR_NETFR_H
#define NETFR_NETFR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define NFR_ALIGN16 alignas(16)
extern "C" {
#else
#define NFR_ALIGN16 _Alignas(16)
#endif

/* ---- limits (upstream NetFR's values, telescope-proj/netfr 45b215f netfr_constants.h) ---- */
#define NETFR_VERSION 1
#define NETFR_MAGIC "NetFrame" /* 8 bytes, no terminator on the wire */
#define NETFR_CALLBACK_USER_DATA_COUNT 8
#define NETFR_MAX_MEM_REGIONS 32
#define NETFR_TOTAL_CONTEXT_COUNT 128
#define NETFR_CM_MESSAGE_MAX_SIZE 16
#define NETFR_MESSAGE_MAX_SIZE 4096
#define NETFR_MESSAGE_INTERNAL_MAX_SIZE 32
#define NETFR_MESSAGE_MAX_PAYLOAD_SIZE (NETFR_MESSAGE_MAX_SIZE - NETFR_MESSAGE_INTERNAL_MAX_SIZE)
#define NETFR_MAX_BUFFER_SIZE (1u << 28)
#define NETFR_CREDIT_COUNT 60
#define NETFR_RESERVED_CREDIT_COUNT 8
#define NETFR_CHANNEL_COUNT 2
#define NETFR_CHANNEL_PRIMARY 0
#define NETFR_CHANNEL_SECONDARY 1

typedef struct NFRHost* PNFRHost;
typedef struct NFRClient* PNFRClient;
typedef struct NFRMemory* PNFRMemory;

/* A completion callback and the user data handed back to it. status: 0 or a negative errno. */
struct NFRCallbackInfo {
  void (*callback)(const struct NFRCallbackInfo* info, int status);
  void* uData[NETFR_CALLBACK_USER_DATA_COUNT];
};

struct NFRInitOpts {
  /* The stack of this process. "attach=SOCKET[,port=NAME]": a client of the roced listening on
     SOCKET (its port NAME, default its first; libroce only, no DPDK in this process). Or a
     link of its own, in-process (programs that link the in-process stack):
     "pmd=memif,socket=PATH,role=server|client,ip=A,mac=M" or "pmd=af_packet,iface=IF,ip=A,
     mac=M", plus optional tx_drop=, rx_drop=, reorder=, seed=, pcap=, window=, lcore=.
     NULL: the environment variable NETFR_LINK. */
  const char* link;
  /* Host: the address to listen on is the link's; client: the host's IPv4 address. */
  const char* peer;
  /* rdma_cm TCP port of the primary channel; the secondary is port + 1. 0: 5010. */
  uint16_t port;
  /* Non-zero: sends return -EAGAIN at zero credits instead of waiting. */
  int nonBlocking;
  /* Seconds to wait when blocking (connect, credits). 0: 10. */
  double timeoutSec;
  /* Client: 0 (default) delivers in upstream NetFR's order: each channel's messages in the order
     the host sent them, the primary channel's first when both have one (a cursor update on the
     secondary never waits for a frame; nothing orders the two channels). Non-zero asks the host
     for connection-wide serials (an extension of ours, offered in the hello) and delivers
     strictly in the host's order across both channels; a host that does not take it (upstream's)
     leaves upstream's order. */
  int totalOrder;
  /* Keepalive (an extension of ours, offered in the hello, so upstream peers never see it): a
     keepalive on each channel after this many seconds without a send, and the peer is dropped
     after 10 such periods without a message (a killed client frees the host's slot). 0: 1 s;
     negative: not offered (host: not taken). */
  double keepaliveSec;
};

/* ---- host ---- */

/* Starts the stack and listens on port and port + 1. */
int nfrHostInit(const struct NFRInitOpts* opts, PNFRHost* result);
/* Background work (connections, completions, acknowledgements): call often. -ENOTCONN when no
   client is connected (not an error), 0 otherwise, other negative values on failure. */
int nfrHostProcess(PNFRHost host);
/* The number of clients connected on channel `index` (0 or 1: one client at a time). */
int nfrHostClientsConnected(PNFRHost host, int index);
/* Sends a datagram of up to NETFR_MESSAGE_MAX_PAYLOAD_SIZE bytes to the client. */
int nfrHostSendData(PNFRHost host, int channelID, const void* data, uint32_t length,
                    uint64_t udata);
/* Copies the oldest datagram of the client on channelID out: *maxLength in: the buffer's size,
   out: the message's; -ENOBUFS (message kept) when it does not fit, -EAGAIN when none. */
int nfrHostReadData(PNFRHost host, int channelID, void* data, uint32_t* maxLength, uint64_t* udata);
/* Sources of buffer writes on channel `index`. Work requests use memory of the stack's
   (shared with roced when attached): nfrHostAllocMemory allocates it (zero copy; write the
   frame at nfrMemoryPointer), nfrHostAttachMemfd registers the application's memfd `fd` mapped
   at `buffer` in place (zero copy), nfrHostAttachMemory takes any memory and copies what each
   write sends into a buffer of the stack's first. */
PNFRMemory nfrHostAllocMemory(PNFRHost host, uint64_t size, uint8_t index);
PNFRMemory nfrHostAttachMemfd(PNFRHost host, int fd, void* buffer, uint64_t size, uint8_t index);
PNFRMemory nfrHostAttachMemory(PNFRHost host, void* buffer, uint64_t size, uint8_t index);
/* Writes length bytes at localOffset of localMem to the smallest buffer the client advertised
   on the memory's channel that holds remoteOffset + length, then notifies the client (buffer
   update with udata). cbInfo (may be NULL): called once the notification is sent. Returns the
   index of the chosen buffer; -ENOBUFS when every fitting buffer is busy, -EMSGSIZE when none
   is large enough (nothing is written in either case). */
int nfrHostWriteBuffer(PNFRMemory localMem, uint64_t localOffset, uint64_t remoteOffset,
                       uint64_t length, uint64_t udata, const struct NFRCallbackInfo* cbInfo);
/* The host's counters, one line of "name value" pairs (static buffer). */
const char* nfrHostStats(PNFRHost host);
void nfrHostFree(PNFRHost* host);

/* ---- client ---- */

enum NFRClientEventType {
  NFR_CLIENT_EVENT_INVALID,
  NFR_CLIENT_EVENT_MEM_WRITE, /* the host wrote into memRegion; acknowledge it when done */
  NFR_CLIENT_EVENT_DATA,      /* a datagram (inlineData) */
  NFR_CLIENT_EVENT_MAX
};

struct NFRClientEvent {
  uint8_t type;
  uint8_t channelIndex;
  uint32_t serial;        /* connection-wide: strictly increasing across both channels */
  uint32_t channelSerial; /* per channel */
  PNFRMemory memRegion;   /* MEM_WRITE */
  uint32_t payloadOffset; /* MEM_WRITE: from the start of memRegion */
  uint32_t payloadLength;
  uint64_t udata;
  NFR_ALIGN16 uint8_t inlineData[NETFR_MESSAGE_MAX_PAYLOAD_SIZE]; /* DATA */
};

/* Starts the stack and connects both channels to the host (opts->peer). */
int nfrClientInit(const struct NFRInitOpts* opts, PNFRClient* result);
/* Background work; fills *evt and returns 1 when the next message in serial order is there,
   0 when none, negative on failure (-ENOTCONN: the host went away). */
int nfrClientProcess(PNFRClient client, struct NFRClientEvent* evt);
/* Advertises a buffer to the host on channel `index`: nfrClientAllocMemory allocates it from
   the stack (zero copy; the frames land at nfrMemoryPointer), nfrClientAttachMemfd registers
   the application's memfd `fd` mapped at `buffer` in place (zero copy; attached to a roced,
   a memfd made with MFD_ALLOW_SEALING, as client.h's register_memfd), nfrClientAttachMemory
   takes any memory: the host writes a buffer of the stack's, copied to `buffer` before the
   MEM_WRITE event is returned. */
PNFRMemory nfrClientAllocMemory(PNFRClient client, uint64_t size, uint8_t index);
PNFRMemory nfrClientAttachMemfd(PNFRClient client, int fd, void* buffer, uint64_t size,
                                uint8_t index);
PNFRMemory nfrClientAttachMemory(PNFRClient client, void* buffer, uint64_t size, uint8_t index);
/* The application is done with the data of a MEM_WRITE event: the host may write the buffer
   again. */
int nfrClientBufferAck(PNFRClient client, PNFRMemory mem);
int nfrClientSendData(PNFRClient client, int channelID, const void* data, uint32_t length,
                      uint64_t udata);
/* Sizes of the host's attached memory (from its buffer state message), 0-terminated; NULL
   before it arrived. */
const uint64_t* nfrClientHostBufferSizes(PNFRClient client);
const char* nfrClientStats(PNFRClient client);
void nfrClientFree(PNFRClient* client);

/* Memory region helpers. */
void* nfrMemoryPointer(PNFRMemory mem);
uint64_t nfrMemorySize(PNFRMemory mem);

#ifdef __cplusplus
}
#endif

#endif
