/* NetFR, the network frame relay of Looking Glass, on the appliance's RoCEv2 stack: the C API.
 *
 * A host streams large buffers (frames) into memory its client advertised, by RDMA WRITE
 * followed by a SEND that names the buffer (nfrHostWriteBuffer), and exchanges small reliable
 * ordered datagrams with it both ways (nfr*SendData, nfrHostReadData, nfrClientProcess). A
 * connection has NETFR_CHANNEL_COUNT channels, each an RC QP set up with rdma_cm: channel 0,
 * primary (frames), and channel 1, secondary (cursor). The messages on the wire are upstream
 * NetFR's, byte for byte; docs/netfr.md describes the protocol.
 *
 * The names, arguments and behaviour follow upstream NetFR's C API (telescope-proj/netfr 45b215f,
 * its netfr.h, netfr_host.h and netfr_client.h) where this stack can; docs/netfr.md lists what
 * differs and why.
 *
 * Return values: 0 (or a count) on success, a negative errno value on failure: -EAGAIN no credit
 * (non-blocking, the default) or nothing to do, -ENOTCONN no peer, -ENOBUFS no free advertised
 * buffer fits or a datagram too long, -EMSGSIZE past the buffer size limit, -EINVAL bad
 * argument, -ETIMEDOUT, -ECONNREFUSED the host refused us (it already serves a client). */
#ifndef NETFR_NETFR_H
#define NETFR_NETFR_H

#include <stddef.h>
#include <stdint.h>
/* What upstream's netfr.h brings in, itself or through libfabric's headers (fabric.h, fi_errno.h,
   fi_domain.h), and what code written against it relies on (upstream's test programs call
   memset, strcmp, inet_addr, htons, nanosleep and use errno values without including them). */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

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
#define NETFR_NUM_CHANNELS NETFR_CHANNEL_COUNT /* upstream's name */
#define NETFR_CHANNEL_PRIMARY 0
#define NETFR_CHANNEL_SECONDARY 1

typedef struct NFRHost* PNFRHost;
typedef struct NFRClient* PNFRClient;
typedef struct NFRMemory* PNFRMemory;
/* Upstream's netfr.h declares these too; no function of its API takes them. */
typedef struct NFRResource* PNFRResource;
typedef struct NFRRemoteMemory* PNFRRemoteMemory;

/* Upstream's completion callback: called with the uData array of its NFRCallbackInfo (copied
   when the operation was posted) once the operation is done; not called when it failed (the
   connection went: nfr*Process reports that). */
typedef void (*NFRCallback)(const void** uData);
struct NFRCallbackInfo {
  NFRCallback callback;
  void* uData[NETFR_CALLBACK_USER_DATA_COUNT];
};

/* Upstream's log levels (nfrSetLogLevel): DEBUG and TRACE print connection events and
   protocol errors on stderr. */
enum {
  NFR_LOG_LEVEL_TRACE,
  NFR_LOG_LEVEL_DEBUG,
  NFR_LOG_LEVEL_INFO,
  NFR_LOG_LEVEL_WARNING,
  NFR_LOG_LEVEL_ERROR,
  NFR_LOG_LEVEL_FATAL,
  NFR_LOG_LEVEL_OFF
};
void nfrSetLogLevel(int level);
/* The level nfrSetLogLevel set (upstream's variable; read it, set it with nfrSetLogLevel). */
extern int nfr_LogLevel;

/* Upstream's transports (NFRInitOpts.transportTypes): this stack is RDMA (RoCEv2) only; a
   channel asking for NFR_TRANSPORT_TCP (libfabric's TCP provider) gets -EPROTONOSUPPORT. */
enum NFRTransportType { NFR_TRANSPORT_TCP = 1, NFR_TRANSPORT_RDMA = 2, NFR_TRANSPORT_MAX };

/* libfabric's API version macro, for NFRInitOpts.apiVersion (which this stack ignores). */
#ifndef FI_VERSION
#define FI_VERSION(major, minor) (((major) << 16) | (minor))
#endif

struct NFRInitOpts {
  /* Upstream's fields, first and as upstream declares them, so that code filling them (after a
     memset to 0, as upstream's programs do) builds and runs unchanged; ours follow, 0 meaning
     the default. apiVersion and flags: libfabric's, ignored here. addrs: host: the address
     and ports to listen on (the address is the link's: only the ports are taken); client
     (peerInfo): the host's address and ports (the client's own opts.addrs are not used: its
     address is the link's). Ours can serve the secondary channel only on the primary's port
     + 1, as upstream's programs do: another port there is -EINVAL. Ours win when set: peer and
     port below. transportTypes: 0 or NFR_TRANSPORT_RDMA; NFR_TRANSPORT_TCP: -EPROTONOSUPPORT. */
  uint32_t apiVersion;
  uint64_t flags;
  struct sockaddr_in addrs[NETFR_NUM_CHANNELS];
  uint8_t transportTypes[NETFR_NUM_CHANNELS];

