#!/usr/bin/env bash
# Debian's unmodified rstream and riostream attached to roced, launched by roce-run --attach:
# two roced on a net_memif link, the server a client of B (192.0.2.96), the client a client of A.
# rsockets' buffers are the program's heap (attached registration adopts the pages) and the
# peer writes into them by RDMA. Each run verifies its data (-T v), must exit 0 on both sides
# and print its result line.
#   rsocket_attached.sh ROCED ROCE_RUN WORKDIR "TOOL ARGS" ...   (ARGS go to both sides)
set -euo pipefail
roced=$(realpath "$1") run=$(realpath "$2") work=$3
shift 3
command -v rstream >/dev/null || { echo "skipped: rstream not installed (rdmacm-utils)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vattrs$$
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0d:31 192.0.2.97 0
appliance b client 02:00:5e:00:0d:32 192.0.2.98 1
fail() { echo "FAIL: $*"; exit 1; }
n=0
for t in "$@"; do
  read -r -a argv <<< "$t"
  prog=${argv[0]} args=("${argv[@]:1}" -p $((7480 + n)))
  n=$((n + 1))
  timeout 60 "$run" --attach "$work/b.sock" -- "$prog" -b 192.0.2.98 "${args[@]}" \
    > "$work/$n-server.txt" 2>&1 &
  spid=$!
  sleep 1
  rc=0
  timeout 60 "$run" --attach "$work/a.sock" -- "$prog" -s 192.0.2.98 "${args[@]}" \
    > "$work/$n-client.txt" 2>&1 || rc=$?
  wait "$spid" || rc=$?
  sed "s/^/$prog server: /" "$work/$n-server.txt"
  sed "s/^/$prog client: /" "$work/$n-client.txt"
  [[ $rc == 0 ]] || fail "$t exited with $rc"
  for side in server client; do
    grep -Eq '^custom +[0-9]+[kmg]? ' "$work/$n-$side.txt" || fail "$t: no result line ($side)"
    ! grep -q 'verification failed' "$work/$n-$side.txt" || fail "$t: data verification failed"
  done
  echo "PASS $t attached (roce-run --attach): $(grep -E '^custom' "$work/$n-client.txt")"
done
echo OK
