#!/usr/bin/env bash
# roce-switch between two roce-perf processes (write_bw), each on a net_memif link to the
# switch: ARP is flooded and learnt, the RoCE traffic crosses the switch's output queues, and
# the switch's counters (JSON at exit) show the frames. With a slow output (--rate-mbps 200)
# and a short queue, the queue marks and the receiver answers with CNPs.
# With ARGS (default --cc dcqcn --cc-max-rate-mbps 200, to both roce-perf processes) and
# MAX_DROPS, the run must drop at most that many frames at the switch.
#   switch_pair.sh ROCE_SWITCH ROCE_PERF [MAX_DROPS [ARGS...]]
set -euo pipefail
sw=$(realpath "$1") perf=$(realpath "$2") max_drops=${3:--1}
shift 2; [[ $# -gt 0 ]] && shift
# The senders must be ECN-capable for the switch to mark them, and they are only with an
# algorithm that reacts (docs/congestion.md): DCQCN at the output's rate unless ARGS say.
[[ $# -gt 0 ]] || set -- --cc dcqcn --cc-max-rate-mbps 200
# shellcheck source=tests/integration/lib_ports.sh
. "$(dirname "$0")/lib_ports.sh"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=$(port_base 1)
"$sw" --port "$work/a.sock" --port "$work/b.sock" --rate-mbps 200 --queue-kb 256 \
  --json "$work/switch.json" > "$work/switch.txt" 2>&1 &
swpid=$!
pids+=("$swpid")
sleep 1
"$perf" write_bw --pmd memif --iface "$work/a.sock" --ip 192.0.2.1 --mac 02:00:00:00:32:01 \
  -p "$port" -s 65536 -n 100 --timeout 60 --json "$work/server.json" "$@" > "$work/server.txt" 2>&1 &
spid=$!
pids+=("$spid")
sleep 1
rc=0
"$perf" write_bw --pmd memif --iface "$work/b.sock" --ip 192.0.2.2 --mac 02:00:00:00:32:02 \
  -p "$port" -s 65536 -n 100 --timeout 60 --json "$work/client.json" "$@" 127.0.0.1 > "$work/client.txt" 2>&1 || rc=$?
wait "$spid" || rc=$?
kill -TERM "$swpid"
wait "$swpid" || true
sed 's/^/switch: /' "$work/switch.txt"
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ -n ${ROCE_SWITCH_KEEP:-} ]] && cp "$work"/*.json "$ROCE_SWITCH_KEEP"/
[[ $rc == 0 ]] || { echo "FAIL: roce-perf exited with $rc"; exit 1; }
[[ -s $work/switch.json ]] || { echo "FAIL: no switch counters"; exit 1; }
/usr/bin/python3 - "$work/switch.json" "$max_drops" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
max_drops = int(sys.argv[2])
frames = sum(o["frames"] for o in d["outputs"])
marked = sum(o["marked"] for o in d["outputs"])
print(f"switch: {frames} frames forwarded, {d['flooded']} flooded, {marked} marked, "
      f"{sum(o['dropped'] for o in d['outputs'])} dropped, max depth "
      f"{max(o['max_depth'] for o in d['outputs'])} B")
# 100 WRITEs of 64 KiB at path MTU 1024: at least 6,400 data frames one way
if frames < 6400 or d["flooded"] < 1:
    print("FAIL: the switch did not carry the traffic")
    sys.exit(1)
if marked == 0:
    print("FAIL: a 200 Mb/s output under a 64 KiB WRITE stream never marked")
    sys.exit(1)
drops = sum(o["dropped"] for o in d["outputs"])
if max_drops >= 0 and drops > max_drops:
    print(f"FAIL: {drops} frames dropped, at most {max_drops} expected")
    sys.exit(1)
PY
echo "PASS"
