#!/usr/bin/env bash
# roce-perf --selective-repeat (review 20 finding 9) between two roce-perf processes on a veth
# pair between two network namespaces, as perftest_pair.sh: selective repeat runs when both
# sides ask for it, over TCP (the offer past the version's NUL, perftest_proto.h SrMark) and over
# rdma_cm (-R, ECE); when only one side asks, the other plays a standard peer (perftest, rxe, an
# RNIC's tools) and both run go-back-N as before: the run completes, the side that asked says
# OFF, and the other prints nothing new. Needs root and iproute2; exits 77 without them.
#   perftest_sr.sh ROCE_PERF
set -euo pipefail
perf=$(realpath "$1")
if [[ $(id -u) -ne 0 ]] || ! command -v ip > /dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
a=roce-sr-a-$$ b=roce-sr-b-$$
work=$(mktemp -d)
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
# shellcheck source=tests/integration/ns_pair.sh
. "$(dirname "$0")/ns_pair.sh"
ns_pair_up "$a" "$b" 1500
fail() { echo "FAIL: $*"; exit 1; }

# run NAME "SERVER ARGS" "CLIENT ARGS" [-R]: write_bw with 1% of the client's frames dropped.
run() {
  local name=$1 sargs=$2 cargs=$3 cm=${4:-} server=192.0.2.11 rc=0
  [[ $cm == -R ]] && server=192.0.2.111
  # shellcheck disable=SC2086
  ip netns exec "$a" "$perf" write_bw --iface veth-a --ip 192.0.2.111 --mac 02:00:00:00:01:11 \
    --json "$work/$name-server.json" --timeout 60 -n 300 $cm $sargs > "$work/$name-server.txt" 2>&1 &
  local spid=$!
  # shellcheck disable=SC2086
  ip netns exec "$b" "$perf" write_bw --iface veth-b --ip 192.0.2.112 --mac 02:00:00:00:01:12 \
    --json "$work/$name-client.json" --timeout 60 -n 300 --tx-drop 0.01 $cm $cargs "$server" \
    > "$work/$name-client.txt" 2>&1 || rc=$?
  wait "$spid" || rc=$?
  sed "s/^/$name server: /" "$work/$name-server.txt" | grep -E "Selective|error|FAIL" || true
  sed "s/^/$name client: /" "$work/$name-client.txt" | grep -E "Selective|error|FAIL|^ 65536" || true
  [[ $rc == 0 ]] || { cat "$work/$name-server.txt" "$work/$name-client.txt"; fail "$name: exit $rc"; }
}
sr_json() { grep -q "\"selective_repeat\":$2" "$work/$1.json" || fail "$1.json: selective_repeat is not $2"; }

# Both ask: on, over TCP and over rdma_cm; lost packets are sent again selectively.
run both --selective-repeat --selective-repeat
grep -q "Selective repeat: ON" "$work/both-client.txt" || fail "both: the client did not turn it on"
grep -q "Selective repeat: ON" "$work/both-server.txt" || fail "both: the server did not turn it on"
sr_json both-client true
sr_json both-server true
grep -Eq '"sr_retransmits":[1-9]' "$work/both-client.json" ||
  fail "both: no selective retransmission under 1% loss"
# The JSON says what the host's port lost beside the injected drops (af_packet's ring, imissed).
grep -Eq '"port_rx_missed":[0-9]+' "$work/both-client.json" || fail "both: no port_rx_missed in the JSON"
# Counted in the engine's sr_connections (roced's Prometheus and roce-ctl), as the CM's are.
for side in client server; do
  grep -q '"sr_connections":1[,}]' "$work/both-$side.json" || fail "both: $side's sr_connections is not 1"
done
run both-cm --selective-repeat --selective-repeat -R
grep -q "Selective repeat: ON" "$work/both-cm-client.txt" || fail "-R: the client did not turn it on"
sr_json both-cm-client true
sr_json both-cm-server true

# One side asks, the other is standard: go-back-N, the run completes, nothing new on its side.
run client-only "" --selective-repeat
grep -q "Selective repeat: OFF (the peer did not accept it: go-back-N)" "$work/client-only-client.txt" ||
  fail "client-only: the client did not fall back"
! grep -q "Selective repeat" "$work/client-only-server.txt" || fail "client-only: the server printed it"
sr_json client-only-client false
sr_json client-only-server false
grep -Eq '"sr_retransmits":0[,}]' "$work/client-only-client.json" || fail "client-only: selective retransmissions"
run server-only --selective-repeat ""
grep -q "Selective repeat: OFF (the peer did not offer it: go-back-N)" "$work/server-only-server.txt" ||
  fail "server-only: the server did not say its client made no offer"
sr_json server-only-server false
run client-only-cm "" --selective-repeat -R
grep -q "Selective repeat: OFF (the peer did not accept it: go-back-N)" "$work/client-only-cm-client.txt" ||
  fail "-R client-only: the client did not fall back"
sr_json client-only-cm-server false
# QPs on the FPGA datapath card run go-back-N: the line names the card, not roced's key.
run card "--selective-repeat --offload datapath" "--selective-repeat --offload datapath"
grep -q "Selective repeat: OFF (the QPs are on the FPGA datapath card" "$work/card-client.txt" ||
  fail "card: the OFF line does not name the card"
sr_json card-client false
echo "PASS perftest_sr"
