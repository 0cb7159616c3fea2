#!/bin/sh
# Instructions per packet of the transport engine (issue 33), counted by callgrind: exact and
# the same on every host, unlike a time. Runs roce-engine-instr (tests/perf/engine_instr.cc:
# roce-engine-bench's BM_Write loop, fixed iterations, no benchmark library) under
# valgrind --tool=callgrind, collecting only its measured loop, and divides the inclusive cost
# of each side's share of an iteration by the packets that share handled:
#   requester   A's run(): req_fast or req_packet and its share of run, per request packet sent
#   post_send   per message posted (not a per-packet cost of the engine, shown apart)
#   responder   B's receive() of each request (parse, ICRC, QP lookup, execute) plus B's run()
#               (the coalesced ACKs), per request packet received (the harness takes the
#               frames from A's ring first, as a port would: instr_hand_over, shown apart)
#   completer   A's receive() of the ACKs, per request packet acknowledged
# Prints a table and a JSON line ("JSON: {...}"), and writes it to WORKDIR/instructions.json.
#
# Usage: engine_instructions.sh ROCE_ENGINE_INSTR WORKDIR [--max-requester N]
#            [--max-responder N] [-- DRIVER_ARGS...]
# With --max-*, exits 1 when a figure is above its bound. Exit 77 without valgrind.
set -eu
bin=$1 dir=$2
shift 2
max_req="" max_resp=""
while [ $# -gt 0 ]; do
  case $1 in
    --max-requester) max_req=$2; shift 2 ;;
    --max-responder) max_resp=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null || {
  echo "SKIP: valgrind (callgrind, callgrind_annotate) is not installed"; exit 77; }
rm -rf "$dir" && mkdir -p "$dir"
rc=0
valgrind --tool=callgrind --collect-atstart=no --toggle-collect=instr_measure \
  --callgrind-out-file="$dir/callgrind.out" "$bin" "$@" >"$dir/driver.json" 2>"$dir/valgrind.log" ||
  rc=$?
[ "$rc" -eq 0 ] || { cat "$dir/valgrind.log"; echo "FAIL: the driver exited $rc"; exit 1; }
callgrind_annotate --inclusive=yes --threshold=100 "$dir/callgrind.out" >"$dir/annotate.txt"
exec /usr/bin/python3 - "$dir" "$max_req" "$max_resp" <<'PY'
import json, re, sys
d, max_req, max_resp = sys.argv[1], sys.argv[2], sys.argv[3]
counts = json.loads(open(f"{d}/driver.json").read())
incl = {}
for line in open(f"{d}/annotate.txt"):
    m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)(?:\s+\[[^]]*\])?\s*$", line)
    if not m:
        continue
    name = m.group(2).split(":", 1)[-1] if ":" in m.group(2) and not m.group(2).startswith("roce::") else m.group(2)
    ir = int(m.group(1).replace(",", ""))
    incl[name] = max(ir, incl.get(name, 0))

def cost(pattern):
    """Inclusive instructions of the functions whose name matches `pattern` (largest)."""
    best = 0
    for name, ir in incl.items():
        if re.search(pattern, name):
            best = max(best, ir)
    return best

req, rx = counts["requests_sent"], counts["requests_received"]
msgs, acks = counts["messages"], counts["acks_received"]
if req == 0 or rx == 0 or msgs == 0:
    sys.exit("FAIL: the measured loop moved no packets: %s" % counts)
per = {
    "requester": cost(r"\binstr_requester_run\b") / req,
    "post_send": cost(r"\binstr_post\b") / msgs,
    "responder_receive": cost(r"\binstr_responder_receive\b") / rx,
    "responder_acks": cost(r"\binstr_responder_run\b") / rx,
    "completer": cost(r"\binstr_completer_receive\b") / rx,
    "poll_cq": cost(r"\binstr_poll\b") / msgs,
    "hand_over": cost(r"\binstr_hand_over\b") / (req + acks),
}
per["responder"] = per["responder_receive"] + per["responder_acks"]
per["total_per_message"] = cost(r"\binstr_measure\b") / msgs
# Where it goes (inclusive, per request packet; functions called on both engines sum both).
# (The fast paths: req_fast writes one-packet messages, write_request_only inline; rx_fast is
# inline in receive; the ICRC kernels with the seed and block count known are icrc_fn<kOr, q>.
# The general path: req_packet, rx_general.)
parts = {
    "req_fast (fast path)": r"Engine::Stages::req_fast\(",
    "req_packet (general path)": r"Engine::Stages::req_packet\(",
    "icrc_fn<false> (TX ICRC, fast)": r"icrc_fn<false,",
    "crc32_fold (TX ICRC, general)": r"wire::crc32_fold\(",
    "Engine::receive": r"Engine::receive\(",
    "rx_general (frames not fast)": r"Engine::Stages::rx_general\(",
    "parse_frame (frames of other shapes)": r"wire::parse_frame\(",
    "compute_icrc (frames of other shapes)": r"wire::compute_icrc\(",
    "icrc_fn<true> (RX ICRC, fast)": r"icrc_fn<true,",
    "crc32_fold_or (RX ICRC, general)": r"wire::crc32_fold_or\(",
    "resp_on_request": r"Engine::Stages::resp_on_request\(",
    "resp_flush_acks": r"Engine::Stages::resp_flush_acks\(",
    "comp_on_response": r"Engine::Stages::comp_on_response\(",
}
breakdown = {k: cost(v) / req for k, v in parts.items() if cost(v)}
out = {"counts": counts, "per_packet": {k: round(v, 1) for k, v in per.items()},
       "breakdown_per_request_packet": {k: round(v, 1) for k, v in breakdown.items()}}
print(f"instructions per packet (callgrind, {msgs} WRITEs of {counts['size']} B, "
      f"depth {counts['depth']}, {req} request packets, {counts['acks_sent']} ACKs)")
print(f"  {'path':<40} {'instructions':>12}")
rows = [("requester: run() per request packet", "requester"),
        ("responder: receive() per request packet", "responder_receive"),
        ("responder: run() (ACKs) per request packet", "responder_acks"),
        ("responder: total per request packet", "responder"),
        ("completer: receive() of ACKs per request", "completer"),
        ("post_send per message", "post_send"),
        ("poll_cq per message", "poll_cq"),
        ("harness: frame hand-over per frame", "hand_over"),
        ("everything per message", "total_per_message")]
for label, k in rows:
    print(f"  {label:<40} {per[k]:>12.1f}")
print("  inclusive, per request packet (both engines):")
for k, v in breakdown.items():
    print(f"    {k:<38} {v:>12.1f}")
print("JSON: " + json.dumps(out))
open(f"{d}/instructions.json", "w").write(json.dumps(out, indent=1) + "\n")
bad = []
if max_req and per["requester"] > float(max_req):
    bad.append(f"requester {per['requester']:.1f} > {max_req}")
if max_resp and per["responder"] > float(max_resp):
    bad.append(f"responder {per['responder']:.1f} > {max_resp}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad))
PY
