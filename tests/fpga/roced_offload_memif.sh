#!/usr/bin/env bash
# roced with the FPGA offload's device model on its port (`offload:`), on a net_memif link (no
# hugepages, no root): A offloads ICRC (icrc), B header parsing and ICRC (parse) and corrupts 3%
# of what it sends (port fault injection, after its device: damage on the wire). Attached
# example clients exchange SEND, WRITE and READ of 64 KiB with every byte checked, and 200
# ping-pongs. Then, from roce-ctl counters (fpga_*: Coyote's network statistics names):
#  - both devices wrote every RoCE ICRC sent, none differing from the software's;
#  - A's device dropped corrupt frames for their ICRC (fpga_icrc_drop_cnt > 0) and A's engine
#    saw none of them (rx_verdict_bad_icrc 0): the device, not the software, filtered them;
#  - the traffic still completed (the transport recovered the dropped frames).
#   roced_offload_memif.sh ROCED ROCE_CTL EXAMPLE WORKDIR
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") ex=$(realpath "$3") work=$4
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=fpgaoff$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_ports.sh"
tcp=$(port_base 8)
prom_a=127.0.0.1:$((tcp + 6)) prom_b=127.0.0.1:$((tcp + 7))
pids=()
cleanup() {
  local rc=$?
  if [[ $rc != 0 && ${#pids[@]} != 0 ]]; then
    for e in "$prom_a" "$prom_b"; do echo "== counters $e"; "$ctl" -p "$e" counters || true; done
    tail -n 30 "$work"/*.log
  fi
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

appliance() {  # NAME ROLE MAC IP PROMETHEUS LCORE OFFLOAD EXTRA
  cat > "$work/$1.yaml" <<YAML
name: $1
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=$tag$1, "--log-level=*:error"]
  lcores: [$6]
ports:
  - name: p0
    device: net_memif0
    devargs: role=$2,id=0,socket-abstract=no,socket=$work/memif.sock
    mac: $3
    ipv4: $4/24
    offload: $7
$8
counters:
  prometheus: $5
  telemetry: false
attach:
  socket: $work/$1.sock
  mode: "0600"
YAML
  "$roced" --config "$work/$1.yaml" > "$work/$1.log" 2>&1 &
  pids+=($!)
}
up() {
  for _ in $(seq 100); do grep -q " up on lcore" "$work/$1.log" && [[ -S $work/$1.sock ]] && break; sleep 0.1; done
  grep -q "attach: $work/$1.sock" "$work/$1.log" || { cat "$work/$1.log"; echo "FAIL: roced $1"; exit 1; }
  grep -q "FPGA offload '$2' on a device model" "$work/$1.log" || { cat "$work/$1.log"; echo "FAIL: no offload on $1"; exit 1; }
}
appliance a server 02:00:5e:00:0b:01 192.0.2.71 "$prom_a" 0 icrc ""
up a icrc
appliance b client 02:00:5e:00:0b:02 192.0.2.72 "$prom_b" 1 "{mode: parse, clock_mhz: 250, bytes_per_cycle: 64}" \
  "    fault: {corrupt: 0.03, seed: 7}"
up b parse

"$ex" --socket "$work/a.sock" --listen "$tcp" --pingpong 200 > "$work/ex-a.log" 2>&1 &
sa=$!
"$ex" --socket "$work/b.sock" --connect "127.0.0.1:$tcp" --pingpong 200 > "$work/ex-b.log" 2>&1 \
  || { cat "$work"/ex-*.log; exit 1; }
wait "$sa" || { cat "$work"/ex-a.log; exit 1; }
grep -q "OK: received SEND" "$work/ex-a.log"
grep -q "OK: SEND of 65536 bytes, WRITE of 65536 bytes, READ of 65536 bytes" "$work/ex-b.log"
grep -q "OK: 200 ping-pongs of 8 bytes" "$work/ex-b.log"

counter() {  # ENDPOINT NAME -> value on port p0
  "$ctl" -p "$1" --all counters | awk -v n="$2" '$1 == "p0" && $2 == n { print $3 }'
}
sleep 0.3  # one publication period of the counters
fails=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fails=$((fails + 1)); fi; }
for side in a b; do
  e=prom_$side
  e=${!e}
  gen=$(counter "$e" fpga_icrc_gen_cnt) roce_tx=$(counter "$e" fpga_roce_tx_pkgs)
  differ=$(counter "$e" fpga_icrc_differ_cnt) ibv_rx=$(counter "$e" fpga_ibv_rx_pkgs)
  echo "$side: fpga_roce_tx_pkgs $roce_tx fpga_icrc_gen_cnt $gen fpga_icrc_differ_cnt $differ fpga_ibv_rx_pkgs $ibv_rx"
  check '[[ -n $gen && $gen -gt 100 && $gen == "$roce_tx" ]]' "$side: device did not write every ICRC ($gen of $roce_tx)"
  check '[[ $differ == 0 ]]' "$side: device ICRCs differ from the software's ($differ)"
  check '[[ -n $ibv_rx && $ibv_rx -gt 100 ]]' "$side: device passed too few frames ($ibv_rx)"
done
drops=$(counter "$prom_a" fpga_icrc_drop_cnt) sw_bad=$(counter "$prom_a" rx_verdict_bad_icrc)
echo "a: fpga_icrc_drop_cnt $drops rx_verdict_bad_icrc $sw_bad"
check '[[ -n $drops && $drops -gt 0 ]]' "A's device dropped no corrupt frame"
check '[[ $sw_bad == 0 ]]' "A's engine saw $sw_bad frames with a bad ICRC: the device let them through"

# roced prints the device counters in Coyote's nstats layout when it stops.
kill -INT "${pids[0]}"
wait "${pids[0]}" || true
pids=("${pids[@]:1}")
check 'grep -q " -- NET STATS p0" "$work/a.log"' "no NET STATS at A's stop"
check 'grep -q "^ROCE RX pkgs: [1-9]" "$work/a.log"' "no ROCE RX pkgs at A's stop"
sed -n '/ -- NET STATS/,$p' "$work/a.log"
[[ $fails == 0 ]] || exit 1
echo "roced_offload_memif: OK"
