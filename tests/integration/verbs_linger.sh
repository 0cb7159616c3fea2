#!/usr/bin/env bash
# The linger does its job (docs/verbs-compat.md, "The progress thread and what the verbs
# cost", "Linger"): Debian's ib_write_lat -s 64 between two in-process appliance processes on
# memif, each side's ROCE_VERBS_STATS read at exit. Every send completion of write_lat leaves
# its QP with nothing outstanding, and the program then spins on its buffer for the peer's
# WRITE, so each of them must either find that WRITE already in (linger_early) or linger for
# it (lingers), and none may be skipped: a program that was waiting is never taken for one
# that was not. Before, a WRITE that came with the ACK made the linger wait for another frame,
# miss, and skip up to 1023 later completions (lingers 13 of 5000).
#   verbs_linger.sh ROCE_RUN WORKDIR [ITERS]
set -euo pipefail
run=$(realpath "$1") work=$2 iters=${3:-2000}
command -v ib_write_lat >/dev/null || { echo "skipped: ib_write_lat not installed (perftest)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
fail() { echo "FAIL: $*"; exit 1; }
port=$(port_base 1)
a=(-s 64 -n "$iters" -p "$port" -d roce0 -x 0 -F)
ROCE_VERBS_STATS=$work/server.stats ROCE_LINK_WAIT=60 timeout 120 "$run" --link \
  "--pmd memif-server --iface $work/memif.sock --ip 192.0.2.137 --mac 02:00:00:00:01:37" \
  -- ib_write_lat "${a[@]}" > "$work/server.txt" 2>&1 &
spid=$!
for _ in $(seq 200); do [[ -S $work/memif.sock ]] && break; sleep 0.05; done
rc=0
# (perftest's client gives up when its first connect comes before the server listens: retry)
for _ in $(seq 50); do
  ROCE_VERBS_STATS=$work/client.stats timeout 120 "$run" --link \
    "--pmd memif --iface $work/memif.sock --ip 192.0.2.138 --mac 02:00:00:00:01:38" \
    -- ib_write_lat "${a[@]}" 127.0.0.1 > "$work/client.txt" 2>&1 && { rc=0; break; } || rc=$?
  grep -q "Couldn't connect\|Unable to open\|Couldn't read" "$work/client.txt" || break
  sleep 0.2
done
wait "$spid" || fail "server ($work/server.txt)"
[[ $rc == 0 ]] || fail "client $rc ($work/client.txt)"
grep -E "^ +64 +$iters " "$work/client.txt" || fail "no result row ($work/client.txt)"
for side in server client; do
  line=$(grep "in-process: post_calls" "$work/$side.stats") || fail "$side: no stats"
  echo "$side: ${line#*in-process: }" | sed 's/ | progress.*//'
  get() { sed -n "s/.* $1 \([0-9]*\).*/\1/p" <<< "$line"; }
  lingers=$(get lingers) early=$(get linger_early) skips=$(get linger_skips)
  [[ -n $early && -n $skips ]] || fail "$side: the stats have no linger_early / linger_skips"
  ((skips == 0)) || fail "$side: $skips completions skipped the linger"
  ((lingers + early >= iters - 1)) ||
    fail "$side: $lingers lingers and $early early of $iters completions"
done
echo "PASS verbs_linger"
