#!/usr/bin/env bash
# Attached vs in-process with the client and roced on distinct CPUs, which two CPUs allow
# (docs/benchmarks.md, "Attached latency and the hybrid wait"): one roced, its poll loop on
# CPU 0, hosting perftest's write_bw and send_lat servers; the client on CPU 1 (taskset), as
#   - inproc: roce-perf's own engine and poll loop (--pmd memif --lcore 1), over a memif link
#     to roced;
#   - attached: a client of that roced (--attach), over its loopback, busy polling its CQ;
#   - attached-e: the same with -e, libroce's hybrid wait (a spin on the completion ring for an
#     adaptive budget, then the CQ's eventfd);
#   - attached-e-nospin: -e with the spin off (ROCE_WAIT_SPIN_US=0): the eventfd alone;
# each an 8-byte WRITE message rate (1024 in flight, one completion in 64) and an 8-byte SEND
# ping-pong (perftest's t_typical: half the round trip's p50). Then an idle client: two
# roce-attach-example clients of the same roced on CPU 1 bounce 8 bytes with 10 ms pauses
# (--gap), and the side that waits reports its CPU time (the issue's "< 20% when idle") and
# the round trip at that rate. RUNS rounds, alternating; medians and spreads, and the targets.
#   attach_latency_bench.sh ROCED ROCE_PERF ROCE_ATTACH_EXAMPLE WORKDIR [RUNS]
# RATE_ITERS, LAT_ITERS: the tests' -n (1000000, 5000); IDLE=0: no idle client.
set -euo pipefail
roced=$(realpath "$1") perf=$(realpath "$2") example=$(realpath "$3") work=$4 runs=${5:-5}
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=alat$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_ports.sh"
tcp=$(port_base 3)
rate_iters=${RATE_ITERS:-1000000} lat_iters=${LAT_ITERS:-5000}
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/../integration/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0d:11 192.0.2.97 0 "" "services:
  - test: write_bw
    port: p0
    listen_port: $tcp
    args: [\"-s\", \"8\", \"-t\", \"1024\", \"-Q\", \"64\", \"-n\", \"$rate_iters\", \"--timeout\", \"120\"]
  - test: send_lat
    port: p0
    listen_port: $((tcp + 1))
    args: [\"-s\", \"8\", \"-n\", \"$lat_iters\", \"--timeout\", \"120\"]"
grep -q "service send_lat: TCP $((tcp + 1))" "$work/a.log" || { cat "$work/a.log"; echo "FAIL: no hosted servers"; exit 1; }

pin=(taskset -c 1)
n=0
out=""
measure() {  # BACKEND TEST ITERS: the JSON in $out
  local backend=$1 test=$2 iters=$3 port=$tcp args=(-s 8 -t 1024 -Q 64) env=()
  [[ $test == send_lat ]] && port=$((tcp + 1)) args=(-s 8)
  n=$((n + 1))
  out="$work/$n-$backend-$test"
  case $backend in
    inproc)
      "${pin[@]}" "$perf" "$test" --pmd memif --iface "$work/memif.sock" --ip 192.0.2.98 \
        --mac 02:00:5e:00:0d:12 --lcore 1 -p "$port" "${args[@]}" -n "$iters" \
        --json "$out.json" 127.0.0.1 > "$out.log" 2>&1 ;;
    attached | attached-e | attached-e-nospin)
      [[ $backend != attached ]] && args+=(-e)
      [[ $backend == attached-e-nospin ]] && env=(ROCE_WAIT_SPIN_US=0)
      env "${env[@]}" "${pin[@]}" "$perf" "$test" --attach "$work/a.sock" -p "$port" \
        "${args[@]}" -n "$iters" --json "$out.json" 127.0.0.1 > "$out.log" 2>&1 ;;
  esac || { cat "$out.log"; echo "FAIL: $backend $test"; exit 1; }
  out="$out.json"
}
idle() {  # the waiting side's CPU and the round trip, 200 pings 10 ms apart: "cpu rtt"
  n=$((n + 1))
  local o="$work/$n-idle"
  "${pin[@]}" "$example" --socket "$work/a.sock" --listen $((tcp + 2)) --size 4096 \
    --pingpong 200 > "$o-server.log" 2>&1 &
  local s=$!
  "${pin[@]}" "$example" --socket "$work/a.sock" --connect 127.0.0.1:$((tcp + 2)) --size 4096 \
    --pingpong 200 --gap 10000 > "$o-client.log" 2>&1 || { cat "$o"-*.log; echo "FAIL: idle"; exit 1; }
  wait "$s" || { cat "$o"-*.log; echo "FAIL: idle server"; exit 1; }
  local cpu rtt
  cpu=$(sed -n 's/.*ping-pong server.*CPU \([0-9.]*\)%.*/\1/p' "$o-server.log")
  rtt=$(sed -n 's/.*round trip p50 \([0-9.]*\) us.*/\1/p' "$o-client.log")
  echo "$cpu $rtt"
}

