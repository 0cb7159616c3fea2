#!/usr/bin/env bash
# librdmacm's udaddy in a Linux rxe VM against roce-perf udaddy on a DPDK port, in both roles:
# the VM serves (udaddy -b) and our client resolves it, then the VM's client (udaddy -s)
# resolves our RoCE IP 192.0.2.100. All rdma_cm SIDR (RDMA_PS_UDP), no TCP exchange: CONNECTIONS
# UD QPs, COUNT SEND_WITH_IMM of SIZE bytes from the client, as many replies from the server.
# Every run is captured on our side and checked like pingpong.sh's.
#   udaddy.sh ROCE_PERF ROCE_PCAP [CONNECTIONS [COUNT [SIZE]]]   (root; 77 when VMs cannot run)
# Env: RXE_VM_NETNS (default rxevm) names the VM's network namespace.
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2"); shift 2
conns=${1:-2} count=${2:-100} size=${3:-1000}
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm}
here=$(cd "$(dirname "$0")" && pwd)
vm=$here/vm/run-vm.sh
if [[ $(id -u) -ne 0 ]] || [[ ! -e /dev/net/tun ]]; then echo "skipped: needs root and /dev/net/tun"; exit 77; fi
"$here/vm/build.sh" >/dev/null || { echo "skipped: cannot build the VM image"; exit 77; }
fail=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(-c "$conns" -C "$count" -S "$size")

boot() {  # boot the VM with a command; wait until it is ready
  "$vm" -b -w -t 180 -c "$1" > "$out/vm.txt" 2>&1 &
  vmpid=$!
  for _ in $(seq 90); do grep -q RXEVM-WAIT "$out/vm.txt" && return 0; sleep 1; done
  echo "VM did not come up:"; cat "$out/vm.txt"; return 1
}
finish() {  # wait for the VM to end; return its command's status
  wait "$vmpid" || true
  grep -q "cmd-end rc=0" "$out/vm.txt"
}

for dir in vm-server us-server; do
  if [[ $dir == vm-server ]]; then
    boot "udaddy -b 192.0.2.1 ${args[*]}"
    ip netns exec "$RXE_VM_NETNS" "$perf" udaddy -s 192.0.2.1 "${args[@]}" --iface dp0 \
      --timeout 60 --pcap "$out/us.pcap" > "$out/us.txt" 2>&1 && ours=0 || ours=$?
  else
    boot "retry udaddy -s 192.0.2.100 ${args[*]}"
    ip netns exec "$RXE_VM_NETNS" "$perf" udaddy -b 192.0.2.100 "${args[@]}" --iface dp0 \
      --timeout 60 --pcap "$out/us.pcap" > "$out/us.txt" 2>&1 && ours=0 || ours=$?
  fi
  finish && theirs=0 || theirs=1
  "$here/../integration/check_capture.sh" "$pcap" "$out/us.pcap" $((2 * conns * count)) \
    > "$out/capture.txt" 2>&1 && cap=0 || cap=1
  cm=$(tshark -r "$out/us.pcap" -Y infiniband.mad.attributeid -T fields -e infiniband.mad.attributeid \
    2>/dev/null | sed 's/0x0017/SIDR_REQ/;s/0x0018/SIDR_REP/' \
    | sort | uniq -c | awk '{printf "%s%s x%s", (NR == 1 ? "" : ", "), $2, $1}' || true)
  summary="$(grep -m1 "each way" "$out/us.txt" || echo "no result"); CM: $cm; $(tail -1 "$out/capture.txt")"
  if [[ $ours == 0 && $theirs == 0 && $cap == 0 ]] && grep -q "return status 0" "$out/vm.txt"; then
    echo "PASS udaddy ($dir): $summary"
  else
    echo "FAIL udaddy ($dir): ours=$ours rxe=$theirs capture=$cap"
    sed 's/^/  capture: /' "$out/capture.txt"
    sed 's/^/  us: /' "$out/us.txt"
    grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -20
    fail=1
  fi
done
exit $fail
