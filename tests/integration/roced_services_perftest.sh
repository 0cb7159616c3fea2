#!/usr/bin/env bash
# roced's hosted perftest servers behave as perftest's own do, on a port with MTU 9000
# (net_af_packet over a veth pair of MTU 9000 in two network namespaces, roce-perf the client):
#  - a client whose -s differs from the server's is served and reported (write_bw), and a
#    send_bw server takes SENDs of another length;
#  - the path MTU defaults to the port's (4096 here), not 1024;
#  - 4 KiB frames both ways: the port layer sizes net_af_packet's ring slots for the MTU (they
#    were 2 KiB: received frames cut short, READ responses dropped by the PMD, no port counter);
#  - the server advertises the second half of its 2 x max(size, cycle buffer) buffer: a client
#    writing past it gets a remote access error, as from perftest;
#  - a write_bw server's buffer grants remote write only: a READ of it is refused;
#  - no frame lost (port_tx_dropped, port_tx_pmd_dropped 0), no QP left;
#  - a port whose ring slots cannot carry its MTU (framesz=2048 given) is refused at start-up;
#  - a server with `selective_repeat: true` accepts roce-perf --selective-repeat, one without
#    the key keeps go-back-N (review 20 finding 9).
# Exits 77 (skipped) without root or network namespaces.
#   roced_services_perftest.sh ROCED ROCE_CTL ROCE_PERF
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") perf=$(realpath "$3")
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then echo "skipped: needs root"; exit 77; fi
a=services-pt-a-$$ b=services-pt-b-$$
work=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
  ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/integration/ns_pair.sh
. "$(dirname "$0")/ns_pair.sh"
ns_pair_up "$a" "$b" 9000
config() {  # config DEVARGS
  cat <<YAML
name: services-perftest
eal:
  args: [--no-huge, --no-shconf, -m, "512", --no-pci, --file-prefix=rocedservices$$, "--log-level=*:error"]
  lcores: [0]
ports:
  - name: p0
    device: net_af_packet0
    devargs: $1
    mac: 02:00:00:00:01:21
    ipv4: 192.0.2.121/24
    mtu: 9000
    mbufs: 2048
counters:
  prometheus: 127.0.0.1:19475
  telemetry: false
control:
  listen: 192.0.2.11:18599  # the management link: the services listen there
services:
  - test: write_bw
    listen_port: 18535
    args: ["--timeout", "20"]
  - test: send_bw
    listen_port: 18536
    args: ["-s", "4096", "-n", "200", "--timeout", "20"]
  - test: read_bw
    listen_port: 18537
    args: ["-m", "4096", "--timeout", "20"]
  - test: write_bw
    listen_port: 18538
    args: ["-s", "4096", "--timeout", "20"]
  - kind: write_bw
    listen_port: 18539
    args: ["--timeout", "20"]
    selective_repeat: true
transport: {selective_repeat: true}
YAML
}
config "iface=veth-a,qpairs=1" > "$work/roced.yaml"
ip netns exec "$a" "$roced" --config "$work/roced.yaml" > "$work/roced.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -qs "service write_bw: TCP 18539" "$work/roced.log" && break; sleep 0.2; done
grep -q "service write_bw: TCP 18539" "$work/roced.log" || { cat "$work/roced.log"; exit 1; }
fails=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fails=$((fails + 1)); fi; }
client() {  # client PORT TEST ARGS...
  local port=$1
  shift
  ip netns exec "$b" "$perf" "$@" -p "$port" --iface veth-b --ip 192.0.2.122 \
    --mac 02:00:00:00:01:22 --netdev-mtu 9000 --timeout 20 192.0.2.11
}
# 1. write_bw, the client's -s not the server's, the path MTU left to both: 4 KiB frames in.
client 18535 write_bw -s 8192 -n 300 --json "$work/w.json" > "$work/w.out" 2>&1 || true
tail -2 "$work/w.out"
check 'grep -q "\"mtu\":4096" "$work/w.json"' "write_bw did not run at path MTU 4096: $(cat "$work/w.json" 2>/dev/null)"
check 'grep -Eq "^ 8192 +300 " "$work/roced.log"' "the write_bw server did not report the client's 8192-byte run"
# 2. send_bw: SENDs of 1024 bytes to a server of -s 4096.
client 18536 send_bw -s 1024 -n 200 > "$work/s.out" 2>&1 || true
tail -2 "$work/s.out"
check 'grep -q "service send_bw: done" "$work/roced.log"' "the send_bw server refused SENDs of another length"
# 3. read_bw at path MTU 4096: 4 KiB READ responses out of roced's port.
client 18537 read_bw -s 65536 -n 100 -m 4096 > "$work/r.out" 2>&1 || true
tail -2 "$work/r.out"
check 'grep -Eq "^ 65536 +100 " "$work/r.out"' "read_bw at path MTU 4096 did not complete"
# 4. The advertised buffer is the second half: 4096 bytes from there for a -s 4096 server.
client 18538 write_bw -s 4096 -n 100 > "$work/h.out" 2>&1 || true
check 'grep -Eq "^ 4096 +100 " "$work/h.out"' "write_bw -s 4096 against a -s 4096 server failed"
if client 18538 write_bw -s 8192 -n 10 > "$work/h2.out" 2>&1; then
  echo "FAIL: a write past the advertised half of the buffer was accepted"; fails=$((fails + 1))