results="$work/runs.txt"
: > "$results"
for r in $(seq "$runs"); do
  echo "run $r/$runs (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
  echo "load - $(cut -d' ' -f1 /proc/loadavg)" >> "$results"
  for b in inproc attached attached-e attached-e-nospin; do
    measure $b write_bw "$rate_iters" && echo "$b write_bw $out" >> "$results"
    measure $b send_lat "$lat_iters" && echo "$b send_lat $out" >> "$results"
  done
  [[ ${IDLE:-1} == 1 ]] && echo "idle - $(idle)" >> "$results"
done

/usr/bin/python3 - "$results" "$work/attach_latency_bench.json" <<'PY'
import json, statistics, sys
rows, idle_cpu, idle_rtt, load = {}, [], [], []
for line in open(sys.argv[1]):
    backend, test, *rest = line.split()
    if backend == "load":
        load.append(float(rest[0]))
        continue
    if backend == "idle":
        idle_cpu.append(float(rest[0]))
        idle_rtt.append(float(rest[1]))
        continue
    r = json.load(open(rest[0]))["results"][0]
    v = r["msg_rate_mpps"] if test == "write_bw" else r["t_typical_usec"]
    rows.setdefault((backend, test), []).append(v)
med = statistics.median
out = {"runs": {f"{b} {t}": v for (b, t), v in rows.items()}, "medians": {}, "targets": {},
       "idle_cpu_percent": idle_cpu, "idle_rtt_p50_us": idle_rtt, "load_average": load}
print(f"{'backend':<18} {'8 B WRITE [Mpps]':>16} {'spread':>15} {'8 B SEND p50 [us]':>18} {'spread':>13}")
backends = ("inproc", "attached", "attached-e", "attached-e-nospin")
for b in backends:
    w, l = rows[(b, "write_bw")], rows[(b, "send_lat")]
    out["medians"][b] = {"write_mpps": med(w), "send_lat_p50_us": med(l)}
    print(f"{b:<18} {med(w):>16.3f} {min(w):>7.3f}..{max(w):<7.3f} {med(l):>18.2f} "
          f"{min(l):>6.2f}..{max(l):<6.2f}")
base = out["medians"]["inproc"]
for b, limit in (("attached", 1.0), ("attached-e", 5.0), ("attached-e-nospin", 5.0)):
    m = out["medians"][b]
    ratio = m["write_mpps"] / base["write_mpps"]
    extra = m["send_lat_p50_us"] - base["send_lat_p50_us"]
    out["targets"][b] = {"write_rate_ratio": ratio, "p50_extra_us": extra,
                         "p50_target_met": extra <= limit}
    rate = f"WRITE rate {ratio:.2f} of in-process" + (
        f" (>= 0.95: {'met' if ratio >= 0.95 else 'not met'})" if b == "attached" else "")
    print(f"{b}: {rate}, p50 {extra:+.2f} us (<= +{limit:g} us: "
          f"{'met' if extra <= limit else 'not met'})")
out["targets"]["attached"]["write_rate_target_met"] = out["targets"]["attached"]["write_rate_ratio"] >= 0.95
if idle_cpu:
    print(f"idle client (wait_cq, pings 10 ms apart): CPU {med(idle_cpu):.1f}% "
          f"({min(idle_cpu):.1f}..{max(idle_cpu):.1f}; < 20%: {'met' if med(idle_cpu) < 20 else 'not met'}), "
          f"round trip p50 {med(idle_rtt):.1f} us ({min(idle_rtt):.1f}..{max(idle_rtt):.1f})")
print(f"load average at the start of each run: {' '.join(f'{x:.2f}' for x in load)}")
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(" JSON:", sys.argv[2])
PY
