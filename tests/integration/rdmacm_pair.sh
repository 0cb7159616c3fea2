#!/usr/bin/env bash
# One of Debian's unmodified rdmacm-utils tools between two processes, each with the appliance
# in-process under libroce-verbs.so (LD_PRELOAD, ROCE_LINK) on one end of a net_memif link and
# our librdmacm.so.1 (LD_LIBRARY_PATH): rping, ucmatose, rdma_server/rdma_client, udaddy, cmtime,
# or give_up (CM_GIVE_UP names tests/integration/cm_give_up.c's program, the client).
# Both sides must exit 0 and print what the tool prints when it worked (cmtime's server runs
# until it is stopped: it must still be running when its client is done).
#   rdmacm_pair.sh LIBROCE_VERBS RDMACM_DIR WORKDIR TOOL
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") work=$3 tool=$4
srv_ip=192.0.2.81 cli_ip=192.0.2.82
case $tool in
  rping)
    server=(rping -s -a "$srv_ip" -v -C 10) client=(rping -c -a "$srv_ip" -v -C 10) ;;
  ucmatose)
    server=(ucmatose -b "$srv_ip" -c 2 -C 20 -S 1000) client=(ucmatose -s "$srv_ip" -c 2 -C 20 -S 1000) ;;
  rdma_client)
    server=(rdma_server -s "$srv_ip") client=(rdma_client -s "$srv_ip") ;;
  udaddy)
    server=(udaddy -b "$srv_ip" -c 2 -C 10) client=(udaddy -s "$srv_ip" -c 2 -C 10) ;;
  cmtime)  # 100 connections set up and torn down at once
    server=(cmtime -b "$srv_ip" -c 100) client=(cmtime -s "$srv_ip" -c 100) ;;
  give_up)  # a client destroys its id right after rdma_connect: rping's server is told REJECTED
    server=(rping -s -a "$srv_ip" -v -C 1)
    client=("${CM_GIVE_UP:?the cm_give_up program (tests/integration/cm_give_up.c) in CM_GIVE_UP}"
      "$srv_ip" 7174 1000) ;;
  *) echo "rdmacm_pair.sh: unknown tool $tool"; exit 2 ;;
esac
command -v "${server[0]}" >/dev/null || { echo "skipped: ${server[0]} not installed (rdmacm-utils)"; exit 77; }
[[ -e $cmdir/librdmacm.so.1 ]] || { echo "FAIL: no librdmacm.so.1 in $cmdir"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
link="--pmd memif --iface $work/memif.sock --netdev-mtu 1500"
run() {  # run LINK_FLAGS CMD... : the tool with the appliance in-process and our librdmacm
  local flags=$1; shift
  LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir ROCE_LINK="$flags" timeout 60 "$@"
}
# Not through run(): $! is then timeout's pid, which passes a kill on to the tool.
LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir \
  ROCE_LINK="${link/memif /memif-server } --ip $srv_ip --mac 02:00:00:00:00:81" \
  timeout 60 "${server[@]}" > "$work/server.txt" 2>&1 &
spid=$!
# The server's memif socket appears when it has opened the device; it listens right after.
for _ in $(seq 100); do
  [[ -S $work/memif.sock ]] && break
  sleep 0.1
done
sleep 0.5
rc=0
run "$link --ip $cli_ip --mac 02:00:00:00:00:82" "${client[@]}" > "$work/client.txt" 2>&1 || rc=$?
src=0
if [[ $tool == cmtime ]]; then
  kill -0 "$spid" 2>/dev/null || { wait "$spid" || src=$?; echo "FAIL: cmtime's server ended ($src)"; src=1; }
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
elif [[ $tool == give_up ]]; then
  # rping's server ends at the REJECTED event (its status: the REJ's reason) with status 255;
  # without the REJ it would wait for the RTU until its REP retries ran out (about a minute).
  for _ in $(seq 100); do
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$spid" 2>/dev/null && { echo "FAIL: rping's server still waits 10 s after the REJ"; kill "$spid"; }
  wait "$spid" 2>/dev/null || true
else
  wait "$spid" || src=$?
fi
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
# Our librdmacm, not Debian's, must have served them.
[[ $rc == 0 ]] || { echo "FAIL: client ${client[0]} exited with $rc"; exit 1; }
[[ $src == 0 ]] || { echo "FAIL: server ${server[0]} exited with $src"; exit 1; }
need() {  # need SIDE PATTERN [COUNT]
  local n
  n=$(grep -Ec "$2" "$work/$1.txt" || true)
  ((n >= ${3:-1})) || { echo "FAIL: $1: $n lines matching '$2', wanted ${3:-1}"; exit 1; }
}
case $tool in
  rping)
    need client '^ping data: rdma-ping-[0-9]: ' 10
    need server '^server ping data: rdma-ping-9: '
    need server 'server DISCONNECT EVENT' ;;
  ucmatose | udaddy)
    need server '^data transfers complete' && need client '^data transfers complete'
    need server '^return status 0' && need client '^return status 0' ;;
  rdma_client)
    need server 'rdma_server: end 0' && need client 'rdma_client: end 0' ;;
  give_up)
    need client '^gave the connect up'
    need server 'RDMA_CM_EVENT_REJECTED, error 4' ;;
  cmtime)
    need client '^connect +:' && need client '^disconnect +:'
    # All at once, yet no step waits for a retransmitted MAD (4.6 s).
    awk '/^(connect|disconnect) +:/ && $3 > 3000 { bad = 1; print "FAIL: " $0 } END { exit bad }' \
      "$work/client.txt" ;;
esac
echo "OK: ${server[*]} / ${client[*]}"
