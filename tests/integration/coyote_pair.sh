#!/usr/bin/env bash
# roce-perf coyote (Coyote's RDMA benchmark, apps/perf/coyote.h) against itself on a net_memif
# link, the exchange on 127.0.0.1. CASE:
#   write, read  two in-process roce-perf: every size's row in Coyote's format on the client, and
#                the buffer where the data travelled equal to the sender's (the checking side
#                compared it word by word; both print an FNV-1a of it, which must match)
#   roced        roced hosting `test: coyote` twice (WRITE, READ): 64 junk bytes on the WRITE
#                service fail that test with a clear error and roced serves on; then an
#                in-process client runs WRITE, and a client attached to a second roced READ
#   clib         the client framed as the seed's cLib (--fid: its function id before the queue,
#                its 12-byte close), WRITE: the server recognises the framing by itself
#   bad          a server given junk instead of a queue, and one whose peer hangs up: each exits
#                1 with the reason within seconds
#   coyote_pair.sh ROCE_PERF ROCED WORKDIR CASE
set -euo pipefail
perf=$(realpath "$1") roced=$(realpath "$2") work=$3 case=$4
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=coyote$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
tcp=$(port_base 32)
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
sizes=(-x 64 -X 16384 -r 5)
expect_sizes="64 128 256 512 1024 2048 4096 8192 16384"
srv=(--pmd memif-server --iface "$work/memif.sock" --ip 192.0.2.91 --mac 02:00:5e:00:0d:01 --timeout 10)
cli=(--pmd memif --iface "$work/memif.sock" --ip 192.0.2.92 --mac 02:00:5e:00:0d:02 --timeout 10)

