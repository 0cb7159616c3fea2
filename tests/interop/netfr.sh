#!/usr/bin/env bash
# NetFR interop, the appliance as host: a NetFR client written on Debian's libfabric (verbs
# provider, FI_EP_MSG over rdma_cm: netfr-libfabric) on Linux rxe in the VM connects both
# channels to roce-netfr-check's host on a DPDK port (net_af_packet on dp0, RoCE IP
# 192.0.2.100), which writes frames of 1 KiB .. 4 MiB into the smallest of the client's buffers
# with a cursor datagram after each; the client checks every byte, the total order across both
# channels and the buffer choice. Our side captures; the capture must decode.
#   netfr.sh ROCE_NETFR_CHECK NETFR_LIBFABRIC ROCE_PCAP   (root; exits 77 when VMs cannot run)
# Env: RXE_VM_NETNS (default rxevm-netfr) names the VM's network namespace.
set -euo pipefail
check=$(realpath "$1") peer=$(realpath "$2") pcap=$(realpath "$3")
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-netfr}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
RXE_VM_EXTRA_BINS="$peer" "$here/vm/build.sh" >/dev/null 2>&1 ||
  { echo "skipped: cannot put $peer into the VM image"; exit 77; }
out=$(mktemp -d)
hpid=
trap '[[ -n $hpid ]] && kill "$hpid" 2>/dev/null; rm -rf "$out"' EXIT
boot "retry $(basename "$peer") client 192.0.2.100" 400
NETFR_LINK="pmd=af_packet,iface=dp0,ip=192.0.2.100,mac=02:00:00:00:01:00,pcap=$out/host.pcap" \
  ip netns exec "$RXE_VM_NETNS" timeout 380 "$check" host frames > "$out/host.txt" 2>&1 &
hpid=$!
finish && theirs=0 || theirs=1
wait "$hpid" && ours=0 || ours=$?
hpid=
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
sed 's/^/  host: /' "$out/host.txt"
"$here/../integration/check_capture.sh" "$pcap" "$out/host.pcap" 20 > "$out/capture.txt" 2>&1 &&
  cap=0 || cap=1
tail -1 "$out/capture.txt"
if [[ $ours == 0 && $theirs == 0 && $cap == 0 ]] && grep -q "PASS netfr-libfabric client" "$out/vm.txt" &&
   grep -q "PASS netfr host" "$out/host.txt"; then
  echo "PASS netfr interop: libfabric client on rxe <- appliance host"
else
  echo "FAIL netfr interop: host=$ours vm=$theirs capture=$cap"
  sed 's/^/  capture: /' "$out/capture.txt"
  exit 1
fi
