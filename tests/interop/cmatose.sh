#!/usr/bin/env bash
# librdmacm's ucmatose or udaddy in a Linux rxe VM against roce-perf's on a DPDK port, in both
# roles: the VM serves (TOOL -b) and our client connects, then the VM's client (TOOL -s)
# connects to our RoCE IP 192.0.2.100. All rdma_cm, no TCP exchange. ucmatose: CONNECTIONS RC
# connections, COUNT messages of SIZE bytes each way on each, the server disconnects. udaddy:
# SIDR (RDMA_PS_UDP), CONNECTIONS UD QPs, COUNT SEND_WITH_IMM of SIZE bytes from the client, as
# many replies from the server. Every run is captured on our side and checked like pingpong.sh's.
#   cmatose.sh ROCE_PERF ROCE_PCAP ucmatose|udaddy [CONNECTIONS [COUNT [SIZE]]]
#   (root; 77 when VMs cannot run)
# Env: RXE_VM_NETNS (default rxevm) names the VM's network namespace.
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2") tool=$3; shift 3
[[ $tool == ucmatose || $tool == udaddy ]] || { echo "usage: $0 ROCE_PERF ROCE_PCAP ucmatose|udaddy ..."; exit 2; }
conns=${1:-2} count=${2:-100} size=${3:-1000}
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
fail=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(-c "$conns" -C "$count" -S "$size")

for dir in vm-server us-server; do
  if [[ $dir == vm-server ]]; then
    boot "$tool -b 192.0.2.1 ${args[*]}"
    ip netns exec "$RXE_VM_NETNS" "$perf" "$tool" -s 192.0.2.1 "${args[@]}" --iface dp0 \
      --timeout 60 --pcap "$out/us.pcap" > "$out/us.txt" 2>&1 && ours=0 || ours=$?
  else
    boot "retry $tool -s 192.0.2.100 ${args[*]}"
    ip netns exec "$RXE_VM_NETNS" "$perf" "$tool" -b 192.0.2.100 "${args[@]}" --iface dp0 \
      --timeout 60 --pcap "$out/us.pcap" > "$out/us.txt" 2>&1 && ours=0 || ours=$?
  fi
  finish && theirs=0 || theirs=1
  "$here/../integration/check_capture.sh" "$pcap" "$out/us.pcap" $((2 * conns * count)) \
    > "$out/capture.txt" 2>&1 && cap=0 || cap=1
  cm=$(tshark -r "$out/us.pcap" -Y infiniband.mad.attributeid -T fields -e infiniband.mad.attributeid \
    2>/dev/null | sed 's/0x0010/REQ/;s/0x0011/MRA/;s/0x0012/REJ/;s/0x0013/REP/;s/0x0014/RTU/;s/0x0015/DREQ/;s/0x0016/DREP/;s/0x0017/SIDR_REQ/;s/0x0018/SIDR_REP/' \
    | sort | uniq -c | awk '{printf "%s%s x%s", (NR == 1 ? "" : ", "), $2, $1}' || true)
  summary="$(grep -m1 "each way" "$out/us.txt" || echo "no result"); CM: $cm; $(tail -1 "$out/capture.txt")"
  if [[ $ours == 0 && $theirs == 0 && $cap == 0 ]] && grep -q "return status 0" "$out/vm.txt"; then
    echo "PASS $tool ($dir): $summary"
  else
    echo "FAIL $tool ($dir): ours=$ours rxe=$theirs capture=$cap"
    sed 's/^/  capture: /' "$out/capture.txt"
    sed 's/^/  us: /' "$out/us.txt"
    grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -20
    fail=1
  fi
done
exit $fail
