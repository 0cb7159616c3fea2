#!/usr/bin/env bash
# Linux rxe against roced with the FPGA offload's device model on its port (docs/fpga.md):
# for each mode (icrc: the device writes and checks every ICRC; parse: also the header parser),
# perftest's ib_write_bw and ib_read_bw in the rxe VM serve, and roce-perf attached to roced
# (--attach) is the client: the VM's tool must accept every frame the device wrote, ours every
# frame it checked, and roced must report the device's counters at its stop. In `datapath`
# mode the VM's tools are the clients of roced's hosted servers, whose QPs the card runs (the
# card's IBV RX/TX counts at roced's stop show it carried them).
#   offload.sh ROCED ROCE_PERF [MODES...]   (root; exits 77 where VMs cannot run)
set -euo pipefail
roced=$(realpath "$1") perf=$(realpath "$2"); shift 2
modes=("${@:-icrc parse datapath}")
read -r -a modes <<< "${modes[*]}"
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
fail=0
# datapath: rxe's perftest is the client of roced's hosted server, whose QP the card runs.
datapath_cell() {  # TOOL
  local tool=$1 svc
  svc="services:
  - test: $tool
    listen_port: 18515
    listen_address: 192.0.2.254
    args: [\"-n\", \"200\", \"-s\", \"16384\", \"--timeout\", \"150\"]"
  boot "retry ib_$tool -d rxe0 -x \$(rxe_gid_idx) -n 200 -s 16384 -p 18515 192.0.2.254" 240
  roced_on_dp0 "$roced" offdatapath "    offload: datapath" "$svc"
  local log=$out/offdatapath.log
  finish && theirs=0 || theirs=1
  for _ in $(seq 50); do grep -q "roced: service $tool: \(done\|failed\)" "$log" && break; sleep 0.2; done
  kill -TERM "$rp" 2>/dev/null; wait "$rp" 2>/dev/null || true
  local row
  row=$(awk '$1 == "16384" && NF >= 5' "$out/vm.txt" | tail -1)
  if [[ $theirs == 0 && -n $row ]] && grep -q "roced: service $tool: done" "$log" \
      && grep -q "QPs on the FPGA datapath card" "$log" && grep -q "^IBV RX pkgs: [1-9]" "$log" \
      && grep -q "^IBV TX pkgs: [1-9]" "$log"; then
    echo "PASS ib_$tool (rxe client), roced offload: datapath (the server's QP on the card): $row;" \
      "card: $(grep -o "^IBV RX pkgs: [0-9]*" "$log"), $(grep -o "^IBV TX pkgs: [0-9]*" "$log")"
  else
    echo "FAIL ib_$tool (rxe client), roced offload: datapath: rxe=$theirs"
    sed 's/^/  roced: /' "$log" | grep -v "^  roced:  " | tail -25
    grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -12
    fail=1
  fi
}
for mode in "${modes[@]}"; do
  for tool in write_bw read_bw; do
    if [[ $mode == datapath ]]; then
      datapath_cell "$tool"
      continue
    fi
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
