#!/usr/bin/env bash
# roce-perf attached to roced (--attach): perftest's tests run in client processes of two roced
# instances on a net_memif link; the QPs live in the roceds' dataplanes, the exchange is
# perftest's TCP one. write_bw, read_bw and send_bw with 8-byte and 64 KiB messages, send_lat
# and write_lat with -e (the clients sleep on their CQs' eventfd), read_lat polling; every run
# must print its perftest table and a JSON file marked attached. Then a client of A runs
# write_bw against the in-process roce-perf (--pmd memif) that replaces roced B: the same test,
# both backends, one wire.
#   perf_attached.sh ROCED ROCE_PERF WORKDIR
set -euo pipefail
roced=$(realpath "$1") perf=$(realpath "$2") work=$3
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=pattach$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
tcp=$(port_base 32)
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0c:01 192.0.2.91 0
appliance b client 02:00:5e:00:0c:02 192.0.2.92 1

n=0
pair() {  # NAME TEST ARGS...: server attached to B, client attached to A
  local name=$1 test=$2; shift 2
  n=$((n + 1))
  local port=$((tcp + n))
  "$perf" "$test" --attach "$work/b.sock" -p "$port" --json "$work/$name-s.json" "$@" \
    > "$work/$name-s.log" 2>&1 &
  local s=$!
  "$perf" "$test" --attach "$work/a.sock" -p "$port" --json "$work/$name-c.json" "$@" 127.0.0.1 \
    > "$work/$name-c.log" 2>&1 || { cat "$work/$name-s.log" "$work/$name-c.log"; echo "FAIL: $name client"; exit 1; }
  wait "$s" || { cat "$work/$name-s.log"; echo "FAIL: $name server"; exit 1; }
  grep -q '"attached":true' "$work/$name-c.json" || { echo "FAIL: $name: JSON not marked attached"; exit 1; }
  echo "== $name"; cat "$work/$name-c.log"
}
row() {  # LOG: the numbers row of a perftest table (first field numeric)
  awk '$1 ~ /^[0-9]+$/ && NF >= 5' "$1" | tail -1
}
pair write8 write_bw -s 8 -n 5000
[[ $(row "$work/write8-c.log" | awk '{print $2}') == 5000 ]] || { echo "FAIL: write_bw 8 B row"; exit 1; }
pair write64k write_bw -s 65536 -n 400
pair read64k read_bw -s 65536 -n 400
pair send8 send_bw -s 8 -n 5000
pair sendlat send_lat -s 8 -n 200 -e
pair writelat write_lat -s 64 -n 200 -e
pair readlat read_lat -s 8 -n 200
for t in write8 write64k read64k send8; do
  awk -v t=$t '$1 ~ /^[0-9]+$/ && NF >= 5 { if ($4 <= 0) { print "FAIL: " t ": no bandwidth"; exit 1 } }' "$work/$t-c.log"
done
for t in sendlat writelat readlat; do
  grep -q '"t_typical_usec":' "$work/$t-c.json" || { echo "FAIL: $t: no latency in JSON"; exit 1; }
done

# Bad use: a socket with nobody behind it, and the in-process-only options.
if "$perf" write_bw --attach "$work/none.sock" 127.0.0.1 > "$work/bad1.log" 2>&1; then
  echo "FAIL: attaching to a missing socket succeeded"; exit 1; fi
grep -q "cannot attach to $work/none.sock" "$work/bad1.log" || { cat "$work/bad1.log"; exit 1; }
if "$perf" write_bw --attach "$work/a.sock" --iface eth0 127.0.0.1 > "$work/bad2.log" 2>&1; then
  echo "FAIL: --iface with --attach accepted"; exit 1; fi
grep -q "belong to an in-process port" "$work/bad2.log" || { cat "$work/bad2.log"; exit 1; }
if "$perf" rc_pingpong --attach "$work/a.sock" > "$work/bad3.log" 2>&1; then
  echo "FAIL: rc_pingpong --attach accepted"; exit 1; fi

# The in-process backend on the same wire: roce-perf owns B's end of the memif link.
kill "$pid_b"; wait "$pid_b" 2>/dev/null || true
n=$((n + 1))
"$perf" write_bw --pmd memif --iface "$work/memif.sock" --ip 192.0.2.92 --mac 02:00:5e:00:0c:02 \
  -p $((tcp + n)) -s 8 -n 5000 --json "$work/local-s.json" > "$work/local-s.log" 2>&1 &
s=$!
"$perf" write_bw --attach "$work/a.sock" -p $((tcp + n)) -s 8 -n 5000 127.0.0.1 \
  > "$work/mixed-c.log" 2>&1 || { cat "$work/local-s.log" "$work/mixed-c.log"; echo "FAIL: attached client against in-process server"; exit 1; }
wait "$s" || { cat "$work/local-s.log"; echo "FAIL: in-process server"; exit 1; }
grep -q '"attached":false' "$work/local-s.json"
cat "$work/mixed-c.log"
echo "perf_attached: OK"
