#!/usr/bin/env bash
# Coyote's RDMA benchmark (the seed's example 8: WRITE and READ, throughput and latency, sizes
# doubling from min to max, repetitions) run with roce-perf against roced, once on the software
# path and once with the FPGA offload's device model on roced's port, next to what the model
# predicts for a 100G card (fpga-predict; for datapath, the prediction of its parse stages: the
# card transport's timing is not modelled). roced runs in one network namespace on a veth pair
# (net_af_packet, MTU 9000, path MTU 4096), roce-perf in the other; the services are roced's
# hosted perftest servers. Each roce-perf run starts its own EAL and port: about 10 s per size
# and test here, so the whole range takes a while (label perf). Exits 77 (skipped) without root or network namespaces.
#   coyote_bench.sh ROCED ROCE_PERF FPGA_PREDICT [MODE [MIN MAX [REPS]]]
#   (defaults: icrc, 64 1048576, 100)
set -euo pipefail
roced=$(realpath "$1") perf=$(realpath "$2") predict=$(realpath "$3")
mode=${4:-icrc} min=${5:-64} max=${6:-1048576} reps=${7:-100}
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then echo "skipped: needs root"; exit 77; fi
a=fpga-bench-a-$$ b=fpga-bench-b-$$
work=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
  ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/integration/ns_pair.sh
. "$(dirname "$0")/../integration/ns_pair.sh"
ns_pair_up "$a" "$b" 9000

start_roced() {  # OFFLOAD
  cat > "$work/roced.yaml" <<YAML
name: fpga-bench
eal:
  args: [--no-huge, --no-shconf, -m, "512", --no-pci, --file-prefix=fpgabench$$, "--log-level=*:error"]
  lcores: [0]
ports:
  - name: p0
    device: net_af_packet0
    devargs: iface=veth-a,qpairs=1
    mac: 02:00:00:00:02:21
    ipv4: 192.0.2.131/24
    mtu: 9000
    mbufs: 4096
    offload: $1
counters:
  telemetry: false
control:
  listen: 192.0.2.11:18699
services:
  - {test: write_bw, listen_port: 18635, args: ["-s", "$max", "--timeout", "30"]}
  - {test: read_bw, listen_port: 18636, args: ["-s", "$max", "--timeout", "30"]}
YAML
  # A latency server per size: a ping-pong's two sides use one size and one iteration count
  # (perftest exchanges neither: a server expecting more iterations than its client sends waits
  # out its timeout, and roced's next service with it).
  local s i=0
  for ((s = min; s <= max; s *= 2, i++)); do
    echo "  - {test: write_lat, listen_port: $((18700 + 2 * i)), args: [\"-s\", \"$s\", \"-n\", \"$reps\", \"--timeout\", \"30\"]}"
    echo "  - {test: read_lat, listen_port: $((18701 + 2 * i)), args: [\"-s\", \"$s\", \"-n\", \"$reps\", \"--timeout\", \"30\"]}"
  done >> "$work/roced.yaml"
  last=$((18701 + 2 * (i - 1)))
  ip netns exec "$a" "$roced" --config "$work/roced.yaml" > "$work/roced-$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -qs "service read_lat: TCP $last" "$work/roced-$1.log" && break; sleep 0.2; done
  grep -q "service read_lat: TCP $last" "$work/roced-$1.log" || { cat "$work/roced-$1.log"; exit 1; }
}
stop_roced() {
  kill -INT "$pid"; wait "$pid" || true; pid=
}
client() {  # PORT TEST SIZE JSON
  # Throughput: ten times the repetitions (Coyote's runs batches of operations per repetition).
  # Throughput: ten times the repetitions, at most 64 MiB a run (a READ of 1 GiB over
  # af_packet would outlast any timeout).
  local n=$reps t=30
  if [[ $2 == *_bw ]]; then
    n=$((reps * 10))
    ((n * $3 > 67108864)) && n=$((67108864 / $3))
    ((n < 10)) && n=10
  fi
  ip netns exec "$b" "$perf" "$2" -s "$3" -n "$n" -p "$1" --iface veth-b --ip 192.0.2.132 \
    --mac 02:00:00:00:02:22 --netdev-mtu 9000 --timeout "$t" --json "$4" 192.0.2.11 \
    > "$4.out" 2>&1 || { echo "FAIL: $2 -s $3"; tail -3 "$4.out"; return 1; }
}
field() {  # JSON KEY
  /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print(r[-1][sys.argv[2]] if r else "nan")' "$1" "$2"
}
run_all() {  # TAG
  local s i=0
  for ((s = min; s <= max; s *= 2, i++)); do
    client 18635 write_bw "$s" "$work/$1-write_bw-$s.json"
    client 18636 read_bw "$s" "$work/$1-read_bw-$s.json"
    client $((18700 + 2 * i)) write_lat "$s" "$work/$1-write_lat-$s.json"
    client $((18701 + 2 * i)) read_lat "$s" "$work/$1-read_lat-$s.json"
  done
}
start_roced none
run_all sw
stop_roced
start_roced "$mode"
run_all hw
stop_roced
sed -n '/ -- NET STATS/,$p' "$work/roced-$mode.log"

"$predict" --op write --mode "${mode/datapath/parse}" -x "$min" -X "$max" > "$work/pred-write.txt"
"$predict" --op read --mode "${mode/datapath/parse}" -x "$min" -X "$max" > "$work/pred-read.txt"
pred() {  # OP SIZE COLUMN(4: MB/s, 5: latency)
  awk -v s="$2" -v c="$3" '$1 !~ /^#/ && $2 == s { print $c }' "$work/pred-$1.txt"
}
echo
echo "Coyote's RDMA benchmark: $reps repetitions, sizes $min..$max doubling, path MTU 4096"
echo "  software: roced on net_af_packet; offload: the same with 'offload: $mode' (device model);"
echo "  100G card: the device model's prediction (250 MHz x 64 B, 100 Gb/s)"
printf "%-5s %9s | %12s %12s %12s | %10s %10s %10s\n" op size "sw MB/s" "offload MB/s" "100G MB/s" \
  "sw us" "offload us" "100G us"
for op in write read; do
  for ((s = min; s <= max; s *= 2)); do
    printf "%-5s %9s | %12.2f %12.2f %12.2f | %10.2f %10.2f %10.3f\n" "$op" "$s" \
      "$(field "$work/sw-${op}_bw-$s.json" bw_avg)" "$(field "$work/hw-${op}_bw-$s.json" bw_avg)" \
      "$(pred "$op" "$s" 4)" \
      "$(field "$work/sw-${op}_lat-$s.json" t_avg_usec)" "$(field "$work/hw-${op}_lat-$s.json" t_avg_usec)" \
      "$(pred "$op" "$s" 5)"
  done
done
grep -q "^ICRC gen cnt: [1-9]" "$work/roced-$mode.log" || { echo "FAIL: the device wrote no ICRC"; exit 1; }
grep -q "^ICRC differ cnt: 0" "$work/roced-$mode.log" || { echo "FAIL: device ICRCs differ"; exit 1; }
