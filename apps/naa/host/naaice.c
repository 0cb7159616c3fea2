/* @file
 * The NAAICE low-level host API (naaice.h) over a transport (naaice_transport.h). MRSP
 * messages are laid out byte by byte in big-endian order, as upstream's structs on the wire:
 * a 4-byte header (type, count or error code, two bytes of padding), then 24 bytes per region
 * of an advertisement+request (MR flags, 7-byte requested NAA address, 8-byte address, 4-byte
 * rkey, 4-byte size) or 16 per region of an advertisement (address, rkey, size). */
#include "apps/naa/host/naaice.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "apps/naa/host/naaice_transport.h"

#define HDR_SIZE 4
#define AAR_ENTRY 24
#define ADV_ENTRY 16
#define MSG_BUF (HDR_SIZE + NAAICE_MAX_COUNT * AAR_ENTRY) /* the largest message */
#define WR_MRSP 1
#define WR_DATA 2
#define WR_RECV_MRSP 3
#define WR_RECV_DATA 4

static void put_be32(unsigned char* p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static void put_be64(unsigned char* p, uint64_t v) {
  put_be32(p, (uint32_t)(v >> 32));
  put_be32(p + 4, (uint32_t)v);
}
static uint32_t get_be32(const unsigned char* p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint64_t get_be64(const unsigned char* p) {
  return ((uint64_t)get_be32(p) << 32) | get_be32(p + 4);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* When a wait that starts now ends: comm_ctx->timeout seconds, never if it is not positive
 * (upstream: `timeout > 0 &&` in its loops, alarm(0) in naaice_poll_cq_blocking). */
static double deadline(const struct naaice_communication_context* c) {
  return c->timeout > 0 ? now_s() + c->timeout : 1e300;
}

static void pause_briefly(void) {
  const struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

const char* naaice_mrsp_error_string(uint8_t code) {
  switch (code) {
    case NAAICE_MRSP_NOT_ENOUGH_MEMORY:
      return "not enough memory (address + size exceeds the memory boundary)";
    case NAAICE_MRSP_INVALID_ADDRESS:
      return "invalid address (address is out of bounds)";
    case NAAICE_MRSP_TOO_MANY_REGIONS:
      return "too many regions requested";
    default:
      return "unknown MRSP error";
  }
}

const char* naaice_rpc_status_string(uint32_t s) {
  if (s == NAA_SUCCESS) return "success";
  if (s == SOCKET_UNAVAIL) return "socket not available";
  if (s == KERNEL_TIMEOUT) return "kernel (NAA application) timeout";
  if (s <= 0x0f) return "reserved";
  if (s <= 0x7f) return "application error";
  return "undefined status";
}

const char* naaice_state_string(naaice_communication_state s) {
  switch (s) {
    case NAAICE_INIT:
      return "NAAICE_INIT";
    case NAAICE_READY:
      return "NAAICE_READY";
    case NAAICE_CONNECTED:
      return "NAAICE_CONNECTED";
    case NAAICE_DISCONNECTED:
      return "NAAICE_DISCONNECTED";
    case NAAICE_MRSP_SENDING:
      return "NAAICE_MRSP_SENDING";
    case NAAICE_MRSP_RECEIVING:
      return "NAAICE_MRSP_RECEIVING";
    case NAAICE_MRSP_DONE:
      return "NAAICE_MRSP_DONE";
    case NAAICE_DATA_SENDING:
      return "NAAICE_DATA_SENDING";
    case NAAICE_CALCULATING:
      return "NAAICE_CALCULATING";
    case NAAICE_DATA_RECEIVING:
      return "NAAICE_DATA_RECEIVING";
    case NAAICE_FINISHED:
      return "NAAICE_FINISHED";
    case NAAICE_ERROR:
      return "NAAICE_ERROR";
  }
  return "unknown state";
}

/* The IPv4 address of `name` (a host name or an address), as upstream resolves the NAA's with
 * getaddrinfo: 0, or -1. */
static int resolve_ipv4(const char* name, char* out, size_t n) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  struct addrinfo* res = NULL;
  if (getaddrinfo(name, NULL, &hints, &res) || !res) return -1;
  const struct sockaddr_in* sin = (const struct sockaddr_in*)(const void*)res->ai_addr;
  const int ok = inet_ntop(AF_INET, &sin->sin_addr, out, (socklen_t)n) != NULL;
  freeaddrinfo(res);
  return ok ? 0 : -1;
}

static void free_context(struct naaice_communication_context* c) {
  if (!c) return;
  free(c->mr_local_data);
  free(c->mr_peer_data);
  if (c->mr_local_message) free(c->mr_local_message->addr);
  free(c->mr_local_message);
  free(c->mr_internal);
  free(c);
}

int naaice_init_communication_context(struct naaice_communication_context** comm_ctx,
                                      uint64_t addr_offset, size_t* param_sizes, char** params,
                                      unsigned int params_amount, unsigned int internal_mr_amount,
                                      size_t* internal_mr_sizes, uint8_t fncode,
                                      const char* local_ip, const char* remote_ip, uint16_t port) {
  if (!comm_ctx || !remote_ip || !param_sizes || !params || params_amount == 0 ||
      (internal_mr_amount && !internal_mr_sizes)) {
    fprintf(stderr, "naaice: invalid arguments (at least one parameter)\n");
    return -1;
  }
  if (fncode < 1) {
    fprintf(stderr, "naaice: the function code must be positive\n");
    return -1;
  }
  if ((fncode & NAAICE_IMM_FNCODE_MASK) == 0) {
    fprintf(stderr, "naaice: function code %u reaches the NAA as 0 (it takes 7 bits)\n", fncode);
    return -1;
  }
  if (params_amount + internal_mr_amount > NAAICE_MAX_COUNT) {
    fprintf(stderr, "naaice: %u regions, at most %d fit an MRSP message\n",
            params_amount + internal_mr_amount, NAAICE_MAX_COUNT);
    return -1;
  }
  const unsigned n = params_amount + internal_mr_amount;
  uint64_t* addrs = calloc(n, sizeof *addrs);
  size_t* sizes = calloc(n, sizeof *sizes);
  struct naaice_communication_context* c = calloc(1, sizeof *c);
  char* msg = calloc(2, MSG_BUF);
  if (!addrs || !sizes || !c || !msg ||
      !(c->mr_local_message = calloc(1, sizeof(struct naaice_mr_local)))) {
    fprintf(stderr, "naaice: out of memory\n");
    free(addrs);
    free(sizes);
    free(msg);
    free_context(c);
    return -1;
  }
  c->mr_local_message->addr = msg;
  c->mr_local_message->size = c->mr_local_message->length = 2 * MSG_BUF;
  /* The NAA addresses to request: sequential from addr_offset, page-aligned, internal regions
   * first (upstream's placeholder for its memory management service). */
  for (unsigned i = 0; i < internal_mr_amount; i++) sizes[i] = internal_mr_sizes[i];
  for (unsigned i = 0; i < params_amount; i++) sizes[internal_mr_amount + i] = param_sizes[i];
  uint64_t next = addr_offset;
  for (unsigned i = 0; i < n; i++) {
    addrs[i] = next;
    next += (sizes[i] + NAAICE_NAA_PAGE - 1) / NAAICE_NAA_PAGE * NAAICE_NAA_PAGE;
  }
  c->state = NAAICE_INIT;
  c->timeout = DEFAULT_TIMEOUT;
  c->retry_count = DEFAULT_RETRY_COUNT;
  if (getenv("NAAICE_CALL_GAP_MS")) c->call_gap = atof(getenv("NAAICE_CALL_GAP_MS")) / 1e3;
  c->fncode = fncode;
  if (resolve_ipv4(remote_ip, c->remote_ip, sizeof c->remote_ip)) {
    fprintf(stderr, "naaice: cannot resolve the NAA's address %s (IPv4)\n", remote_ip);
    free(addrs);
    free(sizes);
    free_context(c);
    return -1;
  }
  if (local_ip) snprintf(c->local_ip, sizeof c->local_ip, "%s", local_ip);
  c->port = port;
  uint8_t imm_bytes[3] = {0, 0, 0};
  int rc = naaice_set_internal_mrs(c, internal_mr_amount, addrs, sizes);
  if (!rc) {
    uint64_t* locals = calloc(params_amount, sizeof *locals);
    rc = locals ? 0 : -1;
    for (unsigned i = 0; locals && i < params_amount; i++) locals[i] = (uintptr_t)params[i];
    if (!rc)
      rc = naaice_set_parameter_mrs(c, params_amount, locals, addrs + internal_mr_amount,
                                    sizes + internal_mr_amount);
    free(locals);
  }
  if (!rc) rc = naaice_set_immediate(c, imm_bytes);
  free(addrs);
  free(sizes);
  if (!rc) {
    c->transport = naaice_transport_open();
    if (!c->transport) rc = -1;
  }
  if (rc) {
    free_context(c);
    return -1;
  }
  *comm_ctx = c;
  return 0;
}

int naaice_setup_connection(struct naaice_communication_context* c) {
  if (c && c->state == NAAICE_CONNECTED) return 0;
  if (!c || c->state != NAAICE_INIT) {
    fprintf(stderr, "naaice: setup_connection needs a fresh context\n");
    return -1;
  }
  /* Send queue: a WRITE per region plus the MRSP SEND; receives: MRSP answer and result. */
  struct naaice_transport* t = c->transport;
  if (t->connect(t->priv, c->local_ip[0] ? c->local_ip : NULL, c->remote_ip, c->port,
                 (uint32_t)c->no_local_mrs + 8, 8, c->retry_count,
                 c->timeout > 0 ? c->timeout : DEFAULT_TIMEOUT)) {
    fprintf(stderr, "naaice: cannot connect to %s port %u: %s\n", c->remote_ip, c->port,
            t->error(t->priv));
    c->state = NAAICE_ERROR;
    return -1;
  }
  c->state = NAAICE_CONNECTED;
  return 0;
}

int naaice_poll_and_handle_connection_event(struct naaice_communication_context* c) {
  if (!c) return -1;
  return c->state == NAAICE_INIT ? naaice_setup_connection(c) : 0;
}

int naaice_register_mrs(struct naaice_communication_context* c) {
  struct naaice_transport* t = c->transport;
  for (int i = 0; i < c->no_local_mrs; i++) {
    struct naaice_mr_local* m = &c->mr_local_data[i];
    if (m->handle) continue;
    struct naaice_mr_handle h;
    if (t->reg_mr(t->priv, m->addr, m->length, &h)) {
      fprintf(stderr, "naaice: cannot register region %d: %s\n", i, t->error(t->priv));
      return -1;
    }
    m->lkey = h.lkey;
    m->rkey = h.rkey;
    m->handle = h.priv;
  }
  struct naaice_mr_local* m = c->mr_local_message;
  if (m->handle) return 0;
  struct naaice_mr_handle h;
  if (t->reg_mr(t->priv, m->addr, m->length, &h)) {
    fprintf(stderr, "naaice: cannot register the MRSP buffer: %s\n", t->error(t->priv));
    return -1;
  }
  m->lkey = h.lkey;
  m->rkey = h.rkey;
  m->handle = h.priv;
  return 0;
}

int naaice_set_parameter_mrs(struct naaice_communication_context* c, unsigned int n,
                             uint64_t* local_addrs, uint64_t* remote_addrs, size_t* sizes) {
  if (n == 0 || n + c->no_internal_mrs > NAAICE_MAX_COUNT || !local_addrs || !remote_addrs ||
      !sizes) {
    fprintf(stderr, "naaice: set_parameter_mrs: 1..%d regions (with the internal ones)\n",
            NAAICE_MAX_COUNT);
    return -1;
  }
  for (int i = 0; c->mr_local_data && i < c->no_local_mrs; i++)
    if (c->mr_local_data[i].handle) {
      fprintf(stderr, "naaice: set_parameter_mrs after naaice_register_mrs\n");
      return -1;
    }
  for (unsigned i = 0; i < n; i++) {
    if (sizes[i] == 0 || sizes[i] > NAAICE_MAX_MR_SIZE || !local_addrs[i]) {
      fprintf(stderr, "naaice: parameter %u: size must be 1..2^32-1 and the buffer set\n", i);
      return -1;
    }
    if (remote_addrs[i] > NAAICE_MAX_NAA_ADDR) {
      fprintf(stderr, "naaice: NAA address of parameter %u beyond 56 bits\n", i);
      return -1;
    }
  }
  struct naaice_mr_local* l = calloc(n, sizeof *l);
  struct naaice_mr_peer* p = calloc(n, sizeof *p);
  if (!l || !p) {
    free(l);
    free(p);
    return -1;
  }
  for (unsigned i = 0; i < n; i++) {
    l[i].addr = (char*)(uintptr_t)local_addrs[i];
    l[i].size = l[i].length = sizes[i];
    p[i].addr = remote_addrs[i];
    p[i].size = sizes[i];
  }
  free(c->mr_local_data);
  free(c->mr_peer_data);
  c->mr_local_data = l;
  c->mr_peer_data = p;
  c->no_local_mrs = c->no_peer_mrs = (uint8_t)n;
  c->no_input_mrs = c->no_output_mrs = 0;
  return 0;
}

int naaice_set_input_mr(struct naaice_communication_context* c, unsigned int idx) {
  if (idx >= c->no_local_mrs) {
    fprintf(stderr, "naaice: region %u as input: there are %u\n", idx, c->no_local_mrs);
    return -1;
  }
  if (!c->mr_local_data[idx].to_write) {
    c->mr_local_data[idx].to_write = true;
    c->no_input_mrs++;
  }
  return 0;
}

int naaice_set_output_mr(struct naaice_communication_context* c, unsigned int idx) {
  if (idx >= c->no_peer_mrs) {
    fprintf(stderr, "naaice: region %u as output: there are %u\n", idx, c->no_peer_mrs);
    return -1;
  }
  if (!c->mr_peer_data[idx].to_write) {
    c->mr_peer_data[idx].to_write = true;
    c->no_output_mrs++;
  }
  return 0;
}

int naaice_set_singlesend_mr(struct naaice_communication_context* c, unsigned int idx) {
  if (idx >= c->no_peer_mrs) {
    fprintf(stderr, "naaice: region %u as single send: there are %u\n", idx, c->no_peer_mrs);
    return -1;
  }
  c->mr_local_data[idx].single_send = true;
  c->mr_peer_data[idx].single_send = true;
  return naaice_set_input_mr(c, idx);
}

int naaice_set_internal_mrs(struct naaice_communication_context* c, unsigned int n, uint64_t* addrs,
                            size_t* sizes) {
  if (n + c->no_local_mrs > NAAICE_MAX_COUNT) {
    fprintf(stderr, "naaice: too many internal regions for one MRSP message\n");
    return -1;
  }
  for (unsigned int i = 0; i < n; i++) {
    if (sizes[i] == 0 || sizes[i] > NAAICE_MAX_MR_SIZE || addrs[i] > NAAICE_MAX_NAA_ADDR) {
      fprintf(stderr, "naaice: internal region %u: size 1..2^32-1, address of 56 bits\n", i);
      return -1;
    }
  }
  struct naaice_mr_internal* m = n ? calloc(n, sizeof *m) : NULL;
  if (n && !m) return -1;
  for (unsigned int i = 0; i < n; i++) {
    m[i].addr = addrs[i];
    m[i].size = sizes[i];
  }
  free(c->mr_internal);
  c->mr_internal = m;
  c->no_internal_mrs = (uint8_t)n;
  return 0;
}

int naaice_set_immediate(struct naaice_communication_context* c, uint8_t* imm_bytes) {
  if (!imm_bytes) return -1;
  c->immediate = (uint32_t)c->fncode | (uint32_t)imm_bytes[0] << 8 | (uint32_t)imm_bytes[1] << 16 |
                 (uint32_t)imm_bytes[2] << 24;
  return 0;
}

int naaice_set_bytes_to_send(struct naaice_communication_context* c, int idx, int number_bytes) {
  if (idx < 0 || idx >= c->no_local_mrs) {
    fprintf(stderr, "naaice: set_bytes_to_send: no region %d\n", idx);
    return -1;
  }
  struct naaice_mr_local* m = &c->mr_local_data[idx];
  if (!m->handle) {
    fprintf(stderr, "naaice: set_bytes_to_send before naaice_register_mrs\n");
    return -1;
  }
  if (number_bytes < 0) {
    m->size = m->length;
    return 0;
  }
  if ((size_t)number_bytes > m->length) {
    fprintf(stderr, "naaice: set_bytes_to_send: %d bytes, the region has %zu\n", number_bytes,
            m->length);
    return -1;
  }
  m->size = (size_t)number_bytes;
  return 0;
}

int naaice_send_message(struct naaice_communication_context* c, enum message_id type,
                        uint8_t errorcode) {
  unsigned char* m = (unsigned char*)c->mr_local_message->addr;
  size_t len = HDR_SIZE;
  memset(m, 0, HDR_SIZE);
  m[0] = (unsigned char)type;
  if (type == MSG_MR_ERR) {
    m[1] = errorcode;
  } else if (type == MSG_MR_AAR) {
    m[1] = (unsigned char)(c->no_local_mrs + c->no_internal_mrs);
    for (int i = 0; i < c->no_local_mrs; i++, len += AAR_ENTRY) {
      uint8_t flags = 0;
      if (c->mr_local_data[i].single_send) flags |= MRFLAG_SINGLESEND;
      if (c->mr_local_data[i].to_write) flags |= MRFLAG_INPUT;
      if (c->mr_peer_data[i].to_write) flags |= MRFLAG_OUTPUT;
      put_be64(m + len, (uint64_t)flags << 56 | (c->mr_peer_data[i].addr & NAAICE_MAX_NAA_ADDR));
      put_be64(m + len + 8, (uint64_t)(uintptr_t)c->mr_local_data[i].addr);
      put_be32(m + len + 16, c->mr_local_data[i].rkey);
      put_be32(m + len + 20, (uint32_t)c->mr_local_data[i].length);
    }
    for (int i = 0; i < c->no_internal_mrs; i++, len += AAR_ENTRY) {
      put_be64(m + len, (uint64_t)MRFLAG_INTERNAL << 56 | c->mr_internal[i].addr);
      put_be64(m + len + 8, 0);
      put_be32(m + len + 16, 0);
      put_be32(m + len + 20, (uint32_t)c->mr_internal[i].size);
    }
  } else if (type == MSG_MR_A) {
    m[1] = c->no_local_mrs;
    for (int i = 0; i < c->no_local_mrs; i++, len += ADV_ENTRY) {
      put_be64(m + len, (uint64_t)(uintptr_t)c->mr_local_data[i].addr);
      put_be32(m + len + 8, c->mr_local_data[i].rkey);
      put_be32(m + len + 12, (uint32_t)c->mr_local_data[i].length);
    }
  } else {
    fprintf(stderr, "naaice: a host sends no message of type %d\n", type);
    return -1;
  }
  c->state = NAAICE_MRSP_SENDING;
  struct naaice_transport* t = c->transport;
  if (t->post_send(t->priv, NAAICE_OP_SEND, WR_MRSP, m, (uint32_t)len, c->mr_local_message->lkey, 0,
                   0, 0, NAAICE_SEND_SIGNALED | NAAICE_SEND_SOLICITED)) {
    fprintf(stderr, "naaice: posting the MRSP message failed: %s\n", t->error(t->priv));
    c->state = NAAICE_ERROR;
    return -1;
  }
  return 0;
}

static int post_recv(struct naaice_communication_context* c, uint64_t id) {
  struct naaice_transport* t = c->transport;
  if (t->post_recv(t->priv, id, c->mr_local_message->addr + MSG_BUF, MSG_BUF,
                   c->mr_local_message->lkey)) {
    fprintf(stderr, "naaice: posting a receive failed: %s\n", t->error(t->priv));
    return -1;
  }
  c->recv_posted++;
  return 0;
}

int naaice_post_recv_mrsp(struct naaice_communication_context* c) {
  return post_recv(c, WR_RECV_MRSP);
}
int naaice_post_recv_data(struct naaice_communication_context* c) {
  return post_recv(c, WR_RECV_DATA);
}

int naaice_init_mrsp(struct naaice_communication_context* c) {
  if (c->state != NAAICE_CONNECTED && c->state != NAAICE_ERROR && c->state != NAAICE_MRSP_DONE &&
      c->state != NAAICE_FINISHED) {
    fprintf(stderr, "naaice: init_mrsp needs a connection (state %s)\n",
            naaice_state_string(c->state));
    return -1;
  }
  if (!c->mr_local_message->handle) {
    fprintf(stderr, "naaice: init_mrsp before naaice_register_mrs\n");
    return -1;
  }
  c->mrsp_error = 0;
  /* The receive for the answer goes first: the NAA may answer before our SEND completes. */
  if (c->recv_posted == 0 && naaice_post_recv_mrsp(c)) return -1;
  return naaice_send_message(c, MSG_MR_AAR, 0);
}

int naaice_write_data(struct naaice_communication_context* c, uint8_t fncode) {
  struct naaice_transport* t = c->transport;
  c->state = NAAICE_DATA_SENDING;
  c->rdma_writes_done = 0;
  if (fncode == 0) {
    c->writes_posted = 1;
    if (t->post_send(t->priv, NAAICE_OP_WRITE_IMM, WR_DATA, c->mr_local_data[0].addr, 0,
                     c->mr_local_data[0].lkey, c->mr_peer_data[0].addr, c->mr_peer_data[0].rkey, 0,
                     NAAICE_SEND_SIGNALED | NAAICE_SEND_SOLICITED)) {
      fprintf(stderr, "naaice: posting the error write failed: %s\n", t->error(t->priv));
      c->state = NAAICE_ERROR;
      return -1;
    }
    return 0;
  }
  /* Single-send regions go with the connection's first call only. */
  for (int i = 0; i < c->no_local_mrs; i++) {
    struct naaice_mr_local* m = &c->mr_local_data[i];
    if (m->single_send && m->to_write && c->no_rpc_calls > 0) {
      m->to_write = false;
      c->no_input_mrs--;
    }
  }
  if (c->no_input_mrs == 0) {
    fprintf(stderr, "naaice: no input region to write (naaice_set_input_mr)\n");
    c->state = NAAICE_ERROR;
    return -1;
  }
  unsigned posted = 0;
  for (int i = 0; i < c->no_local_mrs && posted < c->no_input_mrs; i++) {
    const struct naaice_mr_local* m = &c->mr_local_data[i];
    if (!m->to_write) continue;
    const int last = ++posted == c->no_input_mrs;
    /* The last write carries the immediate: the function code and naaice_set_immediate's
     * bytes, with the bit that marks a host-to-NAA call. */
    if (t->post_send(t->priv, last ? NAAICE_OP_WRITE_IMM : NAAICE_OP_WRITE, WR_DATA, m->addr,
                     (uint32_t)m->size, m->lkey, c->mr_peer_data[i].addr, c->mr_peer_data[i].rkey,
                     last ? c->immediate | NAAICE_IMM_START_RPC : 0,
                     NAAICE_SEND_SIGNALED | (last ? NAAICE_SEND_SOLICITED : 0))) {
      fprintf(stderr, "naaice: posting the write of region %d failed: %s\n", i, t->error(t->priv));
      c->state = NAAICE_ERROR;
      return -1;
    }
  }
  c->writes_posted = (uint8_t)posted;
  return 0;
}

static int poll_once(struct naaice_communication_context* c);

int naaice_init_data_transfer(struct naaice_communication_context* c) {
  if (c->state != NAAICE_MRSP_DONE && c->state != NAAICE_FINISHED) {
    fprintf(stderr, "naaice: init_data_transfer needs a finished MRSP (state %s)\n",
            naaice_state_string(c->state));
    return -1;
  }
  if (c->no_output_mrs == 0) {
    fprintf(stderr, "naaice: no output region (naaice_set_output_mr): nothing would come back\n");
    return -1;
  }
  /* The NAA takes the function code as imm & 0x7f: 128 would call function 0, which no NAA
   * runs (roce-naa does not answer it). Function code 0 is the host-side error write. */
  if (c->fncode != 0 && (c->immediate & NAAICE_IMM_FNCODE_MASK) == 0) {
    fprintf(stderr, "naaice: function code %u reaches the NAA as 0 (it takes 7 bits)\n",
            c->immediate & 0xffu);
    return -1;
  }
  c->naa_returncode = 0;
  c->naa_immediate = 0;
  c->bytes_received = 0;
  /* Let the NAA settle after its last message (call_gap); the transport keeps running, so
   * that our ACK of it goes out now and not with the call. */
  while (c->call_gap > 0 && now_s() < c->naa_msg_at + c->call_gap) {
    if (poll_once(c) < 0) return -1;
    pause_briefly();
  }
  if (c->recv_posted == 0 && naaice_post_recv_data(c)) return -1;
  if (naaice_write_data(c, c->fncode)) return -1;
  c->no_rpc_calls++;
  return 0;
}

static int handle_mrsp_answer(struct naaice_communication_context* c, const struct naaice_wc* wc) {
  const unsigned char* m = (const unsigned char*)c->mr_local_message->addr + MSG_BUF;
  if (wc->byte_len < HDR_SIZE) {
    fprintf(stderr, "naaice: MRSP answer of %u bytes\n", wc->byte_len);
    c->state = NAAICE_ERROR;
    return -1;
  }
  if (m[0] == MSG_MR_ERR) {
    c->mrsp_error = m[1];
    fprintf(stderr, "naaice: the NAA answered MRSP error 0x%02x: %s\n", m[1],
            naaice_mrsp_error_string(m[1]));
    c->state = NAAICE_ERROR;
    return -1;
  }
  if (m[0] != MSG_MR_A) {
    fprintf(stderr, "naaice: MRSP answer of type 0x%02x\n", m[0]);
    c->state = NAAICE_ERROR;
    return -1;
  }
  const unsigned count = m[1];
  if (count != c->no_peer_mrs || wc->byte_len < HDR_SIZE + count * ADV_ENTRY) {
    fprintf(stderr, "naaice: the NAA advertised %u regions (%u bytes), we asked for %u\n", count,
            wc->byte_len, c->no_peer_mrs);
    c->state = NAAICE_ERROR;
    return -1;
  }
  for (unsigned i = 0; i < count; i++) {
    const unsigned char* e = m + HDR_SIZE + i * ADV_ENTRY;
    const uint32_t size = get_be32(e + 12);
    if (size < c->mr_local_data[i].length) {
      fprintf(stderr, "naaice: the NAA's region %u (%u bytes) is smaller than ours\n", i, size);
      c->state = NAAICE_ERROR;
      return -1;
    }
    c->mr_peer_data[i].addr = get_be64(e);
    c->mr_peer_data[i].rkey = get_be32(e + 8);
    c->mr_peer_data[i].size = size;
  }
  c->state = NAAICE_MRSP_DONE;
  c->naa_msg_at = now_s();
  return 0;
}

static int out_of_turn(struct naaice_communication_context* c, const char* what) {
  fprintf(stderr, "naaice: %s in state %s\n", what, naaice_state_string(c->state));
  c->state = NAAICE_ERROR;
  return -1;
}

int naaice_handle_work_completion(const struct naaice_wc* wc,
                                  struct naaice_communication_context* c) {
  if (!wc->ok) {
    fprintf(stderr, "naaice: work completion failed: %s\n", wc->status);
    c->state = NAAICE_ERROR;
    return -1;
  }
  switch (wc->kind) {
    case NAAICE_WC_SEND:
      if (c->state == NAAICE_MRSP_SENDING) c->state = NAAICE_MRSP_RECEIVING;
      return 0;
    case NAAICE_WC_WRITE:
      if (c->state == NAAICE_DATA_SENDING && ++c->rdma_writes_done >= c->writes_posted) {
        c->rdma_writes_done = 0;
        c->state = NAAICE_DATA_RECEIVING;
      }
      return 0;
    case NAAICE_WC_RECV:
      c->recv_posted--;
      if (c->state == NAAICE_MRSP_SENDING || c->state == NAAICE_MRSP_RECEIVING)
        return handle_mrsp_answer(c, wc);
      return out_of_turn(c, "an MRSP message");
    case NAAICE_WC_RECV_IMM: {
      c->recv_posted--;
      if (c->state != NAAICE_DATA_SENDING && c->state != NAAICE_CALCULATING &&
          c->state != NAAICE_DATA_RECEIVING)
        return out_of_turn(c, "a result");
      /* The output regions have arrived before the WRITE_WITH_IMM that ends them. */
      struct naaice_transport* t = c->transport;
      if (t->sync_in)
        for (int i = 0; i < c->no_peer_mrs; i++)
          if (c->mr_peer_data[i].to_write)
            t->sync_in(t->priv, c->mr_local_data[i].addr, c->mr_local_data[i].length);
      c->naa_msg_at = now_s();
      c->naa_immediate = wc->imm;
      c->naa_returncode = (uint8_t)(wc->imm >> IMMEDIATE_OFFSET);
      c->bytes_received = wc->byte_len;
      c->rdma_writes_done = 0;
      c->state = NAAICE_FINISHED;
      if (c->naa_returncode)
        fprintf(stderr, "naaice: the NAA returns 0x%02x: %s\n", c->naa_returncode,
                naaice_rpc_status_string(c->naa_returncode));
      return 0;
    }
  }
  return 0;
}

/* Handles what has completed; the number of receives among it, or -1. */
static int poll_once(struct naaice_communication_context* c) {
  struct naaice_transport* t = c->transport;
  struct naaice_wc wc[8];
  const int n = t->poll(t->priv, wc, 8);
  if (n < 0) {
    fprintf(stderr, "naaice: the connection broke: %s\n", t->error(t->priv));
    c->state = NAAICE_ERROR;
    return -1;
  }
  int recvs = 0;
  for (int i = 0; i < n; i++) {
    if (naaice_handle_work_completion(&wc[i], c)) return -1;
    if (wc[i].kind == NAAICE_WC_RECV || wc[i].kind == NAAICE_WC_RECV_IMM) recvs++;
  }
  return recvs;
}

int naaice_poll_cq_nonblocking(struct naaice_communication_context* c) {
  return poll_once(c) < 0 ? -1 : 0;
}

int naaice_poll_cq_blocking(struct naaice_communication_context* c) {
  const double end = deadline(c);
  for (;;) {
    const int r = poll_once(c);
    if (r < 0) return -1;
    if (r > 0) return 0;
    if (now_s() > end) {
      fprintf(stderr, "naaice: timed out waiting for the NAA (state %s)\n",
              naaice_state_string(c->state));
      return -1;
    }
    pause_briefly();
  }
}

int naaice_poll_cq_busy(struct naaice_communication_context* c) {
  const double end = deadline(c);
  while (c->state < NAAICE_FINISHED) {
    if (poll_once(c) < 0) return -1;
    if (now_s() > end) {
      fprintf(stderr, "naaice: timed out waiting for the result\n");
      return -1;
    }
  }
  return c->state == NAAICE_ERROR ? -1 : 0;
}

static int wait_state(struct naaice_communication_context* c, naaice_communication_state s,
                      const char* what) {
  const double end = deadline(c);
  while (c->state < s) {
    const int r = poll_once(c);
    if (r < 0) return -1;
    if (c->state >= s) break;
    if (now_s() > end) {
      fprintf(stderr, "naaice: timed out waiting for %s (state %s)\n", what,
              naaice_state_string(c->state));
      c->state = NAAICE_ERROR;
      return -1;
    }
    if (r == 0) pause_briefly();
  }
  return c->state == NAAICE_ERROR ? -1 : 0;
}

int naaice_do_mrsp(struct naaice_communication_context* c) {
  if (naaice_init_mrsp(c)) return -1;
  return wait_state(c, NAAICE_MRSP_DONE, "the MRSP answer");
}

int naaice_do_data_transfer(struct naaice_communication_context* c) {
  if (naaice_init_data_transfer(c)) return -1;
  return wait_state(c, NAAICE_FINISHED, "the result");
}

int naaice_disconnect_and_cleanup(struct naaice_communication_context* c) {
  if (!c) return -1;
  struct naaice_transport* t = c->transport;
  if (c->state >= NAAICE_CONNECTED) t->disconnect(t->priv);
  for (int i = 0; i < c->no_local_mrs; i++) {
    struct naaice_mr_local* m = &c->mr_local_data[i];
    if (m->handle) {
      struct naaice_mr_handle h = {m->addr, m->length, m->lkey, m->rkey, m->handle};
      t->dereg_mr(t->priv, &h);
    }
  }
  struct naaice_mr_local* m = c->mr_local_message;
  if (m->handle) {
    struct naaice_mr_handle h = {m->addr, m->length, m->lkey, m->rkey, m->handle};
    t->dereg_mr(t->priv, &h);
  }
  t->destroy(t->priv);
  free(t);
  free_context(c);
  return 0;
}
