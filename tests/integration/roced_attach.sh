#!/usr/bin/env bash
# Client processes attached to roced (libroce, docs/client-api.md): two roced instances on a
# net_memif link (no hugepages, no root), each with attached example clients.
#  1. roce-attach-example (C++ API): a client of A and a client of B exchange RC SEND, WRITE
#     and READ, every byte checked (A's through an SRQ), and 200 8-byte ping-pongs; then the C
#     example (roce/roce.h) does WRITE + SEND.
#  2. kill -9: a client of A that loops WRITE + READ-back is killed mid-transfer while a second
#     client pair keeps running its own loop; roced A keeps running, the second pair finishes
#     with its data verified, the victim's peer sees the connection end (its next SEND fails),
#     and A's QP, MR and attached-client counts (roce-ctl counters) return to their baseline.
#     A client flooding its send queue with WRITEs is throttled (post_send: ENOMEM) while
#     another pair's ping-pong goes on.
#  3. misuse (roce-attach-misuse): foreign handles, quotas, bad memory, malformed requests;
#     3b. the control thread: a client waiting for ARP blocks nobody, descriptors and
#     connections are bounded (per client, per uid, silent ones, EMFILE), handles never
#     reused while live, CM events of a client that never reads bounded, privileged Q_Keys.
#  4. roced stopping under an attached client: the client's calls fail with ENOTCONN.
# With LINK "veth" the two roced sit on the ends of a veth pair (net_af_packet) instead.
#   roced_attach.sh ROCED ROCE_CTL EXAMPLE EXAMPLE_C MISUSE WORKDIR [memif|veth]
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") ex=$(realpath "$3") exc=$(realpath "$4") misuse=$(realpath "$5") work=$6
link=${7:-memif}
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=attach$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
tcp=$(port_base 32)
prom_a=127.0.0.1:$((tcp + 30)) prom_b=127.0.0.1:$((tcp + 31))
pids=()
cleanup() {
  local rc=$?
  [[ $link == veth ]] && ip link del "ra$$" 2>/dev/null
  if [[ $rc != 0 && ${#pids[@]} != 0 ]]; then  # what the appliances saw, for the failure
    for e in "$prom_a" "$prom_b"; do echo "== counters $e"; "$ctl" -p "$e" counters || true; done
    tail -n 20 "$work"/*.log
  fi
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

if [[ $link == veth ]]; then
  if [[ $(id -u) -ne 0 ]]; then echo "skipped: needs root for a veth pair"; exit 77; fi
  ip link add "ra$$" type veth peer name "rb$$" || { echo "skipped: cannot create a veth pair"; exit 77; }
  for i in "ra$$" "rb$$"; do
    sysctl -qw "net.ipv6.conf.$i.disable_ipv6=1" || true
    ip link set "$i" up
  done
fi
appliance() {  # NAME ROLE MAC IP PROMETHEUS LCORE
  local device=net_memif0 devargs="role=$2,id=0,socket-abstract=no,socket=$work/memif.sock"
  if [[ $link == veth ]]; then
    device=net_af_packet0 devargs="iface=r$1$$,qpairs=1"
  fi
  cat > "$work/$1.yaml" <<YAML
name: $1
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=$tag$1, "--log-level=*:error"]
  lcores: [$6]
ports:
  - name: p0
    device: $device
    devargs: $devargs
    mac: $3
    ipv4: $4/24
counters:
  prometheus: $5
  telemetry: false
attach:
  socket: $work/$1.sock
  mode: "0660"
  group: $(id -gn)
  max_clients_per_uid: 6
  hello_timeout_ms: 1000
  resolve_timeout_ms: 2000
  cm_backlog: 8
  privileged_uids: []
  test_handle_limit: 64
  quotas:
    max_qps: 8
    # (default max_qps: the cm scenario's listener holds 72 unanswered requests, to meet
    # cm_backlog; the quota of connections is attach_guard_test's)
    max_cm_conns: 256
    max_memory: 67108864
    max_fds: 16
    max_regions: 32
YAML
  "$roced" --config "$work/$1.yaml" > "$work/$1.log" 2>&1 &
  pids+=($!)
}
up() {
  for _ in $(seq 100); do grep -q " up on lcore" "$work/$1.log" && [[ -S $work/$1.sock ]] && break; sleep 0.1; done
  grep -q "attach: $work/$1.sock" "$work/$1.log" || { cat "$work/$1.log"; echo "FAIL: roced $1"; exit 1; }
}
# The memif server (A) listens before its client (B) connects.
appliance a server 02:00:5e:00:0a:01 192.0.2.61 "$prom_a" 0
up a
appliance b client 02:00:5e:00:0a:02 192.0.2.62 "$prom_b" 1
up b
# roced ignores SIGPIPE (bit 13 of SigIgn): a management peer's reset costs an EPIPE, not roced.
sigign=$(awk '/^SigIgn/ { print $2 }' /proc/"${pids[0]}"/status)
(( (16#$sigign >> 12) & 1 )) || { echo "FAIL: roced does not ignore SIGPIPE (SigIgn $sigign)"; exit 1; }
counter() {  # ENDPOINT NAME -> value on port p0
  "$ctl" -p "$1" --all counters | awk -v n="$2" '$1 == "p0" && $2 == n { print $3 }'
}
baseline_qps=$(counter "$prom_a" qps) baseline_mrs=$(counter "$prom_a" mrs)
echo "baseline on A: qps $baseline_qps mrs $baseline_mrs"

# ---- 1. data verified, C++ and C --------------------------------------------------------------
# (the server receives through an SRQ; then 200 ping-pongs of 8 bytes)
"$ex" --socket "$work/a.sock" --listen "$tcp" --srq --pingpong 200 > "$work/ex-a.log" 2>&1 &
sa=$!
"$ex" --socket "$work/b.sock" --connect "127.0.0.1:$tcp" --pingpong 200 > "$work/ex-b.log" 2>&1 \
  || { cat "$work"/ex-*.log; exit 1; }
wait "$sa" || { cat "$work"/ex-a.log; exit 1; }
cat "$work/ex-a.log" "$work/ex-b.log"
grep -q "OK: received SEND" "$work/ex-a.log"
grep -q "OK: SEND of 65536 bytes, WRITE of 65536 bytes, READ of 65536 bytes" "$work/ex-b.log"
grep -q "OK: 200 ping-pongs of 8 bytes" "$work/ex-b.log"
# The address a peer uses is the client's own (an I/O virtual address), not roced's mapping.
grep -q "our MR's iova is our own buffer address" "$work/ex-a.log"
grep -q "our MR's iova is our own buffer address" "$work/ex-b.log"

"$exc" "$work/a.sock" listen $((tcp + 1)) > "$work/exc-a.log" 2>&1 &
sa=$!
"$exc" "$work/b.sock" connect $((tcp + 1)) > "$work/exc-b.log" 2>&1 || { cat "$work"/exc-*.log; exit 1; }
wait "$sa" || { cat "$work"/exc-a.log; exit 1; }
cat "$work/exc-a.log" "$work/exc-b.log"
grep -q "OK: WRITE and SEND of 8192 bytes verified" "$work/exc-a.log"

# ---- 2. kill -9 mid-transfer ------------------------------------------------------------------
# The survivor pair: A2 (server) <- B2 (client looping for 10 s: still running when roce-ctl
# lists the clients, after the victim pair started, also on a loaded host).
"$ex" --socket "$work/a.sock" --listen $((tcp + 2)) --seconds 10 > "$work/a2.log" 2>&1 &
a2=$!
"$ex" --socket "$work/b.sock" --connect "127.0.0.1:$((tcp + 2))" --seconds 10 > "$work/b2.log" 2>&1 &
b2=$!
# The victim pair: A1 loops WRITE + READ-back against B1 and is killed after a second of it.
"$ex" --socket "$work/b.sock" --listen $((tcp + 3)) --seconds 30 --size 262144 > "$work/b1.log" 2>&1 &
b1=$!
"$ex" --socket "$work/a.sock" --connect "127.0.0.1:$((tcp + 3))" --seconds 30 --size 262144 \
  > "$work/a1.log" 2>&1 &
a1=$!
for _ in $(seq 100); do grep -q "rounds$" "$work/a1.log" && break; sleep 0.05; done
grep -q "rounds$" "$work/a1.log" || { cat "$work/a1.log" "$work/b1.log"; echo "FAIL: victim loop"; exit 1; }
during=$(counter "$prom_a" attach_clients)
"$ctl" -p "$prom_a" clients | tee "$work/clients.txt"
[[ $(awk '$4 == "p0" && $6 == 1 && $7 == 1 && $8 == 1' "$work/clients.txt" | wc -l) == 2 ]] \
  || { echo "FAIL: roce-ctl clients should list two clients with 1 QP, 1 MR, 1 CQ each"; exit 1; }
grep -q "^[0-9]* *$a1 " "$work/clients.txt" || { echo "FAIL: the victim's pid is not listed"; exit 1; }
kill -9 "$a1"
wait "$a1" 2>/dev/null || true
# The victim's peer (a client of B) sees the connection end: its next SEND fails.
wait "$b1" || { cat "$work/b1.log"; echo "FAIL: the victim's peer"; exit 1; }
grep "the peer's end is gone: SEND completed with" "$work/b1.log"
wait "$b2" || { cat "$work/b2.log" "$work/a2.log"; echo "FAIL: the survivor's loop"; exit 1; }
wait "$a2" || { cat "$work/a2.log"; echo "FAIL: the survivor's server"; exit 1; }
grep -E "OK: [0-9]+ WRITE \+ READ-back rounds" "$work/b2.log"
kill -0 "${pids[0]}" || { cat "$work/a.log"; echo "FAIL: roced A died"; exit 1; }
sleep 0.4  # the counters are published every 100 ms
after_qps=$(counter "$prom_a" qps) after_mrs=$(counter "$prom_a" mrs)
clients=$(counter "$prom_a" attach_clients) lost=$(counter "$prom_a" attach_clients_lost)
echo "A: attached clients during the kill $during, now $clients; lost $lost; qps $after_qps mrs $after_mrs"
"$ctl" -p "$prom_a" counters | grep -E "qps|mrs|attach" || true
[[ $after_qps == "$baseline_qps" && $after_mrs == "$baseline_mrs" ]] || { echo "FAIL: resources left"; exit 1; }
[[ $clients == 0 && $lost -ge 1 ]] || { echo "FAIL: attach counts"; exit 1; }
[[ $("$ctl" -p "$prom_a" clients | wc -l) == 1 ]] || { echo "FAIL: clients still listed"; exit 1; }
grep -q "client .* gone: 1 QPs, 1 MRs, 1 CQs released" "$work/a.log"

# ---- 2b. a client flooding its send queue is throttled (ENOMEM), others keep going ---------
"$ex" --socket "$work/b.sock" --listen $((tcp + 4)) --seconds 3 > "$work/flood-s.log" 2>&1 &
fs=$!
"$ex" --socket "$work/a.sock" --connect "127.0.0.1:$((tcp + 4))" --seconds 3 --flood \
  > "$work/flood-c.log" 2>&1 &
fc=$!
"$ex" --socket "$work/a.sock" --listen $((tcp + 5)) --pingpong 200 > "$work/calm-s.log" 2>&1 &
cs=$!
"$ex" --socket "$work/b.sock" --connect "127.0.0.1:$((tcp + 5))" --pingpong 200 \
  > "$work/calm-c.log" 2>&1 || { cat "$work"/calm-*.log; echo "FAIL: the calm pair beside a flood"; exit 1; }
wait $cs && wait $fc && wait $fs || { cat "$work"/flood-*.log "$work"/calm-s.log; echo "FAIL: flood pair"; exit 1; }
grep "OK: flood of" "$work/flood-c.log"
grep "OK: 200 ping-pongs" "$work/calm-c.log"
refused=$(sed -n 's/.*WRITEs, \([0-9]*\) posts refused.*/\1/p' "$work/flood-c.log")
[[ ${refused:-0} -gt 0 ]] || { echo "FAIL: the flood was never throttled"; exit 1; }
kill -0 "${pids[0]}" || { echo "FAIL: roced A died under the flood"; exit 1; }

# ---- 3. misuse is refused, roced keeps serving ------------------------------------------------
# A well-behaved pair's rate and roced A's resident memory before the hostile clients.
rate_pair() {  # PORT LOG -> WRITE + READ-back rounds of 64 KiB in 2 s
  "$ex" --socket "$work/a.sock" --listen "$1" --seconds 2 > "$work/$2-s.log" 2>&1 &
  local s=$!
  "$ex" --socket "$work/b.sock" --connect "127.0.0.1:$1" --seconds 2 > "$work/$2-c.log" 2>&1 \
    || { cat "$work/$2-c.log"; echo "FAIL: the well-behaved pair ($2)"; exit 1; }
  wait "$s" || { cat "$work/$2-s.log"; echo "FAIL: the well-behaved pair's server ($2)"; exit 1; }
  sed -n 's/.*OK: \([0-9]*\) WRITE + READ-back rounds.*/\1/p' "$work/$2-c.log"
}
rss_kib() { awk '/^VmRSS/ { print $2 }' /proc/"$1"/status; }
rate_before=$(rate_pair $((tcp + 6)) calm-before)
rss_before=$(rss_kib "${pids[0]}")
"$misuse" "$work/a.sock" 8 67108864 32 | tee "$work/misuse.log"
grep -q "OK: misuse refused" "$work/misuse.log"

# ---- 3b. the control thread and its descriptors: no client blocks or exhausts the others ----
"$misuse" "$work/a.sock" --ctl pid="${pids[0]}" b="$work/b.sock" ip=192.0.2.61 port=$((tcp + 10)) \
  max_fds=16 per_uid=6 hello_ms=1000 resolve_ms=2000 handle_limit=64 cm_backlog=8 \
  | tee "$work/misuse-ctl.log"
grep -q "OK: control misuse refused" "$work/misuse-ctl.log"
kill -0 "${pids[0]}" || { echo "FAIL: roced A died"; exit 1; }
[[ $(stat -c %G:%a "$work/a.sock") == "$(id -gn):660" ]] || { echo "FAIL: the socket's group or mode"; exit 1; }
sleep 0.4  # (counters every 100 ms)
for n in attach_refused attach_silent_closed attach_out_of_fds attach_cm_refused; do
  v=$(counter "$prom_a" $n)
  echo "A: $n $v"
  [[ ${v:-0} -ge 1 ]] || { echo "FAIL: $n not counted"; exit 1; }
done

# ---- 3c. after every hostile client: a well-behaved pair at its rate, roced A's RSS bounded -----
rate_after=$(rate_pair $((tcp + 7)) calm-after)
rss_after=$(rss_kib "${pids[0]}")
echo "well-behaved pair: $rate_before rounds in 2 s before the misuse, $rate_after after;" \
  "roced A's RSS $rss_before KiB before, $rss_after KiB after"
# The same pair, the same 2 s: at least half the rate (the machine's noise is well within that).
((rate_after * 2 >= rate_before)) || { echo "FAIL: the pair's rate after the misuse"; exit 1; }
# docs/security.md: the hostile clients' scenarios leave at most 32 MiB of roced's RSS behind.
((rss_after - rss_before < 32768)) || { echo "FAIL: roced A's RSS grew by more than 32 MiB"; exit 1; }

# ---- 4. roced stops under an attached client --------------------------------------------------
"$misuse" "$work/a.sock" --hold > "$work/hold.log" 2>&1 &
hold=$!
for _ in $(seq 50); do grep -q holding "$work/hold.log" && break; sleep 0.1; done
kill -TERM "${pids[0]}" "${pids[1]}"
wait "${pids[0]}" "${pids[1]}"
pids=()
wait "$hold" || { cat "$work/hold.log"; echo "FAIL: the holding client"; exit 1; }
cat "$work/hold.log"
grep -q "stopping (SIGTERM)" "$work/a.log"
[[ ! -e $work/a.sock ]] || { echo "FAIL: the socket was left behind"; exit 1; }
echo "roced_attach: OK"
