#!/usr/bin/env bash
# roced with `offload: datapath` (docs/fpga.md): the card model's transport runs the RC QPs of
# roced's hosted perftest WRITE and READ servers, the host reaching it only through the card's
# ports (fpga/host/card_context.h). Two roced on a net_memif link (no hugepages, no root): A on
# the card, hosting write_bw, read_bw, write_lat, read_lat, send_bw and Coyote's READ benchmark;
# B plain, with roce-perf attached to it as the client of each. Checked:
#  - A ran the WRITE/READ servers' QPs on the card and send_bw on its engine (it says which);
#    Coyote's READ benchmark printed its row for each size;
#  - every table row is there; A's card took the clients' frames (fpga_ibv_rx_pkgs), answered
#    (fpga_roce_tx_pkgs) and ran the write_lat server's WRITEs (fpga_wq_in = fpga_cq_out > 0);
#  - A's engine had none of it: its RoCE receive counts grew by send_bw's frames only (and by
#    stragglers for card QPs already destroyed, which it drops as addressed to no QP);
#  - with 2% of A's frames dropped on the wire, write_bw, read_bw and write_lat still complete
#    and the card retransmits (fpga_retrans_cnt > 0); A's stop prints the card's NET STATS.
#   roced_datapath_memif.sh ROCED ROCE_CTL ROCE_PERF WORKDIR
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") perf=$(realpath "$3") work=$4
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=fpgadp$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_ports.sh"
tcp=$(port_base 16)
prom_a=127.0.0.1:$((tcp + 14)) prom_b=127.0.0.1:$((tcp + 15))
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/../integration/lib_appliance.sh"
trap 'rc=$?; [[ $rc != 0 ]] && "$ctl" -p "$prom_a" --all counters 2>/dev/null | grep -E "fpga|rx_"; stop_all $rc' EXIT

services="services:"
for t in write_bw read_bw write_lat read_lat send_bw; do
  n=$((${n:-0} + 1))
  services+=$'\n'"  - test: $t"$'\n'"    listen_port: $((tcp + n))"$'\n'"    args: [\"--timeout\", \"20\"]"
done
# Coyote's benchmark, READ: the server only answers, from the card.
services+=$'\n'"  - test: coyote"$'\n'"    listen_port: $((tcp + 6))"
services+=$'\n'"    args: [-o, '0', -x, '64', -X, '16384', -r, '5', --timeout, '20']"
port_yaml="    offload: datapath" appliance a server 02:00:5e:00:0d:01 192.0.2.81 0 "$prom_a" "$services"
grep -q "FPGA offload 'datapath' on a device model.*on the card" "$work/a.log" \
  || { cat "$work/a.log"; echo "FAIL: A did not report the datapath card"; exit 1; }
appliance b client 02:00:5e:00:0d:02 192.0.2.82 1 "$prom_b"

counter() {  # ENDPOINT NAME -> value on port p0
  "$ctl" -p "$1" --all counters | awk -v n="$2" '$1 == "p0" && $2 == n { print $3 }'
}
fails=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fails=$((fails + 1)); fi; }
run() {  # TEST PORT_INDEX ARGS...: roce-perf attached to B against A's service
  local t=$1 i=$2; shift 2
  "$perf" "$t" --attach "$work/b.sock" -p $((tcp + i)) --timeout 30 "$@" 127.0.0.1 \
    > "$work/$t.log" 2>&1 || { cat "$work/$t.log"; echo "FAIL: $t client"; exit 1; }
  local row
  row=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5' "$work/$t.log" | tail -1)
  [[ -n $row ]] || { cat "$work/$t.log"; echo "FAIL: $t: no result row"; exit 1; }
  echo "$t: $row"
}
sleep 0.3
rx0=$(counter "$prom_a" rx_frames) unk0=$(counter "$prom_a" rx_drop_unknown_qp)
run write_bw 1 -s 65536 -n 400
run read_bw 2 -s 65536 -n 400
run write_lat 3
run read_lat 4
"$perf" coyote --attach "$work/b.sock" -p $((tcp + 6)) -o 0 -x 64 -X 16384 -r 5 --timeout 20 \
  -t 127.0.0.1 > "$work/coyote.log" 2>&1 || { cat "$work/coyote.log"; echo "FAIL: coyote client"; exit 1; }
