#!/usr/bin/env bash
# Instructions per work request of the provider's post/poll path against libroce's own, where
# timing on a shared host is noise (docs/benchmarks.md, "Unmodified perftest through the
# provider"): one roced (its memif port without a peer), a server and a client attached to it
# (self-delivery), the client under callgrind, N and 2N messages of `write_bw -s SIZE`:
#   provider  Debian's ib_write_bw under roce-run: ibv_post_send (our post_send_op) and
#             ibv_poll_cq (our poll_cq_op), inclusive, and libroce's Attached::post_send /
#             Attached::poll_cq inside them;
#   native    roce-perf write_bw --attach: libroce's Attached::post_send / poll_cq, called by
#             roce-perf's own loop.
# Prints, per message: post_send (one call a message), poll_cq (all calls; how many depends on
# how far roced is ahead of the slowed client, so per message, not per call), their sum, and
# the whole client's instructions (difference of the 2N and N runs: set-up cancels out).
#   verbs_callgrind.sh ROCED ROCE_PERF ROCE_RUN WORKDIR [SIZE [N]]
# ROCE_RUN may be another build's roce-run (its libroce-verbs.so: the "before" of a change).
set -euo pipefail
roced=$(realpath "$1") perf=$(realpath "$2") run=$(realpath "$3") work=$4
size=${5:-64} n1=${6:-5000}
n2=$((2 * n1))
command -v valgrind >/dev/null || { echo "skipped: valgrind not installed"; exit 77; }
command -v callgrind_annotate >/dev/null || { echo "skipped: callgrind_annotate not installed"; exit 77; }
command -v ib_write_bw >/dev/null || { echo "skipped: ib_write_bw not installed (perftest)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vcg$$
pids=()
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_ports.sh"
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_appliance.sh"
trap 'stop_all $?' EXIT
fail() { echo "FAIL: $*"; exit 1; }

memif_sock=one-memif.sock appliance one server 02:00:5e:00:0d:44 192.0.2.96 0

# one IMPL ITERS: a server, then the client under callgrind; the profile in $work/IMPL-ITERS.out
one() {
  local impl=$1 it=$2 port srv cli
  port=$(port_base 2)
  local cg=(valgrind --tool=callgrind "--callgrind-out-file=$work/$impl-$it.out")
  if [[ $impl == provider ]]; then
    local a=(-s "$size" -n "$it" -p "$port" -d roce0 -x 0 -F)
    srv=("$run" --attach "$work/one.sock" -- ib_write_bw "${a[@]}")
    cli=("$run" --attach "$work/one.sock" -- "${cg[@]}" ib_write_bw "${a[@]}" 127.0.0.1)
  else
    local a=(--attach "$work/one.sock" -s "$size" -n "$it" -p "$port" --timeout 170)
    srv=("$perf" write_bw "${a[@]}")
    cli=("${cg[@]}" "$perf" write_bw "${a[@]}" 127.0.0.1)
  fi
  timeout 180 "${srv[@]}" > "$work/$impl-$it.server.txt" 2>&1 &
  local spid=$!
  for _ in $(seq 200); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  timeout 180 "${cli[@]}" > "$work/$impl-$it.client.txt" 2>&1 || fail "$impl client ($work/$impl-$it.client.txt)"
  wait "$spid" || fail "$impl server ($work/$impl-$it.server.txt)"
  callgrind_annotate --inclusive=yes --threshold=100 "$work/$impl-$it.out" > "$work/$impl-$it.txt" 2>/dev/null
}
for impl in provider native; do
  one "$impl" "$n1"
  one "$impl" "$n2"
done

/usr/bin/python3 - "$work" "$n1" "$n2" "$size" <<'PY'
import re, sys
work, n1, n2, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def profile(path):
    """callgrind's own file: calls and inclusive Ir of every function called, by name, and the
    program's total (the cost line after each calls= line is that call's inclusive cost)"""
    names, calls, incl, total = {}, {}, {}, 0
    events = None
    pending = None  # the function a calls= line named, whose cost line comes next
    for line in open(path):
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:") or line.startswith("totals:"):
            total = int(line.split()[1])
        elif line.startswith("cfn="):
            m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
            if m.group(2):
                names[m.group(1)] = m.group(2)
            cfn = m.group(1)
        elif line.startswith("fn="):
            m = re.match(r"fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
            if m.group(2):
                names[m.group(1)] = m.group(2)
        elif line.startswith("calls="):
            calls[cfn] = calls.get(cfn, 0) + int(line.split()[0][6:])
            pending = cfn
        elif pending is not None and line[:1] in "0123456789+-*":
            f = line.split()
            incl[pending] = incl.get(pending, 0) + (int(f[1]) if len(f) > 1 else 0)
            pending = None
    by = {}
    for i, nm in names.items():
        c, ir = by.get(nm, (0, 0))
        by[nm] = (c + calls.get(i, 0), ir + incl.get(i, 0))
    return by, total
def pick(fns, pattern):
    c = ir = 0
    for k, (kc, kir) in fns.items():
        if re.search(pattern, k):
            c, ir = c + kc, ir + kir
    return c, ir
LIB_POST = r"client::\(anonymous namespace\)::Attached::post_send\("
LIB_POLL = r"client::\(anonymous namespace\)::Attached::poll_cq\("
rows = []
for impl in ("provider", "native"):
    _, ta = profile(f"{work}/{impl}-{n1}.out")
    b, tb = profile(f"{work}/{impl}-{n2}.out")
    if impl == "provider":
        post = pick(b, r"verbs_compat::\(anonymous namespace\)::post_send_op\(")
        poll = pick(b, r"verbs_compat::\(anonymous namespace\)::poll_cq_op\(")
    else:
        post, poll = pick(b, LIB_POST), pick(b, LIB_POLL)
    rows.append((impl, post, poll, pick(b, LIB_POST), pick(b, LIB_POLL), (tb - ta) / (n2 - n1)))
print(f"write_bw -s {size} attached to one roced, the client under callgrind ({n2} messages; "
      f"client total per message: the {n2} and {n1} runs' difference)")
print(f"{'':<10}{'post_send/call':>15}{'(libroce)':>10}{'poll_cq/call':>13}{'(libroce)':>10}"
      f"{'polls/msg':>10}{'post+poll/msg':>14}{'client/msg':>11}")
per = lambda x: x[1] / x[0] if x[0] else 0
for impl, post, poll, lp, lq, tot in rows:
    print(f"{impl:<10}{per(post):>15.0f}{per(lp):>10.0f}{per(poll):>13.0f}{per(lq):>10.0f}"
          f"{poll[0] / n2:>10.2f}{(post[1] + poll[1]) / n2:>14.0f}{tot:>11.0f}")
PY
