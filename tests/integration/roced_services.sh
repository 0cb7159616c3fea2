#!/usr/bin/env bash
# roced hosting perftest servers as configured services: roced in one network namespace (RoCE on
# net_af_packet over a veth pair, the out-of-band TCP on a second veth pair, the management
# link), roce-perf clients in the other. Two tests run against the same service one after the
# other, with a garbage-speaking client and a vanishing one in between, then another service;
# roce-ctl must show no QP left, and SIGTERM a clean stop.
# Exits 77 (skipped) without root or network namespaces.
#   roced_services.sh ROCED ROCE_CTL ROCE_PERF [LCORES]
# With LCORES=2 the appliance runs two lcores on the port (two af_packet queues whose frames
# the kernel spreads by flow hash): what one lcore receives for the other's QPs is steered.
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") perf=$(realpath "$3") lcores=${4:-1}
lcore_list=0 qpairs=1
[[ $lcores == 2 ]] && lcore_list="0, 1" qpairs=2
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then echo "skipped: needs root"; exit 77; fi
a=roced-svc-a-$$ b=roced-svc-b-$$
work=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
  ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/integration/ns_pair.sh
. "$(dirname "$0")/ns_pair.sh"
ns_pair_up "$a" "$b"
cat > "$work/roced.yaml" <<YAML
name: services-test
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=rocedsvc$$, "--log-level=*:error"]
  lcores: [$lcore_list]
ports:
  - name: p0
    device: net_af_packet0
    devargs: iface=veth-a,qpairs=$qpairs
    mac: 02:00:00:00:01:11
    ipv4: 192.0.2.111/24
counters:
  prometheus: 127.0.0.1:19465
  telemetry: false
control:
  listen: 192.0.2.11:18599  # the management link: the services listen there
services:
  - test: write_bw
    port: p0
    listen_port: 18515
    args: ["-n", "200", "--timeout", "12"]
  - test: send_lat
    listen_port: 18516
    args: ["-n", "200", "-s", "64"]
YAML
ip netns exec "$a" "$roced" --config "$work/roced.yaml" > "$work/roced.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " up on lcore" "$work/roced.log" && break; sleep 0.2; done
grep -q "service send_lat: TCP 18516" "$work/roced.log" || { cat "$work/roced.log"; exit 1; }
client() {
  ip netns exec "$b" "$perf" "$@" --iface veth-b --ip 192.0.2.112 --mac 02:00:00:00:01:12 \
    --timeout 30 192.0.2.11
}
client write_bw -n 200 | tail -3
# The services listen on the management address only: not on the appliance's loopback.
if ip netns exec "$a" /usr/bin/python3 -c 'import socket; socket.create_connection(("127.0.0.1", 18515), timeout=3)' 2>/dev/null; then
  echo "FAIL: a service answers on 127.0.0.1, not only on the management address"; exit 1
fi
# A client that connects and says nothing must not hold the service up: it waits aside and
# is dropped at its deadline (the service's --timeout, 12 s) while others are served.
ip netns exec "$b" /usr/bin/python3 -c 'import socket, time; s = socket.create_connection(("192.0.2.11", 18515)); time.sleep(14)' &
silent=$!
sleep 0.5
start=$(date +%s)
client write_bw -n 200 | tail -2
elapsed=$(( $(date +%s) - start ))
[[ $elapsed -lt 10 ]] || { echo "FAIL: a silent client held the service up for ${elapsed} s"; exit 1; }
# A client that speaks garbage, and one that vanishes mid-exchange: each must cost one failed
# run, not the daemon (the next client is served as usual).
ip netns exec "$b" /usr/bin/python3 - <<'PY'
import socket, time
s = socket.create_connection(("192.0.2.11", 18515), timeout=10)
s.sendall(b"6.06".ljust(16, b"\0"))                   # version
s.recv(16)
s.sendall(b"\0\0\x10\0"); s.recv(4)                  # cycle buffer
s.sendall(b"\0\0\0\x40"); s.recv(4)                  # cache line
s.sendall(b"3\0"); s.recv(2)                          # MTU
s.sendall(b"not a QP address".ljust(108, b"?"))       # garbage where the QP address goes
time.sleep(0.5)
s.close()
s = socket.create_connection(("192.0.2.11", 18515), timeout=10)
s.sendall(b"6.06".ljust(16, b"\0"))
s.close()                                              # gone after the version
PY
client write_bw -n 200 | tail -2
client send_lat -n 200 -s 64 -p 18516 | tail -2
wait "$silent" 2>/dev/null || true  # its deadline has passed: roced dropped it
sleep 0.3
ip netns exec "$a" "$ctl" -p 127.0.0.1:19465 --all counters > "$work/counters.txt"; grep -E "qps|retransmitted" "$work/counters.txt"
grep -Eq "^p0 +qps +0$" "$work/counters.txt" || { echo "FAIL: QPs left behind"; exit 1; }
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
cat "$work/roced.log"
grep -q "service write_bw failed: malformed QP address from the peer" "$work/roced.log"
grep -q "service write_bw failed: the peer closed the exchange connection" "$work/roced.log"
grep -q "service write_bw: a client sent nothing within 12 s, dropped" "$work/roced.log"
grep -q "service write_bw (TCP 18515): 5 runs, 2 failed, 1 silent clients dropped" "$work/roced.log"
grep -q "service send_lat (TCP 18516): 1 runs, 0 failed" "$work/roced.log"
grep -q "stopping (SIGTERM)" "$work/roced.log"
if [[ $lcores == 2 ]]; then grep -q "frames steered to another lcore" "$work/roced.log"; fi
exit $rc
