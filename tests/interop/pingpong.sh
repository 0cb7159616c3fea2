#!/usr/bin/env bash
# ibv_rc_pingpong, ibv_ud_pingpong or ibv_srq_pingpong (rdma-core) in a Linux rxe VM against roce-perf on a DPDK
# port, in both directions and for several message sizes (RC: multi-packet from 4096 up at
# MTU 1024; UD: up to the MTU).
# Every run is captured on our side and checked: our parser accepts every RoCEv2 frame and
# tshark dissects them without errors.
#   pingpong.sh ROCE_PERF ROCE_PCAP rc|ud|srq [SIZES...]   (root; exits 77 when VMs cannot run here)
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2") kind=$3; shift 3
[[ $kind == rc || $kind == ud || $kind == srq ]] || { echo "usage: $0 ROCE_PERF ROCE_PCAP rc|ud|srq [SIZES...]"; exit 2; }
test=${kind}_pingpong
if [[ $kind == ud ]]; then default="1 64 1024"; else default="1 64 1024 4096 16384"; fi
sizes=("${@:-$default}")
read -r -a sizes <<< "${sizes[*]}"
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
iters=${ITERS:-200}
mtu_args="" ours_mtu=()
if [[ ${RXE_VM_MTU:-1500} -ge 9000 ]]; then
  ours_mtu=(-m 4096 --netdev-mtu 9000)
  # ibv_ud_pingpong has no -m: its datagrams may fill the port's MTU
  [[ $kind == ud ]] || mtu_args="-m 4096"
fi
fail=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for s in "${sizes[@]}"; do
  for dir in vm-server us-server; do
    if [[ $dir == vm-server ]]; then
      boot "ibv_$test -d rxe0 -g \$(rxe_gid_idx) -s $s -n $iters $mtu_args"
      ip netns exec "${RXE_VM_NETNS:-rxevm}" "$perf" "$test" --iface dp0 -s "$s" -n "$iters" --timeout 120 \
        "${ours_mtu[@]}" \
        --pcap "$out/us.pcap" 192.0.2.1 > "$out/us.txt" 2>&1 && ours=0 || ours=$?
    else
      boot "retry ibv_$test -d rxe0 -g \$(rxe_gid_idx) -s $s -n $iters $mtu_args 192.0.2.254"
      ip netns exec "${RXE_VM_NETNS:-rxevm}" "$perf" "$test" --iface dp0 -s "$s" -n "$iters" --timeout 120 \
        "${ours_mtu[@]}" \
        --pcap "$out/us.pcap" > "$out/us.txt" 2>&1 && ours=0 || ours=$?
    fi
    finish && theirs=0 || theirs=1
    rate=$(grep -m1 "usec/iter" "$out/us.txt" || echo "no result")
    "$here/../integration/check_capture.sh" "$pcap" "$out/us.pcap" $((2 * iters)) \
      > "$out/capture.txt" 2>&1 && cap=0 || cap=1
    rate="$rate; $(tail -1 "$out/capture.txt")"
    if [[ $ours == 0 && $theirs == 0 && $cap == 0 ]]; then
      echo "PASS $test size $s ($dir): $rate"
    else
      echo "FAIL $test size $s ($dir): ours=$ours rxe=$theirs capture=$cap"
      sed 's/^/  capture: /' "$out/capture.txt"
      sed 's/^/  us: /' "$out/us.txt"; grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -20
      fail=1
    fi
  done
done
exit $fail
