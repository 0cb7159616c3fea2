#!/usr/bin/env bash
# Debian's unmodified ibv_devices and ibv_devinfo -v on the appliance's port (libroce-verbs.so,
# in-process on net_memif): the device listed with its GUID, the port ACTIVE once the link's
# other end (a pingpong server waiting for its client) is up, its MTU and its RoCE v2 GID.
#   verbs_devinfo.sh LIBROCE_VERBS WORKDIR
set -euo pipefail
lib=$(realpath "$1") work=$2
command -v ibv_devinfo >/dev/null || { echo "skipped: ibverbs-utils not installed"; exit 77; }
# shellcheck source=tests/integration/lib_ports.sh
. "$(dirname "$0")/lib_ports.sh"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
export LD_PRELOAD=$lib
ROCE_LINK="--pmd memif-server --iface $work/memif.sock --ip 192.0.2.73 --mac 02:00:00:00:00:73" \
  ibv_devices > "$work/devices.txt" 2>&1 || true
cat "$work/devices.txt"
grep -Eq "^[[:space:]]+roce0[[:space:]]+000000fffe000073$" "$work/devices.txt" ||
  fail "ibv_devices does not list roce0 with its GUID"
# the other end of the link: a server that opens the device, then waits for a client
port=$(port_base 1)
ROCE_LINK="--pmd memif-server --iface $work/memif.sock --ip 192.0.2.74 --mac 02:00:00:00:00:74" \
  timeout 30 ibv_rc_pingpong -d roce0 -g 0 -p "$port" > "$work/peer.txt" 2>&1 &
peer=$!
trap 'kill $peer 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -S $work/memif.sock ]] && break; sleep 0.1; done
ROCE_DEVICE=roce7 \
ROCE_LINK="--pmd memif --iface $work/memif.sock --ip 192.0.2.75 --mac 02:00:00:00:00:75 --netdev-mtu 1500" \
  timeout 60 ibv_devinfo -v > "$work/devinfo.txt" 2>&1 || fail "ibv_devinfo -v: $(cat "$work/devinfo.txt")"
cat "$work/devinfo.txt"
expect() { grep -Eq "$1" "$work/devinfo.txt" || fail "ibv_devinfo -v: no line matching '$1'"; }
expect "^hca_id:[[:space:]]+roce7$"
expect "^[[:space:]]+transport:[[:space:]]+InfiniBand \(0\)$"
expect "^[[:space:]]+phys_port_cnt:[[:space:]]+1$"
expect "^[[:space:]]+max_ah:[[:space:]]+32767$"
expect "^[[:space:]]+state:[[:space:]]+PORT_ACTIVE \(4\)$"
expect "^[[:space:]]+max_mtu:[[:space:]]+4096 \(5\)$"
expect "^[[:space:]]+active_mtu:[[:space:]]+1024 \(3\)$"
expect "^[[:space:]]+link_layer:[[:space:]]+Ethernet$"
expect "^[[:space:]]+GID\[  0\]:[[:space:]]+::ffff:192.0.2.75, RoCE v2$"
echo "OK"
