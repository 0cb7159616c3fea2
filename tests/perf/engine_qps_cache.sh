#!/bin/sh
# Instructions and simulated cache misses per packet at 1, 1,000 and 10,000 QPs (issue 33: the
# many-QP rows), from callgrind's cache simulation: exact and the same on every host, unlike a
# time or a hardware counter (which this VM does not expose). roce-engine-instr runs
# roce-perf's many-QP workload in memory (4 KiB WRITEs, path MTU 1024, depth 2 per QP, a source
# and a destination buffer per QP, the clock moving --wire-ns per frame) under
# valgrind --tool=callgrind --cache-sim=yes, collecting only its measured loop, and each side's
# share is divided by the request packets:
#   requester   A's run() (scheduler, req_fast/req_packet, the payload copy, the TX ICRC)
#   responder   B's receive() of the requests and B's run() (the coalesced ACKs)
#   completer   A's receive() of the ACKs
#   harness     post_send, poll_cq and the frames' hand-over (the application's and the port's)
#   payload     of all of the above, the payload copies and the ICRC kernels (memcpy, ISA-L,
#               crc32_fold): the bytes of the packets, which every QP count moves alike
#   state       everything else: what grows with the QP count is the QPs' state
# D1: the first-level data cache (this VM's: 48 KiB, 12 ways); LL: the last level callgrind
# simulates (default 32 MiB, 16 ways: the L3 of the VM's CCD). Both engines run on one thread
# here, so they share the simulated caches, where on a link each appliance has its own core.
# A software prefetch is not simulated: it costs its instructions and hides no miss here.
#
# Usage: engine_qps_cache.sh ROCE_ENGINE_INSTR WORKDIR [QPS...]     (default: 1 1000 10000)
#   env LL=size,assoc,line D1=size,assoc,line to simulate other caches (LL=1048576,8,64: the L2)
# Prints a table per QP count and a JSON line; exit 77 without valgrind.
set -eu
bin=$1 dir=$2
shift 2
[ $# -gt 0 ] || set -- 1 1000 10000
ll=${LL:-33554432,16,64} d1=${D1:-49152,12,64}
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null || {
  echo "SKIP: valgrind (callgrind, callgrind_annotate) is not installed"; exit 77; }
mkdir -p "$dir"
for qps in "$@"; do
  msgs=$((qps * 4)) warm=$((qps * 2))
  [ "$msgs" -ge 40000 ] || msgs=40000
  [ "$warm" -ge 20000 ] || warm=20000
  out=$dir/callgrind.$qps.out
  valgrind --tool=callgrind --cache-sim=yes --D1="$d1" --LL="$ll" --collect-atstart=no \
    --toggle-collect=instr_measure --callgrind-out-file="$out" "$bin" --qps "$qps" --size 4096 \
    --mtu 1024 --depth 2 --wire-ns 100 --messages "$msgs" --warmup "$warm" \
    >"$dir/driver.$qps.json" 2>"$dir/valgrind.$qps.log" ||
    { cat "$dir/valgrind.$qps.log"; echo "FAIL: the driver exited with an error"; exit 1; }
  ev=Ir,D1mr,D1mw,DLmr,DLmw
  callgrind_annotate --auto=no --inclusive=yes --show=$ev --threshold=100 "$out" >"$dir/incl.$qps.txt"
  callgrind_annotate --auto=no --show=$ev --threshold=100 "$out" >"$dir/self.$qps.txt"
done
exec /usr/bin/python3 - "$dir" "$ll" "$d1" "$@" <<'PY'
import json, re, sys
d, ll, d1, qpss = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
num = r"([\d,]+|\.)(?:\s+\([^)]*\))?"
line_re = re.compile(r"^\s*" + r"\s+".join([num] * 5) + r"\s+(\S.*)$")

def rows(path):
    """(function text, [Ir, D1mr, D1mw, DLmr, DLmw]) for each line of an annotate listing."""
    for line in open(path):
        m = line_re.match(line)
        if m:
            yield m.group(6), [0 if v == "." else int(v.replace(",", "")) for v in m.groups()[:5]]

def incl(path, fn):
    best = [0] * 5
    for name, v in rows(path):
        if re.search(r"[:\s]" + fn + r"\b", name) and v[0] > best[0]:
            best = v
    return best

payload_re = re.compile(r"memcpy|memmove|libisal|crc32_fold|icrc_fn|crc32_zlib")
result = {}
for qps in qpss:
    counts = json.load(open(f"{d}/driver.{qps}.json"))
    pkts = counts["requests_sent"]
    if pkts == 0:
        sys.exit(f"FAIL: {qps} QPs: the measured loop moved no packets")
    f = lambda fn: incl(f"{d}/incl.{qps}.txt", fn)
    side = {
        "requester": f("instr_requester_run"),
        "responder": [a + b for a, b in zip(f("instr_responder_receive"), f("instr_responder_run"))],
        "completer": f("instr_completer_receive"),
        "harness": [a + b + c for a, b, c in zip(f("instr_post"), f("instr_poll"), f("instr_hand_over"))],
        "total": f("instr_measure"),
    }
    pay = [0] * 5
    for name, v in rows(f"{d}/self.{qps}.txt"):
        if "PROGRAM TOTALS" not in name and payload_re.search(name):
            pay = [a + b for a, b in zip(pay, v)]
    side["payload"] = pay
    side["state"] = [a - b for a, b in zip(side["total"], pay)]
    per = {k: {"instructions": round(v[0] / pkts, 1), "d1_misses": round((v[1] + v[2]) / pkts, 2),
               "ll_misses": round((v[3] + v[4]) / pkts, 2)} for k, v in side.items()}
    result[qps] = {"packets": pkts, "retransmitted": counts.get("retransmitted", 0),
                   "timeouts": counts.get("timeouts", 0), "per_packet": per}
    print(f"== {qps} QPs: {counts['messages']} WRITEs of {counts['size']} B at MTU "
          f"{counts['mtu']}, {pkts} request packets, {counts.get('retransmitted', 0)} sent again "
          f"(D1 {d1}, LL {ll})")
    print(f"  {'per request packet':<22} {'instructions':>12} {'D1 misses':>10} {'LL misses':>10}")
    for k, v in per.items():
        print(f"  {k:<22} {v['instructions']:>12.1f} {v['d1_misses']:>10.2f} {v['ll_misses']:>10.2f}")
print("JSON: " + json.dumps({"d1": d1, "ll": ll, "qps": result}))
open(f"{d}/cache.json", "w").write(json.dumps(result, indent=1) + "\n")
PY
