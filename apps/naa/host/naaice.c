/* @file
 * The NAAICE low-level host API (naaice.h) over a transport (naaice_transport.h). MRSP
 * messages are laid out byte by byte in big-endian order (apps/naa/mrsp.h describes them). */
#include "apps/naa/host/naaice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  if (s == 0) return "success";
  if (s == 0x01) return "socket not available";
  if (s == 0x02) return "kernel (NAA application) timeout";
  if (s <= 0x0f) return "reserved";
  if (s == 0x10) return "application error 0x10 (no kernel for the function code)";
  if (s == 0x11) return "application error 0x11 (the return address names no region)";
  if (s == 0x12) return "application error 0x12 (wrong number of parameters)";
  if (s == 0x13) return "application error 0x13 (a parameter has the wrong size)";
  if (s <= 0x7f) return "application error";
  return "undefined status";
}

int naaice_init_communication_context(struct naaice_communication_context** comm_ctx,
                                      unsigned int* param_sizes, char** params,
                                      unsigned int params_amount, uint8_t fncode,
                                      const char* remote_ip, uint16_t port) {
  if (!comm_ctx || !remote_ip || (params_amount && (!param_sizes || !params))) {
    fprintf(stderr, "naaice: invalid arguments\n");
    return -1;
  }
  /* The metadata region and the parameters must fit the 8-bit count. */
  if (params_amount + 1 > NAAICE_MAX_COUNT) {
    fprintf(stderr, "naaice: %u parameters, at most %d fit an MRSP message\n", params_amount,
            NAAICE_MAX_COUNT - 1);
    return -1;
  }
  for (unsigned int i = 0; i < params_amount; i++) {
    if (param_sizes[i] == 0 || param_sizes[i] > NAAICE_MAX_MR_SIZE || !params[i]) {
      fprintf(stderr, "naaice: parameter %u: size must be 1..1 GiB and the buffer set\n", i);
      return -1;
    }
  }
  struct naaice_communication_context* c = calloc(1, sizeof *c);
  if (!c) return -1;
  c->state = INIT;
  c->no_local_mrs = (uint8_t)(params_amount + 1);
  c->mr_local_data = calloc(c->no_local_mrs, sizeof *c->mr_local_data);
  c->mr_peer_data = calloc(c->no_local_mrs, sizeof *c->mr_peer_data);
  c->mr_local_message = calloc(1, sizeof *c->mr_local_message);
  c->fpga_addrs = calloc(c->no_local_mrs, sizeof *c->fpga_addrs);
  struct naaice_rpc_metadata* meta = calloc(1, sizeof *meta);
  char* msg = calloc(2, MSG_BUF);
  if (!c->mr_local_data || !c->mr_peer_data || !c->mr_local_message || !c->fpga_addrs || !meta ||
      !msg) {
    fprintf(stderr, "naaice: out of memory\n");
    free(c->mr_local_data);
    free(c->mr_peer_data);
    free(c->mr_local_message);
    free(c->fpga_addrs);
    free(meta);
    free(msg);
    free(c);
    return -1;
  }
  c->mr_local_data[0].addr = (char*)meta;
  c->mr_local_data[0].size = sizeof *meta;
  for (unsigned int i = 0; i < params_amount; i++) {
    c->mr_local_data[i + 1].addr = params[i];
    c->mr_local_data[i + 1].size = param_sizes[i];
  }
  c->mr_local_message->addr = msg;
  c->mr_local_message->size = 2 * MSG_BUF;
  c->fncode = fncode;
  snprintf(c->remote_ip, sizeof c->remote_ip, "%s", remote_ip);
  c->port = port;
  c->timeout = 60;
  c->transport = naaice_transport_open();
  if (!c->transport) {
    free(c->mr_local_data);
    free(c->mr_peer_data);
    free(c->mr_local_message);
    free(c->fpga_addrs);
    free(meta);
    free(msg);
    free(c);
    return -1;
  }
  c->state = READY;
  *comm_ctx = c;
  return 0;
}

