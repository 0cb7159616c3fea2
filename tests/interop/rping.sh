#!/usr/bin/env bash
# librdmacm's rping in a Linux rxe VM against roce-perf rping on a DPDK port, in both roles:
# the VM's rping -s with our client connecting, then the VM's rping -c -V connecting to us.
# Everything is rdma_cm (REQ/REP/RTU/DREQ/DREP on QP1): there is no TCP exchange, the VM's
# client connects to our RoCE IP 192.0.2.100. Every run is captured on our side and checked:
# our parser accepts every RoCEv2 frame and tshark dissects them without errors.
#   rping.sh ROCE_PERF ROCE_PCAP [COUNT [SIZES...]]   (root; exits 77 when VMs cannot run here)
# Env: RXE_VM_NETNS (default rxevm) names the VM's network namespace.
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2"); shift 2
count=${1:-300}; shift || true
sizes=("${@:-64}")
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
fail=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log() {  # ROCE_RPING_KEEP=DIR keeps each run's outputs and capture
  [[ -n ${ROCE_RPING_KEEP:-} ]] || return 0
  for f in "$out"/*.txt "$out"/*.pcap; do cp "$f" "$ROCE_RPING_KEEP/$1-$(basename "$f")"; done
}

for s in "${sizes[@]}"; do
  for dir in vm-server us-server; do
    if [[ $dir == vm-server ]]; then
      # Our client retries while nobody listens yet (REJ 8).
      boot "rping -s -a 192.0.2.1 -C $count -S $s -v"
      ip netns exec "$RXE_VM_NETNS" "$perf" rping -c -a 192.0.2.1 -C "$count" -S "$s" -v \
        --iface dp0 --timeout 60 --pcap "$out/us.pcap" > "$out/us.txt" 2>&1 && ours=0 || ours=$?
    else
      boot "retry rping -c -a 192.0.2.100 -C $count -S $s -v -V"
      ip netns exec "$RXE_VM_NETNS" "$perf" rping -s -a 192.0.2.100 -C "$count" -S "$s" -v \
        --iface dp0 --timeout 60 --pcap "$out/us.pcap" > "$out/us.txt" 2>&1 && ours=0 || ours=$?
    fi
    finish && theirs=0 || theirs=1
    # The pings rxe's rping printed with -v (its stdout and stderr share the console, so a line
    # may be split: count the distinct "rdma-ping-N:" anywhere).
    vm_pings=$(grep -v "^\[rxe-vm\]" "$out/vm.txt" | grep -o "rdma-ping-[0-9]*:" | sort -u | wc -l)
    rate=$(grep -m1 "usec/ping" "$out/us.txt" || echo "no result")
    "$here/../integration/check_capture.sh" "$pcap" "$out/us.pcap" $((4 * count)) \
      > "$out/capture.txt" 2>&1 && cap=0 || cap=1
    cm=$(tshark -r "$out/us.pcap" -Y infiniband.mad.attributeid -T fields -e infiniband.mad.attributeid \
      2>/dev/null | sed 's/0x0010/REQ/;s/0x0011/MRA/;s/0x0012/REJ/;s/0x0013/REP/;s/0x0014/RTU/;s/0x0015/DREQ/;s/0x0016/DREP/' \
      | sort | uniq -c | awk '{printf "%s%s x%s", (NR == 1 ? "" : ", "), $2, $1}' || true)
    rate="$rate; rxe printed $vm_pings pings; CM attributes: $cm; $(tail -1 "$out/capture.txt")"
    log "$s-$dir"
    if [[ $ours == 0 && $theirs == 0 && $cap == 0 && $vm_pings == "$count" ]]; then
      echo "PASS rping size $s ($dir): $rate"
    else
      echo "FAIL rping size $s ($dir): ours=$ours rxe=$theirs capture=$cap rxe_pings=$vm_pings"
      sed 's/^/  capture: /' "$out/capture.txt"
      grep -v "ping data:" "$out/us.txt" | sed 's/^/  us: /'
      grep -v "^\[rxe-vm\]" "$out/vm.txt" | grep -v "ping data:" | sed 's/^/  vm: /' | tail -20
      fail=1
    fi
  done
done
exit $fail
