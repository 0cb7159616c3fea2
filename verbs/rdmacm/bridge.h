/// @file
/// A local copy of the declarations of verbs/provider/bridge.h (the provider's interface to the
/// other parts of verbs/, docs/verbs-compat.md), exactly as the common notes give them,
/// until the provider's own header is merged; librdmacm.cc includes "verbs/provider/bridge.h"
/// as soon as it exists, and then this file can go. librdmacm reaches these functions in the LD_PRELOADed provider
/// (build/lib/libroce-verbs.so) through weak references (librdmacm.cc), so that it also loads
/// without it and then lists no devices.
#pragma once

#include <infiniband/verbs.h>
#include <roce/client.h>

#include <functional>
#include <mutex>

namespace roce::verbs_compat {

// The appliance's objects behind libibverbs handles; null for handles of other providers.
struct Device;  // one per appliance port, what an ibv_context was opened on
client::Context* context_of(ibv_context*);
std::mutex& lock_of(ibv_context*);  // taken around every call into that Context
client::Qp* qp_of(ibv_qp*);
client::Cq* cq_of(ibv_cq*);
client::Pd* pd_of(ibv_pd*);
// CM events of a context go to one sink (librdmacm installs it); the provider's progress
// thread calls cm_get_event and hands each event over, without the lock held.
void set_cm_sink(ibv_context*, std::function<void(client::CmEvent&&)>);

}  // namespace roce::verbs_compat
