#!/usr/bin/env bash
# One perftest tool (ib_write_bw, ib_read_lat, ...) in a Linux rxe VM against roce-perf on a DPDK
# port, in both directions: the VM as server and we connect, then we serve and the VM connects.
# Every run is captured on our side and checked (our parser, tshark); both sides must finish
# with status 0 and print a result row.
#   perftest.sh ROCE_PERF ROCE_PCAP TEST [ARGS...]   (root; exits 77 when VMs cannot run here)
# TEST: write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat. ARGS go to
# both tools (e.g. -s 4096 -n 100). Environment: RXE_VM_MTU=9000 runs path MTU 4096;
# ROCE_EXTRA adds arguments on our side only (e.g. "--tx-drop 0.01"); ROCE_EXPECT_RETX=1
# (loss runs) requires that frames were dropped and that our counters show the recovery (our
# retransmissions, our sequence NAKs, or duplicates from the peer's retransmissions) in at
# least one of the two directions. With -R (rdma_cm) there is no TCP: the VM's client connects
# to our RoCE address 192.0.2.100 (ours to the VM's 192.0.2.1, as without -R).
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2") test=$3; shift 3
args=("$@")
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
ours=()
if [[ ${RXE_VM_MTU:-1500} -ge 9000 ]]; then
  args+=(-m 4096); ours+=(--netdev-mtu 9000)
fi
read -r -a extra <<< "${ROCE_EXTRA:-}"
us=192.0.2.254  # where the VM's client finds us: the bridge, for the TCP exchange
for a in "${args[@]}"; do [[ $a == -R ]] && us=192.0.2.100; done
ours+=("${extra[@]}")
fail=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for dir in vm-server us-server; do
  if [[ $dir == vm-server ]]; then
    boot "ib_$test -d rxe0 -x \$(rxe_gid_idx) ${args[*]}" 240
    ip netns exec "${RXE_VM_NETNS:-rxevm}" "$perf" "$test" --iface dp0 --timeout 180 --pcap "$out/us.pcap" \
      --json "$out/us.json" "${ours[@]}" "${args[@]}" 192.0.2.1 > "$out/us.txt" 2>&1 && rc=0 || rc=$?
  else
    boot "retry ib_$test -d rxe0 -x \$(rxe_gid_idx) ${args[*]} $us" 240
    ip netns exec "${RXE_VM_NETNS:-rxevm}" "$perf" "$test" --iface dp0 --timeout 180 --pcap "$out/us.pcap" \
      --json "$out/us.json" "${ours[@]}" "${args[@]}" > "$out/us.txt" 2>&1 && rc=0 || rc=$?
  fi
  wait "$vmpid" || true
  theirs=1; grep -q "cmd-end rc=0" "$out/vm.txt" && theirs=0
  "$here/../integration/check_capture.sh" "$pcap" "$out/us.pcap" 1 > "$out/capture.txt" 2>&1 \
    && cap=0 || cap=1
  # With ROCE_OFFLOAD set (docs/fpga.md), what the device carried.
  grep -h -E "^roce-perf: offload|QPs on the FPGA datapath card" "$out/us.txt" | sed 's/^ *//' || true
  # the result row: a line that starts with the message size
  row=$(grep -m1 -E '^ [0-9]+ +[0-9]+ ' "$out/us.txt" | tr -s ' \t' ' ' || true)
  vmrow=$(grep -v '^\[rxe-vm\]' "$out/vm.txt" | grep -m1 -E '^ [0-9]+ +[0-9]+ ' | tr -s ' \t' ' ' || true)
  num() { local v; v=$(sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$out/us.json" 2>/dev/null | head -1); echo "${v:-0}"; }
  retx=$(num retransmitted)
  # recovery seen from our side: our retransmissions, the NAKs we sent for gaps, and the
  # duplicates the peer's retransmissions brought us
  recovery=$(( retx + $(num retransmit_timeouts) + $(num seq_err_naks_sent) + $(num duplicate_requests) ))
  injected=$(( $(num tx_dropped_injected) + $(num rx_dropped_injected) ))
  ok=1
  [[ $rc == 0 && $theirs == 0 && $cap == 0 ]] || ok=0
  # Without injected loss, recovery must stay rare: rxe is slow and jittery, so a few probes
  # and their duplicates are expected, but not a retransmission storm or ACK timeouts (a
  # probe that re-requested every outstanding READ once made read_bw 25x slower).
  timeouts=$(num retransmit_timeouts) probes=$(num retransmit_probes)
  if [[ ${ROCE_EXPECT_RETX:-0} != 1 ]] && (( retx > 1000 || timeouts > 2 )); then
    echo "  too much recovery without loss: retransmitted $retx, timeouts $timeouts, probes $probes"
    ok=0
  fi
  # read/atomic latency servers print no row; everyone else does
  if [[ -z $row && ! ($dir == us-server && $test =~ ^(read|atomic)_lat$) ]]; then ok=0; fi
  if [[ -z $vmrow && ! ($dir == vm-server && $test =~ ^(read|atomic)_lat$) ]]; then ok=0; fi
  all_injected=$(( ${all_injected:-0} + injected )) all_recovery=$(( ${all_recovery:-0} + recovery ))
  summary="us:[${row:-none}] rxe:[${vmrow:-none}] retransmitted $retx (probes $probes, timeouts $timeouts), injected drops $injected, recovery events $recovery; $(tail -1 "$out/capture.txt")"
  if [[ $ok == 1 ]]; then
    echo "PASS ib_$test ${args[*]} ${extra[*]} ($dir): $summary"
  else
    echo "FAIL ib_$test ${args[*]} ${extra[*]} ($dir): ours=$rc rxe=$theirs capture=$cap; $summary"
    sed 's/^/  capture: /' "$out/capture.txt"
    sed 's/^/  us: /' "$out/us.txt" | tail -20
    grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -25
    fail=1
  fi
done
# Loss runs: drops must have happened, and recovery must show in our counters in at least one
# direction (a dropped ACK may be covered by the next one and leave no trace).
if [[ ${ROCE_EXPECT_RETX:-0} == 1 ]] && (( all_injected == 0 || all_recovery == 0 )); then
  echo "FAIL loss run: $all_injected frames dropped by injection, $all_recovery recovery events"
  fail=1
fi
exit $fail
