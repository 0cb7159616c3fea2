#!/usr/bin/env bash
# Debian's unmodified ibverbs-utils attached to roced through libroce-verbs.so (ROCE_ATTACH):
# two roced on a net_memif link; ibv_devices and ibv_devinfo -v see A's port (its GUID, ACTIVE,
# its MTU and RoCE v2 GID), then ibv_rc_pingpong runs between a client of A and a client of B.
# The pingpong registers the program's own memory, which attached mode takes once the attached
# memory sharing is there; until then it must stop at ibv_reg_mr with the provider's message.
#   verbs_attached.sh ROCED LIBROCE_VERBS WORKDIR
set -euo pipefail
roced=$(realpath "$1") lib=$(realpath "$2") work=$3
command -v ibv_devinfo >/dev/null || { echo "skipped: ibverbs-utils not installed"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vattach$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
port=$(port_base 1)
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
ROCE_ATTACH=$work/a.sock timeout 30 ibv_devinfo -v > "$work/devinfo.txt" 2>&1 ||
  fail "ibv_devinfo -v: $(cat "$work/devinfo.txt")"
expect() { grep -Eq "$1" "$work/devinfo.txt" || fail "ibv_devinfo -v: no line matching '$1'"; }
expect "^[[:space:]]+fw_ver:[[:space:]]+roce 0.1.0 \(attached\)$"
expect "^[[:space:]]+state:[[:space:]]+PORT_ACTIVE \(4\)$"
expect "^[[:space:]]+active_mtu:[[:space:]]+(1024 \(3\)|2048 \(4\)|4096 \(5\))$"
expect "^[[:space:]]+GID\[  0\]:[[:space:]]+::ffff:192.0.2.93, RoCE v2$"
echo "ibv_devinfo -v: port ACTIVE, $(grep -E 'active_mtu' "$work/devinfo.txt" | xargs), GID ::ffff:192.0.2.93 RoCE v2"

ROCE_ATTACH=$work/b.sock timeout 30 ibv_rc_pingpong -d roce0 -g 0 -p "$port" -n 100 \
  > "$work/pp-server.txt" 2>&1 &
spp=$!
for _ in $(seq 100); do
  ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
  grep -q "Couldn't register MR" "$work/pp-server.txt" && break
  sleep 0.1
done
rc=0
ROCE_ATTACH=$work/a.sock timeout 30 ibv_rc_pingpong -d roce0 -g 0 -p "$port" -n 100 127.0.0.1 \
  > "$work/pp-client.txt" 2>&1 || rc=$?
wait "$spp" || rc=$?
sed 's/^/pingpong server: /' "$work/pp-server.txt"
sed 's/^/pingpong client: /' "$work/pp-client.txt"
if grep -q "ibv_reg_mr registers only memory roced shares" "$work/pp-server.txt"; then
  grep -q "Couldn't register MR" "$work/pp-server.txt" || fail "no ibv_reg_mr failure after the message"
  echo "ibv_rc_pingpong attached: stops at ibv_reg_mr (EOPNOTSUPP: the program's memory is not shared with roced yet)"
else
  [[ $rc == 0 ]] || fail "ibv_rc_pingpong exited with $rc"
  for side in server client; do
    grep -Eq "^[0-9]+ iters in [0-9.]+ seconds" "$work/pp-$side.txt" || fail "$side did not finish"
  done
fi
echo OK
