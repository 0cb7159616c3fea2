/* The C API with Motr's names (roce/m0_net.h), compiled as C: what Motr-style code does with
 * m0_net_domain, m0_net_transfer_mc, m0_net_buffer and end points, on the fake network of the
 * unit tests (m0_net_glue.cc). Exit 0 when every check holds. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <roce/m0_net.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void* lnet_fake_new(int complete_sends);
void lnet_fake_free(void* c);
int lnet_fake_deliver(void* c, unsigned len);

static int failures;
#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); \
      ++failures;                                                           \
    }                                                                       \
  } while (0)

static volatile int tm_events, started, stopped;
static void tm_event(const struct m0_net_tm_event* ev) {
  ++tm_events;
  if (ev->nte_type == M0_NET_TEV_STATE_CHANGE && ev->nte_next_state == M0_NET_TM_STARTED)
    started = ev->nte_ep != NULL && ev->nte_status == 0;
  if (ev->nte_type == M0_NET_TEV_STATE_CHANGE && ev->nte_next_state == M0_NET_TM_STOPPED) ++stopped;
}
static const struct m0_net_tm_callbacks tm_cbs = {tm_event};

static volatile int recv_events, recv_status = 1, send_events, send_status = 1;
static volatile m0_bcount_t recv_length;
static volatile uint64_t recv_flags;
static char recv_from[64];
static void on_recv(const struct m0_net_buffer_event* ev) {
  recv_status = ev->nbe_status;
  recv_length = ev->nbe_length;
  recv_flags = ev->nbe_buffer->nb_flags;
  if (ev->nbe_ep) snprintf(recv_from, sizeof recv_from, "%s", ev->nbe_ep->nep_addr);
  ++recv_events;
}
static void on_send(const struct m0_net_buffer_event* ev) {
  send_status = ev->nbe_status;
  ++send_events;
}
static void on_any(const struct m0_net_buffer_event* ev) { (void)ev; }
static const struct m0_net_buffer_callbacks buf_cbs = {
    {on_recv, on_send, on_any, on_any, on_any, on_any}};

static int wait_for(volatile int* v, int want) {
  const struct timespec ms = {0, 1000000};
  for (int i = 0; i < 2000 && *v < want; ++i) nanosleep(&ms, NULL);
  return *v >= want;
}

int main(void) {
  void* fake1 = lnet_fake_new(1);
  void* fake2 = lnet_fake_new(1);
  struct m0_net_roce_options o;
  memset(&o, 0, sizeof o);
  o.oob_host = "127.0.0.1";
  o.oob_port_base = (uint16_t)(20000 + (getpid() + 3) % 20 * 2000);
  struct m0_net_domain dom, dom2;
  memset(&dom, 0, sizeof dom);
  memset(&dom2, 0, sizeof dom2);
  CHECK(m0_net_roce_domain_init(&dom, &o, fake1) == 0);
  CHECK(m0_net_roce_domain_init(&dom2, &o, fake2) == 0);
  CHECK(dom.nd_xprt == &m0_net_roce_xprt);

  struct m0_net_transfer_mc tm, tm2;
  memset(&tm, 0, sizeof tm);
  memset(&tm2, 0, sizeof tm2);
  tm.ntm_callbacks = &tm_cbs;
  tm2.ntm_callbacks = &tm_cbs;
  CHECK(m0_net_tm_init(&tm, &dom) == 0);
  CHECK(tm.ntm_state == M0_NET_TM_INITIALIZED);
  CHECK(m0_net_tm_init(&tm2, &dom2) == 0);
  CHECK(m0_net_tm_start(&tm, "192.0.2.1@roce:0:4:*") == 0);
  CHECK(started);
  CHECK(tm.ntm_state == M0_NET_TM_STARTED);
  CHECK(tm.ntm_ep != NULL && strcmp(tm.ntm_ep->nep_addr, "192.0.2.1@roce:0:4:63") == 0);
  CHECK(m0_net_tm_start(&tm2, "192.0.2.1@roce:0:4:7") == 0);

  /* A receive buffer in shared memory: a message arrives. */
  struct m0_net_buffer rb;
  memset(&rb, 0, sizeof rb);
  CHECK(m0_bufvec_alloc(&rb.nb_buffer, 2, 2048) == 0);
  CHECK(m0_net_buffer_register(&rb, &dom) == 0);
  CHECK(rb.nb_flags == M0_NET_BUF_REGISTERED);
  CHECK(rb.nb_timeout == M0_TIME_NEVER);
  rb.nb_qtype = M0_NET_QT_MSG_RECV;
  rb.nb_callbacks = &buf_cbs;
  rb.nb_min_receive_size = 4096;
  rb.nb_max_receive_msgs = 1;
  CHECK(m0_net_buffer_add(&rb, &tm) == 0);
  CHECK(rb.nb_flags & M0_NET_BUF_QUEUED);
  CHECK(lnet_fake_deliver(fake1, 42) == 0);
  CHECK(wait_for(&recv_events, 1));
  CHECK(recv_status == 0);
  CHECK(recv_length == 42);
  CHECK(!(recv_flags & M0_NET_BUF_QUEUED));
  CHECK(rb.nb_msgs_received == 1);

  /* A deadline in the past: -ETIME, as Motr says. */
  rb.nb_timeout = m0_time_now() - 1;
  CHECK(m0_net_buffer_add(&rb, &tm) == -ETIME);
  rb.nb_timeout = M0_TIME_NEVER;

  /* A message to tm2 through an end point: the connection is set up, the send completes. */
  struct m0_net_end_point* ep = NULL;
  CHECK(m0_net_end_point_create(&ep, &tm, "192.0.2.1@roce:0:4:7") == 0);
  CHECK(ep != NULL && strcmp(ep->nep_addr, "192.0.2.1@roce:0:4:7") == 0);
  struct m0_net_end_point* again = NULL;
  CHECK(m0_net_end_point_create(&again, &tm, "192.0.2.1@roce:0:4:7") == 0);
  CHECK(again == ep); /* one object per address, counted */
  m0_net_end_point_put(again);
  CHECK(m0_net_end_point_create(&again, &tm, "not an address") == -EINVAL);
  struct m0_net_buffer sb;
  memset(&sb, 0, sizeof sb);
  CHECK(m0_bufvec_alloc(&sb.nb_buffer, 1, 256) == 0);
  CHECK(m0_net_buffer_register(&sb, &dom) == 0);
  memcpy(sb.nb_buffer.ov_buf[0], "hello", 5);
  sb.nb_qtype = M0_NET_QT_MSG_SEND;
  sb.nb_callbacks = &buf_cbs;
  sb.nb_length = 5;
  sb.nb_ep = ep;
  CHECK(m0_net_buffer_add(&sb, &tm) == 0);
  CHECK(wait_for(&send_events, 1));
  CHECK(send_status == 0);
  m0_net_end_point_put(ep);
  /* The last reference is gone: a second put, a get or an add through the stale pointer (an
   * application's bug) is ignored or refused, never a use of freed memory. */
  m0_net_end_point_put(ep);
  m0_net_end_point_get(ep);
  m0_net_end_point_put(ep);
  CHECK(m0_net_buffer_add(&sb, &tm) == -EINVAL);
  sb.nb_ep = NULL;
  struct m0_net_end_point* held = NULL; /* a reference the application never puts */
  CHECK(m0_net_end_point_create(&held, &tm2, "192.0.2.1@roce:0:4:63") == 0);

  /* A passive bulk buffer gets its descriptor; a copy is the application's. */
  struct m0_net_buffer pb;
  memset(&pb, 0, sizeof pb);
  CHECK(m0_bufvec_alloc(&pb.nb_buffer, 1, 4096) == 0);
  CHECK(m0_net_buffer_register(&pb, &dom) == 0);
  pb.nb_qtype = M0_NET_QT_PASSIVE_BULK_RECV;
  pb.nb_callbacks = &buf_cbs;
  CHECK(m0_net_buffer_add(&pb, &tm) == 0);
  CHECK(pb.nb_desc.nbd_len > 0 && pb.nb_desc.nbd_data != NULL);
  struct m0_net_buf_desc copy;
  CHECK(m0_net_desc_copy(&pb.nb_desc, &copy) == 0);
  CHECK(copy.nbd_len == pb.nb_desc.nbd_len &&
        memcmp(copy.nbd_data, pb.nb_desc.nbd_data, copy.nbd_len) == 0);
  m0_net_desc_free(&copy);
  CHECK(copy.nbd_data == NULL && copy.nbd_len == 0);
  CHECK(m0_net_buffer_del(&pb, &tm)); /* not yet on the wire: cancelled at once */

  /* Statistics per queue (m0_net_qstats). */
  struct m0_net_qstats qs[M0_NET_QT_NR];
  CHECK(m0_net_tm_stats_get(&tm, M0_NET_QT_NR, qs, false) == 0);
  CHECK(qs[M0_NET_QT_MSG_RECV].nqs_num_adds == 1);
  CHECK(qs[M0_NET_QT_MSG_RECV].nqs_num_s_events == 1);
  CHECK(qs[M0_NET_QT_MSG_RECV].nqs_total_bytes == 42);
  CHECK(qs[M0_NET_QT_MSG_RECV].nqs_max_bytes == 42);
  CHECK(qs[M0_NET_QT_MSG_SEND].nqs_num_adds == 1);
  CHECK(qs[M0_NET_QT_MSG_SEND].nqs_num_s_events == 1);
  CHECK(qs[M0_NET_QT_PASSIVE_BULK_RECV].nqs_num_dels == 1);
  struct m0_net_qstats one;
  CHECK(m0_net_tm_stats_get(&tm, M0_NET_QT_MSG_SEND, &one, true) == 0);
  CHECK(one.nqs_total_bytes == 5);
  CHECK(m0_net_tm_stats_get(&tm, M0_NET_QT_MSG_SEND, &one, false) == 0);
  CHECK(one.nqs_num_adds == 0);

  CHECK(m0_net_tm_stop(&tm, false) == 0);
  CHECK(tm.ntm_state == M0_NET_TM_STOPPED);
  CHECK(m0_net_tm_stop(&tm2, false) == 0);
  CHECK(stopped == 2);
  m0_net_tm_fini(&tm);
  m0_net_tm_fini(&tm2);
  m0_net_end_point_put(held); /* after its Tm: ignored */
  CHECK(tm.ntm_state == M0_NET_TM_UNDEFINED);
  m0_net_buffer_deregister(&rb, &dom);
  m0_net_buffer_deregister(&sb, &dom);
  m0_net_buffer_deregister(&pb, &dom);
  CHECK(rb.nb_flags == 0);
  m0_net_desc_free(&pb.nb_desc);
  m0_bufvec_free(&rb.nb_buffer);
  m0_bufvec_free(&sb.nb_buffer);
  m0_bufvec_free(&pb.nb_buffer);
  m0_net_domain_fini(&dom);
  m0_net_domain_fini(&dom2);
  lnet_fake_free(fake1);
  lnet_fake_free(fake2);
  if (failures == 0) printf("m0_net C API: OK\n");
  return failures == 0 ? 0 : 1;
}
