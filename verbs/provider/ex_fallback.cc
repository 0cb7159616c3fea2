/// @file
/// Weak stand-ins for the extended API's set-up (verbs/provider/ex_api.cc defines the real
/// ones): without it a QP made by ibv_create_qp_ex keeps no ibv_wr_* pointers and a CQ made by
/// ibv_create_cq_ex no ibv_start_poll pointers, so the provider links and runs the classic API.
#include "verbs/provider/bridge.h"

namespace roce::verbs_compat {

__attribute__((weak)) void init_qp_ex(ibv_qp_ex*) {}
__attribute__((weak)) void init_cq_ex(ibv_cq_ex*) {}

}  // namespace roce::verbs_compat
