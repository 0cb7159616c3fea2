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
# and in-process (MODES="attached inproc"): the client on one end of a net_memif link, the server
# on the other, the provider's client against roce-perf's in-process one, the client's threads
# profiled apart (its first thread: the program's).
# Every figure is the difference of the 2N and N runs (set-up cancels out): per call and per
# message of post_send (one call a message) and poll_cq (how many polls a message takes depends
# on how far the other side runs ahead of a client slowed 50 times, so compare per call), and
# in-process the poll loop's iterations the client's thread ran (PollLoop::poll_once, inside
# poll_cq or roce-perf's loop) and the provider's transmit bursts (send_now, inside post_send).
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

modes=${MODES:-attached inproc}
[[ $modes == *attached* ]] && memif_sock=one-memif.sock appliance one server 02:00:5e:00:0d:44 192.0.2.96 0

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
# inproc IMPL ITERS: a memif pair, the client under callgrind, one profile per thread
# ($work/inproc-IMPL-ITERS.out-01 is the program's thread)
inproc() {
  local impl=$1 it=$2 port d=$work/inproc-$1-$2
  port=$(port_base 2)
  mkdir -p "$d"
  local cg=(valgrind --tool=callgrind --separate-threads=yes
            "--callgrind-out-file=$work/inproc-$impl-$it.out")
  local s=(--pmd memif-server --iface "$d/memif.sock" --ip 192.0.2.97 --mac 02:00:00:00:00:97)
  local c=(--pmd memif --iface "$d/memif.sock" --ip 192.0.2.98 --mac 02:00:00:00:00:98)
  local a=(-s "$size" -n "$it" -p "$port") spid
  if [[ $impl == provider ]]; then
    a+=(-d roce0 -x 0 -F)
    timeout 300 env ROCE_LINK_WAIT=240 "$run" --link "${s[*]}" -- ib_write_bw "${a[@]}" \
      > "$d/server.txt" 2>&1 &
    spid=$!
    for _ in $(seq 200); do [[ -S $d/memif.sock ]] && break; sleep 0.05; done
    timeout 300 "$run" --link "${c[*]}" -- "${cg[@]}" ib_write_bw "${a[@]}" 127.0.0.1 \
      > "$d/client.txt" 2>&1 || fail "inproc $impl client ($d/client.txt)"
  else
    timeout 180 "$perf" write_bw "${s[@]}" "${a[@]}" --timeout 170 > "$d/server.txt" 2>&1 &
    spid=$!
    for _ in $(seq 200); do [[ -S $d/memif.sock ]] && break; sleep 0.05; done
    timeout 300 "${cg[@]}" "$perf" write_bw "${c[@]}" "${a[@]}" --timeout 170 127.0.0.1 \
      > "$d/client.txt" 2>&1 || fail "inproc $impl client ($d/client.txt)"
  fi
  wait "$spid" || fail "inproc $impl server ($d/server.txt)"
}
for mode in $modes; do
  for impl in provider native; do
    for it in "$n1" "$n2"; do
      if [[ $mode == attached ]]; then one "$impl" "$it"; else inproc "$impl" "$it"; fi
    done
  done
done

/usr/bin/python3 - "$work" "$n1" "$n2" "$size" "$modes" <<'PY'
import os, re, sys
work, n1, n2, size, modes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
def profile(path):
    """callgrind's own file: calls and inclusive Ir of every function called, by name (the cost
    line after each calls= line is that call's inclusive cost)"""
    names, calls, incl = {}, {}, {}
    pending = cfn = None  # the function a calls= line named, whose cost line comes next
    for line in open(path):
        if line.startswith("cfn="):
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
    return by
def diff(a, b, pattern):
    """calls and inclusive Ir of the functions matching `pattern`: run b minus run a"""
    tot = lambda p: [sum(v[i] for k, v in p.items() if re.search(pattern, k)) for i in (0, 1)]
    (ca, ia), (cb, ib) = tot(a), tot(b)
    return cb - ca, ib - ia
