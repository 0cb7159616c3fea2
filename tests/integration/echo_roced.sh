#!/usr/bin/env bash
# The walkthrough of docs/new-application.md, run: roced A hosts the `echo` service (apps/echo)
# on a net_memif port; roced B on the other end of the link has roce-echo-client attached,
# which connects to the service through rdma_cm and checks every echo byte for byte (twice:
# two clients one after the other, then two at once). A's Prometheus counters count the
# messages; SIGTERM stops A with the service's report in its log. roced --check refuses a
# misspelt echo key and an out-of-range one. No root needed.
# Last, a hostile peer (roce-conn-hostile) gives up more connections than the service takes
# after the service accepted them; a well-behaved client must still be served.
#   echo_roced.sh ROCED ROCE_CTL ECHO_CLIENT WORKDIR [CONN_HOSTILE]
set -euo pipefail
here=$(dirname "$(realpath "$0")")
roced=$(realpath "$1") ctl=$(realpath "$2") client=$(realpath "$3") work=$4
hostile=${5:+$(realpath "$5")}
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=echo$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
prom=127.0.0.1:$(port_base 1)
pids=()
# shellcheck source=lib_appliance.sh
source "$here/lib_appliance.sh"
trap 'stop_all $?' EXIT

# 1. roced --check: the kind's own keys are checked by the reader and by the kind.
base='ports:
  - name: p0
    device: net_memif0
    mac: 02:00:00:00:00:01
    ipv4: 192.0.2.1/24
services:
  - kind: echo
    port: p0'
printf '%s\n    mesage_size: 512\n' "$base" > "$work/typo.yaml"
if "$roced" --check --config "$work/typo.yaml" > "$work/typo.out" 2>&1; then
  cat "$work/typo.out"; echo "FAIL: roced --check took a misspelt echo key"; exit 1
fi
grep -q "typo.yaml:9:5: unknown key 'mesage_size' in services\[0\] (echo takes max_connections, message_size" "$work/typo.out" ||
  { cat "$work/typo.out"; echo "FAIL: the typo's error does not name the key and its place"; exit 1; }
printf '%s\n    message_size: 8\n' "$base" > "$work/range.yaml"
if "$roced" --check --config "$work/range.yaml" > "$work/range.out" 2>&1; then
  cat "$work/range.out"; echo "FAIL: roced --check took message_size 8"; exit 1
fi
grep -q "range.yaml:9:19: services\[0\].message_size = 8 is out of range \[64, 1048576\]" "$work/range.out" ||
  { cat "$work/range.out"; echo "FAIL: no range error for message_size"; exit 1; }
printf '%s\n    message_size: 512\n' "$base" > "$work/good.yaml"
"$roced" --check --config "$work/good.yaml" || { echo "FAIL: roced --check refused a good echo service"; exit 1; }

# 2. The service, and attached clients on the other roced.
# Both allow selective repeat; the service accepts it, and only the client that offers it gets
# it (the others, which ask nothing, run go-back-N as before).
appliance a server 02:00:00:00:00:01 192.0.2.1 0 "$prom" "transport: {selective_repeat: true}
services:
  - kind: echo
    port: p0
    max_connections: 4
    message_size: 1024
    selective_repeat: true"
appliance b client 02:00:00:00:00:02 192.0.2.2 0 127.0.0.1:0 "transport: {selective_repeat: true}"
grep -q "service echo: rdma_cm port 7471 on port p0, 4 connections of 1024-byte messages" "$work/a.log" ||
  { cat "$work/a.log"; echo "FAIL: no echo service"; exit 1; }
# The start-up line of a port without congestion control says what Not-ECT means (review 20 #10).
grep -q "port p0: congestion none, ECT off: a switch that marks ECN drops these packets instead" "$work/a.log" ||
  { cat "$work/a.log"; echo "FAIL: no Not-ECT start-up line"; exit 1; }
"$client" --attach "$work/b.sock" -n 16 -s 1024 192.0.2.1 > "$work/c1.log" 2>&1 ||
  { cat "$work/c1.log"; echo "FAIL: client 1"; exit 1; }
"$client" --attach "$work/b.sock" -n 8 -s 64 192.0.2.1 > "$work/c2.log" 2>&1 ||
  { cat "$work/c2.log"; echo "FAIL: client 2"; exit 1; }
