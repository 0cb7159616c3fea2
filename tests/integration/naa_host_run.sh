#!/usr/bin/env bash
# A host program of the NAAICE library (linked with the appliance transport, naaice_roce) against
# roce-naa on a memif pair (no hugepages, no root): naa_host_threads.c, naa_host_overlap.c.
#   naa_host_run.sh ROCE_NAA CONNECTIONS "ROCE_NAA_OPTIONS" PROGRAM [ARGS...]
# PROGRAM is run as PROGRAM 192.0.2.1 ARGS... and prints PASS or FAIL; roce-naa serves
# CONNECTIONS connections, then exits.
set -euo pipefail
naa=$(realpath "$1") conns=$2 naa_opts=$3 prog=$(realpath "$4")
shift 4
work=$(mktemp -d /tmp/naa-host-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; [[ -n ${NAA_KEEP:-} ]] || rm -rf "$work"; }
trap cleanup EXIT
sock=$work/memif.sock
# shellcheck disable=SC2086  # the options are words
"$naa" --memif-socket "$sock" --ip 192.0.2.1 --mac 02:00:00:00:00:01 --exit-after "$conns" \
  --timeout 60 $naa_opts > "$work/naa.log" 2>&1 &
pid=$!
for _ in $(seq 150); do grep -q "listening on rdma_cm port" "$work/naa.log" && break; sleep 0.1; done
export NAAICE_ROCE="pmd=memif,socket=$sock,role=client,ip=192.0.2.2,mac=02:00:00:00:00:02"
rc=0
timeout 120 "$prog" 192.0.2.1 "$@" || rc=$?
if [[ $rc != 0 ]]; then
  kill "$pid" 2>/dev/null || true
fi
wait "$pid" || [[ $rc != 0 ]] || rc=$?
pid=
sed 's/^/naa: /' "$work/naa.log"
[[ $rc == 0 ]] || { echo "FAIL $(basename "$prog"): exit status $rc"; exit 1; }
