#!/usr/bin/env bash
# An idle program costs (next to) nothing (docs/verbs-compat.md, "The progress thread and what
# the verbs cost", "Idle"): Debian's ibv_rc_pingpong as a server that has opened the device and
# made its QP, waiting for a TCP peer that never comes, in-process (a memif link nobody joins)
# and attached to a roced. The context switches of all its threads over 3 s must stay below
# 1000 a second in-process (10 us naps were about 10 000) and 50 attached (usleep(200) polling
# was about 1700). Then an attached `ibv_rc_pingpong -e` runs, so that the sleeping thread still
# relays completion events.
#   verbs_idle.sh ROCED ROCE_RUN WORKDIR
set -euo pipefail
roced=$(realpath "$1") run=$(realpath "$2") work=$3
command -v ibv_rc_pingpong >/dev/null ||
  { echo "skipped: ibv_rc_pingpong not installed (Debian package ibverbs-utils)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vidle$$
pids=()
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$(realpath "$0")")/lib_appliance.sh"
trap 'stop_all $?' EXIT
fail() { echo "FAIL: $*"; exit 1; }

switches() {  # the voluntary and involuntary context switches of every thread of PID
  local s=0 t
  for t in /proc/"$1"/task/*/status; do
    s=$((s + $(awk '/ctxt_switches/ {x += $2} END {print x + 0}' "$t" 2>/dev/null || echo 0)))
  done
  echo "$s"
}
# idle LABEL LIMIT COMMAND...: starts the server, waits until it listens, counts over 3 s
idle() {
  local label=$1 limit=$2 port=$3 p pid a b rate
  shift 3
  "$@" > "$work/$label.txt" 2>&1 &
  p=$!
  pids+=("$p")
  for _ in $(seq 200); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$p" 2>/dev/null || { cat "$work/$label.txt"; fail "$label: the server ended"; }
    sleep 0.05
  done
  pid=$(pgrep -f "^ibv_rc_pingpong .*-p $port" | head -1)
  [[ -n $pid ]] || pid=$p
  sleep 1  # past the 10 ms (and 1 s) of quiet after the set-up
  a=$(switches "$pid")
  sleep 3
  b=$(switches "$pid")
  rate=$(((b - a) / 3))
  kill "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  echo "$label: $rate context switches a second"
  ((rate < limit)) || fail "$label: $rate context switches a second while idle (limit $limit)"
}

memif_sock=one-memif.sock appliance one server 02:00:5e:00:0d:4a 192.0.2.86 0
port=$(port_base 4)
idle in-process 1000 "$port" "$run" --link \
  "--pmd memif-server --iface $work/ip.sock --ip 192.0.2.84 --mac 02:00:00:00:00:84" -- \
  ibv_rc_pingpong -d roce0 -g 0 -p "$port"
idle attached 50 $((port + 1)) "$run" --attach "$work/one.sock" -- \
  ibv_rc_pingpong -d roce0 -g 0 -p $((port + 1))

# the sleeping thread still relays completion events (ibv_get_cq_event)
p2=$((port + 2))
timeout 60 "$run" --attach "$work/one.sock" -- ibv_rc_pingpong -d roce0 -g 0 -p $p2 -n 500 -e \
  > "$work/server.txt" 2>&1 &
spid=$!
for _ in $(seq 200); do ss -Hltn "sport = :$p2" 2>/dev/null | grep -q . && break; sleep 0.05; done
rc=0
timeout 60 "$run" --attach "$work/one.sock" -- ibv_rc_pingpong -d roce0 -g 0 -p $p2 -n 500 -e \
  127.0.0.1 > "$work/client.txt" 2>&1 || rc=$?
wait "$spid" || rc=$?
cat "$work/client.txt"
[[ $rc == 0 ]] || { cat "$work/server.txt"; fail "ibv_rc_pingpong -e attached exited with $rc"; }
grep -q "usec/iter" "$work/client.txt" || fail "ibv_rc_pingpong -e: no result"
echo OK