rows() {  # LOG: the sizes of Coyote's result rows, checking each row's format
  local bad
  bad=$(grep '^Size:' "$1" | grep -cvE '^Size: +[0-9]+; Average throughput: +[0-9.e+-]+ MB/s; Average latency: +[0-9.e+-]+ us$' || true)
  [[ $bad == 0 ]] || { echo "FAIL: $bad rows of $1 not in Coyote's format"; exit 1; }
  grep '^Size:' "$1" | awk '{print $2}' | tr -d ';' | xargs
}
hash_of() { sed -n 's/^Buffer after the sweep: FNV-1a \(0x[0-9a-f]*\) .*/\1/p' "$1"; }
same_data() {  # CHECKER_LOG SENDER_LOG
  grep -q "checked word by word" "$1" || { cat "$1"; echo "FAIL: $1 did not check the data"; exit 1; }
  local a b
  a=$(hash_of "$1") b=$(hash_of "$2")
  [[ -n $a && $a == "$b" ]] || { echo "FAIL: buffers differ ($a vs $b)"; exit 1; }
  echo "data: both buffers FNV-1a $a"
}
pair() {  # NAME OP [CLIENT ARGS...]: in-process server and client
  local name=$1 op=$2 port=$((tcp + ${#pids[@]} + 1))
  shift 2
  "$perf" coyote "${srv[@]}" -p "$port" -o "$op" "${sizes[@]}" > "$work/$name-s.log" 2>&1 &
  local s=$!
  pids+=("$s")
  wait_listening "$port"
  "$perf" coyote "${cli[@]}" -p "$port" -o "$op" "${sizes[@]}" "$@" -t 127.0.0.1 > "$work/$name-c.log" 2>&1 ||
    { cat "$work/$name-s.log" "$work/$name-c.log"; echo "FAIL: $name client"; exit 1; }
  wait "$s" || { cat "$work/$name-s.log"; echo "FAIL: $name server"; exit 1; }
  cat "$work/$name-c.log"
  [[ $(rows "$work/$name-c.log") == "$expect_sizes" ]] || { echo "FAIL: $name: rows"; exit 1; }
}
wait_listening() {  # PORT: the server's memif socket and TCP port are up
  for _ in $(seq 100); do
    [[ -S $work/memif.sock ]] && ss -Hltn "sport = :$1" | grep -q LISTEN && return 0
    sleep 0.1
  done
  echo "FAIL: no server on $1"; exit 1
}
junk() {  # PORT: connects, sends 64 junk bytes, keeps the socket open a moment
  /usr/bin/python3 -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"\xde\xad\xbe\xef" * 16)
time.sleep(1)' "$1"
}
hangup() {  # PORT: connects and closes at once
  /usr/bin/python3 -c '
import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()' "$1"
}
connect_retry() {  # FN PORT: FN once the port listens
  for _ in $(seq 50); do "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done
  echo "FAIL: nobody listens on $2"; exit 1
}

case $case in
  write)
    pair write 1
    same_data "$work/write-s.log" "$work/write-c.log"
    grep -q "Benchmark operation: WRITE" "$work/write-s.log" ;;
  clib)
    pair clib 1 --fid 1
    same_data "$work/clib-s.log" "$work/clib-c.log"
    grep -q "cLib client, function id 1" "$work/clib-s.log" || { cat "$work/clib-s.log"; echo "FAIL: framing not recognised"; exit 1; } ;;
  read)
    pair read 0
    same_data "$work/read-c.log" "$work/read-s.log" ;;
  roced)
    pw=$((tcp + 1)) pr=$((tcp + 2))
    appliance a server 02:00:5e:00:0d:01 192.0.2.91 0 "" "services:
  - test: coyote
    listen_port: $pw
    args: [-o, '1', -x, '64', -X, '16384', -r, '5', --timeout, '10']
  - test: coyote
    listen_port: $pr
    args: [-o, '0', -x, '64', -X, '16384', -r, '5', --timeout, '10']"
    grep -q "service coyote: TCP $pw" "$work/a.log" || { cat "$work/a.log"; echo "FAIL: no service"; exit 1; }
    junk "$pw"
    for _ in $(seq 50); do grep -q "is not what Coyote sends" "$work/a.log" && break; sleep 0.1; done
    grep "is not what Coyote sends" "$work/a.log" || { cat "$work/a.log"; echo "FAIL: junk not reported"; exit 1; }
    # shellcheck disable=SC2154  # pid_a: set by appliance()
    kill -0 "$pid_a" || { echo "FAIL: roced died on junk"; exit 1; }
    "$perf" coyote "${cli[@]}" -p "$pw" -o 1 "${sizes[@]}" -t 127.0.0.1 > "$work/hw.log" 2>&1 ||
      { cat "$work/a.log" "$work/hw.log"; echo "FAIL: WRITE against roced"; exit 1; }
    cat "$work/hw.log"
    [[ $(rows "$work/hw.log") == "$expect_sizes" ]] || { echo "FAIL: hosted WRITE rows"; exit 1; }
    for _ in $(seq 50); do grep -q "checked word by word" "$work/a.log" && break; sleep 0.1; done
    same_data "$work/a.log" "$work/hw.log"
    # READ from a client attached to roced B (its memif client end replaces the one that left)
    appliance b client 02:00:5e:00:0d:02 192.0.2.92 1
    "$perf" coyote --attach "$work/b.sock" -p "$pr" -o 0 "${sizes[@]}" --timeout 10 -t 127.0.0.1 \
      > "$work/hr.log" 2>&1 || { cat "$work/a.log" "$work/b.log" "$work/hr.log"; echo "FAIL: attached READ"; exit 1; }
    cat "$work/hr.log"
    [[ $(rows "$work/hr.log") == "$expect_sizes" ]] || { echo "FAIL: attached READ rows"; exit 1; }
    grep -q "checked word by word" "$work/hr.log" || { echo "FAIL: READ data not checked"; exit 1; }
    # WRITE is refused attached, with the reason
    if "$perf" coyote --attach "$work/b.sock" -o 1 -t 127.0.0.1 > "$work/aw.log" 2>&1; then
      echo "FAIL: WRITE attached accepted"; exit 1; fi
    grep -q "not available with --attach" "$work/aw.log" || { cat "$work/aw.log"; exit 1; } ;;
  bad)
    for peer in junk hangup; do
      port=$((tcp + ${#pids[@]} + 1))
      "$perf" coyote "${srv[@]}" -p "$port" -o 1 "${sizes[@]}" > "$work/$peer.log" 2>&1 &
      s=$!
      pids+=("$s")
      connect_retry "$peer" "$port"
      rc=0
      timeout 20 tail --pid="$s" -f /dev/null || { echo "FAIL: server hangs after $peer"; exit 1; }
      wait "$s" || rc=$?
      cat "$work/$peer.log"
      [[ $rc == 1 ]] || { echo "FAIL: server exited $rc after $peer"; exit 1; }
    done
    grep -q "the peer's queue is not what Coyote sends" "$work/junk.log" || { echo "FAIL: junk reason"; exit 1; }
    grep -q "the peer closed the exchange connection" "$work/hangup.log" || { echo "FAIL: hangup reason"; exit 1; } ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "PASS: coyote $case"
