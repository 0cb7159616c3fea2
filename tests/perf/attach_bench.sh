#!/usr/bin/env bash
# Attached vs in-process, the same test on the same wire (docs/benchmarks.md, "Attached
# clients"): perftest's write_bw (8-byte WRITE message rate, 1024 in flight, one completion in
# 64) and send_lat (8-byte SEND ping-pong, t_typical = p50) run by roce-perf
#   - attached: a client process of roced B (--attach), polling its CQ or (-e) sleeping on the
#     CQ's eventfd; roced B's poll loop on CPU 1;
#   - in-process: roce-perf's own engine and poll loop on CPU 1 (--pmd memif) in place of B;
# against the same far end: the perftest servers roced A hosts in its own poll loop (CPU 0).
# The two appliances share a net_memif link. The backends alternate, RUNS times; the report is
# the median and the spread of each, and the ratios of the medians.
#   attach_bench.sh ROCED ROCE_PERF WORKDIR [RUNS]
# Prints a table and the path of a JSON file.
set -euo pipefail
roced=$(realpath "$1") perf=$(realpath "$2") work=$3 runs=${4:-3}
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=abench$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_ports.sh"
tcp=$(port_base 2)
rate_iters=${RATE_ITERS:-1000000} lat_iters=${LAT_ITERS:-5000}
rate_flags=(-s 8 -t 1024 -Q 64)
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/../integration/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0d:01 192.0.2.95 0 "" "services:
  - test: write_bw
    port: p0
    listen_port: $tcp
    args: [\"-s\", \"8\", \"-t\", \"1024\", \"-Q\", \"64\", \"-n\", \"$rate_iters\", \"--timeout\", \"120\"]
  - test: send_lat
    port: p0
    listen_port: $((tcp + 1))
    args: [\"-s\", \"8\", \"-n\", \"$lat_iters\", \"--timeout\", \"120\"]"
grep -q "service send_lat: TCP $((tcp + 1))" "$work/a.log" || { cat "$work/a.log"; echo "FAIL: no hosted servers"; exit 1; }

n=0
out=""
measure() {  # BACKEND(attached|attached-e|inproc) TEST ITERS: the JSON in $out
  local backend=$1 test=$2 iters=$3 port=$tcp args=("${rate_flags[@]}")
  [[ $test == send_lat ]] && port=$((tcp + 1)) args=(-s 8)
  n=$((n + 1))
  out="$work/$n-$backend-$test"
  case $backend in
    inproc)
      "$perf" "$test" --pmd memif --iface "$work/memif.sock" --ip 192.0.2.96 \
        --mac 02:00:5e:00:0d:02 --lcore 1 -p "$port" "${args[@]}" -n "$iters" \
        --json "$out.json" 127.0.0.1 > "$out.log" 2>&1 ;;
    attached)
      "$perf" "$test" --attach "$work/b.sock" -p "$port" "${args[@]}" -n "$iters" \
        --json "$out.json" 127.0.0.1 > "$out.log" 2>&1 ;;
    attached-e)
      "$perf" "$test" --attach "$work/b.sock" -e -p "$port" "${args[@]}" -n "$iters" \
        --json "$out.json" 127.0.0.1 > "$out.log" 2>&1 ;;
  esac || { cat "$out.log"; echo "FAIL: $backend $test"; exit 1; }
  out="$out.json"
}

results="$work/runs.txt"
: > "$results"
for r in $(seq "$runs"); do
  echo "run $r/$runs: attached" >&2
  appliance b client 02:00:5e:00:0d:02 192.0.2.96 1
  for b in attached attached-e; do
    measure $b write_bw "$rate_iters" && echo "$b write_bw $out" >> "$results"
    measure $b send_lat "$lat_iters" && echo "$b send_lat $out" >> "$results"
  done
  kill "$pid_b"; wait "$pid_b" 2>/dev/null || true
  echo "run $r/$runs: in-process" >&2
  measure inproc write_bw "$rate_iters" && echo "inproc write_bw $out" >> "$results"
  measure inproc send_lat "$lat_iters" && echo "inproc send_lat $out" >> "$results"
done

/usr/bin/python3 - "$results" "$work/attach_bench.json" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    backend, test, path = line.split()
    j = json.load(open(path))
    r = j["results"][0]
    v = r["msg_rate_mpps"] if test == "write_bw" else r["t_typical_usec"]
    rows.setdefault((backend, test), []).append(v)
def med(k): return statistics.median(rows[k])
out = {"runs": {f"{b} {t}": v for (b, t), v in rows.items()}, "medians": {}, "targets": {}}
print(f"{'backend':<12} {'8 B WRITE rate [Mpps]':>22} {'spread':>16} {'8 B SEND p50 [us]':>18} {'spread':>16}")
for b in ("inproc", "attached", "attached-e"):
    w, l = rows[(b, "write_bw")], rows[(b, "send_lat")]
    out["medians"][b] = {"write_mpps": med((b, "write_bw")), "send_lat_p50_us": med((b, "send_lat"))}
    print(f"{b:<12} {med((b,'write_bw')):>22.3f} {min(w):>7.3f}..{max(w):<7.3f} "
          f"{med((b,'send_lat')):>18.2f} {min(l):>7.2f}..{max(l):<7.2f}")
base = out["medians"]["inproc"]
for b in ("attached", "attached-e"):
    m = out["medians"][b]
    ratio = m["write_mpps"] / base["write_mpps"]
    extra = m["send_lat_p50_us"] - base["send_lat_p50_us"]
    out["targets"][b] = {"write_rate_ratio": ratio, "write_rate_target_met": ratio >= 0.8,
                         "p50_extra_us": extra, "p50_target_met": extra <= 1.0}
    print(f"{b}: WRITE rate {ratio:.2f} of in-process (target >= 0.8: "
          f"{'met' if ratio >= 0.8 else 'not met'}), p50 {extra:+.2f} us (target <= +1 us: "
          f"{'met' if extra <= 1.0 else 'not met'})")
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(" JSON:", sys.argv[2])
PY
