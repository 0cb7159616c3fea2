/* roce-attach-example-c: the C header (client/include/roce/roce.h) in a C program. Two of
 * them, each attached to its own roced, connect an RC QP (addresses exchanged over TCP); the
 * client WRITEs a pattern into the server's buffer, then SENDs a pattern; the server checks
 * both and answers over TCP.
 *   roce-attach-example-c SOCKET listen TCPPORT
 *   roce-attach-example-c SOCKET connect TCPPORT        (to 127.0.0.1)
 * With rdma_cm instead of TCP (roce_cm_*): the server's buffer address and rkey travel in the
 * private data of its accept, and the server's checks end the exchange.
 *   roce-attach-example-c SOCKET cm-listen CMPORT
 *   roce-attach-example-c SOCKET cm-connect CMPORT SERVER_IPV4 */
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

static void cm_expect(roce_context* ctx, int type, struct roce_cm_event* ev) {
  int rc = roce_cm_get_event(ctx, ev, 20000);
  if (rc) die("roce_cm_get_event", rc);
  if (ev->type != type) {
    fprintf(stderr, "attach-example-c: CM event %d (reason %u), expected %d\n", ev->type,
            ev->reason, type);
    exit(1);
  }
}

int main(int argc, char** argv) {
  const int cm = argc >= 3 && strncmp(argv[2], "cm-", 3) == 0;
  if ((!cm && (argc != 4 || (strcmp(argv[2], "listen") && strcmp(argv[2], "connect")))) ||
      (cm && !((argc == 4 && !strcmp(argv[2], "cm-listen")) ||
               (argc == 5 && !strcmp(argv[2], "cm-connect"))))) {
    fprintf(stderr,
            "usage: %s SOCKET listen|connect TCPPORT\n"
            "       %s SOCKET cm-listen CMPORT | cm-connect CMPORT SERVER_IPV4\n",
            argv[0], argv[0]);
    return 2;
  }
  const int server = strcmp(argv[2], "listen") == 0 || strcmp(argv[2], "cm-listen") == 0;
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

  struct info mine = {roce_qp_num(qp), 4242, roce_mr_rkey(mr), 0, roce_mr_iova(mr), {0}}, peer;
  memcpy(mine.gid, port.gid, 16);
  struct roce_sge sge = {(uint64_t)(uintptr_t)mem, kSize, roce_mr_lkey(mr)};
  struct roce_recv_wr rwr = {1, NULL, &sge, 1};
  struct roce_cm_event ev;
  uint32_t id = 0;
  int rc = 0, tcp = -1;
  if (cm) {
    const unsigned short cmport = (unsigned short)atoi(argv[3]);
    if (server) {
      if ((rc = roce_cm_listen(ctx, cmport))) die("roce_cm_listen", rc);
      printf("attach-example-c: listening on rdma_cm port %u\n", cmport);
      fflush(stdout);
      cm_expect(ctx, ROCE_CM_CONNECT_REQUEST, &ev);
      struct roce_cm_param p = {1, 1, 7, &mine, sizeof mine}; /* our buffer, for the WRITE */
      if ((rc = roce_cm_accept(ctx, ev.id, qp, &p))) die("roce_cm_accept", rc);
      id = ev.id;
      if ((rc = roce_post_recv(ctx, qp, &rwr, NULL))) die("roce_post_recv", rc);
      cm_expect(ctx, ROCE_CM_ESTABLISHED, &ev);
    } else {
      struct in_addr ia;
      if (!inet_aton(argv[4], &ia)) die("bad server address", 0);
      if ((rc = roce_cm_connect(ctx, qp, ntohl(ia.s_addr), cmport, NULL, &id)))
        die("roce_cm_connect", rc);
      cm_expect(ctx, ROCE_CM_ESTABLISHED, &ev);
      if (ev.private_len < sizeof peer) die("no buffer address in the accept", 0);
      memcpy(&peer, ev.private_data, sizeof peer);
    }
  } else {
    tcp = tcp_open(server, (unsigned short)atoi(argv[3]));
    full(tcp, &mine, sizeof mine, 1);
    full(tcp, &peer, sizeof peer, 0);
    struct roce_rc_peer rp = {peer.qpn, peer.psn, {0}};
    memcpy(rp.gid, peer.gid, 16);
    rc = roce_connect_rc(ctx, qp, &rp, mine.psn, ROCE_MTU_1024);
    if (rc) die("roce_connect_rc", rc);
  }

  char ok = 0;
  if (server) {
    if (!cm) {
      if ((rc = roce_post_recv(ctx, qp, &rwr, NULL))) die("roce_post_recv", rc);
      full(tcp, "r", 1, 1);
    }
    wait_one(ctx, cq, 1); /* the SEND came after the WRITE: both are in place */
    for (int i = 0; i < kSize; ++i)
      if (mem[i] != (unsigned char)(i * 3 + 1) || mem[kSize + i] != (unsigned char)(i * 5 + 2))
        die("data differs", 0);
    if (cm) {
      cm_expect(ctx, ROCE_CM_DISCONNECTED, &ev); /* the client ends it */
    } else {
      full(tcp, "k", 1, 1);
    }
    printf("attach-example-c: OK: WRITE and SEND of %d bytes verified%s\n", kSize,
           cm ? " (connected by rdma_cm)" : "");
  } else {
    for (int i = 0; i < kSize; ++i) {
      mem[i] = (unsigned char)(i * 3 + 1);
      mem[kSize + i] = (unsigned char)(i * 5 + 2);
    }
    if (!cm) full(tcp, &ok, 1, 0);
    struct roce_sge wsge = {(uint64_t)(uintptr_t)(mem + kSize), kSize, roce_mr_lkey(mr)};
    struct roce_send_wr send = {2, NULL, &sge, 1, ROCE_WR_SEND, ROCE_SEND_SIGNALED, 0, 0, 0, 0, 0};
    struct roce_send_wr write = {
        1, &send, &wsge, 1, ROCE_WR_RDMA_WRITE, 0, 0, peer.iova + kSize, peer.rkey, 0, 0};
    if ((rc = roce_post_send(ctx, qp, &write, NULL))) die("roce_post_send", rc);
    wait_one(ctx, cq, 2);
    if (cm) {
      if ((rc = roce_cm_disconnect(ctx, id))) die("roce_cm_disconnect", rc);
      cm_expect(ctx, ROCE_CM_DISCONNECTED, &ev);
      printf("attach-example-c: OK: WRITE and SEND of %d bytes sent, disconnected\n", kSize);
    } else {
      full(tcp, &ok, 1, 0);
      if (ok != 'k') die("the server did not confirm", 0);
      printf("attach-example-c: OK: WRITE and SEND of %d bytes sent and confirmed\n", kSize);
    }
  }
  if (tcp >= 0) close(tcp);
  roce_destroy_qp(ctx, qp);
  roce_destroy_cq(ctx, cq);
  roce_dereg_mr(ctx, mr);
  roce_free_buffer(ctx, buf);
  roce_dealloc_pd(ctx, pd);
  roce_close(ctx);
  return 0;
}
