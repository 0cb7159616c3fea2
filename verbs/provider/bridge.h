/// @file
/// The internal interface between the parts of verbs/ (the libibverbs provider, our librdmacm,
/// the extended verbs API, attached-mode memory): the appliance's objects behind libibverbs'
/// handles, the lock that serialises calls into a Context, and the shared post/poll paths.
/// Owned by the provider (verbs/provider/); the others rely on exactly these declarations.
#pragma once

#include <infiniband/verbs.h>
#include <roce/client.h>

#include <functional>
#include <mutex>

namespace roce::verbs_compat {

/// One per appliance port: what an ibv_context was opened on.
struct Device;

// The appliance's objects behind libibverbs handles; null for handles of other providers.
client::Context* context_of(ibv_context*);
/// Taken around every call into that Context (the in-process Context is single threaded).
std::mutex& lock_of(ibv_context*);
client::Qp* qp_of(ibv_qp*);
client::Cq* cq_of(ibv_cq*);
client::Pd* pd_of(ibv_pd*);

/// CM events of a context go to one sink (librdmacm installs it); the provider's progress
/// thread calls cm_get_event and hands each event over, without the lock held. An empty
/// function removes the sink (events then wait in the Context). In-process every context of the
/// process runs on one engine and one CM: they share one sink, the last installed.
void set_cm_sink(ibv_context*, std::function<void(client::CmEvent&&)>);

/// Work requests for a QP, rdma-core's semantics (inline data copied, any number of SGEs up
/// to the QP's max_send_sge): the path ibv_post_send and the ibv_wr_* builder share.
/// 0 or an errno value, `*bad_wr` the first request not posted.
int post_send(ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad_wr);

/// Completions of a CQ in libibverbs' form (the path ibv_poll_cq and ibv_start_poll share):
/// a count, or a negative errno value.
int poll_cq(ibv_cq*, int max, ibv_wc* out);

// Extended API (verbs/provider/ex_api.cc): every builder / every reader. ibv_create_qp_ex and
// ibv_create_cq_ex call ex_api.h's forms that follow the creation attributes (send_ops_flags
// and caps; wc_flags) instead.
void init_qp_ex(ibv_qp_ex*);  ///< sets wr_start/wr_complete/wr_abort/wr_* pointers
void init_cq_ex(ibv_cq_ex*);  ///< sets start_poll/next_poll/end_poll/read_* pointers

}  // namespace roce::verbs_compat
