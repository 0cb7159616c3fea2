/* The messaging API (roce/lnet.h) in C with Motr's names (net/net.h of Motr: m0_net_domain,
 * m0_net_transfer_mc, m0_net_buffer, m0_net_end_point, m0_net_qstats and their subroutines), so
 * that code written against Motr's network layer links against roce_lnet. The structures carry
 * the fields of Motr's that such code sets and reads, with Motr's names, types and values; the
 * rest of Motr's (lists, mutexes, state-machine groups) are the transport's business and kept
 * in its private pointers. Differences from Motr's behaviour: docs/client-api.md, "The C API
 * with Motr's names". Plain C (C99 and later); link roce_lnet. */
#ifndef ROCE_M0_NET_H
#define ROCE_M0_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t m0_bcount_t;
typedef uint64_t m0_bindex_t;
/** Nanoseconds since the epoch (CLOCK_REALTIME), as Motr's m0_time_t. */
typedef uint64_t m0_time_t;
#define M0_TIME_NEVER UINT64_MAX
/** Now, in m0_time_t. */
m0_time_t m0_time_now(void);
/** Now plus `secs` seconds and `ns` nanoseconds, as Motr's (for nb_timeout). */
m0_time_t m0_time_from_now(uint64_t secs, long ns);

struct m0_vec {
  uint32_t v_nr;
  m0_bcount_t* v_count;
};
struct m0_bufvec {
  struct m0_vec ov_vec;
  void** ov_buf;
};
/** `num_segs` segments of `seg_size` bytes in shared memory (a memfd) that a domain can
 * register. 0 or -errno. */
int m0_bufvec_alloc(struct m0_bufvec* bufvec, uint32_t num_segs, m0_bcount_t seg_size);
void m0_bufvec_free(struct m0_bufvec* bufvec);

struct m0_net_xprt {
  const char* nx_name;
  const void* nx_ops;
};
/** The transport: RoCEv2 through roced (or the in-process engine). */
extern const struct m0_net_xprt m0_net_roce_xprt;

struct m0_net_domain {
  void* nd_xprt_private;
  const struct m0_net_xprt* nd_xprt;
};

struct m0_net_transfer_mc;

/** Transport-managed, reference counted (m0_net_end_point_get/put). */
struct m0_net_end_point {
  const char* nep_addr;
  struct m0_net_transfer_mc* nep_tm;
  void* nep_xprt_pvt;
};

enum m0_net_queue_type {
  M0_NET_QT_MSG_RECV = 0,
  M0_NET_QT_MSG_SEND,
  M0_NET_QT_PASSIVE_BULK_RECV,
  M0_NET_QT_PASSIVE_BULK_SEND,
  M0_NET_QT_ACTIVE_BULK_RECV,
  M0_NET_QT_ACTIVE_BULK_SEND,
  M0_NET_QT_NR
};

enum m0_net_tm_state {
  M0_NET_TM_UNDEFINED = 0,
  M0_NET_TM_INITIALIZED,
  M0_NET_TM_STARTING,
  M0_NET_TM_STARTED,
  M0_NET_TM_STOPPING,
  M0_NET_TM_STOPPED,
  M0_NET_TM_FAILED
};

enum m0_net_tm_ev_type {
  M0_NET_TEV_ERROR = 0,
  M0_NET_TEV_STATE_CHANGE,
  M0_NET_TEV_DIAGNOSTIC,
  M0_NET_TEV_NR
};

struct m0_net_tm_event {
  enum m0_net_tm_ev_type nte_type;
  struct m0_net_transfer_mc* nte_tm;
  m0_time_t nte_time;
  int32_t nte_status;
  enum m0_net_tm_state nte_next_state;
  struct m0_net_end_point* nte_ep;
  void* nte_payload;
};

struct m0_net_tm_callbacks {
  void (*ntc_event_cb)(const struct m0_net_tm_event* ev);
};

struct m0_net_qstats {
  uint64_t nqs_num_adds;
  uint64_t nqs_num_dels;
  uint64_t nqs_num_s_events;
  uint64_t nqs_num_f_events;
  m0_time_t nqs_time_in_queue;
  uint64_t nqs_total_bytes;
  uint64_t nqs_max_bytes;
};

struct m0_net_transfer_mc {
  const struct m0_net_tm_callbacks* ntm_callbacks; /* set before m0_net_tm_init */
  enum m0_net_tm_state ntm_state;
  struct m0_net_domain* ntm_dom;
  struct m0_net_end_point* ntm_ep; /* set when started */
  void* ntm_xprt_private;
};

struct m0_net_buffer;
struct m0_net_buffer_event {
  struct m0_net_buffer* nbe_buffer;
  m0_time_t nbe_time;
  int32_t nbe_status;
  m0_bcount_t nbe_length;
  m0_bindex_t nbe_offset;
  struct m0_net_end_point* nbe_ep; /* a received message's sender, put after the callback */
};
typedef void (*m0_net_buffer_cb_proc_t)(const struct m0_net_buffer_event* ev);
struct m0_net_buffer_callbacks {
  m0_net_buffer_cb_proc_t nbc_cb[M0_NET_QT_NR];
};

