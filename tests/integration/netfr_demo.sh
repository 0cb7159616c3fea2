#!/usr/bin/env bash
# roce-netfr-demo's host and client on a net_memif link: synthetic RGBA frames and a cursor
# stream for a few seconds per resolution; the client checks every frame and cursor message and
# must report 0 dropped; the latency plot must be written.
#   netfr_demo.sh ROCE_NETFR_DEMO FPS SECONDS RESOLUTIONS [OUT_DIR] [ORDER]
# ORDER: strict (default: the client's NFRInitOpts.totalOrder) or relaxed (upstream NetFR's order).
set -euo pipefail
demo=$(realpath "$1") fps=$2 secs=$3 res=$4 out=${5:-} order=${6:-strict}
work=$(mktemp -d /tmp/netfr-demo-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
sock=$work/memif.sock link="window=16777216"
NETFR_LINK="pmd=memif,socket=$sock,role=server,ip=192.0.2.1,mac=02:00:00:00:00:01,$link" \
  "$demo" host --fps "$fps" --seconds "$secs" --res "$res" > "$work/host.log" 2>&1 &
pid=$!
for _ in $(seq 150); do grep -qs "waiting for a client" "$work/host.log" && break; sleep 0.1; done
rc=0
NETFR_LINK="pmd=memif,socket=$sock,role=client,ip=192.0.2.2,mac=02:00:00:00:00:02,$link" \
  timeout 600 "$demo" client 192.0.2.1 --svg "$work/latency.svg" --order "$order" > "$work/client.log" 2>&1 || rc=$?
wait "$pid" || rc=$?
pid=
sed 's/^/host: /' "$work/host.log"
tr '\r' '\n' < "$work/client.log" | grep -v '^$' | tail -n 12 | sed 's/^/client: /'
[[ -n $out ]] && mkdir -p "$out" && cp "$work/latency.svg" "$work/client.log" "$out/"
[[ $rc == 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
grep -q "<polyline" "$work/latency.svg" || { echo "FAIL: no latency plot"; exit 1; }
grep -q "PASS netfr demo" "$work/client.log" || { echo "FAIL: the client did not pass"; exit 1; }
echo "PASS netfr_demo"
