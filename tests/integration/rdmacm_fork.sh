#!/usr/bin/env bash
# A forked child's exit and the parent's rdma_cm connections (attached): two roced on
# net_memif, an rdma_cm server attached to B, a client attached to A that forks a child which
# exit()s at once, then disconnects 2 s later (rdmacm_fork.c, our librdmacm.so.1). The server
# must see DISCONNECTED only then: the child's exit handlers must not disconnect the parent's
# connections over the attachment it inherited.
#   rdmacm_fork.sh ROCED LIBROCE_VERBS RDMACM_DIR WORKDIR RDMACM_FORK
set -euo pipefail
roced=$(realpath "$1") lib=$(realpath "$2") cmdir=$(realpath "$3") work=$4 prog=$(realpath "$5")
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=cmfork$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
port=$(port_base 1)
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0f:01 192.0.2.97 0
appliance b client 02:00:5e:00:0f:02 192.0.2.98 1
fail() { echo "FAIL: $*"; exit 1; }
export LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir
ROCE_ATTACH=$work/b.sock timeout 30 "$prog" server "$port" > "$work/server.txt" 2>&1 &
spid=$!
for _ in $(seq 100); do grep -q "listening" "$work/server.txt" && break; sleep 0.1; done
rc=0
ROCE_ATTACH=$work/a.sock timeout 30 "$prog" client 192.0.2.98 "$port" > "$work/client.txt" 2>&1 || rc=$?
wait "$spid" || rc=$?
sed 's/^/client: /' "$work/client.txt"
sed 's/^/server: /' "$work/server.txt"
[[ $rc == 0 ]] || fail "rdmacm_fork exited with $rc"
grep -qx "client: the child exited with 0" "$work/client.txt" || fail "the child did not exit"
line=$(grep -E "^server: RDMA_CM_EVENT_DISCONNECTED after" "$work/server.txt") || fail "no DISCONNECTED"
secs=${line##* after }
secs=${secs% s}
awk -v s="$secs" 'BEGIN { exit !(s >= 1.5) }' || fail "disconnected after $secs s: by the child's exit"
echo "PASS rdmacm_fork"
