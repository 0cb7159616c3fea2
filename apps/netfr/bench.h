/* For benchmarks only, not part of NetFR's API: the baseline NetFR's buffer writes are measured
   against, a bare RDMA WRITE of `length` bytes from the start of `mem` into the client's buffer
   `index` (as advertised), without a notification and without marking the buffer busy. */
#ifndef NETFR_BENCH_H
#define NETFR_BENCH_H

#include "apps/netfr/include/netfr/netfr.h"

#ifdef __cplusplus
extern "C" {
#endif

int nfr_bench_host_raw_write(PNFRHost host, PNFRMemory mem, uint64_t length, uint32_t index);

#ifdef __cplusplus
}
#endif

#endif