int naaice_setup_connection(struct naaice_communication_context* c) {
  if (!c || c->state != READY) {
    fprintf(stderr, "naaice: setup_connection needs a fresh context\n");
    return -1;
  }
  /* Send queue: a WRITE per region plus the MRSP SEND; receives: MRSP answer and status. */
  struct naaice_transport* t = c->transport;
  if (t->connect(t->priv, c->remote_ip, c->port, (uint32_t)c->no_local_mrs + 8, 8, c->timeout)) {
    fprintf(stderr, "naaice: cannot connect to %s port %u: %s\n", c->remote_ip, c->port,
            t->error(t->priv));
    c->state = ERROR;
    return -1;
  }
  c->state = CONNECTED;
  return 0;
}

int naaice_register_mrs(struct naaice_communication_context* c) {
  struct naaice_transport* t = c->transport;
  for (int i = 0; i < c->no_local_mrs; i++) {
    struct naaice_mr_handle h;
    if (t->reg_mr(t->priv, c->mr_local_data[i].addr, c->mr_local_data[i].size, &h)) {
      fprintf(stderr, "naaice: cannot register region %d: %s\n", i, t->error(t->priv));
      return -1;
    }
    c->mr_local_data[i].lkey = h.lkey;
    c->mr_local_data[i].rkey = h.rkey;
    c->mr_local_data[i].handle = h.priv;
  }
  struct naaice_mr_handle h;
  if (t->reg_mr(t->priv, c->mr_local_message->addr, c->mr_local_message->size, &h)) {
    fprintf(stderr, "naaice: cannot register the MRSP buffer: %s\n", t->error(t->priv));
    return -1;
  }
  c->mr_local_message->lkey = h.lkey;
  c->mr_local_message->rkey = h.rkey;
  c->mr_local_message->handle = h.priv;
  return 0;
}

int naaice_set_metadata(struct naaice_communication_context* c, uintptr_t return_addr) {
  /* Region 0 (the metadata) is not a valid return region. */
  for (int i = 1; i < c->no_local_mrs; i++) {
    if ((uintptr_t)c->mr_local_data[i].addr == return_addr) {
      c->mr_return_idx = (uint8_t)i;
      put_be64((unsigned char*)c->mr_local_data[0].addr, (uint64_t)return_addr);
      return 0;
    }
  }
  fprintf(stderr, "naaice: the return address is not a registered parameter\n");
  return -1;
}

int naaice_set_internal_mrs(struct naaice_communication_context* c, unsigned int n,
                            uintptr_t* addrs, size_t* sizes) {
  if (n + c->no_local_mrs > NAAICE_MAX_COUNT) {
    fprintf(stderr, "naaice: too many internal regions for one MRSP message\n");
    return -1;
  }
  free(c->mr_internal);
  c->mr_internal = NULL;
  c->no_internal_mrs = 0;
  if (n == 0) return 0;
  c->mr_internal = calloc(n, sizeof *c->mr_internal);
  if (!c->mr_internal) return -1;
  for (unsigned int i = 0; i < n; i++) {
    if (sizes[i] == 0 || sizes[i] > NAAICE_MAX_MR_SIZE) {
      fprintf(stderr, "naaice: internal region %u: size must be 1..1 GiB\n", i);
      return -1;
    }
    c->mr_internal[i].addr = addrs[i];
    c->mr_internal[i].size = (uint32_t)sizes[i];
  }
  c->no_internal_mrs = (uint8_t)n;
  return 0;
}

int naaice_set_fpga_addresses(struct naaice_communication_context* c, const uint64_t* addrs) {
  for (int i = 1; i < c->no_local_mrs; i++) {
    if (addrs[i - 1] >> 56) {
      fprintf(stderr, "naaice: FPGA address of parameter %d beyond 56 bits\n", i - 1);
      return -1;
    }
    c->fpga_addrs[i] = addrs[i - 1];
  }
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
      put_be64(m + len, c->fpga_addrs[i]); /* flags 0 in the top byte */
      put_be64(m + len + 8, (uint64_t)(uintptr_t)c->mr_local_data[i].addr);
      put_be32(m + len + 16, c->mr_local_data[i].rkey);
      put_be32(m + len + 20, (uint32_t)c->mr_local_data[i].size);
    }
    for (int i = 0; i < c->no_internal_mrs; i++, len += AAR_ENTRY) {
      put_be64(m + len, ((uint64_t)MRFLAG_INTERNAL << 56) | c->mr_internal[i].addr);
      put_be64(m + len + 8, 0);
      put_be32(m + len + 16, 0);
      put_be32(m + len + 20, c->mr_internal[i].size);
    }
  } else {
    fprintf(stderr, "naaice: a host sends no message of type %d\n", type);
    return -1;
  }
  struct naaice_transport* t = c->transport;
  if (t->post_send(t->priv, NAAICE_OP_SEND, WR_MRSP, m, (uint32_t)len, c->mr_local_message->lkey, 0,
                   0, 0, 1)) {
    fprintf(stderr, "naaice: posting the MRSP message failed: %s\n", t->error(t->priv));
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
  if (c->state != CONNECTED && c->state != ERROR && c->state != MRSP_DONE && c->state != FINISHED) {
    fprintf(stderr, "naaice: init_mrsp needs a connection\n");
    return -1;
  }
  c->mrsp_error = 0;
  /* The receive for the answer goes first: the NAA may answer before our SEND completes. */
  if (c->recv_posted == 0 && naaice_post_recv_mrsp(c)) return -1;
  c->state = MRSP_SENDING;
  if (naaice_send_message(c, MSG_MR_AAR, 0)) {
    c->state = ERROR;
    return -1;
  }
  c->state = MRSP_RECEIVING;
  return 0;
}

