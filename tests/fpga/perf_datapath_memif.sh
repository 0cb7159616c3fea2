#!/usr/bin/env bash
# roce-perf in-process with `--offload datapath` (docs/fpga.md): two roce-perf on a net_memif
# link (no root), one of them on the card model. WRITE and READ, bandwidth and latency, with the
# card as the responder (server) and as the requester (client): every table row is there, the
# card's side says its QPs were on the card and prints its counts (work requests on the card
# for the requester's tests, none for the responder's, none differing ICRCs). send_bw on a
# datapath port stays on the engine (the card does no SEND).
#   perf_datapath_memif.sh ROCE_PERF WORKDIR
set -euo pipefail
perf=$(realpath "$1") work=$2
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_ports.sh"
tcp=$(port_base 32)
n=0
pair() {  # SIDE(server|client: which one is on the card) TEST ARGS...
  local side=$1 t=$2; shift 2
  n=$((n + 1))
  local s_off=() c_off=() sock=$work/m$n.sock
  [[ $side == server ]] && s_off=(--offload datapath) || c_off=(--offload datapath)
  "$perf" "$t" --pmd memif-server --iface "$sock" --ip 192.0.2.93 --mac 02:00:5e:00:0a:03 \
    -p $((tcp + n)) --timeout 15 "${s_off[@]}" "$@" > "$work/$n-s.log" 2>&1 &
  local sp=$!
  for _ in $(seq 150); do grep -q "Waiting for client" "$work/$n-s.log" && break; sleep 0.1; done
  "$perf" "$t" --pmd memif --iface "$sock" --ip 192.0.2.94 --mac 02:00:5e:00:0a:04 \
    -p $((tcp + n)) --timeout 15 "${c_off[@]}" "$@" 127.0.0.1 > "$work/$n-c.log" 2>&1 \
    || { cat "$work/$n-s.log" "$work/$n-c.log"; echo "FAIL: $t ($side on the card): client"; exit 1; }
  wait "$sp" || { cat "$work/$n-s.log"; echo "FAIL: $t ($side on the card): server"; exit 1; }
  local card=$work/$n-${side:0:1}.log row
  row=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5' "$work/$n-c.log" | tail -1)
  [[ -n $row ]] || { cat "$work/$n-c.log"; echo "FAIL: $t: no result row"; exit 1; }
  stats=$(grep "roce-perf: offload datapath:" "$card") \
    || { cat "$card"; echo "FAIL: $t: no card counts"; exit 1; }
  echo "$t, $side on the card: $row"
  echo "  $stats"
  [[ $stats == *"(0 differing)"* ]] || { echo "FAIL: $t: ICRCs differ"; exit 1; }
  if [[ $t == send_bw ]]; then
    ! grep -q "QPs on the FPGA datapath card" "$card" || { echo "FAIL: send_bw ran on the card"; exit 1; }
    return
  fi
  grep -q "QPs on the FPGA datapath card" "$card" || { echo "FAIL: $t: not on the card"; exit 1; }
  wrs=$(sed -n 's/.*; \([0-9]*\) work requests on the card.*/\1/p' <<< "$stats")
  if [[ $side == client || $t == write_lat ]]; then
    [[ $wrs -gt 0 ]] || { echo "FAIL: $t: the requester posted nothing on the card"; exit 1; }
  else
    [[ $wrs == 0 ]] || { echo "FAIL: $t: the responder posted $wrs work requests"; exit 1; }
  fi
}
for side in server client; do
  pair "$side" write_bw -s 65536 -n 500
  pair "$side" read_bw -s 65536 -n 500
  pair "$side" write_lat -n 500
  pair "$side" read_lat -n 500
done
pair server send_bw -s 4096 -n 500
echo "perf_datapath_memif: OK"
