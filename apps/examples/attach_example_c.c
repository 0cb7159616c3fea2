/* roce-attach-example-c: the C header (client/include/roce/roce.h) in a C program. Two of
 * them, each attached to its own roced, connect an RC QP (addresses exchanged over TCP); the
 * client WRITEs a pattern into the server's buffer, then SENDs a pattern; the server checks
 * both and answers over TCP.
 *   roce-attach-example-c SOCKET listen TCPPORT
 *   roce-attach-example-c SOCKET connect TCPPORT        (to 127.0.0.1) */
#define _DEFAULT_SOURCE /* usleep */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "roce/roce.h"

enum { kSize = 8192 };

struct info {
  uint32_t qpn, psn, rkey, pad;
  uint64_t iova;
  uint8_t gid[16];
};

static void die(const char* what, int err) {
  fprintf(stderr, "attach-example-c: %s%s%s\n", what, err ? ": " : "", err ? strerror(err) : "");
  exit(1);
}

static void full(int fd, void* p, size_t n, int wr) {
  unsigned char* b = p;
  while (n) {
    ssize_t k = wr ? write(fd, b, n) : read(fd, b, n);
    if (k <= 0) die("the peer's TCP connection closed", 0);
    b += k;
    n -= (size_t)k;
  }
}

static int tcp_open(int listen_mode, unsigned short port) {
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (listen_mode) {
    int one = 1, s = socket(AF_INET, SOCK_STREAM, 0), fd;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr*)&sa, sizeof sa) || listen(s, 1)) die("listen", errno);
    fd = accept(s, NULL, NULL);
    close(s);
    if (fd < 0) die("accept", errno);
    return fd;
  }
  for (int i = 0; i < 200; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr*)&sa, sizeof sa) == 0) return fd;
    close(fd);
    usleep(100000);
  }
  die("connect", errno);
  return -1;
}

static void wait_one(roce_context* ctx, roce_cq* cq, uint64_t wr_id) {
  struct roce_wc wc;
  for (int tries = 0; tries < 200; ++tries) {
    int n = roce_poll_cq(ctx, cq, 1, &wc);
    if (n < 0) die("roce_poll_cq", -n);
    if (n == 1) {
      if (wc.status != ROCE_WC_SUCCESS || wc.wr_id != wr_id) die("bad completion", 0);
      return;
    }
    int rc = roce_wait_cq(ctx, cq, 100);
    if (rc && rc != ETIMEDOUT) die("roce_wait_cq", rc);
  }
  die("no completion within 20 s", 0);
}

int main(int argc, char** argv) {
  if (argc != 4 || (strcmp(argv[2], "listen") && strcmp(argv[2], "connect"))) {
    fprintf(stderr, "usage: %s SOCKET listen|connect TCPPORT\n", argv[0]);
    return 2;
  }
  const int server = strcmp(argv[2], "listen") == 0;
  roce_context* ctx = roce_attach(argv[1], NULL);
  if (!ctx) die("roce_attach", errno);
  struct roce_port_info port;
  roce_query_port(ctx, &port);
  void* addr = NULL;
  roce_pd* pd = roce_alloc_pd(ctx);
  roce_buffer* buf = roce_alloc_buffer(ctx, 2 * kSize, &addr);
  if (!pd || !buf) die("alloc", errno);
  unsigned char* mem = addr;
  roce_mr* mr =
      roce_reg_mr(ctx, pd, addr, 2 * kSize, ROCE_ACCESS_LOCAL_WRITE | ROCE_ACCESS_REMOTE_WRITE);
  roce_cq* cq = roce_create_cq(ctx, 16);
  struct roce_qp_cap cap = {8, 8, 1, 1};
  roce_qp* qp = cq && mr ? roce_create_qp(ctx, pd, ROCE_QPT_RC, cq, cq, &cap) : NULL;
  if (!qp) die("reg_mr / create_cq / create_qp", errno);

  int tcp = tcp_open(server, (unsigned short)atoi(argv[3]));
  struct info mine = {roce_qp_num(qp), 4242, roce_mr_rkey(mr), 0, roce_mr_iova(mr), {0}}, peer;
  memcpy(mine.gid, port.gid, 16);
  full(tcp, &mine, sizeof mine, 1);
  full(tcp, &peer, sizeof peer, 0);
  struct roce_rc_peer rp = {peer.qpn, peer.psn, {0}};
  memcpy(rp.gid, peer.gid, 16);
  int rc = roce_connect_rc(ctx, qp, &rp, mine.psn, ROCE_MTU_1024);
  if (rc) die("roce_connect_rc", rc);

  struct roce_sge sge = {(uint64_t)(uintptr_t)mem, kSize, roce_mr_lkey(mr)};
  char ok = 0;
  if (server) {
    struct roce_recv_wr rwr = {1, NULL, &sge, 1};
    if ((rc = roce_post_recv(ctx, qp, &rwr, NULL))) die("roce_post_recv", rc);
    full(tcp, "r", 1, 1);
    wait_one(ctx, cq, 1); /* the SEND came after the WRITE: both are in place */
    for (int i = 0; i < kSize; ++i)
      if (mem[i] != (unsigned char)(i * 3 + 1) || mem[kSize + i] != (unsigned char)(i * 5 + 2))
        die("data differs", 0);
    full(tcp, "k", 1, 1);
    printf("attach-example-c: OK: WRITE and SEND of %d bytes verified\n", kSize);
  } else {
    for (int i = 0; i < kSize; ++i) {
      mem[i] = (unsigned char)(i * 3 + 1);
      mem[kSize + i] = (unsigned char)(i * 5 + 2);
    }
    full(tcp, &ok, 1, 0);
    struct roce_sge wsge = {(uint64_t)(uintptr_t)(mem + kSize), kSize, roce_mr_lkey(mr)};
    struct roce_send_wr send = {2, NULL, &sge, 1, ROCE_WR_SEND, ROCE_SEND_SIGNALED, 0, 0, 0, 0, 0};
    struct roce_send_wr write = {
        1, &send, &wsge, 1, ROCE_WR_RDMA_WRITE, 0, 0, peer.iova + kSize, peer.rkey, 0, 0};
    if ((rc = roce_post_send(ctx, qp, &write, NULL))) die("roce_post_send", rc);
    wait_one(ctx, cq, 2);
    full(tcp, &ok, 1, 0);
    if (ok != 'k') die("the server did not confirm", 0);
    printf("attach-example-c: OK: WRITE and SEND of %d bytes sent and confirmed\n", kSize);
  }
  close(tcp);
  roce_destroy_qp(ctx, qp);
  roce_destroy_cq(ctx, cq);
  roce_dereg_mr(ctx, mr);
  roce_free_buffer(ctx, buf);
  roce_dealloc_pd(ctx, pd);
  roce_close(ctx);
  return 0;
}
