#!/usr/bin/env bash
# The NAA server and the NAAICE host library in each of their modes, from the same code (the
# ConnStack on libroce and its connection layer), on one net_memif link, no root:
#   inprocess:     roce-naa on a DPDK port of its own; the host library in-process too
#   attached:      roce-naa --attach to roced A (A's port); the host library in-process
#   hosted:        the NAA as roced A's service (services: - test: naa); host in-process
#   host-attached: roce-naa in-process; the host library attached to roced B
#                  (naaice_client --attach), the NAAICE host without a DPDK port of its own
#   both-attached: roce-naa attached to roced A, the host attached to roced B with the
#                  attach-only host library (naaice_client_attached: no DPDK, no engine)
# Each runs every kernel with 2 hosts at once (the client checks every result against its
# own computation), then provokes an MRSP error and an application error, and checks the
# NAA's counters.
#   naa_modes.sh ROCED ROCE_NAA NAAICE_CLIENT_ROCE NAAICE_CLIENT_ATTACHED MODE
set -euo pipefail
roced=$(realpath "$1") naa=$(realpath "$2") client=$(realpath "$3") client_att=$(realpath "$4")
mode=$5
work=$(mktemp -d /tmp/naa-modes-XXXXXX)
tag=naam$$
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$(realpath "$0")")/lib_appliance.sh"
cleanup() { local rc=$?; stop_all "$rc"; [[ -n ${NAA_KEEP:-} ]] || rm -rf "$work"; }
trap cleanup EXIT
sock=$work/memif.sock
naa_ip=192.0.2.1 host_ip=192.0.2.2
naa_log=$work/naa.log
naa_pid=
# The NAA side: roce-naa in-process (memif server), attached to roced A, or hosted by A.
case $mode in
  inprocess | host-attached)
    "$naa" --memif-socket "$sock" --ip $naa_ip --mac 02:00:00:00:00:01 --memory-per-host 16 \
      --timeout 60 > "$naa_log" 2>&1 &
    naa_pid=$!
    pids+=("$naa_pid")
    ;;
  attached | both-attached)
    appliance a server 02:00:00:00:00:01 $naa_ip 0
    "$naa" --attach "$work/a.sock" --memory-per-host 16 --timeout 60 > "$naa_log" 2>&1 &
    naa_pid=$!
    pids+=("$naa_pid")
    ;;
  hosted)
    appliance a server 02:00:00:00:00:01 $naa_ip 0 127.0.0.1:0 "services:
  - test: naa
    port: p0
    listen_port: 12345
    args: [\"--memory-per-host\", \"16\"]"
    naa_log=$work/a.log
    ;;
  *) echo "FAIL: unknown mode $mode"; exit 1 ;;
esac
for _ in $(seq 150); do grep -q "listening on rdma_cm port\|service naa: rdma_cm port" "$naa_log" && break; sleep 0.1; done
grep -q "listening on rdma_cm port\|service naa: rdma_cm port" "$naa_log" || { cat "$naa_log"; echo "FAIL: no NAA"; exit 1; }
# The host side: in-process (memif client) or attached to roced B (memif client).
host=("$client")
case $mode in
  host-attached | both-attached)
    appliance b client 02:00:00:00:00:02 $host_ip 1
    [[ $mode == both-attached ]] && host=("$client_att")
    host+=(--attach "$work/b.sock")
    unset NAAICE_ROCE
    ;;
  *)
    export NAAICE_ROCE="pmd=memif,socket=$sock,role=client,ip=$host_ip,mac=02:00:00:00:00:02"
    ;;
esac
rc=0
"${host[@]}" -k all -s 4096 -n 2 -H 2 $naa_ip > "$work/host.log" 2>&1 || rc=$?
"${host[@]}" -e invalid-address -M 16 $naa_ip >> "$work/host.log" 2>&1 || rc=$?
"${host[@]}" -e bad-param-size $naa_ip >> "$work/host.log" 2>&1 || rc=$?
sed 's/^/host: /' "$work/host.log"
# Stop the NAA cleanly: its counters go to its log.
if [[ -n $naa_pid ]]; then kill -TERM "$naa_pid"; wait "$naa_pid" || rc=$?; fi
# shellcheck disable=SC2154  # pid_a: set by appliance (lib_appliance.sh)
if [[ $mode == hosted ]]; then kill -TERM "$pid_a"; wait "$pid_a" || rc=$?; fi
grep -v "(conn" "$naa_log" | sed 's/^/naa: /'
[[ $rc == 0 ]] || { echo "FAIL naa_modes $mode: exit status $rc"; exit 1; }
# Every kernel's calls (checked by the host), then the one call of bad-param-size (as naa_roced).
grep -q "calls 22, failed 1" "$naa_log" || { echo "FAIL naa_modes $mode: the NAA's counters are not as expected"; exit 1; }
if ! grep -q "rejected 0" "$naa_log" || ! grep -q "transport errors 0" "$naa_log"; then
  echo "FAIL naa_modes $mode: hosts rejected or transport errors"; exit 1
fi
echo "PASS naa_modes $mode"