  /* The stack of this process. "attach=SOCKET[,port=NAME]": a client of the roced listening on
     SOCKET (its port NAME, default its first; libroce only, no DPDK in this process). Or a
     link of its own, in-process (programs that link the in-process stack):
     "pmd=memif,socket=PATH,role=server|client,ip=A,mac=M" or "pmd=af_packet,iface=IF,ip=A,
     mac=M", plus optional tx_drop=, rx_drop=, reorder=, seed=, pcap=, window=, lcore=.
     NULL: the environment variable NETFR_LINK. */
  const char* link;
  /* Host: the address to listen on is the link's; client: the host's IPv4 address (NULL:
     peerInfo->addrs[0]). */
  const char* peer;
  /* rdma_cm TCP port of the primary channel; the secondary is port + 1. 0: addrs[0]'s port,
     else 5010. */
  uint16_t port;
  /* 0 (default, upstream's behaviour): sends return -EAGAIN when the credits are down to the
     reserve, buffer writes -ENOBUFS when no buffer is free. Non-zero: they wait (up to
     timeoutSec) instead. */
  int blocking;
  /* Seconds to wait when blocking, and for the connection. 0: 10. */
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
/* Sends a datagram of 1 .. NETFR_MESSAGE_MAX_PAYLOAD_SIZE bytes to the client: -ENOBUFS when
   longer, -EAGAIN when the channel's credits are down to the reserve (non-blocking). */
int nfrHostSendData(PNFRHost host, int channelID, const void* data, uint32_t length,
                    uint64_t udata);
/* Copies the oldest datagram of the client on channelID out: *maxLength in: the buffer's size,
   out: the message's; -ENOBUFS (message kept) when it does not fit, -EAGAIN when none (with or
   without a client, as upstream's). */
int nfrHostReadData(PNFRHost host, int channelID, void* data, uint32_t* maxLength, uint64_t* udata);
/* Sources of buffer writes on channel `index`. Work requests use memory of the stack's
   (shared with roced when attached): nfrHostAllocMemory allocates it (zero copy; write the
   frame at nfrMemoryPointer), nfrHostAttachMemfd registers the application's memfd `fd` mapped
   at `buffer` in place (zero copy), nfrHostAttachMemory takes any memory and copies what each
   write sends into a buffer of the stack's first. */
PNFRMemory nfrHostAllocMemory(PNFRHost host, uint64_t size, uint8_t index);
PNFRMemory nfrHostAttachMemfd(PNFRHost host, int fd, void* buffer, uint64_t size, uint8_t index);
PNFRMemory nfrHostAttachMemory(PNFRHost host, void* buffer, uint64_t size, uint8_t index);
/* Writes length bytes at localOffset of localMem to the smallest free buffer the client
   advertised on the memory's channel that holds remoteOffset + length, then notifies the client
   (a buffer update; its udata is 0, as upstream's). cbInfo (may be NULL): its callback runs
   once the notification is sent, from this host's nfrHostProcess only (as upstream's), on the
   thread calling it. Returns 0 (as upstream);
   -ENOBUFS when no free buffer fits (none large enough, or all busy: upstream does not
   tell them apart), -EMSGSIZE past NETFR_MAX_BUFFER_SIZE; nothing is written then. */
int nfrHostWriteBuffer(PNFRMemory localMem, uint64_t localOffset, uint64_t remoteOffset,
                       uint64_t length, struct NFRCallbackInfo* cbInfo);
/* Ours: the same with the buffer update's udata (the client's event carries it), returning the
   index of the chosen buffer (>= 0) on success. */
int nfrHostWriteBufferUdata(PNFRMemory localMem, uint64_t localOffset, uint64_t remoteOffset,
                            uint64_t length, uint64_t udata, const struct NFRCallbackInfo* cbInfo);
/* Ours: the credits left on a channel (NETFR_CREDIT_COUNT when every datagram sent was
   acknowledged), or a negative errno. */
int nfrHostCredits(PNFRHost host, int channelID);
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

/* Upstream's fields in upstream's order and types, plus channelSerial (ours), so inlineData
   sits 16 bytes further than upstream's: source compatible, not binary. */
struct NFRClientEvent {
  PNFRMemory memRegion; /* MEM_WRITE */
  uint64_t udata;
  uint32_t serial;        /* total order: connection-wide; else the channel's serial */
  uint32_t payloadOffset; /* MEM_WRITE: from the start of memRegion */
  uint32_t payloadLength;
  uint8_t type;
  uint8_t channelIndex;
  uint32_t channelSerial;                                      /* ours: per channel */
  NFR_ALIGN16 char inlineData[NETFR_MESSAGE_MAX_PAYLOAD_SIZE]; /* DATA */
};

/* Starts the stack and starts connecting both channels (as upstream: nothing waits here) to the
   host peerInfo->peer, else opts->peer, else peerInfo->addrs[0]'s address (upstream's way),
   port peerInfo->port, else opts->port, else peerInfo->addrs[0]'s port, else 5010. */
int nfrClientInit(const struct NFRInitOpts* opts, const struct NFRInitOpts* peerInfo,
                  PNFRClient* result);
/* Upstream's connection step, non-blocking: -EAGAIN while connecting, 0 once both channels are
   up (and while they stay up), -ECONNREFUSED when the host serves another client, -ECONNRESET
   (or -ENOTCONN) when the connection went, other negative values on failure. Free the client after
   a failure. */
int nfrClientConnect(PNFRClient client);
/* Ours: nfrClientConnect until it is not -EAGAIN, for up to timeoutSec (-ETIMEDOUT). */
int nfrClientConnectWait(PNFRClient client);
/* Background work; fills *evt and returns 1 when a message is there, 0 when none, negative on
   failure. When the connection went, what had arrived is still handed out, then (as upstream)
   the reason once (-ECONNRESET: the host disconnected, went silent or a transfer failed;
   -EHOSTUNREACH), then -ENOTCONN. index: -1 for both channels (upstream's order: the
   primary channel's next message first; with totalOrder, the next in the host's order),
   0 or 1 for that channel's next message only (not with totalOrder: -EINVAL). */
int nfrClientProcess(PNFRClient client, int index, struct NFRClientEvent* evt);
/* Advertises a buffer to the host on channel `index`: nfrClientAllocMemory allocates it from
   the stack (zero copy; the frames land at nfrMemoryPointer), nfrClientAttachMemfd registers
   the application's memfd `fd` mapped at `buffer` in place (zero copy; attached to a roced,
   a memfd made with MFD_ALLOW_SEALING, as client.h's register_memfd), nfrClientAttachMemory
   takes any memory: the host writes a buffer of the stack's, copied to `buffer` before the
   MEM_WRITE event is returned; a NULL `buffer` (as upstream: the library allocates) is
   nfrClientAllocMemory. nfrFreeMemory frees what the library allocated. */
PNFRMemory nfrClientAllocMemory(PNFRClient client, uint64_t size, uint8_t index);
PNFRMemory nfrClientAttachMemfd(PNFRClient client, int fd, void* buffer, uint64_t size,
                                uint8_t index);
PNFRMemory nfrClientAttachMemory(PNFRClient client, void* buffer, uint64_t size, uint8_t index);
/* Upstream's name: nfrClientAllocMemory (the stack's memory is what DMA-BUFs are for there). */
PNFRMemory nfrClientAllocDMABUF(PNFRClient client, uint64_t size, uint8_t index);
/* The application is done with the data of a MEM_WRITE event: the host may write the buffer
   again (the client advertises it anew). nfrAckBuffer is upstream's name. */
int nfrClientBufferAck(PNFRClient client, PNFRMemory mem);
void nfrAckBuffer(PNFRMemory mem);
int nfrClientSendData(PNFRClient client, int channelID, const void* data, uint32_t length,
                      uint64_t udata);
/* Sizes of the host's attached memory (from its buffer state message), 0-terminated; NULL
   before it arrived. */
const uint64_t* nfrClientHostBufferSizes(PNFRClient client);
int nfrClientCredits(PNFRClient client, int channelID);
const char* nfrClientStats(PNFRClient client);
void nfrClientFree(PNFRClient* client);

/* Memory region helpers. */
void* nfrMemoryPointer(PNFRMemory mem);
uint64_t nfrMemorySize(PNFRMemory mem);
/* Releases a region of a host or client and sets *mem to NULL: a client's buffer is withdrawn
   from the host first (a buffer state of size 0). Memory the application attached stays its
   own; memory of the stack's goes back to it. Not while a write into or from it is under way
   (-EBUSY from nfrFreeMemoryChecked). nfrReleaseMemory is the name upstream's header also has. */
void nfrFreeMemory(PNFRMemory* mem);
void nfrReleaseMemory(PNFRMemory* mem);
int nfrFreeMemoryChecked(PNFRMemory* mem);

/* Threads: every function above may be called from any thread; they take one lock of the
   process (all hosts and clients of a process share its stack), so calls from two threads (as
   Looking Glass makes: its frame and cursor threads send and write while its main loop calls
   nfr*Process) serialize. A blocking call waits with the lock held and keeps the stack going
   for the others' connections meanwhile. Callbacks run from nfrHostProcess only (on its
   caller's thread), under the lock, and may call the API. */

#ifdef __cplusplus
}
#endif

#endif