int naaice_write_data(struct naaice_communication_context* c, uint8_t fncode) {
  struct naaice_transport* t = c->transport;
  c->rdma_writes_done = 0;
  for (int i = 0; i < c->no_local_mrs; i++) {
    const int last = i == c->no_local_mrs - 1;
    if (t->post_send(t->priv, last ? NAAICE_OP_WRITE_IMM : NAAICE_OP_WRITE, WR_DATA,
                     c->mr_local_data[i].addr, (uint32_t)c->mr_local_data[i].size,
                     c->mr_local_data[i].lkey, c->mr_peer_data[i].addr, c->mr_peer_data[i].rkey,
                     fncode, last)) {
      fprintf(stderr, "naaice: posting the write of region %d failed: %s\n", i, t->error(t->priv));
      return -1;
    }
  }
  return 0;
}

int naaice_init_data_transfer(struct naaice_communication_context* c) {
  if (c->state != MRSP_DONE && c->state != FINISHED) {
    fprintf(stderr, "naaice: init_data_transfer needs a finished MRSP\n");
    return -1;
  }
  if (c->mr_return_idx == 0) {
    fprintf(stderr, "naaice: no return address set (naaice_set_metadata)\n");
    return -1;
  }
  c->rpc_status = 0;
  if (c->recv_posted == 0 && naaice_post_recv_data(c)) return -1;
  c->state = DATA_SENDING;
  if (naaice_write_data(c, c->fncode)) {
    c->state = ERROR;
    return -1;
  }
  c->state = CALCULATING;
  return 0;
}

static int handle_mrsp_answer(struct naaice_communication_context* c, const struct naaice_wc* wc) {
  const unsigned char* m = (const unsigned char*)c->mr_local_message->addr + MSG_BUF;
  if (wc->byte_len < HDR_SIZE) {
    fprintf(stderr, "naaice: MRSP answer of %u bytes\n", wc->byte_len);
    c->state = ERROR;
    return -1;
  }
  if (m[0] == MSG_MR_ERR) {
    c->mrsp_error = m[1];
    fprintf(stderr, "naaice: the NAA answered MRSP error 0x%02x: %s\n", m[1],
            naaice_mrsp_error_string(m[1]));
    c->state = ERROR;
    return -1;
  }
  if (m[0] != MSG_MR_A) {
    fprintf(stderr, "naaice: MRSP answer of type 0x%02x\n", m[0]);
    c->state = ERROR;
    return -1;
  }
  const unsigned count = m[1];
  if (count != c->no_local_mrs || wc->byte_len < HDR_SIZE + count * ADV_ENTRY) {
    fprintf(stderr, "naaice: the NAA advertised %u regions (%u bytes), we asked for %u\n", count,
            wc->byte_len, c->no_local_mrs);
    c->state = ERROR;
    return -1;
  }
  for (unsigned i = 0; i < count; i++) {
    const unsigned char* e = m + HDR_SIZE + i * ADV_ENTRY;
    c->mr_peer_data[i].addr = get_be64(e);
    c->mr_peer_data[i].rkey = get_be32(e + 8);
    c->mr_peer_data[i].size = get_be32(e + 12);
    if (c->mr_peer_data[i].size < c->mr_local_data[i].size) {
      fprintf(stderr, "naaice: the NAA's region %u is smaller than ours\n", i);
      c->state = ERROR;
      return -1;
    }
  }
  c->no_peer_mrs = (uint8_t)count;
  c->state = MRSP_DONE;
  return 0;
}

