#!/usr/bin/env bash
# rdma_cm's UD ids (SIDR) attached to roced: two roced on a net_memif link, X (server end) and
# Y (client end), each program a client of one of them.
#  1. sidr_attach (libroce's Context, sidr_attach.cc): who may listen, unlisten, accept and
#     reject what, the budget of SIDR exchanges in flight (Y's cm_backlog), a listener that goes
#     away with a request unanswered; both roced still running at the end;
#  2. Debian's unmodified udaddy under roce-run --attach, in both roles: the server a client of
#     X and the client one of Y, then the other way round;
#  3. sidr_unlisten (librdmacm's API, attached to X) listens on udaddy's port and leaves it with
#     rdma_destroy_id, twice; udaddy's client (of Y) then gets UNREACHABLE with SIDR status 1
#     and the program no event; udaddy's server, another client of X, then listens on the same
#     port and serves the client.
#   sidr_attach.sh ROCED ROCE_RUN SIDR_UNLISTEN SIDR_ATTACH WORKDIR
set -euo pipefail
roced=$(realpath "$1") run=$(realpath "$2") unl=$(realpath "$3") sat=$(realpath "$4") work=$5
command -v udaddy >/dev/null || { echo "skipped: udaddy not installed (Debian package rdmacm-utils)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=sidr$$
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
# Y's clients: SIDR exchanges in flight up to their CM event ring (64) and cm_backlog
x_ip=192.0.2.97 y_ip=192.0.2.98 backlog=4
appliance_wait=300  # 30 s: the EAL starts slowly on a loaded host
budget=$((64 + backlog))
appliance x server 02:00:5e:00:0d:31 $x_ip 0
appliance y client 02:00:5e:00:0d:32 $y_ip 1 127.0.0.1:0 "  cm_backlog: $backlog"
fail() { echo "FAIL: $*"; exit 1; }
need() { grep -q -- "$2" "$work/$1.txt" || fail "$1: no '$2'"; }
show() { for f in "$@"; do sed "s/^/$f: /" "$work/$f.txt"; done; }
# client SOCK OUT ARGS...: udaddy's client, again (at most 5 times) when its ARP timed out
client() {
  local sock=$1 out=$2 rc; shift 2
  for _ in 1 2 3 4 5; do
    rc=0
    timeout 30 "$run" --attach "$sock" -- udaddy "$@" > "$work/$out.txt" 2>&1 || rc=$?
    grep -q "ADDR_ERROR" "$work/$out.txt" || return "$rc"
  done
  return "$rc"
}

# 1. the rules roced applies (first: its resolves fill both ports' ARP caches, which udaddy's
# 2 s rdma_resolve_addr then finds on a loaded host)
rc=0
timeout 60 "$sat" "$work/x.sock" "$work/y.sock" $x_ip 7200 7471 $budget > "$work/rules.txt" 2>&1 || rc=$?
show rules
[[ $rc == 0 ]] || fail "sidr_attach exited with $rc"

# 2. udaddy in both roles
for roles in "x y" "y x"; do
  read -r s c <<< "$roles"
  sip=$x_ip
  [[ $s == y ]] && sip=$y_ip
  timeout 30 "$run" --attach "$work/$s.sock" -- udaddy -b "$sip" -c 2 -C 10 > "$work/server.txt" 2>&1 &
  spid=$!
  sleep 0.5
  rc=0
  client "$work/$c.sock" client -s "$sip" -c 2 -C 10 || rc=$?
  wait "$spid" || rc=$?
  show server client
  [[ $rc == 0 ]] || fail "udaddy (server of $s) exited with $rc"
  for side in server client; do
    need $side '^data transfers complete'
    need $side '^return status 0'
  done
  echo "PASS udaddy attached: server a client of roced $s, client a client of roced $c"
done

# 3. rdma_destroy_id of a listening UD id: no more requests; the port listened on again
timeout 30 "$run" --attach "$work/x.sock" -- "$unl" $x_ip 7174 4000 > "$work/unlisten.txt" 2>&1 &
upid=$!
for _ in $(seq 100); do grep -q '^unlistened' "$work/unlisten.txt" && break; sleep 0.05; done
need unlisten '^unlistened'
rc=0
client "$work/y.sock" refused -s $x_ip -c 1 -C 1 || rc=$?
urc=0
wait "$upid" || urc=$?
show unlisten refused
[[ $urc == 0 ]] || fail "sidr_unlisten exited with $urc"
need unlisten '^no request'
need refused 'RDMA_CM_EVENT_UNREACHABLE, error: 1'
[[ $rc != 0 ]] || fail "udaddy's client succeeded without a listener"
echo "PASS a destroyed UD listen id: SIDR status 1 to the client, no event to the program"
timeout 30 "$run" --attach "$work/x.sock" -- udaddy -b $x_ip -c 1 -C 5 > "$work/server.txt" 2>&1 &
spid=$!
sleep 0.5
rc=0
client "$work/y.sock" client -s $x_ip -c 1 -C 5 || rc=$?
wait "$spid" || rc=$?
show server client
[[ $rc == 0 ]] || fail "udaddy on the port left by sidr_unlisten exited with $rc"
need client '^return status 0'
echo "PASS the port listened on again by another client"

for n in x y; do
  eval "p=\$pid_$n"
  kill -0 "$p" 2>/dev/null || fail "roced $n is gone"
done
echo OK
