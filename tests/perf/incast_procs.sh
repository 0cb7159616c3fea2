#!/usr/bin/env bash
# Incast between real processes (docs/congestion.md): N senders, each an appliance process of
# its own (roce-perf write_bw, in-process, on a net_memif link), to one receiving appliance
# (roced, N QPs held by N attached roce-perf write_bw servers), through roce-switch, whose
# output to the receiver is the bottleneck (--rate-mbps). Prints each sender's result, the
# switch's counters and the receiver's per-QP rates; the figures depend on the host's
# scheduling (the switch's poll loop reads its rings when it gets a CPU).
#   incast_procs.sh BUILD_DIR OUT_DIR [SENDERS [CC [RATE_MBPS [ITERS]]]]
set -euo pipefail
build=$(realpath "$1") out=$2 n=${3:-4} cc=${4:-dcqcn} rate=${5:-200} iters=${6:-200}
roced=$build/bin/roced perf=$build/bin/roce-perf sw=$build/bin/roce-switch
mkdir -p "$out"
out=$(realpath "$out")
work=$(mktemp -d)
tag=incp$$
# shellcheck source=tests/integration/lib_ports.sh
. "$(dirname "$(realpath "$0")")/../integration/lib_ports.sh"
tcp=$(port_base $((n + 2)))
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n ${KEEP:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
socks=(--port "$work/rx.sock")
for i in $(seq 1 "$n"); do socks+=(--port "$work/s$i.sock"); done
"$sw" "${socks[@]}" --rate-mbps "$rate" --queue-kb 512 --kmin-kb 10 --kmax-kb 50 \
  --json "$out/switch.json" > "$work/switch.log" 2>&1 &
swpid=$!
pids+=("$swpid")
sleep 1
# The running algorithm's maximum rate only (roced warns of a mapping no algorithm uses).
case $cc in
  dcqcn) ccmax=", dcqcn: {rpg_max_rate_mbps: $rate}" ;;
  delay) ccmax=", delay: {max_rate_mbps: $rate}" ;;
  *) ccmax="" ;;
esac
cat > "$work/rx.yaml" <<YAML
name: rx
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=${tag}rx, "--log-level=*:error"]
  lcores: [0]
ports:
  - name: p0
    device: net_memif0
    devargs: role=client,id=0,socket-abstract=no,socket=$work/rx.sock
    mac: 02:00:00:00:34:01
    ipv4: 192.0.2.1/24
    congestion: {algorithm: $cc$ccmax}
counters:
  telemetry: false
  prometheus: 127.0.0.1:$((tcp + n + 1))
attach:
  socket: $work/rx.att
  mode: "0600"
YAML
"$roced" --config "$work/rx.yaml" > "$work/rx.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do [[ -S $work/rx.att ]] && grep -q " up on lcore" "$work/rx.log" && break; sleep 0.1; done
ccargs=()
[[ $cc != none ]] && ccargs=(--cc "$cc" --cc-max-rate-mbps "$rate")
spids=()
for i in $(seq 1 "$n"); do
  "$perf" write_bw --attach "$work/rx.att" -p $((tcp + i)) -s 65536 -n "$iters" --timeout 120 \
    > "$work/server$i.log" 2>&1 &
  spids+=($!)
done
sleep 1
cpids=()
for i in $(seq 1 "$n"); do
  "$perf" write_bw --pmd memif --iface "$work/s$i.sock" --ip 192.0.2.$((10 + i)) \
    --mac 02:00:00:00:34:$((10 + i)) -p $((tcp + i)) -s 65536 -n "$iters" --timeout 120 \
    "${ccargs[@]}" --json "$out/sender$i.json" 127.0.0.1 > "$work/sender$i.log" 2>&1 &
  cpids+=($!)
done
rc=0
for p in "${cpids[@]}" "${spids[@]}"; do wait "$p" || rc=1; done
"$build/bin/roce-ctl" -p 127.0.0.1:$((tcp + n + 1)) counters > "$out/rx-counters.txt" 2>&1 || true
kill -TERM "$swpid"; wait "$swpid" || true
for i in $(seq 1 "$n"); do
  echo "sender $i: $(awk '$1 == 65536' "$work/sender$i.log" | tail -1)"
done
grep -E "cnp|ecn" "$out/rx-counters.txt" || true
[[ $rc == 0 ]] || { tail -n 5 "$work"/*.log; echo "FAIL: a sender or server failed"; exit 1; }
/usr/bin/python3 - "$out/switch.json" "$n" "$rate" "$out" <<'PY'
import json, sys, glob
d = json.load(open(sys.argv[1]))
o = d["outputs"][0]
bw, secs, retx, tmo = [], [], 0, 0
for f in sorted(glob.glob(sys.argv[4] + "/sender*.json")):
    j = json.load(open(f))
    r = j["results"][0]
    bw.append(r["gbit_per_sec"] * 1000)
    secs.append(r["seconds"])
    retx += j["retransmitted"]
    tmo += j["retransmit_timeouts"]
s = sum(bw)
jain = s * s / (len(bw) * sum(b * b for b in bw)) if bw and s else 0
total = sum(r * t for r, t in zip(bw, secs)) / max(secs)
print(f"incast {len(bw)}:1 between processes: {total:.1f} Mb/s in all ({total / float(sys.argv[3]):.3f} "
      f"of the {sys.argv[3]} Mb/s output), Jain {jain:.3f}, senders "
      f"{', '.join(f'{b:.1f}' for b in bw)} Mb/s; output: {o['frames']} frames, {o['marked']} "
      f"marked, {o['dropped']} dropped, depth p50 {o['p50_depth'] // 1024} p99 "
      f"{o['p99_depth'] // 1024} max {o['max_depth'] // 1024} KiB; senders retransmitted {retx} "
      f"packets, {tmo} retransmit timeouts")
PY