"$client" --attach "$work/b.sock" -n 50 -s 100 192.0.2.1 > "$work/c3.log" 2>&1 & c3=$!
"$client" --attach "$work/b.sock" -n 50 -s 200 192.0.2.1 > "$work/c4.log" 2>&1 ||
  { cat "$work/c4.log"; echo "FAIL: client 4"; exit 1; }
wait "$c3" || { cat "$work/c3.log"; echo "FAIL: client 3"; exit 1; }
cat "$work"/c?.log
grep -q "16 messages of 1024 bytes echoed, every byte checked" "$work/c1.log"
# Counters: every message of the four clients counted (published every 100 ms).
ok=
for _ in $(seq 30); do
  "$ctl" -p "$prom" --all counters > "$work/counters.txt" 2>&1 || true
  grep -Eq "^p0 +echo_messages +124$" "$work/counters.txt" && { ok=1; break; }
  sleep 0.1
done
grep -E "echo|services" "$work/counters.txt" || true
[[ -n $ok ]] || { echo "FAIL: echo_messages is not 124"; exit 1; }
grep -Eq "^p0 +echo_connections +4$" "$work/counters.txt" || { echo "FAIL: echo_connections"; exit 1; }
grep -Eq "^p0 +services_running_now +1$" "$work/counters.txt" || { echo "FAIL: services_running_now"; exit 1; }
if command -v curl > /dev/null; then  # the exposition itself: the service's HELP and TYPE lines
  curl -s "http://$prom/metrics" > "$work/metrics.txt" || { echo "FAIL: no /metrics"; exit 1; }
  grep -q "^# HELP roce_echo_messages messages echoed$" "$work/metrics.txt" &&
    grep -q "^# TYPE roce_echo_connections_now gauge$" "$work/metrics.txt" ||
    { grep echo "$work/metrics.txt"; echo "FAIL: no HELP/TYPE lines for the echo counters"; exit 1; }
fi
grep -Eq "^p0 +sr_connections +0$" "$work/counters.txt" ||
  { echo "FAIL: a client that offered nothing got selective repeat"; exit 1; }
# A client that offers selective repeat (review 20 finding 9): the service accepts it in ECE.
"$client" --attach "$work/b.sock" --selective-repeat -n 16 -s 1024 192.0.2.1 > "$work/c-sr.log" 2>&1 ||
  { cat "$work/c-sr.log"; echo "FAIL: the selective repeat client"; exit 1; }
grep -q "16 messages of 1024 bytes echoed, every byte checked" "$work/c-sr.log"
ok=
for _ in $(seq 30); do
  "$ctl" -p "$prom" --all counters > "$work/counters.txt" 2>&1 || true
  grep -Eq "^p0 +sr_connections +1$" "$work/counters.txt" && { ok=1; break; }
  sleep 0.1
done
[[ -n $ok ]] || { grep sr_ "$work/counters.txt"; echo "FAIL: the service did not run it (sr_connections)"; exit 1; }

# 3. A hostile peer: 8 connections (the service takes 4) given up between the service's REP and
# the RTU, which its CM answers with a REJ. Each took a slot of the service when it was
# accepted; the REJ must give it back, or the service refuses everyone from then on.
if [[ -n $hostile ]]; then
  "$hostile" "$work/b.sock" 192.0.2.1 7471 abandon 8 > "$work/hostile.log" 2>&1 ||
    { cat "$work/hostile.log"; echo "FAIL: roce-conn-hostile"; exit 1; }
  "$client" --attach "$work/b.sock" -n 4 -s 512 192.0.2.1 > "$work/c5.log" 2>&1 ||
    { cat "$work/c5.log" "$work/a.log"; echo "FAIL: a client after the abandoned connections was not served"; exit 1; }
fi

# 4. SIGTERM: the service stops, its report in the log.
kill -TERM "$pid_a"
for _ in $(seq 50); do kill -0 "$pid_a" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$pid_a" 2>/dev/null || { echo "FAIL: roced A did not stop"; exit 1; }
# (The hostile peer's connections were never established: not counted; some were refused.)
# (The selective repeat client's 16 messages of 1024 bytes are in both.)
report="service echo: 5 connections, 140 messages \(48280 bytes\) echoed, 0 refused, 0 errors"
[[ -z $hostile ]] ||
  report="service echo: 6 connections, 144 messages \(50328 bytes\) echoed, [0-9]+ refused, 0 errors"
grep -Eq "$report" "$work/a.log" ||
  { cat "$work/a.log"; echo "FAIL: the service's report"; exit 1; }
echo "PASS echo_roced"
