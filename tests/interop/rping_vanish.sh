#!/usr/bin/env bash
# A peer that vanishes mid-connection, against Linux rxe: roce-perf rping -s -P (persistent
# server) on our DPDK port; in the VM a first rping -c pings without end and is killed with
# SIGKILL, then a second rping -c -V must connect and complete its pings. (The kernel tears
# down the killed process's rdma_cm ID and sends the DREQ itself.) Our server must end the
# first connection, free its QP (QP count back at its baseline) and serve the second.
#   rping_vanish.sh ROCE_PERF ROCE_PCAP   (root; exits 77 when VMs cannot run here)
# Env: RXE_VM_NETNS (default rxevm) names the VM's network namespace.
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2"); shift 2
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# In the VM: wait until our port answers, give the server a moment to listen, start a client
# pinging without end, kill it, then connect again.
boot "rxe_wait_peer 192.0.2.100 && sleep 2 && \
  { rping -c -a 192.0.2.100 -C 0 -S 64 > /tmp/c1.txt 2>&1 & p=\$!; sleep 8; kill -9 \$p; wait \$p; \
    echo \"first client: \$(grep -c . /tmp/c1.txt) lines before SIGKILL\"; } ; sleep 1; \
  retry rping -c -a 192.0.2.100 -C 50 -S 64 -v -V"
t0=$(date +%s)
ip netns exec "$RXE_VM_NETNS" "$perf" rping -s -P --max-connections 2 -a 192.0.2.100 -S 64 \
  --iface dp0 --timeout 120 --pcap "$out/us.pcap" --json "$out/us.json" > "$out/us.txt" 2>&1 \
  && ours=0 || ours=$?
t1=$(date +%s)
finish && theirs=0 || theirs=1
num() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$out/us.json" 2>/dev/null; }
vm_pings=$(grep -v "^\[rxe-vm\]" "$out/vm.txt" | grep -o "rdma-ping-[0-9]*:" | sort -u | wc -l)
"$here/../integration/check_capture.sh" "$pcap" "$out/us.pcap" 1 > "$out/capture.txt" 2>&1 \
  && cap=0 || cap=1
# CM messages in order, "<" from the VM, ">" from us
cm=$(tshark -r "$out/us.pcap" -Y infiniband.mad.attributeid -T fields -e ip.src -e infiniband.mad.attributeid \
  2>/dev/null | sed 's/0x0010/REQ/;s/0x0011/MRA/;s/0x0012/REJ/;s/0x0013/REP/;s/0x0014/RTU/;s/0x0015/DREQ/;s/0x0016/DREP/' \
  | awk '{printf "%s%s%s", (NR == 1 ? "" : " "), ($1 == "192.0.2.100" ? ">" : "<"), $2}' || true)
first=$(grep -v "^\[rxe-vm\]" "$out/vm.txt" | grep -m1 "^first client" || true)
summary="$first; $(grep "^connection 1" "$out/us.txt" | tr '\n' ' ')| second client: $vm_pings pings; CM: $cm; $((t1 - t0)) s; $(tail -1 "$out/capture.txt")"
if [[ $ours == 0 && $theirs == 0 && $cap == 0 && $vm_pings == 50 && $(num connections) == 2 &&
      $(num qps_after) == "$(num qps_baseline)" && -n $(num qps_baseline) ]]; then
  echo "PASS rping vanished peer (us-server): $summary"
else
  echo "FAIL rping vanished peer (us-server): ours=$ours rxe=$theirs capture=$cap pings=$vm_pings json=$(cat "$out/us.json" 2>/dev/null)"
  sed 's/^/  capture: /' "$out/capture.txt"
  grep -v "ping data:" "$out/us.txt" | sed 's/^/  us: /'
  grep -v "^\[rxe-vm\]" "$out/vm.txt" | grep -v "ping data:" | sed 's/^/  vm: /' | tail -20
  exit 1
fi
