#!/usr/bin/env bash
# rdma_cm through the attach socket (libroce's cm_* calls): client processes of two roced on a
# net_memif link connect by rdma_cm alone (no TCP), as librdmacm's rdma_server/rdma_client do.
# roced A also hosts the accelerator service on rdma_cm port 12345: its CM (QP1) is shared.
#  1. a client of A listens on 7471, one of B connects with private data; 16 bytes each way,
#     echoed and checked; disconnect; twice;
#  2. listening on the hosted service's port is refused (EADDRINUSE), so is a second listener;
#  3. a rejecting server: the client sees REJECTED with the server's private data;
#  4. a port nobody listens to: REJECTED, invalid service ID;
#  5. the C API (roce/roce.h): the server's buffer address and rkey in its accept's private
#     data, the client WRITEs and SENDs 8 KiB, the server checks both;
#  6. kill -9 of a connected server process: its client (of B) sees the connection end;
#  7. roced A's QP count is back at its baseline.
#   cm_attach.sh ROCED ROCE_CTL ROCE_CM_EXAMPLE ROCE_ATTACH_EXAMPLE_C WORKDIR
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") ex=$(realpath "$3") exc=$(realpath "$4") work=$5
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
ports=$(port_base 2)
tag=cma$$ prom=127.0.0.1:$ports
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0f:01 192.0.2.111 0 "$prom" "services:
  - test: naa
    port: p0
    listen_port: 12345"
appliance b client 02:00:5e:00:0f:02 192.0.2.112 1 "127.0.0.1:$((ports + 1))"
grep -q "service naa: rdma_cm port 12345" "$work/a.log" || { cat "$work/a.log"; echo "FAIL: no naa service"; exit 1; }
listening() {  # LOG: wait until the server there listens
  for _ in $(seq 100); do grep -q "listening on rdma_cm port" "$1" && return 0; sleep 0.05; done
  cat "$1"; echo "FAIL: no listener"; exit 1
}
counter() { "$ctl" -p "$prom" --all counters | awk -v n="$1" '$1 == "p0" && $2 == n { print $3 }'; }
sleep 0.3
base_qps=$(counter qps)

# 1. two connections, data checked
"$ex" --socket "$work/a.sock" --listen 7471 --echo --count 2 > "$work/server.log" 2>&1 &
s=$!
for i in 1 2; do
  "$ex" --socket "$work/b.sock" --connect 192.0.2.111:7471 --echo --private "hello $i" \
    > "$work/client$i.log" 2>&1 || { cat "$work/server.log" "$work/client$i.log"; echo "FAIL: client $i"; exit 1; }
  grep -q "OK: connected by rdma_cm, 16 bytes each way, disconnected" "$work/client$i.log"
done
wait $s || { cat "$work/server.log"; echo "FAIL: server"; exit 1; }
cat "$work/server.log"
grep -q "private data 56 bytes: 'hello 1'" "$work/server.log"
[[ $(grep -c "^OK: connection" "$work/server.log") == 2 ]]

# 2. ports taken
if "$ex" --socket "$work/a.sock" --listen 12345 > "$work/taken.log" 2>&1; then
  echo "FAIL: listening on the hosted service's port succeeded"; exit 1; fi
grep -q "cm_listen: Address already in use" "$work/taken.log"

# 3. a rejecting server
"$ex" --socket "$work/a.sock" --listen 7472 --reject > "$work/rejecter.log" 2>&1 &
s=$!
listening "$work/rejecter.log"
"$ex" --socket "$work/b.sock" --connect 192.0.2.111:7472 --expect-reject > "$work/rejected.log" 2>&1 \
  || { cat "$work/rejecter.log" "$work/rejected.log"; echo "FAIL: reject"; exit 1; }
wait $s
grep -q "OK: rejected (reason 28), private data 'go away'" "$work/rejected.log"

# 4. nobody listens
"$ex" --socket "$work/b.sock" --connect 192.0.2.111:7999 --expect-reject > "$work/nobody.log" 2>&1 \
  || { cat "$work/nobody.log"; echo "FAIL: connect to nobody"; exit 1; }
grep -q "OK: rejected (reason 8)" "$work/nobody.log"

# 5. the C API
"$exc" "$work/a.sock" cm-listen 7473 > "$work/c-server.log" 2>&1 &
s=$!
listening "$work/c-server.log"
"$exc" "$work/b.sock" cm-connect 7473 192.0.2.111 > "$work/c-client.log" 2>&1 \
  || { cat "$work/c-server.log" "$work/c-client.log"; echo "FAIL: C client"; exit 1; }
wait $s || { cat "$work/c-server.log"; echo "FAIL: C server"; exit 1; }
cat "$work/c-server.log" "$work/c-client.log"
grep -q "OK: WRITE and SEND of 8192 bytes verified (connected by rdma_cm)" "$work/c-server.log"

# 6. kill -9 of a connected process
"$ex" --socket "$work/a.sock" --listen 7474 --hold > "$work/victim.log" 2>&1 &
s=$!
listening "$work/victim.log"
"$ex" --socket "$work/b.sock" --connect 192.0.2.111:7474 --hold > "$work/survivor.log" 2>&1 &
c=$!
for _ in $(seq 100); do grep -q holding "$work/victim.log" && break; sleep 0.05; done
grep -q holding "$work/victim.log" || { cat "$work/victim.log"; echo "FAIL: not connected"; exit 1; }
kill -9 $s
wait $s 2>/dev/null || true
wait $c || { cat "$work/survivor.log"; echo "FAIL: the peer did not see the end"; exit 1; }
grep -q "OK: the peer ended the connection" "$work/survivor.log"

# 7. nothing left behind
sleep 0.4
[[ $(counter qps) == "$base_qps" ]] || { echo "FAIL: QPs left: $(counter qps), baseline $base_qps"; exit 1; }
echo "cm_attach: OK"
