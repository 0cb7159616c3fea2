#!/usr/bin/env bash
# Selective repeat is a per-connection opt-in that the application sees (review 18, findings 1
# and 2): two roced on net_memif, both with `transport: selective_repeat: true`, an rdma_cm
# server attached to B and a client attached to A (rdmacm_ece.c, our librdmacm.so.1). Offered
# by the client (ibv_set_ece) and accepted by the server (rdma_set_local_ece): both QPs run it,
# ibv_query_ece says so on both sides and roce-ctl sr lists them. The server echoing the offer,
# or either side asking nothing: go-back-N on both, nothing listed. roce-ctl counters shows
# sr_connections and the mlx5 names of the congestion counters.
#   rdmacm_ece.sh ROCED ROCE_CTL LIBROCE_VERBS RDMACM_DIR WORKDIR RDMACM_ECE
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") lib=$(realpath "$3") cmdir=$(realpath "$4") work=$5
prog=$(realpath "$6")
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=cmece$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
base=$(port_base 3)
port=$base prom_a=127.0.0.1:$((base + 1)) prom_b=127.0.0.1:$((base + 2))
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
sr_yaml='transport: {selective_repeat: true}'
appliance a server 02:00:5e:00:0f:11 192.0.2.107 0 "$prom_a" "$sr_yaml"
appliance b client 02:00:5e:00:0f:12 192.0.2.108 1 "$prom_b" "$sr_yaml"
fail() { echo "FAIL: $*"; exit 1; }
export LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir

# run CLIENT_MODE SERVER_MODE WANT_SR: one connection; WANT_SR 1 or 0.
run() {
  local cm=$1 sm=$2 want=$3 rc=0
  echo "--- client $cm, server $sm"
  ROCE_ATTACH=$work/b.sock timeout 40 "$prog" server "$port" "$sm" > "$work/server.txt" 2>&1 &
  local spid=$!
  for _ in $(seq 100); do grep -q "listening" "$work/server.txt" && break; sleep 0.1; done
  ROCE_ATTACH=$work/a.sock timeout 40 "$prog" client 192.0.2.108 "$port" "$cm" \
    > "$work/client.txt" 2>&1 &
  local cpid=$!
  for _ in $(seq 100); do grep -q "in force" "$work/client.txt" && break; sleep 0.1; done
  sleep 0.5  # the metrics' lcore snapshots
  "$ctl" -p "$prom_a" sr > "$work/sr_a.txt" || true
  "$ctl" -p "$prom_b" sr > "$work/sr_b.txt" || true
  wait "$cpid" || rc=$?
  wait "$spid" || rc=$?
  sed 's/^/  /' "$work/client.txt" "$work/server.txt" "$work/sr_a.txt" "$work/sr_b.txt"
  [[ $rc == 0 ]] || fail "rdmacm_ece exited with $rc"
  local opts=0x0
  ((want)) && opts=0x524f0003
  grep -q "^client: in force rc 0 vendor 0xffffff options $opts$" "$work/client.txt" ||
    fail "client: selective repeat in force is not $opts"
  grep -q "^server: in force rc 0 vendor 0xffffff options $opts$" "$work/server.txt" ||
    fail "server: selective repeat in force is not $opts"
  for s in a b; do
    grep -q "^port p0: $want QPs run selective repeat" "$work/sr_$s.txt" ||
      fail "roced $s: roce-ctl sr does not count $want QPs"
    (( $(grep -c "selective repeat$" "$work/sr_$s.txt" || true) == want )) ||
      fail "roced $s: roce-ctl sr lists the wrong QPs"
  done
}

run offer accept 1
grep -q "^server: remote vendor 0xffffff options 0x524f0001$" "$work/server.txt" ||
  fail "the server did not see the offer (rdma_get_remote_ece)"
run offer echo 0
run offer none 0
run none accept 0
grep -q "^server: remote vendor 0x0 options 0x0$" "$work/server.txt" ||
  fail "the REQ carried an ECE the client did not ask for"
# The counters: one connection of the four ran selective repeat on each side, and roce-ctl
# names the RNIC counters an operator looks for beside ours (their HELP lines).
for e in "$prom_a" "$prom_b"; do
  "$ctl" -p "$e" --all counters > "$work/counters.txt"
  grep -Eq "^p0 +sr_connections +1$" "$work/counters.txt" || fail "$e: sr_connections is not 1"
  grep -Eq "^p0 +cnp_sent +[0-9]+  mlx5 np_cnp_sent$" "$work/counters.txt" ||
    fail "$e: roce-ctl counters does not name mlx5's np_cnp_sent"
done
echo "PASS rdmacm_ece"
