#!/usr/bin/env bash
# verbs_async (a libibverbs program) as server and client, each in-process under
# libroce-verbs.so on one end of a net_memif link: a WRITE with a wrong rkey must reach the
# client as a remote access error through its completion channel's fd, and the server as
# IBV_EVENT_QP_ACCESS_ERR through async_fd (verbs_async.c).
#   verbs_async.sh LIBROCE_VERBS VERBS_ASYNC WORKDIR
set -euo pipefail
lib=$(realpath "$1") prog=$(realpath "$2") work=$3
# shellcheck source=tests/integration/lib_ports.sh
. "$(dirname "$0")/lib_ports.sh"
rm -rf "$work" && mkdir -p "$work"
port=$(port_base 1)
LD_PRELOAD=$lib ROCE_LINK="--pmd memif-server --iface $work/memif.sock --ip 192.0.2.76 --mac 02:00:00:00:00:76" \
  timeout 60 "$prog" server "$port" > "$work/server.txt" 2>&1 &
spid=$!
rc=0
LD_PRELOAD=$lib ROCE_LINK="--pmd memif --iface $work/memif.sock --ip 192.0.2.77 --mac 02:00:00:00:00:77" \
  timeout 60 "$prog" client "$port" 127.0.0.1 > "$work/client.txt" 2>&1 || rc=$?
wait "$spid" || rc=$?
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ $rc == 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
grep -q "^completion: wr_id 7, remote access error$" "$work/client.txt" || { echo "FAIL: client"; exit 1; }
grep -q "^async event: local access violation work queue error, element is our QP: yes$" \
  "$work/server.txt" || { echo "FAIL: server"; exit 1; }
echo OK