fi
check 'grep -q "completion with error" "$work/h2.out"' "the write past the buffer did not end in an error completion: $(tail -1 "$work/h2.out")"
# 5. A write_bw server's buffer is not readable.
if client 18535 read_bw -s 4096 -n 10 > "$work/x.out" 2>&1; then
  echo "FAIL: a READ of the write_bw server's buffer was served"; fails=$((fails + 1))
fi
check 'grep -q "completion with error" "$work/x.out"' "the READ of a write_bw buffer did not end in an error completion: $(tail -1 "$work/x.out")"
# 5b. Selective repeat (review 20 #9): the server with `selective_repeat: true` accepts a
# roce-perf client's offer; the one without it answers as perftest would, and both keep
# go-back-N.
client 18539 write_bw --selective-repeat -n 200 --json "$work/sr.json" > "$work/sr.out" 2>&1 || true
check 'grep -q "Selective repeat: ON" "$work/sr.out"' "the selective_repeat service did not accept the offer: $(grep -i selective "$work/sr.out")"
check 'grep -q "\"selective_repeat\":true" "$work/sr.json"' "sr.json does not say selective_repeat true"
client 18535 write_bw --selective-repeat -n 100 > "$work/nosr.out" 2>&1 || true
check 'grep -q "Selective repeat: OFF (the peer did not accept it: go-back-N)" "$work/nosr.out"' "a service without the key accepted selective repeat, or the run failed: $(tail -1 "$work/nosr.out")"
check 'grep -Eq "^ 65536 +100 " "$work/nosr.out"' "the go-back-N run against the service without the key did not complete"
sleep 0.3
ip netns exec "$a" "$ctl" -p 127.0.0.1:19475 --all counters > "$work/counters.txt"
grep -E "qps|port_tx_dropped|port_tx_pmd|port_tx_oversize|remote_access" "$work/counters.txt" || true
check 'grep -Eq "^p0 +qps +0$" "$work/counters.txt"' "QPs left behind"
check 'grep -Eq "^p0 +port_tx_dropped +0$" "$work/counters.txt"' "frames were dropped on transmit"
check 'grep -Eq "^p0 +port_tx_pmd_dropped +0$" "$work/counters.txt"' "no port_tx_pmd_dropped counter, or frames lost in the PMD"
kill -TERM "$pid"
wait "$pid" || true
pid=
# 6. Ring slots too small for the MTU: refused, with the reason.
config "iface=veth-a,qpairs=1,framesz=2048" > "$work/small.yaml"
if timeout 15 ip netns exec "$a" "$roced" --config "$work/small.yaml" > "$work/small.log" 2>&1; then
  echo "FAIL: roced started a port whose ring slots cannot carry its MTU"; fails=$((fails + 1))
fi
cat "$work/small.log"
check 'grep -q "framesz=2048 carries frames of up to 1982 bytes; MTU 9000 needs 9018" "$work/small.log"' "no clear error for ring slots too small"
if ((fails > 0)); then
  cat "$work/roced.log"
  exit 1
fi
echo "PASS"
