#!/usr/bin/env bash
# Debian's unmodified perftest attached to roced, launched by roce-run --attach: two roced on a
# net_memif link, the server a client of B, the client a client of A; perftest registers its
# own memory (attached registration adopts its pages, verbs/memory) and posts with its default
# API. Each run must exit 0 on both sides and print its result row; ib_write_bw and ib_read_bw
# also their bandwidth (MB/s, above zero).
#   verbs_attached_perftest.sh ROCED ROCE_RUN WORKDIR "TEST ARGS" ...   (ARGS go to both sides)
set -euo pipefail
roced=$(realpath "$1") run=$(realpath "$2") work=$3
shift 3
for t in "$@"; do
  read -r prog _ <<< "$t"
  command -v "$prog" >/dev/null || { echo "skipped: $prog not installed (Debian package perftest)"; exit 77; }
done
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vattperf$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
port=$(port_base 3)
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0d:21 192.0.2.95 0
appliance b client 02:00:5e:00:0d:22 192.0.2.96 1
fail() { echo "FAIL: $*"; exit 1; }

for t in "$@"; do
  read -r -a argv <<< "$t"
  prog=${argv[0]} name=${argv[0]#ib_}
  args=("${argv[@]:1}" -d roce0 -x 0 -F -p "$port")
  timeout 60 "$run" --attach "$work/b.sock" -- "$prog" "${args[@]}" > "$work/$name-server.txt" 2>&1 &
  spid=$!
  for _ in $(seq 100); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  rc=0
  timeout 60 "$run" --attach "$work/a.sock" -- "$prog" "${args[@]}" 127.0.0.1 \
    > "$work/$name-client.txt" 2>&1 || rc=$?
  wait "$spid" || rc=$?
  sed "s/^/$prog server: /" "$work/$name-server.txt"
  sed "s/^/$prog client: /" "$work/$name-client.txt"
  [[ $rc == 0 ]] || fail "$prog exited with $rc"
  # The result row: a number of bytes and iterations, then the measurements.
  row=$(grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+" "$work/$name-client.txt" | tail -1 | xargs)
  [[ -n $row ]] || fail "$prog: no result row"
  if [[ $prog == *_bw ]]; then
    awk '{ exit !($4 > 0) }' <<< "$row" || fail "$prog: no bandwidth in '$row'"
  fi
  echo "PASS $t attached (roce-run --attach): $row"
  port=$((port + 1))
done
echo OK
