#!/bin/sh
# Instructions per packet at many QPs against one QP (issue 33: no cliff at 10,000 QPs), counted
# by callgrind through engine_instructions.sh: roce-engine-instr sends 4 KiB WRITEs (path MTU
# 1024, depth 2 per QP, a buffer pair per QP, as roce-perf's many-QP rows) once over 1 QP and
# once over QPS QPs, with the clock moving --wire-ns per frame so that the timers run as on a
# link. Prints both tables and the ratios; fails when a side's cost per packet at QPS QPs is
# more than MAX_RATIO times its cost at 1 QP (before the scheduler stopped passing over every
# waiting QP in each run(), the requester's was 7.4x at 10,000 QPs).
#
# Usage: engine_qps_instructions.sh ROCE_ENGINE_INSTR WORKDIR [QPS [MAX_RATIO]]
# Exit 77 without valgrind.
set -eu
bin=$1 dir=$2 qps=${3:-10000} max=${4:-1.10}
here=$(dirname "$0")
args="--size 4096 --mtu 1024 --depth 2 --wire-ns 100"
msgs=$((qps * 4)) warm=$((qps * 2))
[ "$msgs" -ge 40000 ] || msgs=40000
[ "$warm" -ge 20000 ] || warm=20000
mkdir -p "$dir"
rc=0
"$here/engine_instructions.sh" "$bin" "$dir/1" -- --qps 1 $args --messages "$msgs" \
  --warmup "$warm" >"$dir/one.txt" || rc=$?
[ "$rc" -eq 77 ] && { cat "$dir/one.txt"; exit 77; }
[ "$rc" -eq 0 ] || { cat "$dir/one.txt"; exit 1; }
"$here/engine_instructions.sh" "$bin" "$dir/n" -- --qps "$qps" $args --messages "$msgs" \
  --warmup "$warm" >"$dir/many.txt" || { cat "$dir/many.txt"; exit 1; }
echo "== 1 QP"; grep -v '^JSON' "$dir/one.txt"
echo "== $qps QPs"; grep -v '^JSON' "$dir/many.txt"
exec /usr/bin/python3 - "$dir/1/instructions.json" "$dir/n/instructions.json" "$qps" "$max" <<'PY'
import json, sys
one = json.load(open(sys.argv[1]))["per_packet"]
many = json.load(open(sys.argv[2]))["per_packet"]
qps, limit = sys.argv[3], float(sys.argv[4])
bad = []
print(f"instructions per packet, {qps} QPs against 1 QP (limit {limit:.2f}x):")
for k in ("requester", "responder", "completer"):
    r = many[k] / one[k]
    print(f"  {k:<10} {one[k]:>8.1f} -> {many[k]:>8.1f}  {r:.3f}x")
    if r > limit:
        bad.append(f"{k} {r:.3f}x")
print("JSON: " + json.dumps({"qps": int(qps), "one": one, "many": many}))
if bad:
    sys.exit("FAIL: per-packet cost grows with the QP count: " + "; ".join(bad))
PY
