#!/usr/bin/env bash
# librdmacm's ucmatose in a Linux rxe VM against roce-perf ucmatose on a DPDK port, in both
# roles: the VM serves (ucmatose -b) and our client connects, then the VM's client
# (ucmatose -s) connects to our RoCE IP 192.0.2.100. All rdma_cm, no TCP exchange: CONNECTIONS
# RC connections, COUNT messages of SIZE bytes each way on each, the server disconnects.
# Every run is captured on our side and checked like pingpong.sh's.
#   ucmatose.sh ROCE_PERF ROCE_PCAP [CONNECTIONS [COUNT [SIZE]]]   (root; 77 when VMs cannot run)
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
    boot "ucmatose -b 192.0.2.1 ${args[*]}"
    ip netns exec "$RXE_VM_NETNS" "$perf" ucmatose -s 192.0.2.1 "${args[@]}" --iface dp0 \
      --timeout 60 --pcap "$out/us.pcap" > "$out/us.txt" 2>&1 && ours=0 || ours=$?
  else
    boot "retry ucmatose -s 192.0.2.100 ${args[*]}"
    ip netns exec "$RXE_VM_NETNS" "$perf" ucmatose -b 192.0.2.100 "${args[@]}" --iface dp0 \
      --timeout 60 --pcap "$out/us.pcap" > "$out/us.txt" 2>&1 && ours=0 || ours=$?
  fi
  finish && theirs=0 || theirs=1
  "$here/../integration/check_capture.sh" "$pcap" "$out/us.pcap" $((2 * conns * count)) \
    > "$out/capture.txt" 2>&1 && cap=0 || cap=1
  cm=$(tshark -r "$out/us.pcap" -Y infiniband.mad.attributeid -T fields -e infiniband.mad.attributeid \
    2>/dev/null | sed 's/0x0010/REQ/;s/0x0011/MRA/;s/0x0012/REJ/;s/0x0013/REP/;s/0x0014/RTU/;s/0x0015/DREQ/;s/0x0016/DREP/' \
    | sort | uniq -c | awk '{printf "%s%s x%s", (NR == 1 ? "" : ", "), $2, $1}' || true)
  summary="$(grep -m1 "each way" "$out/us.txt" || echo "no result"); CM: $cm; $(tail -1 "$out/capture.txt")"
  if [[ $ours == 0 && $theirs == 0 && $cap == 0 ]] && grep -q "return status 0" "$out/vm.txt"; then
    echo "PASS ucmatose ($dir): $summary"
  else
    echo "FAIL ucmatose ($dir): ours=$ours rxe=$theirs capture=$cap"
    sed 's/^/  capture: /' "$out/capture.txt"
    sed 's/^/  us: /' "$out/us.txt"
    grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -20
    fail=1
  fi
done
exit $fail
