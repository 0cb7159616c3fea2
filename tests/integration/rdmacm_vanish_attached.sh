#!/usr/bin/env bash
# A program killed with SIGKILL while its rdma_cm connection is up, attached to roced: roced
# outlives it, as the kernel's rdma_cm outlives a process, so roced must end the connection
# (a DREQ) and the peer must see RDMA_CM_EVENT_DISCONNECTED at once, not wait forever.
# Two roced on a net_memif link; Debian's unmodified rping: the server a client of X, pinging
# without end with the client (a client of Y); the server is killed, the client must exit
# within 10 s having printed its disconnect. Then the other way round (the client killed).
# Last, roced X itself is killed: its client must get RDMA_CM_EVENT_DEVICE_REMOVAL and end.
#   rdmacm_vanish_attached.sh ROCED ROCE_RUN WORKDIR
set -euo pipefail
roced=$(realpath "$1") run=$(realpath "$2") work=$3
command -v rping >/dev/null || { echo "skipped: rping not installed (Debian package rdmacm-utils)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vanish$$
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
x_ip=192.0.2.93 y_ip=192.0.2.94
appliance_wait=300
appliance x server 02:00:5e:00:0d:41 $x_ip 0
appliance y client 02:00:5e:00:0d:42 $y_ip 1 127.0.0.1:0
fail() { echo "FAIL: $*"; exit 1; }
show() { for f in "$@"; do sed "s/^/$f: /" "$work/$f.txt"; done; }

# victim SURVIVOR: which one is killed
round=0
for victim in server client roced; do
  round=$((round + 1))
  timeout 120 stdbuf -oL "$run" --attach "$work/x.sock" -- rping -s -a $x_ip -p 7300 -C 0 -S 64 -v \
    > "$work/server.txt" 2>&1 &
  spid=$!
  # the server attached (a loaded host starts programs slowly), then a moment to listen
  for _ in $(seq 300); do [[ $(grep -c "attach: client .* on port" "$work/x.log") -ge $round ]] && break; sleep 0.1; done
  sleep 1
  # the client, again (at most 5 times) when its 2 s address resolution timed out
  for _ in 1 2 3 4 5; do
    timeout 120 stdbuf -oL "$run" --attach "$work/y.sock" -- rping -c -a $x_ip -p 7300 -C 0 -S 64 -v \
      > "$work/client.txt" 2>&1 &
    cpid=$!
    for _ in $(seq 50); do grep -q "ping data\|ADDR_ERROR" "$work/client.txt" && break; sleep 0.1; done
    grep -q ADDR_ERROR "$work/client.txt" || break
    wait $cpid || true
  done
  # pinging: both sides printed lines
  for _ in $(seq 600); do
    [[ $(grep -c 'ping data' "$work/client.txt" 2>/dev/null) -ge 5 ]] && break
    kill -0 $cpid 2>/dev/null || break
    sleep 0.1
  done
  [[ $(grep -c 'ping data' "$work/client.txt") -ge 5 ]] || { show server client; fail "no pings"; }
  if [[ $victim == server ]]; then kpid=$spid opid=$cpid other=client; else kpid=$cpid opid=$spid other=server; fi
  if [[ $victim == roced ]]; then
    # roced X itself: its client (the server) sees the device go (RDMA_CM_EVENT_DEVICE_REMOVAL,
    # rping: "cma detected device removal"), as with a device the kernel removes
    kill -9 "$pid_x"
    kpid=$cpid opid=$spid other=server
  else
    # the program itself, not timeout/roce-run's shell: roce-run execs, so the child of timeout
    prog=$(pgrep -P $kpid | head -1)
    kill -9 "$prog"
  fi
  t0=$(date +%s%N)
  rc=0
  for _ in $(seq 100); do kill -0 $opid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $opid 2>/dev/null; then
    kill $opid 2>/dev/null || true
    wait $opid 2>/dev/null || true
    wait $kpid 2>/dev/null || true
    show server client
    fail "the $other still runs 10 s after the $victim was killed"
  fi
  wait $opid || rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  if [[ $victim == roced ]]; then
    # the client (of Y) lost its peer's host: nothing tells it (as with rxe); end it
    prog=$(pgrep -P $kpid | head -1)
    kill -9 "$prog" 2>/dev/null || true
    wait $kpid 2>/dev/null || true
    grep -q "device removal" "$work/server.txt" || { show server client; fail "the server ended without DEVICE_REMOVAL"; }
    echo "PASS: roced X killed, its client (the server) saw DEVICE_REMOVAL and ended in $ms ms (rc $rc)"
    continue
  fi
  wait $kpid 2>/dev/null || true
  grep -q "DISCONNECT EVENT" "$work/$other.txt" || { show server client; fail "the $other ended without a DISCONNECTED event"; }
  echo "PASS: the $victim killed, the $other ended in $ms ms (rc $rc)"
done