N = n2 - n1
PROV_POST = r"verbs_compat::\(anonymous namespace\)::post_send_op\("
PROV_POLL = r"verbs_compat::\(anonymous namespace\)::poll_cq_op\("
def own(p, lib_post, lib_poll):
    """the provider's own instructions per ibv_post_send and per ibv_poll_cq in one run: the
    calls' inclusive cost less libroce's post/poll inside them and the transmit bursts
    (send_now) a post runs in-process. Unlike the differences above, these do not move with how
    far the other side runs ahead (where the engine's work lands: in a post's burst or a poll)"""
    (cp, ip), (_, lp), (_, sn) = (diff({}, p, x) for x in (PROV_POST, lib_post, r"port::PollLoop::send_now\(\)"))
    (cq, iq), (_, lq) = (diff({}, p, x) for x in (PROV_POLL, lib_poll))
    print(f"  the provider's own part, per call ({cp} posts, {cq} polls of the {n2}-message run): "
          f"ibv_post_send {(ip - lp - sn) / max(cp, 1):.0f}, ibv_poll_cq {(iq - lq) / max(cq, 1):.0f}")
def show(title, rows):
    print(title)
    print(f"  {'':<22}{'calls/msg':>10}{'Ir/call':>9}{'Ir/msg':>9}")
    for label, (c, ir) in rows:
        print(f"  {label:<22}{c / N:>10.2f}{ir / c if c else 0:>9.0f}{ir / N:>9.0f}")
print(f"write_bw -s {size}, the client under callgrind, per message of the {n2}- and {n1}-message "
      f"runs' difference")
if "attached" in modes:
    LIB_POST = r"client::\(anonymous namespace\)::Attached::post_send\("
    LIB_POLL = r"client::\(anonymous namespace\)::Attached::poll_cq\("
    for impl in ("provider", "native"):
        a, b = profile(f"{work}/{impl}-{n1}.out"), profile(f"{work}/{impl}-{n2}.out")
        rows = []
        if impl == "provider":
            rows += [("ibv_post_send", diff(a, b, PROV_POST))]
        rows += [("libroce post_send", diff(a, b, LIB_POST))]
        if impl == "provider":
            rows += [("ibv_poll_cq", diff(a, b, PROV_POLL))]
        rows += [("libroce poll_cq", diff(a, b, LIB_POLL))]
        who = "perftest via the provider" if impl == "provider" else "roce-perf --attach"
        show(f"attached to one roced, {who}:", rows)
        if impl == "provider":
            own(b, LIB_POST, LIB_POLL)
if "inproc" in modes:
    LOC_POST = r"client::\(anonymous namespace\)::Local::post_send\("
    LOC_POLL = r"client::\(anonymous namespace\)::Local::poll_cq\("
    LOOP = r"port::PollLoop::poll_once\(\)"
    SEND = r"port::PollLoop::send_now\(\)"
    for impl in ("provider", "native"):
        a, b = profile(f"{work}/inproc-{impl}-{n1}.out-01"), profile(f"{work}/inproc-{impl}-{n2}.out-01")
        rows = []
        if impl == "provider":
            rows += [("ibv_post_send", diff(a, b, PROV_POST)), ("  send_now in it", diff(a, b, SEND))]
        rows += [("libroce post_send", diff(a, b, LOC_POST))]
        if impl == "provider":
            rows += [("ibv_poll_cq", diff(a, b, PROV_POLL))]
        rows += [("libroce poll_cq", diff(a, b, LOC_POLL)), ("poll loop iterations", diff(a, b, LOOP))]
        show(f"in-process, {'perftest via the provider' if impl == 'provider' else 'roce-perf'} "
             f"(the program's thread):", rows)
        if impl == "provider":
            own(b, LOC_POST, LOC_POLL)
PY
