#!/usr/bin/env bash
# Debian's unmodified ibverbs-utils attached to roced through libroce-verbs.so (ROCE_ATTACH):
# two roced on a net_memif link; ibv_devices and ibv_devinfo -v see A's port (its GUID, ACTIVE,
# its MTU and RoCE v2 GID), then ibv_{rc,srq,uc,ud}_pingpong -c run between a client of A and a
# client of B on the programs' own memory (attached registration adopts its pages) and must
# finish with the data checked. Then verbs_attached_data moves data between a client of A and a
# client of B in memory of the attached Context: inline and 6-SGE SENDs (the provider's bounce
# buffer), WRITE and READ, and a CQ armed for solicited completions only (woken by the solicited
# SEND, not by the one before it).
# Last, roced B is killed under a program waiting on its context's async_fd (verbs_async
# wait-fatal): it must read IBV_EVENT_DEVICE_FATAL.
#   verbs_attached.sh ROCED LIBROCE_VERBS WORKDIR VERBS_ATTACHED_DATA VERBS_ASYNC
set -euo pipefail
roced=$(realpath "$1") lib=$(realpath "$2") work=$3 data=$(realpath "$4") async=$(realpath "$5")
command -v ibv_devinfo >/dev/null || { echo "skipped: ibverbs-utils not installed"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vattach$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
port=$(port_base 2)
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0d:01 192.0.2.93 0
appliance b client 02:00:5e:00:0d:02 192.0.2.94 1
fail() { echo "FAIL: $*"; exit 1; }
export LD_PRELOAD=$lib

ROCE_ATTACH=$work/a.sock ibv_devices > "$work/devices.txt" 2>&1 || fail "ibv_devices: $(cat "$work/devices.txt")"
cat "$work/devices.txt"
grep -Eq "^[[:space:]]+roce0[[:space:]]+00005efffe000d01$" "$work/devices.txt" ||
  fail "ibv_devices does not list roce0 with A's GUID"
# a device per port ROCE_PORT names (here the one port twice), a message for a port roced lacks
ROCE_ATTACH=$work/a.sock ROCE_PORT=p0,p0,nope ibv_devices > "$work/devices3.txt" 2>&1 ||
  fail "ibv_devices with ROCE_PORT: $(cat "$work/devices3.txt")"
cat "$work/devices3.txt"
[[ $(grep -cE "^[[:space:]]+roce[01][[:space:]]+00005efffe000d01$" "$work/devices3.txt") == 2 ]] ||
  fail "ROCE_PORT=p0,p0: not roce0 and roce1"
grep -q "ROCE_PORT=nope" "$work/devices3.txt" || fail "no message for a port roced lacks"
ROCE_ATTACH=$work/a.sock timeout 30 ibv_devinfo -v > "$work/devinfo.txt" 2>&1 ||
  fail "ibv_devinfo -v: $(cat "$work/devinfo.txt")"
expect() { grep -Eq "$1" "$work/devinfo.txt" || fail "ibv_devinfo -v: no line matching '$1'"; }
expect "^[[:space:]]+fw_ver:[[:space:]]+roce 0.1.0 \(attached\)$"
expect "^[[:space:]]+state:[[:space:]]+PORT_ACTIVE \(4\)$"
expect "^[[:space:]]+active_mtu:[[:space:]]+(1024 \(3\)|2048 \(4\)|4096 \(5\))$"
expect "^[[:space:]]+GID\[  0\]:[[:space:]]+::ffff:192.0.2.93, RoCE v2$"
echo "ibv_devinfo -v: port ACTIVE, $(grep -E 'active_mtu' "$work/devinfo.txt" | xargs), GID ::ffff:192.0.2.93 RoCE v2"

# The pingpongs on the program's own memory (ibv_reg_mr adopts its pages, verbs/memory), the
# server checking what it received (-c); UD's AH by GID (roced fills the MAC in).
pingpong() {  # KIND: server on B, client on A; both must finish, the server's data intact
  local kind=$1 rc=0 spp
  shift
  ROCE_ATTACH=$work/b.sock timeout 30 "ibv_${kind}_pingpong" -d roce0 -g 0 -p "$port" -n 200 -c \
    > "$work/$kind-server.txt" 2>&1 &
  spp=$!
  for _ in $(seq 100); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spp" 2>/dev/null || break
    sleep 0.1
  done
  ROCE_ATTACH=$work/a.sock timeout 30 "ibv_${kind}_pingpong" -d roce0 -g 0 -p "$port" -n 200 -c \
    127.0.0.1 > "$work/$kind-client.txt" 2>&1 || rc=$?
  wait "$spp" || rc=$?
  sed "s/^/ibv_${kind}_pingpong server: /" "$work/$kind-server.txt"
  sed "s/^/ibv_${kind}_pingpong client: /" "$work/$kind-client.txt"
  [[ $rc == 0 ]] || fail "ibv_${kind}_pingpong exited with $rc"
  for side in server client; do
    grep -Eq "^200 iters in [0-9.]+ seconds" "$work/$kind-$side.txt" || fail "ibv_${kind}_pingpong $side did not finish"
  done
  ! grep -q "invalid data" "$work/$kind-server.txt" || fail "ibv_${kind}_pingpong: data corrupted"
  echo "ibv_${kind}_pingpong -c attached: 200 iters, data checked"
}
for kind in rc srq uc ud; do pingpong "$kind"; done

ROCE_ATTACH=$work/b.sock timeout 30 "$data" server $((port + 1)) > "$work/data-server.txt" 2>&1 &
sdata=$!
rc=0
ROCE_ATTACH=$work/a.sock timeout 30 "$data" client $((port + 1)) 127.0.0.1 > "$work/data-client.txt" 2>&1 || rc=$?
wait "$sdata" || rc=$?
sed 's/^/data server: /' "$work/data-server.txt"
sed 's/^/data client: /' "$work/data-client.txt"
[[ $rc == 0 ]] || fail "verbs_attached_data exited with $rc"
for l in "SEND with inline data: 32 bytes, intact" "SEND of 6 SGEs: 600 bytes, intact" \
         "RDMA WRITE into our memory: intact" \
         "solicited-only arming: woken with 2 completion(s) polled, the solicited SEND's last, in order"; do
  grep -qx "$l" "$work/data-server.txt" || fail "server: no '$l'"
done
grep -qx "RDMA WRITE then READ back: intact" "$work/data-client.txt" || fail "client: READ"
for side in server client; do
  grep -qx "ibv_reg_mr of the program's own memory: registered" "$work/data-$side.txt" &&
    grep -qx "ibv_rereg_mr to other own memory: moved" "$work/data-$side.txt" &&
    grep -qx "ibv_rereg_mr keys: kept" "$work/data-$side.txt" &&
    grep -qx "full receive queue: ENOMEM past max_recv_wr" "$work/data-$side.txt" &&
    grep -qx "ibv_rereg_mr to read-only memory with write access: refused" "$work/data-$side.txt" &&
    grep -qx "ibv_reg_mr of shared anonymous memory: Operation not supported" "$work/data-$side.txt" ||
    fail "$side: attached registration of own or shared memory"
done

ROCE_ATTACH=$work/b.sock timeout 30 "$async" wait-fatal 20 > "$work/fatal.txt" 2>&1 &
fpid=$!
for _ in $(seq 100); do grep -q "device open" "$work/fatal.txt" && break; sleep 0.1; done
kill -9 "$pid_b"
rc=0
wait "$fpid" || rc=$?
sed 's/^/after roced B died: /' "$work/fatal.txt"
[[ $rc == 0 ]] && grep -qx "async event: local catastrophic error" "$work/fatal.txt" ||
  fail "no IBV_EVENT_DEVICE_FATAL when roced went away"
echo OK
