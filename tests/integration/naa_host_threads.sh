#!/usr/bin/env bash
# Several threads of one host process, each with its own NAAICE connections (naa_host_threads.c),
# against roce-naa on a memif pair (no hugepages, no root).
#   naa_host_threads.sh ROCE_NAA NAA_HOST_THREADS [THREADS]
set -euo pipefail
naa=$(realpath "$1") prog=$(realpath "$2") threads=${3:-4}
work=$(mktemp -d /tmp/naa-threads-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; [[ -n ${NAA_KEEP:-} ]] || rm -rf "$work"; }
trap cleanup EXIT
sock=$work/memif.sock
"$naa" --memif-socket "$sock" --ip 192.0.2.1 --mac 02:00:00:00:00:01 --exit-after "$threads" \
  --timeout 60 > "$work/naa.log" 2>&1 &
pid=$!
for _ in $(seq 150); do grep -q "listening on rdma_cm port" "$work/naa.log" && break; sleep 0.1; done
export NAAICE_ROCE="pmd=memif,socket=$sock,role=client,ip=192.0.2.2,mac=02:00:00:00:00:02"
rc=0
timeout 120 "$prog" 192.0.2.1 "$threads" || rc=$?
if [[ $rc != 0 ]]; then
  kill "$pid" 2>/dev/null || true
fi
wait "$pid" || [[ $rc != 0 ]] || rc=$?
pid=
sed 's/^/naa: /' "$work/naa.log"
[[ $rc == 0 ]] || { echo "FAIL naa_host_threads: exit status $rc"; exit 1; }
