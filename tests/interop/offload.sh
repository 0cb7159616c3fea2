#!/usr/bin/env bash
# Linux rxe against roced with the FPGA offload's device model on its port (docs/fpga.md):
# for each mode (icrc: the device writes and checks every ICRC; parse: also the header parser),
# perftest's ib_write_bw and ib_read_bw in the rxe VM serve, and roce-perf attached to roced
# (--attach) is the client: the VM's tool must accept every frame the device wrote, ours every
# frame it checked, and roced must report the device's counters at its stop.
#   offload.sh ROCED ROCE_PERF [MODES...]   (root; exits 77 where VMs cannot run)
set -euo pipefail
roced=$(realpath "$1") perf=$(realpath "$2"); shift 2
modes=("${@:-icrc parse}")
read -r -a modes <<< "${modes[*]}"
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
fail=0
for mode in "${modes[@]}"; do
  for tool in write_bw read_bw; do
    boot "ib_$tool -d rxe0 -x \$(rxe_gid_idx) -n 200 -s 16384" 240
    roced_on_dp0 "$roced" "off$mode" "    offload: $mode"
    ip netns exec "${RXE_VM_NETNS:-rxevm}" timeout 150 "$perf" "$tool" --attach "$out/off$mode.sock" -n 200 -s 16384 --timeout 120 \
      192.0.2.1 > "$out/us.txt" 2>&1 && ours=0 || ours=$?
    finish && theirs=0 || theirs=1
    kill -TERM "$rp" 2>/dev/null; wait "$rp" 2>/dev/null || true
    row=$(awk '$1 == "16384" && NF >= 5' "$out/us.txt" | tail -1)
    if [[ $ours == 0 && $theirs == 0 && -n $row ]] && grep -q "FPGA offload '$mode'" "$out/off$mode.log" \
        && grep -q "ICRC gen cnt: [1-9]" "$out/off$mode.log"; then
      echo "PASS ib_$tool, roced offload: $mode: $row; device: $(grep -o "ICRC gen cnt: [0-9]*" "$out/off$mode.log")"
    else
      echo "FAIL ib_$tool, roced offload: $mode: ours=$ours rxe=$theirs"
      sed 's/^/  us: /' "$out/us.txt" | tail -8; sed 's/^/  roced: /' "$out/off$mode.log" | tail -8
      grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -12
      fail=1
    fi
  done
done
exit $fail
