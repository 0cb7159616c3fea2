#!/usr/bin/env bash
# roced hosting the NAA as a configured service (services: - test: naa) on a net_memif port;
# the NAAICE host example (host library on the appliance's stack) on the other end of the link:
# every kernel with 2 hosts at once, then one MRSP error and one application error; SIGTERM
# must stop the daemon cleanly with the service's counters in its log. No root needed.
#   naa_roced.sh ROCED NAAICE_CLIENT_ROCE
set -euo pipefail
roced=$(realpath "$1") client=$(realpath "$2")
work=$(mktemp -d /tmp/naa-roced-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
cat > "$work/roced.yaml" <<YAML
name: naa-test
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=rocednaa$$, "--log-level=*:error"]
ports:
  - name: p0
    device: net_memif0
    devargs: role=server,id=0,socket-abstract=no,socket=$work/memif.sock
    mac: 02:00:00:00:00:01
    ipv4: 192.0.2.1/24
counters:
  telemetry: false
services:
  - test: naa
    port: p0
    listen_port: 12345
    args: ["--max-hosts", "4", "--memory-per-host", "16"]
YAML
"$roced" --config "$work/roced.yaml" > "$work/roced.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "service naa: rdma_cm port" "$work/roced.log" && break; sleep 0.1; done
grep -q "service naa: rdma_cm port 12345" "$work/roced.log" || { cat "$work/roced.log"; echo "FAIL: no naa service"; exit 1; }
export NAAICE_ROCE="pmd=memif,socket=$work/memif.sock,role=client,ip=192.0.2.2,mac=02:00:00:00:00:02"
rc=0
"$client" -k all -s 4096 -n 2 -H 2 192.0.2.1 || rc=$?
"$client" -e invalid-address -M 16 192.0.2.1 || rc=$?
"$client" -e bad-param-size 192.0.2.1 || rc=$?
kill -TERM "$pid"
wait "$pid" || rc=$?
pid=
sed 's/^/roced: /' "$work/roced.log"
[[ $rc == 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
grep -q "calls 22, failed 1" "$work/roced.log" || { echo "FAIL: the service's counters are not as expected"; exit 1; }
echo "PASS naa_roced"