rows=$(grep -c "^Size: .*Average throughput: .*Average latency:" "$work/coyote.log" || true)
echo "coyote READ: $rows rows; $(grep "^Size: *16384" "$work/coyote.log")"
[[ $rows == 9 ]] || { cat "$work/coyote.log"; echo "FAIL: coyote READ printed $rows of 9 rows"; exit 1; }
sleep 0.3
rx_card=$(counter "$prom_a" rx_frames) unk=$(counter "$prom_a" rx_drop_unknown_qp)
run send_bw 5 -s 4096 -n 500
sleep 0.3
rx_send=$(counter "$prom_a" rx_frames)
for t in write_bw read_bw write_lat read_lat; do
  check 'grep -q "roced: service $t: done" "$work/a.log"' "A's $t service did not finish"
done
check '[[ $(grep -c "QPs on the FPGA datapath card" "$work/a.log") == 5 ]]' \
  "A did not put the 5 WRITE/READ servers' QPs on the card (perftest's four, Coyote's READ)"
check 'grep -q "roced: service send_bw: done" "$work/a.log"' "A's send_bw (engine) did not finish"
ibv_rx=$(counter "$prom_a" fpga_ibv_rx_pkgs) roce_tx=$(counter "$prom_a" fpga_roce_tx_pkgs)
wq=$(counter "$prom_a" fpga_wq_in) cq=$(counter "$prom_a" fpga_cq_out)
echo "A: fpga_ibv_rx_pkgs $ibv_rx fpga_roce_tx_pkgs $roce_tx fpga_wq_in $wq fpga_cq_out $cq;" \
  "engine rx_frames $rx0 -> $rx_card (card tests; to no QP: $((unk - unk0))) -> $rx_send (send_bw)"
check '[[ -n $ibv_rx && $ibv_rx -gt 5000 ]]' "A's card took too few frames ($ibv_rx)"
check '[[ -n $roce_tx && $roce_tx -gt 1000 ]]' "A's card sent too few frames ($roce_tx)"
check '[[ -n $wq && $wq -ge 200 && $wq == "$cq" ]]' "A's card work requests $wq, completions $cq"
# (A frame that arrives after its card QP is gone, e.g. a retransmission at a test's end, is the
# engine's to drop as addressed to no QP.)
check '[[ -n $rx0 && $((rx_card - rx0)) == $((unk - unk0)) ]]' \
  "A's engine processed $((rx_card - rx0 - unk + unk0)) RoCE frames of the card's tests"
check '[[ $rx_send -gt $((rx_card + 500)) ]]' "A's engine did not run send_bw ($rx_card -> $rx_send)"
[[ $fails == 0 ]] || exit 1

# Loss: a second pair, A's port dropping 2% of what it sends (the card's frames included); the
# card recovers.
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
memif_sock=memif-lossy.sock tag=${tag}l
rm -f "$work/a.sock" "$work/b.sock"
port_yaml="    offload: datapath"$'\n'"    fault: {drop: 0.02, seed: 9}" \
  appliance a server 02:00:5e:00:0d:01 192.0.2.81 0 "$prom_a" "$services"
appliance b client 02:00:5e:00:0d:02 192.0.2.82 1 "$prom_b"
run write_bw 1 -s 65536 -n 400
run read_bw 2 -s 65536 -n 400
run write_lat 3  # the card as the requester: its lost WRITEs are its to send again
sleep 0.3
retrans=$(counter "$prom_a" fpga_retrans_cnt) drops=$(counter "$prom_a" fault_dropped)
echo "A with 2% loss: fpga_retrans_cnt $retrans, frames dropped on the wire ${drops:-?}"
check '[[ -n $retrans && $retrans -gt 0 ]]' "A's card retransmitted nothing under loss"
kill -INT "${pids[0]}"
wait "${pids[0]}" || true
pids=("${pids[@]:1}")
check 'grep -q " -- NET STATS p0" "$work/a.log"' "no NET STATS at A's stop"
check 'grep -q "^Retrans cnt: [1-9]" "$work/a.log"' "no retransmissions in A's NET STATS"
sed -n '/ -- NET STATS/,$p' "$work/a.log"
[[ $fails == 0 ]] || exit 1
echo "roced_datapath_memif: OK"
