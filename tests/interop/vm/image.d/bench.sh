# shellcheck shell=bash disable=SC2034
# The NFS benchmark (tests/perf/nfs_fio_bench.sh): veth pairs inside the VM, so that the kernel's
# nfsd (on a kernel address of one pair's far end, with rxe on it) and roce-nfsd (its DPDK
# net_af_packet port on another pair's far end, its binary and libraries brought in over 9p)
# are both reached from the client's rxe across the same kind of link.
MODS+=(veth)