enum m0_net_buf_flags {
  M0_NET_BUF_REGISTERED = 1 << 0,
  M0_NET_BUF_QUEUED = 1 << 1,
  M0_NET_BUF_IN_USE = 1 << 2,
  M0_NET_BUF_CANCELLED = 1 << 3,
  M0_NET_BUF_TIMED_OUT = 1 << 4,
  M0_NET_BUF_RETAIN = 1 << 5
};

struct m0_net_buf_desc {
  uint32_t nbd_len;
  uint8_t* nbd_data;
};

struct m0_net_buffer {
  struct m0_bufvec nb_buffer;
  m0_bcount_t nb_length;
  m0_bindex_t nb_offset; /* 0 only */
  struct m0_net_domain* nb_dom;
  struct m0_net_transfer_mc* nb_tm;
  enum m0_net_queue_type nb_qtype;
  const struct m0_net_buffer_callbacks* nb_callbacks;
  m0_time_t nb_timeout;
  m0_time_t nb_add_time;
  struct m0_net_buf_desc nb_desc;
  struct m0_net_end_point* nb_ep;
  void* nb_xprt_private;
  void* nb_app_private;
  uint64_t nb_flags;
  m0_bcount_t nb_min_receive_size;
  uint32_t nb_max_receive_msgs;
  uint32_t nb_msgs_received;
};

/** Where m0_net_domain_init finds roced and the other domains' listeners. NULL fields and 0s:
 * the environment's ROCE_SOCKET (else /run/roce/roced.sock), ROCE_PORT, ROCE_LNET_PID,
 * ROCE_LNET_OOB_HOST, ROCE_LNET_OOB_BASE (DomainOptions of roce/lnet.h). */
struct m0_net_roce_options {
  const char* socket;
  const char* port;
  uint32_t pid;
  const char* oob_host;
  uint16_t oob_port_base;
};

/** Attaches to roced (the environment says where). 0 or -errno. */
int m0_net_domain_init(struct m0_net_domain* dom, const struct m0_net_xprt* xprt);
/** With options; `context`: a roce::client::Context* of the caller's (C++ glue, tests), or NULL
 * to attach. */
int m0_net_roce_domain_init(struct m0_net_domain* dom, const struct m0_net_roce_options* opts,
                            void* context);
void m0_net_domain_fini(struct m0_net_domain* dom);
/** The domain's limits, as Motr's: 4 segments of at most 4 GiB - 1 each (the engine's SGE
 * length); a descriptor of at most 335 bytes. (Memory quotas of roced bound what can actually
 * be registered: 1 GiB per client by default.) */
m0_bcount_t m0_net_domain_get_max_buffer_size(struct m0_net_domain* dom);
m0_bcount_t m0_net_domain_get_max_buffer_segment_size(struct m0_net_domain* dom);
int32_t m0_net_domain_get_max_buffer_segments(struct m0_net_domain* dom);
m0_bcount_t m0_net_domain_get_max_buffer_desc_size(struct m0_net_domain* dom);

int m0_net_tm_init(struct m0_net_transfer_mc* tm, struct m0_net_domain* dom);
void m0_net_tm_fini(struct m0_net_transfer_mc* tm);
/** The STARTED (or FAILED) event is posted before this returns, on this thread. -errno: the
 * Tm is M0_NET_TM_FAILED (as Motr's: fini it). */
int m0_net_tm_start(struct m0_net_transfer_mc* tm, const char* addr);
/** Cancels what is queued (-ECANCELED events, each a del in the statistics), then the STOPPED
 * event, on this thread; `abort` is ignored (always cancels). From M0_NET_TM_INITIALIZED: the
 * STOPPED event only. */
int m0_net_tm_stop(struct m0_net_transfer_mc* tm, bool abort);
int m0_net_tm_stats_get(struct m0_net_transfer_mc* tm, enum m0_net_queue_type qtype,
                        struct m0_net_qstats* qs, bool reset);
int m0_net_buffer_event_deliver_synchronously(struct m0_net_transfer_mc* tm);
bool m0_net_buffer_event_pending(struct m0_net_transfer_mc* tm);
void m0_net_buffer_event_deliver_all(struct m0_net_transfer_mc* tm);

int m0_net_end_point_create(struct m0_net_end_point** epp, struct m0_net_transfer_mc* tm,
                            const char* addr);
void m0_net_end_point_get(struct m0_net_end_point* ep);
void m0_net_end_point_put(struct m0_net_end_point* ep);

int m0_net_buffer_register(struct m0_net_buffer* buf, struct m0_net_domain* dom);
void m0_net_buffer_deregister(struct m0_net_buffer* buf, struct m0_net_domain* dom);
/** -ETIME: nb_timeout is in the past. A send holds a reference on nb_ep until its callback has
 * returned. */
int m0_net_buffer_add(struct m0_net_buffer* buf, struct m0_net_transfer_mc* tm);
/** True when queued. A M0_NET_QT_MSG_RECV buffer already given to the engine comes back only
 * with its next message or at m0_net_tm_stop (docs/client-api.md). */
bool m0_net_buffer_del(struct m0_net_buffer* buf, struct m0_net_transfer_mc* tm);

int m0_net_desc_copy(const struct m0_net_buf_desc* from_desc, struct m0_net_buf_desc* to_desc);
void m0_net_desc_free(struct m0_net_buf_desc* desc);

#ifdef __cplusplus
}
#endif
#endif /* ROCE_M0_NET_H */
