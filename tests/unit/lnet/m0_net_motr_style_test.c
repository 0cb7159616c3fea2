/* roce/m0_net.h used the way Motr's own code uses net/net.h (its net/ut tests, the RPC layer):
 * designated-initializer callback tables, a wait for the state-change events, multi-message
 * receive buffers, an end point put right after the send that names it, deadlines, del, active
 * bulk with a copied descriptor, statistics with reset, stop with abort. Each CHECK is a
 * behaviour such code relies on; what our API does differently is listed in docs/client-api.md
 * ("The C API with Motr's names"). On the fake network of the unit tests (m0_net_glue.cc).
 * Exit 0 when every check holds. */
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
int lnet_fake_deliver_at(void* c, unsigned len, unsigned offset, int still);

static int failures;
#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); \
      ++failures;                                                           \
    }                                                                       \
  } while (0)

static int wait_for(volatile int* v, int want) {
  const struct timespec ms = {0, 1000000};
  for (int i = 0; i < 3000 && *v < want; ++i) nanosleep(&ms, NULL);
  return *v >= want;
}

/* ---- transfer machine events ---- */
static volatile int ev_started, ev_stopped, ev_other;
static void tm_event_cb(const struct m0_net_tm_event* ev) {
  if (ev->nte_type != M0_NET_TEV_STATE_CHANGE) {
    ++ev_other;
    return;
  }
  if (ev->nte_next_state == M0_NET_TM_STARTED && ev->nte_status == 0 && ev->nte_ep != NULL &&
      ev->nte_tm->ntm_dom != NULL)
    ++ev_started;
  if (ev->nte_next_state == M0_NET_TM_STOPPED) ++ev_stopped;
}
static const struct m0_net_tm_callbacks tm_cbs = {.ntc_event_cb = tm_event_cb};

/* ---- buffer events: what a callback sees, recorded ---- */
struct seen {
  volatile int n;
  int32_t status;
  m0_bcount_t length;
  m0_bindex_t offset;
  uint64_t flags;
  m0_time_t timeout;
  int ep_ok; /* nb_ep of a send is still the end point it was added with */
};
static struct seen s_recv, s_send, s_pbulk, s_abulk;
static struct m0_net_transfer_mc tm, tm2;

static void note(struct seen* s, const struct m0_net_buffer_event* ev) {
  s->status = ev->nbe_status;
  s->length = ev->nbe_length;
  s->offset = ev->nbe_offset;
  s->flags = ev->nbe_buffer->nb_flags;
  s->timeout = ev->nbe_buffer->nb_timeout;
}
static void recv_cb(const struct m0_net_buffer_event* ev) {
  note(&s_recv, ev);
  ++s_recv.n;
}
static void send_cb(const struct m0_net_buffer_event* ev) {
  note(&s_send, ev);
  /* Motr's m0_net_buffer_add took a reference on nb_ep for a send; it is put after this
   * callback, so the application may have put its own reference already. */
  const struct m0_net_end_point* ep = ev->nbe_buffer->nb_ep;
  s_send.ep_ok = ep != NULL && ep->nep_tm == &tm && ep->nep_addr != NULL &&
                 strcmp(ep->nep_addr, "192.0.2.1@roce:0:4:7") == 0;
  ++s_send.n;
}
static void pbulk_cb(const struct m0_net_buffer_event* ev) {
  note(&s_pbulk, ev);
  ++s_pbulk.n;
}
static void abulk_cb(const struct m0_net_buffer_event* ev) {
  note(&s_abulk, ev);
  ++s_abulk.n;
}
static const struct m0_net_buffer_callbacks buf_cbs = {.nbc_cb = {
                                                           [M0_NET_QT_MSG_RECV] = recv_cb,
                                                           [M0_NET_QT_MSG_SEND] = send_cb,
                                                           [M0_NET_QT_PASSIVE_BULK_RECV] = pbulk_cb,
                                                           [M0_NET_QT_PASSIVE_BULK_SEND] = pbulk_cb,
                                                           [M0_NET_QT_ACTIVE_BULK_RECV] = abulk_cb,
                                                           [M0_NET_QT_ACTIVE_BULK_SEND] = abulk_cb,
                                                       }};

