#!/usr/bin/env bash
# Attached vs in-process, the same test on the same wire (docs/benchmarks.md, "Attached
# clients"): perftest's write_bw (8-byte WRITE message rate) and send_lat (8-byte SEND
# ping-pong, t_typical = p50) run by roce-perf
#   - attached: a client process of roced B (--attach; -e: sleeping on its CQ's eventfd, or
#     busy polling), roced B's poll loop on CPU 1;
#   - in-process: roce-perf's own engine and poll loop on CPU 1 (--pmd memif), in place of B;
# against the same passive side: a client of roced A (CPU 0) sleeping on events. The two
# appliances share a net_memif link. Runs alternate (A B A B), RUNS times; the report is the
# median and the spread of each, and the ratios of the medians.
#   attach_bench.sh ROCED ROCE_PERF WORKDIR [RUNS]
# Prints a table and the path of a JSON file.
set -euo pipefail
roced=$(realpath "$1") perf=$(realpath "$2") work=$3 runs=${4:-3}
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=abench$$
tcp=$((41000 + $$ % 10000))
rate_iters=${RATE_ITERS:-200000} lat_iters=${LAT_ITERS:-3000}
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/../integration/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0d:01 192.0.2.95 0

n=0
measure() {  # BACKEND(attached|attached-e|inproc) TEST SIZE ITERS -> JSON path
  local backend=$1 test=$2 size=$3 iters=$4
  n=$((n + 1))
  local port=$((tcp + n)) out="$work/$n-$backend-$test"
  "$perf" "$test" --attach "$work/a.sock" -e -p "$port" -s "$size" -n "$iters" \
    > "$out-server.log" 2>&1 &
  local s=$!
  case $backend in
    inproc)
      "$perf" "$test" --pmd memif --iface "$work/memif.sock" --ip 192.0.2.96 \
        --mac 02:00:5e:00:0d:02 --lcore 1 -p "$port" -s "$size" -n "$iters" --json "$out.json" \
        127.0.0.1 > "$out.log" 2>&1 ;;
    attached)
      "$perf" "$test" --attach "$work/b.sock" -p "$port" -s "$size" -n "$iters" \
        --json "$out.json" 127.0.0.1 > "$out.log" 2>&1 ;;
    attached-e)
      "$perf" "$test" --attach "$work/b.sock" -e -p "$port" -s "$size" -n "$iters" \
        --json "$out.json" 127.0.0.1 > "$out.log" 2>&1 ;;
  esac || { cat "$out-server.log" "$out.log"; echo "FAIL: $backend $test"; exit 1; }
  wait "$s" || { cat "$out-server.log"; echo "FAIL: server of $backend $test"; exit 1; }
  echo "$out.json"
}

results="$work/runs.txt"
: > "$results"
for r in $(seq "$runs"); do
  echo "run $r/$runs: attached" >&2
  appliance b client 02:00:5e:00:0d:02 192.0.2.96 1
  for b in attached attached-e; do
    echo "$b write_bw $(measure $b write_bw 8 "$rate_iters")" >> "$results"
    echo "$b send_lat $(measure $b send_lat 8 "$lat_iters")" >> "$results"
  done
  kill "$pid_b"; wait "$pid_b" 2>/dev/null || true
  echo "run $r/$runs: in-process" >&2
  echo "inproc write_bw $(measure inproc write_bw 8 "$rate_iters")" >> "$results"
  echo "inproc send_lat $(measure inproc send_lat 8 "$lat_iters")" >> "$results"
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
