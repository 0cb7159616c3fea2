#!/usr/bin/env bash
# Two programs attached to the same roced port talk through its own GID (as MPI ranks on one
# host, or rdma-core's tests): Debian's ibv_rc_pingpong and ibv_ud_pingpong -c, server and
# client both attached to one roced whose net_memif link has no peer. The engine's
# self-delivery (dataplane/port/self_delivery.h) carries every frame: both sides finish with
# the data checked, and roced's /metrics counts the frames it delivered to itself.
#   verbs_attached_self.sh ROCED LIBROCE_VERBS WORKDIR
set -euo pipefail
roced=$(realpath "$1") lib=$(realpath "$2") work=$3
command -v ibv_rc_pingpong >/dev/null || { echo "skipped: ibverbs-utils not installed"; exit 77; }
command -v curl >/dev/null || { echo "skipped: curl not installed"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vself$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
port=$(port_base 3)
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0d:21 192.0.2.95 0 "127.0.0.1:$((port + 2))"
fail() { echo "FAIL: $*"; exit 1; }
metric() {  # NAME: roced's value of roce_NAME on p0 (0 when absent)
  curl -s "http://127.0.0.1:$((port + 2))/metrics" |
    awk -v n="roce_$1" '$1 ~ "^"n"[{]" && $1 ~ /p0/ { print $2; f=1 } END { if (!f) print 0 }'
}
pingpong() {  # KIND P: server and client on the same roced port, -c: the server checks data
  local kind=$1 p=$2 rc=0 spp
  LD_PRELOAD=$lib ROCE_ATTACH=$work/a.sock timeout 30 "ibv_${kind}_pingpong" -d roce0 -g 0 \
    -p "$p" -n 200 -c > "$work/$kind-server.txt" 2>&1 &
  spp=$!
  for _ in $(seq 100); do
    ss -Hltn "sport = :$p" 2>/dev/null | grep -q . && break
    kill -0 "$spp" 2>/dev/null || break
    sleep 0.1
  done
  LD_PRELOAD=$lib ROCE_ATTACH=$work/a.sock timeout 30 "ibv_${kind}_pingpong" -d roce0 -g 0 \
    -p "$p" -n 200 -c 127.0.0.1 > "$work/$kind-client.txt" 2>&1 || rc=$?
  wait "$spp" || rc=$?
  sed "s/^/ibv_${kind}_pingpong server: /" "$work/$kind-server.txt"
  sed "s/^/ibv_${kind}_pingpong client: /" "$work/$kind-client.txt"
  [[ $rc == 0 ]] || fail "ibv_${kind}_pingpong exited with $rc"
  for side in server client; do
    grep -Eq "^200 iters in [0-9.]+ seconds" "$work/$kind-$side.txt" ||
      fail "ibv_${kind}_pingpong $side did not finish"
    grep -q "GID ::ffff:192.0.2.95" "$work/$kind-$side.txt" || fail "not the port's own GID"
  done
  ! grep -q "invalid data" "$work/$kind-server.txt" || fail "ibv_${kind}_pingpong: data corrupted"
}
pingpong rc "$port"
pingpong ud "$((port + 1))"
# roced publishes its counters every 100 ms
for _ in $(seq 30); do
  n=$(metric tx_self_delivered)
  ((n >= 800)) && break
  sleep 0.1
done
echo "roced: tx_self_delivered $n, tx_self_dropped $(metric tx_self_dropped)"
((n >= 800)) || fail "tx_self_delivered $n: fewer than the 800 messages of the two pingpongs"
echo "two attached programs on one port: rc and ud pingpong, 200 iters each, data checked"