static void buf_setup(struct m0_net_buffer* nb, struct m0_net_domain* dom, uint32_t segs,
                      m0_bcount_t seg_size) {
  memset(nb, 0, sizeof *nb);
  CHECK(m0_bufvec_alloc(&nb->nb_buffer, segs, seg_size) == 0);
  nb->nb_callbacks = &buf_cbs;
  CHECK(m0_net_buffer_register(nb, dom) == 0);
  CHECK(nb->nb_flags == M0_NET_BUF_REGISTERED && nb->nb_dom == dom);
}
static void buf_teardown(struct m0_net_buffer* nb, struct m0_net_domain* dom) {
  m0_net_buffer_deregister(nb, dom);
  CHECK(nb->nb_flags == 0);
  m0_net_desc_free(&nb->nb_desc);
  m0_bufvec_free(&nb->nb_buffer);
}

int main(void) {
  void* fake1 = lnet_fake_new(1);
  void* fake2 = lnet_fake_new(1);
  struct m0_net_roce_options o;
  memset(&o, 0, sizeof o);
  o.oob_host = "127.0.0.1";
  o.oob_port_base = (uint16_t)(21000 + (getpid() + 7) % 20 * 2000);
  struct m0_net_domain dom, dom2;
  memset(&dom, 0, sizeof dom);
  memset(&dom2, 0, sizeof dom2);
  CHECK(m0_net_roce_domain_init(&dom, &o, fake1) == 0);
  CHECK(m0_net_roce_domain_init(&dom2, &o, fake2) == 0);

  /* lib/time.h's m0_time_from_now, as net/ut sets its deadlines. */
  const m0_time_t t0 = m0_time_now();
  const m0_time_t t1 = m0_time_from_now(2, 5);
  CHECK(t1 >= t0 + 2000000005ull && t1 < t0 + 3000000000ull);

  /* The domain's limits, which Motr's RPC layer reads to size its buffers. */
  CHECK(m0_net_domain_get_max_buffer_segments(&dom) == 4);
  CHECK(m0_net_domain_get_max_buffer_segment_size(&dom) >= 1024 * 1024);
  CHECK(m0_net_domain_get_max_buffer_size(&dom) >= m0_net_domain_get_max_buffer_segment_size(&dom));
  CHECK(m0_net_domain_get_max_buffer_desc_size(&dom) >= 16);

  /* Init and start; Motr code waits for the STARTED event (on ntm_chan; here: the state). */
  tm.ntm_callbacks = &tm_cbs;
  tm2.ntm_callbacks = &tm_cbs;
  CHECK(m0_net_tm_init(&tm, &dom) == 0);
  CHECK(m0_net_tm_init(&tm2, &dom2) == 0);
  CHECK(tm.ntm_state == M0_NET_TM_INITIALIZED && tm.ntm_dom == &dom);
  CHECK(m0_net_tm_start(&tm, "192.0.2.1@roce:0:4:5") == 0);
  CHECK(m0_net_tm_start(&tm2, "192.0.2.1@roce:0:4:7") == 0);
  CHECK(wait_for(&ev_started, 2));
  CHECK(tm.ntm_state == M0_NET_TM_STARTED && tm.ntm_ep != NULL);
  CHECK(strcmp(tm.ntm_ep->nep_addr, "192.0.2.1@roce:0:4:5") == 0 && tm.ntm_ep->nep_tm == &tm);

  /* A multi-message receive buffer (nb_min_receive_size, nb_max_receive_msgs): the first
   * message leaves it queued (M0_NET_BUF_QUEUED still set in the callback, RETAIN cleared),
   * the second takes it off the queue. */
  struct m0_net_buffer rb;
  buf_setup(&rb, &dom, 2, 2048);
  rb.nb_qtype = M0_NET_QT_MSG_RECV;
  rb.nb_min_receive_size = 1024;
  rb.nb_max_receive_msgs = 2;
  CHECK(m0_net_buffer_add(&rb, &tm) == 0);
  CHECK(rb.nb_flags == (M0_NET_BUF_REGISTERED | M0_NET_BUF_QUEUED));
  CHECK(rb.nb_tm == &tm);
  CHECK(lnet_fake_deliver_at(fake1, 100, 0, 1) == 0);
  CHECK(wait_for(&s_recv.n, 1));
  CHECK(s_recv.status == 0 && s_recv.length == 100 && s_recv.offset == 0);
  CHECK(s_recv.flags == (M0_NET_BUF_REGISTERED | M0_NET_BUF_QUEUED));
  CHECK(lnet_fake_deliver_at(fake1, 200, 100, 0) == 0);
  CHECK(wait_for(&s_recv.n, 2));
  CHECK(s_recv.status == 0 && s_recv.length == 200 && s_recv.offset == 100);
  CHECK(s_recv.flags == M0_NET_BUF_REGISTERED);
  CHECK(rb.nb_msgs_received == 2);

  /* A deadline: the buffer comes back with -ETIMEDOUT, nb_timeout reset to M0_TIME_NEVER
   * before the callback. (A passive buffer: a receive buffer already given to the engine
   * comes back only with its next message or at stop, docs/client-api.md.) */
  struct m0_net_buffer xb;
  buf_setup(&xb, &dom, 1, 1024);
  xb.nb_qtype = M0_NET_QT_PASSIVE_BULK_SEND;
  xb.nb_length = 1024;
  xb.nb_timeout = m0_time_from_now(0, 30 * 1000000);
  CHECK(m0_net_buffer_add(&xb, &tm) == 0);
  CHECK(wait_for(&s_pbulk.n, 1));
  CHECK(s_pbulk.status == -ETIMEDOUT);
  CHECK(s_pbulk.timeout == M0_TIME_NEVER && s_pbulk.flags == M0_NET_BUF_REGISTERED);

  /* Del: -ECANCELED, and an event for the buffer; del of a buffer not queued: false. */
  CHECK(m0_net_buffer_add(&xb, &tm) == 0);
  CHECK(m0_net_buffer_del(&xb, &tm));
  CHECK(wait_for(&s_pbulk.n, 2));
  CHECK(s_pbulk.status == -ECANCELED && s_pbulk.flags == M0_NET_BUF_REGISTERED);
  CHECK(!m0_net_buffer_del(&xb, &tm));

  /* A send; the application puts its end point right after the add (m0_net_buffer_add holds
   * a reference until the event is posted). */
  struct m0_net_end_point* ep = NULL;
  CHECK(m0_net_end_point_create(&ep, &tm, "192.0.2.1@roce:0:4:7") == 0);
  struct m0_net_buffer sb;
  buf_setup(&sb, &dom, 1, 512);
  memcpy(sb.nb_buffer.ov_buf[0], "ping", 4);
  sb.nb_qtype = M0_NET_QT_MSG_SEND;
  sb.nb_length = 4;
  sb.nb_ep = ep;
  CHECK(m0_net_buffer_add(&sb, &tm) == 0);
  m0_net_end_point_put(ep);
  CHECK(wait_for(&s_send.n, 1));
  CHECK(s_send.status == 0 && s_send.ep_ok);
  CHECK(s_send.flags == M0_NET_BUF_REGISTERED);

  /* Many sends on the connection now up: each callback leaves the buffer off the queue, and
   * m0_net_buffer_add never leaves M0_NET_BUF_QUEUED behind after its event. */
  int stale_queued = 0;
  CHECK(m0_net_end_point_create(&ep, &tm, "192.0.2.1@roce:0:4:7") == 0);
  sb.nb_ep = ep;
  for (int i = 0; i < 100; ++i) {
    const int before = s_send.n;
    CHECK(m0_net_buffer_add(&sb, &tm) == 0);
    if (!wait_for(&s_send.n, before + 1)) break;
    if (sb.nb_flags & M0_NET_BUF_QUEUED) ++stale_queued;
  }
  CHECK(stale_queued == 0);

  /* Passive bulk on tm2, its descriptor conveyed to tm (m0_net_desc_copy), active send. */
  struct m0_net_buffer pb, ab;
  buf_setup(&pb, &dom2, 2, 4096);
  pb.nb_qtype = M0_NET_QT_PASSIVE_BULK_RECV;
  CHECK(m0_net_buffer_add(&pb, &tm2) == 0);
  CHECK(pb.nb_desc.nbd_len != 0 && pb.nb_desc.nbd_data != NULL);
  CHECK(pb.nb_desc.nbd_len <= m0_net_domain_get_max_buffer_desc_size(&dom2));
  buf_setup(&ab, &dom, 1, 8192);
  ab.nb_qtype = M0_NET_QT_ACTIVE_BULK_SEND;
  ab.nb_length = 8192;
  CHECK(m0_net_desc_copy(&pb.nb_desc, &ab.nb_desc) == 0);
  CHECK(m0_net_buffer_add(&ab, &tm) == 0);
  CHECK(wait_for(&s_abulk.n, 1));
  CHECK(s_abulk.status == 0 && s_abulk.flags == M0_NET_BUF_REGISTERED);

  /* Statistics: per queue, nanoseconds in queue; reset. */
  struct m0_net_qstats qs[M0_NET_QT_NR];
  CHECK(m0_net_tm_stats_get(&tm, M0_NET_QT_NR, qs, false) == 0);
  CHECK(qs[M0_NET_QT_MSG_RECV].nqs_num_adds == 1);
  CHECK(qs[M0_NET_QT_MSG_RECV].nqs_num_s_events == 2); /* one per message */
  CHECK(qs[M0_NET_QT_MSG_RECV].nqs_total_bytes == 300);
  CHECK(qs[M0_NET_QT_MSG_RECV].nqs_max_bytes == 200);
  CHECK(qs[M0_NET_QT_PASSIVE_BULK_SEND].nqs_num_adds == 2);
  CHECK(qs[M0_NET_QT_PASSIVE_BULK_SEND].nqs_num_dels == 1);
  CHECK(qs[M0_NET_QT_PASSIVE_BULK_SEND].nqs_num_f_events == 2);
  /* the timed-out one: 30 ms in the queue, counted in nanoseconds */
  CHECK(qs[M0_NET_QT_PASSIVE_BULK_SEND].nqs_time_in_queue >= 30 * 1000000ull);
  CHECK(qs[M0_NET_QT_ACTIVE_BULK_SEND].nqs_num_s_events == 1);
  CHECK(m0_net_tm_stats_get(&tm, M0_NET_QT_NR, NULL, true) == 0); /* reset only */
  CHECK(m0_net_tm_stats_get(&tm, M0_NET_QT_MSG_RECV, qs, false) == 0);
  CHECK(qs[0].nqs_num_adds == 0 && qs[0].nqs_time_in_queue == 0);

  /* Stop with abort: every queued buffer gets its -ECANCELED event, then STOPPED. */
  CHECK(m0_net_buffer_add(&rb, &tm) == 0);
  const int recv_before = s_recv.n;
  CHECK(m0_net_tm_stop(&tm2, true) == 0);
  CHECK(wait_for(&s_pbulk.n, 3));
  CHECK(s_pbulk.status == -ECANCELED && s_pbulk.flags == M0_NET_BUF_REGISTERED);
  /* Motr's stop with abort counts a del for each buffer it cancels (m0_net__tm_cancel). */
  CHECK(m0_net_tm_stats_get(&tm2, M0_NET_QT_PASSIVE_BULK_RECV, qs, false) == 0);
  CHECK(qs[0].nqs_num_adds == 1);
  CHECK(qs[0].nqs_num_dels == 1);
  CHECK(qs[0].nqs_num_f_events == 1);
  m0_net_end_point_put(ep);
  CHECK(m0_net_tm_stop(&tm, true) == 0);
  CHECK(wait_for(&ev_stopped, 2));
  CHECK(s_recv.n == recv_before + 1 && s_recv.status == -ECANCELED);
  CHECK(tm.ntm_state == M0_NET_TM_STOPPED && tm2.ntm_state == M0_NET_TM_STOPPED);
  CHECK(ev_other == 0);

  m0_net_tm_fini(&tm);
  m0_net_tm_fini(&tm2);

  /* Motr's state machine around start and stop: a start that fails leaves the Tm FAILED (no
   * retry; fini it); a Tm never started may be stopped, with its STOPPED event. */
  struct m0_net_transfer_mc tm3;
  memset(&tm3, 0, sizeof tm3);
  tm3.ntm_callbacks = &tm_cbs;
  CHECK(m0_net_tm_init(&tm3, &dom) == 0);
  CHECK(m0_net_tm_start(&tm3, "198.51.100.9@roce:0:4:5") == -EINVAL); /* not our NID */
  CHECK(tm3.ntm_state == M0_NET_TM_FAILED && tm3.ntm_ep == NULL);
  m0_net_tm_fini(&tm3);
  CHECK(tm3.ntm_state == M0_NET_TM_UNDEFINED);
  CHECK(m0_net_tm_init(&tm3, &dom) == 0);
  CHECK(m0_net_tm_stop(&tm3, false) == 0);
  CHECK(wait_for(&ev_stopped, 3));
  CHECK(tm3.ntm_state == M0_NET_TM_STOPPED);
  m0_net_tm_fini(&tm3);
  buf_teardown(&rb, &dom);
  buf_teardown(&xb, &dom);
  buf_teardown(&sb, &dom);
  buf_teardown(&ab, &dom);
  buf_teardown(&pb, &dom2);
  m0_net_domain_fini(&dom);
  m0_net_domain_fini(&dom2);
  lnet_fake_free(fake1);
  lnet_fake_free(fake2);
  if (failures == 0) printf("m0_net Motr-style: OK\n");
  return failures == 0 ? 0 : 1;
}