int naaice_poll_cq_nonblocking(struct naaice_communication_context* c) {
  struct naaice_transport* t = c->transport;
  struct naaice_wc wc[8];
  const int n = t->poll(t->priv, wc, 8);
  if (n < 0) {
    fprintf(stderr, "naaice: the connection broke: %s\n", t->error(t->priv));
    c->state = ERROR;
    return -1;
  }
  for (int i = 0; i < n; i++) {
    if (!wc[i].ok) {
      fprintf(stderr, "naaice: work completion failed: %s\n", wc[i].status);
      c->state = ERROR;
      return -1;
    }
    if (wc[i].kind == NAAICE_WC_RECV) {
      c->recv_posted--;
      if (c->state != MRSP_RECEIVING && c->state != MRSP_SENDING) {
        fprintf(stderr, "naaice: an MRSP message out of turn\n");
        c->state = ERROR;
        return -1;
      }
      if (handle_mrsp_answer(c, &wc[i])) return -1;
    } else if (wc[i].kind == NAAICE_WC_RECV_IMM) {
      c->recv_posted--;
      if (c->state != CALCULATING && c->state != DATA_RECEIVING) {
        fprintf(stderr, "naaice: a result out of turn\n");
        c->state = ERROR;
        return -1;
      }
      c->rpc_status = wc[i].imm;
      c->state = FINISHED;
      if (wc[i].imm != 0) {
        fprintf(stderr, "naaice: the NAA reports status 0x%02x: %s\n", wc[i].imm,
                naaice_rpc_status_string(wc[i].imm));
        return -1;
      }
    } else if (wc[i].kind == NAAICE_WC_WRITE && c->state == CALCULATING) {
      c->rdma_writes_done = c->no_local_mrs;
      c->state = DATA_RECEIVING;
    }
  }
  return 0;
}

static int wait_state(struct naaice_communication_context* c, enum naaice_communication_state s,
                      const char* what) {
  const double end = now_s() + c->timeout;
  while (c->state < s) {
    if (naaice_poll_cq_nonblocking(c)) return -1;
    if (c->state >= s) break;
    if (now_s() > end) {
      fprintf(stderr, "naaice: timed out waiting for %s\n", what);
      c->state = ERROR;
      return -1;
    }
  }
  return c->state == ERROR ? -1 : 0;
}

int naaice_do_mrsp(struct naaice_communication_context* c) {
  if (naaice_init_mrsp(c)) return -1;
  return wait_state(c, MRSP_DONE, "the MRSP answer");
}

int naaice_do_data_transfer(struct naaice_communication_context* c) {
  if (naaice_init_data_transfer(c)) return -1;
  return wait_state(c, FINISHED, "the result");
}

int naaice_disconnect_and_cleanup(struct naaice_communication_context* c) {
  if (!c) return -1;
  struct naaice_transport* t = c->transport;
  if (c->state >= CONNECTED) t->disconnect(t->priv);
  for (int i = 0; i < c->no_local_mrs; i++) {
    if (c->mr_local_data[i].handle) {
      struct naaice_mr_handle h = {c->mr_local_data[i].addr, c->mr_local_data[i].size,
                                   c->mr_local_data[i].lkey, c->mr_local_data[i].rkey,
                                   c->mr_local_data[i].handle};
      t->dereg_mr(t->priv, &h);
    }
  }
  if (c->mr_local_message->handle) {
    struct naaice_mr_handle h = {c->mr_local_message->addr, c->mr_local_message->size,
                                 c->mr_local_message->lkey, c->mr_local_message->rkey,
                                 c->mr_local_message->handle};
    t->dereg_mr(t->priv, &h);
  }
  t->destroy(t->priv);
  free(t);
  free(c->mr_local_data[0].addr);
  free(c->mr_local_message->addr);
  free(c->mr_local_data);
  free(c->mr_peer_data);
  free(c->mr_local_message);
  free(c->mr_internal);
  free(c->fpga_addrs);
  free(c);
  return 0;
}
