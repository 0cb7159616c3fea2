#!/usr/bin/env bash
# The in-process progress thread rests as roce-perf's loop does while the program blocks outside
# our verbs (docs/verbs-compat.md, "The progress thread and what the verbs cost"): Debian's
# ib_write_bw -s 4096 between two in-process appliance processes on memif, each side's
# ROCE_VERBS_STATS read at exit. ib_write_bw's server makes no verb during the stream (it
# waits in a TCP read), so its progress thread alone drives the port: from the 32nd idle poll
# it must yield (idle_yields), never nap. Before (issue 30's 4 KiB row, 0.2 of native), it
# napped 10 us in every gap longer than 50 us (2 375 to 20 293 naps for 100 000 messages at
# load 9-11), and on Linux's EEVDF scheduler each nap on a busy CPU ended a slice late (94 us
# a wake-up on average, perf sched). The client's counters are printed, with the back-offs its
# progress thread renewed because the program was preempted (preempted), not checked: those
# depend on the host's load; its sleeps on the backend's lock (lock_waits) are.
#   verbs_bw_counters.sh ROCE_RUN WORKDIR [ITERS]
set -euo pipefail
run=$(realpath "$1") work=$2 iters=${3:-20000}
command -v ib_write_bw >/dev/null || { echo "skipped: ib_write_bw not installed (perftest)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
fail() { echo "FAIL: $*"; exit 1; }
port=$(port_base 1)
a=(-s 4096 -n "$iters" -p "$port" -d roce0 -x 0 -F)
ROCE_VERBS_STATS=$work/server.stats ROCE_LINK_WAIT=60 timeout 120 "$run" --link \
  "--pmd memif-server --iface $work/memif.sock --ip 192.0.2.139 --mac 02:00:00:00:01:39" \
  -- ib_write_bw "${a[@]}" > "$work/server.txt" 2>&1 &
spid=$!
for _ in $(seq 200); do [[ -S $work/memif.sock ]] && break; sleep 0.05; done
rc=0
# (perftest's client gives up when its first connect comes before the server listens: retry)
for _ in $(seq 50); do
  ROCE_VERBS_STATS=$work/client.stats timeout 120 "$run" --link \
    "--pmd memif --iface $work/memif.sock --ip 192.0.2.140 --mac 02:00:00:00:01:40" \
    -- ib_write_bw "${a[@]}" 127.0.0.1 > "$work/client.txt" 2>&1 && { rc=0; break; } || rc=$?
  grep -q "Couldn't connect\|Unable to open\|Couldn't read" "$work/client.txt" || break
  sleep 0.2
done
wait "$spid" || fail "server ($work/server.txt)"
[[ $rc == 0 ]] || fail "client $rc ($work/client.txt)"
grep -E "^ +4096 +$iters " "$work/client.txt" || fail "no result row ($work/client.txt)"
get() { sed -n "s/.* $1 \([0-9]*\).*/\1/p" <<< "$2"; }
for side in server client; do
  line=$(grep "in-process: post_calls" "$work/$side.stats") || fail "$side: no stats"
  echo "$side: ${line#*| }"
done
line=$(grep "in-process: post_calls" "$work/server.stats")
naps=$(get naps "$line") yields=$(get idle_yields "$line") posts=$(get post_calls "$line")
[[ -n $naps && -n $yields ]] || fail "server: the stats have no naps / idle_yields"
((posts == 0)) || fail "server: $posts ibv_post_send calls (ib_write_bw's server makes none)"
# a few naps may come from quiet spells of 10 ms and more with a timer armed (deep_nap)
((naps < 100)) || fail "server: $naps naps (its progress thread must yield in a stream's gaps)"
((yields > 0)) || fail "server: no idle yields"
# The client's verbs sleep on the backend's lock (held by its progress thread) at most once in
# 100 messages (measured: 0-6 in 100 000 at load 16).
line=$(grep "in-process: post_calls" "$work/client.stats")
waits=$(get lock_waits "$line")
[[ -n $waits ]] || fail "client: the stats have no lock_waits"
((waits * 100 <= iters)) || fail "client: $waits of $iters messages slept on the backend's lock"
echo "PASS verbs_bw_counters"
