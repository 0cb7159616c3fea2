#!/usr/bin/env bash
# NetFR interop, the appliance as client: a NetFR host written on Debian's libfabric (verbs
# provider, FI_EP_MSG over rdma_cm: netfr-libfabric) on Linux rxe in the VM accepts both
# channels of roce-netfr-check's client on a DPDK port (net_af_packet on dp0, RoCE IP
# 192.0.2.100) and streams frames of 1 KiB .. 4 MiB into the smallest of its buffers, with a
# cursor datagram after each; our client checks every byte, the total order and the buffer
# choice. Our side captures; the capture must decode.
#   netfr_reverse.sh ROCE_NETFR_CHECK NETFR_LIBFABRIC ROCE_PCAP   (root; 77 when VMs cannot run)
# Env: RXE_VM_NETNS (default rxevm-netfrr) names the VM's network namespace.
set -euo pipefail
check=$(realpath "$1") peer=$(realpath "$2") pcap=$(realpath "$3")
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-netfrr}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
RXE_VM_EXTRA_BINS="$peer" "$here/vm/build.sh" >/dev/null 2>&1 ||
  { echo "skipped: cannot put $peer into the VM image"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
boot "$(basename "$peer") host 192.0.2.1" 400
# The host in the VM may still be starting: retry while nobody listens.
rc=1
for _ in $(seq 60); do
  NETFR_LINK="pmd=af_packet,iface=dp0,ip=192.0.2.100,mac=02:00:00:00:01:00,pcap=$out/client.pcap" \
    ip netns exec "$RXE_VM_NETNS" timeout 300 "$check" client frames 192.0.2.1 \
    > "$out/client.txt" 2>&1 && rc=0 || rc=$?
  [[ $rc != 0 ]] && grep -q "nfrClientInit: -1[01][0-9]" "$out/client.txt" && { sleep 2; continue; }
  break
done
finish && theirs=0 || theirs=1
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
sed 's/^/  client: /' "$out/client.txt"
"$here/../integration/check_capture.sh" "$pcap" "$out/client.pcap" 20 > "$out/capture.txt" 2>&1 &&
  cap=0 || cap=1
tail -1 "$out/capture.txt"
if [[ $rc == 0 && $theirs == 0 && $cap == 0 ]] && grep -q "PASS netfr-libfabric host" "$out/vm.txt" &&
   grep -q "PASS netfr client" "$out/client.txt"; then
  echo "PASS netfr interop: appliance client <- libfabric host on rxe"
else
  echo "FAIL netfr interop: client=$rc vm=$theirs capture=$cap"
  sed 's/^/  capture: /' "$out/capture.txt"
  exit 1
fi
