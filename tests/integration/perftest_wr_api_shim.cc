// LD_PRELOADed beside libroce-verbs.so by verbs_perftest_wr.sh: Debian's perftest 4.5-0.17 takes
// its ibv_wr_* post path (the extended API) only on the device part numbers it knows for it
// (ConnectX-4 and later, BlueField, EFA: verify_params_with_device_context in
// src/perftest_resources.c, ib_dev_name in src/perftest_parameters.c); on any other device it
// falls back to ibv_post_send, as it does on rxe. This shim reports a ConnectX-5 part number
// (4119) under our vendor id so that the unmodified binary drives verbs/provider/ex_api.cc.
// Nothing else of the device changes (perftest then also uses its latency tests' inline sizes).
#include <dlfcn.h>
#include <infiniband/verbs.h>

extern "C" int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  using Fn = int (*)(ibv_context*, ibv_device_attr*);
  static const Fn real = reinterpret_cast<Fn>(dlvsym(RTLD_NEXT, "ibv_query_device", "IBVERBS_1.1"));
  if (real == nullptr) return EOPNOTSUPP;
  const int rc = real(context, attr);
  if (rc == 0) attr->vendor_part_id = 4119;
  return rc;
}
