/// @file
/// The extended verbs API (libibverbs' ibv_qp_ex work request builder and ibv_cq_ex completion
/// iterator) over the provider's shared paths: a batch built with ibv_wr_* becomes a list of
/// ibv_send_wr handed to bridge post_send at wr_complete; start_poll/next_poll read a small
/// per-CQ batch taken with bridge poll_cq. bridge.h declares init_qp_ex/init_cq_ex; this header
/// adds the forms that follow the creation attributes as rdma-core's providers do, the checks
/// of those attributes, and the hooks for destruction.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace roce::verbs_compat {

/// The IBV_QP_EX_WITH_* builders the appliance has for a QP type (UD: SEND, SEND_WITH_IMM;
/// UC: also RDMA WRITE (+IMM), SEND_WITH_INV, LOCAL_INV; RC: also RDMA READ and the two
/// atomics). 0 for other types.
std::uint64_t supported_send_ops(ibv_qp_type);
/// ibv_create_qp_ex's check of send_ops_flags (when IBV_QP_INIT_ATTR_SEND_OPS_FLAGS is set):
/// 0, or EOPNOTSUPP for a builder the type does not have (rdma-core's rxe answers so).
int check_send_ops(ibv_qp_type, std::uint64_t send_ops_flags);

/// Sets every builder of supported_send_ops(ANY), the setters, wr_start/wr_complete/wr_abort;
/// no limits known, so SGE counts and inline lengths are left to post_send.
void init_qp_ex(ibv_qp_ex*);
/// As rdma-core's providers: only the builders asked for in send_ops_flags are set (others
/// stay null), and the builder refuses (wr_complete returns ENOSPC) more SGEs than
/// cap.max_send_sge, more inline bytes than cap.max_inline_data and more requests in one batch
/// than cap.max_send_wr. Call again for a new QP at the same address: it starts afresh.
void init_qp_ex(ibv_qp_ex*, std::uint64_t send_ops_flags, const ibv_qp_cap& cap);
/// At ibv_destroy_qp: frees the builder's state (without it that state is kept until a QP is
/// created at the same address).
void fini_qp_ex(ibv_qp_ex*);

/// The IBV_WC_EX_WITH_* fields the appliance fills: IBV_WC_STANDARD_FLAGS (no timestamps, no
/// CVLAN, flow tag or tag matching).
std::uint64_t supported_wc_flags();
/// ibv_create_cq_ex's check of its attributes: 0; EOPNOTSUPP for wc_flags outside
/// supported_wc_flags(), for comp_mask bits libibverbs does not know, and for
/// IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN; EINVAL for IBV_CQ_INIT_ATTR_MASK_PD (there are no parent
/// domains). IBV_CREATE_CQ_ATTR_SINGLE_THREADED is accepted (a hint).
int check_cq_attr(const ibv_cq_init_attr_ex&);

/// Sets start_poll/next_poll/end_poll and every read_* of supported_wc_flags().
void init_cq_ex(ibv_cq_ex*);
/// As rdma-core's providers: read_opcode, read_vendor_err, read_wc_flags always, the other
/// read_* only for the fields asked for in wc_flags.
void init_cq_ex(ibv_cq_ex*, std::uint64_t wc_flags);
/// At ibv_destroy_cq: frees the iterator's state and the completions it still held.
void fini_cq_ex(ibv_cq_ex*);
/// Completions the iterator took from poll_cq but has not handed out yet (end_poll before
/// next_poll came to ENOENT), oldest first: ibv_poll_cq on a CQ made by ibv_create_cq_ex
/// returns these before polling on, so the two ways of polling one CQ keep its order.
/// The count moved to `out` (0 when none, not a CQ of init_cq_ex, or a thread is inside the
/// CQ's start_poll..end_poll: it never waits).
int take_pending(ibv_cq*, int max, ibv_wc* out);
/// How many completions the iterator holds outside a batch (0: none, not a CQ of init_cq_ex,
/// or a thread is polling it): for the provider's "an armed CQ that holds completions fires"
/// check. Never waits.
int pending(ibv_cq*);

}  // namespace roce::verbs_compat
