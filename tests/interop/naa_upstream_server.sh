#!/usr/bin/env bash
# Our NAAICE host library on the appliance's stack (naaice_client_roce on a DPDK net_af_packet
# port on dp0, RoCE IP 192.0.2.100) against upstream's software NAA, unchanged:
# naaice-greenhpc/naa-communication-library's examples/naaice_server, built from the checkout
# NAAICE_UPSTREAM (upstream_naaice_build.sh) and run on Linux rxe in the VM (192.0.2.1).
#   - every upstream function (1 adds 1, 2 adds 2, 3 returns the regions unchanged), 2 hosts at
#     once, 3 calls each, regions of every role (single-send input, input and output, output
#     only, input), results checked against a model of the NAA's copies;
#   - every MRSP error upstream's NAA answers: 0x01 when it cannot allocate a region (an
#     internal region of 4 GiB - 4 KiB in a VM of 512 MiB);
#   - what it does instead of answering: a function code it does not know (no answer: the host
#     times out), a request of 33 regions (its receive is too short: our SEND fails);
#   - on the wire (our capture): the NAA's advertisements and result writes carry the
#     Solicited Event bit, results have immediate 0; our requests carry upstream's flags and
#     SE, our calls immediate fncode | 0x80 with SE.
# With NAAICE_CLIENT_IBVERBS, first our host on rdma-core (the same library on libibverbs and
# librdmacm) in the VM runs every function against the server there (rxe loopback).
#   naa_upstream_server.sh NAAICE_CLIENT_ROCE ROCE_PCAP [NAAICE_CLIENT_IBVERBS]
#                                         (root; 77 without NAAICE_UPSTREAM or where VMs cannot run)
# Env: NAAICE_UPSTREAM (the checkout), MICROLOG_SRC (microlog v7.0.3, upstream's dependency),
# RXE_VM_NETNS (default rxevm-naau).
set -euo pipefail
client=$(realpath "$1") pcap=$(realpath "$2") ibv_client=${3:+$(realpath "$3")}
if [[ -z ${NAAICE_UPSTREAM:-} ]]; then
  echo "skipped: set NAAICE_UPSTREAM to a checkout of naaice-greenhpc/naa-communication-library" \
       "(and MICROLOG_SRC to microlog v7.0.3) to run upstream's naaice_server"
  exit 77
fi
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-naau}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
bindir=$("$here/upstream_naaice_build.sh") || exit $?
commit=$(cat "$bindir/../../commit")
echo "upstream: $commit ($NAAICE_UPSTREAM)"
# The VM image keeps every extra binary under its base name, whoever put it there (other
# worktrees too): ours go in under names of their own, copied (mtime kept) only when changed.
vmbins=${ROCE_UPSTREAM_CACHE:-/var/tmp/roce-upstream}/vm-bins
mkdir -p "$vmbins"
vm_copy() {  # vm_copy FILE NAME: the copy's path
  cmp -s "$1" "$vmbins/$2" 2>/dev/null || cp -p "$1" "$vmbins/$2"
  echo "$vmbins/$2"
}
server=$(vm_copy "$bindir/naaice_server" "upstream_naaice_server_${commit:0:7}")
ibv_bin=""
if [[ -n $ibv_client ]]; then
  ibv_bin=$(vm_copy "$ibv_client" "naaice_client_ibverbs_$(realpath "$ibv_client" | md5sum | cut -c1-8)")
fi
RXE_VM_EXTRA_BINS="$server $ibv_bin" "$here/vm/build.sh" >/dev/null 2>&1 ||
  { echo "skipped: cannot put $server into the VM image"; exit 77; }
out=$(mktemp -d)
stop_ip=192.0.2.253
cleanup() {
  ip netns exec "$RXE_VM_NETNS" ip addr del "$stop_ip/32" dev br0 2>/dev/null || true
  [[ -n ${NAA_KEEP:-} ]] && echo "kept: $out" || rm -rf "$out"
}
trap cleanup EXIT
# The server runs until the host side raises $stop_ip on the bridge (it has no option to end
# by itself): then SIGTERM, which it handles by leaving its loop. Before, our rdma-core host in
# the VM calls each function (a stall retried as below).
ibv_phase="echo ibverbs phase skipped"
if [[ -n $ibv_client ]]; then
  c=$(basename "$ibv_bin")
  ibv_phase="sleep 1; ibv_fail=0; for k in add1 add2 noop; do for a in 1 2 3; do
    NAAICE_CALL_GAP_MS=50 retry $c -U -R 20 -T 15 -k \$k -s 1024 -n 3 192.0.2.1 > /tmp/\$k.txt 2>&1; rc=\$?
    if [ \$rc != 0 ] && grep -q 'timed out' /tmp/\$k.txt && [ \$a -lt 3 ]; then
      sed \"s/FAIL /stalled, retried: /; s/^/ibverbs \$k-\$a: /\" /tmp/\$k.txt; echo ibverbs-stall; continue; fi
    sed \"s/^/ibverbs \$k-\$a: /\" /tmp/\$k.txt
    break; done; [ \$rc = 0 ] || ibv_fail=1; done; echo ibverbs phase done fail=\$ibv_fail"
fi
# The VM shows the host side that its phase is over by taking $ready_ip too (its output comes
# only when its command ends).
ready_ip=192.0.2.251
boot "$(basename "$server") & s=\$!; $ibv_phase
ip addr add $ready_ip/32 dev eth0
while kill -0 \$s 2>/dev/null && ! ping -c 1 -W 1 $stop_ip >/dev/null 2>&1; do :; done; kill -TERM \$s 2>/dev/null; wait \$s; echo naaice_server exit \$?" 900
for _ in $(seq 300); do
  ip netns exec "$RXE_VM_NETNS" ping -c 1 -W 1 "$ready_ip" > /dev/null 2>&1 && break
  sleep 1
done
run=0 fail=0
host() {  # host NAME ARGS...: one client process with its own capture
  local name=$1; shift
  run=$((run + 1))
  NAAICE_CALL_GAP_MS=${NAAICE_CALL_GAP_MS:-50} NAAICE_ROCE="pmd=af_packet,iface=dp0,ip=192.0.2.100,mac=02:00:00:00:01:00,pcap=$out/$name.pcap" \
    ip netns exec "$RXE_VM_NETNS" timeout 180 "$client" -U -R 20 "$@" 192.0.2.1 > "$out/$name.txt" 2>&1
}
report() { sed "s/^/  host $1: /" "$out/$1.txt"; }
# The NAA in the VM may still be starting: retry while it rejects (no listener yet).
for _ in $(seq 60); do
  host start -k noop -s 64 -n 1 && rc=0 || rc=$?
  [[ $rc != 0 ]] && grep -q "rejected" "$out/start.txt" && { sleep 1; continue; }
  break
done
report start
# Each function: one host, 3 calls. Upstream's NAA re-arms its CQ after polling it without
# polling again, so a completion of its own (our ACK of its advertisement or of a result
# write) that lands between its last poll and the re-arm raises no event, and it sleeps with
# our call in its CQ (the host times out; our DREQ frees its worker). Such a stall is retried
# (at most twice) and counted; two hosts at once (two workers spinning on the VM's one CPU)
# make it likely.
stalls=0
for k in add1 add2 noop; do
  for attempt in 1 2 3; do
    host "$k-$attempt" -k "$k" -s 1024 -n 3 -T 15 && rc=0 || rc=$?
    if [[ $rc != 0 ]] && grep -q "timed out" "$out/$k-$attempt.txt" && [[ $attempt -lt 3 ]]; then
      stalls=$((stalls + 1))
      sed -i 's/FAIL /stalled, retried: /' "$out/$k-$attempt.txt"
      report "$k-$attempt"
      continue
    fi
    report "$k-$attempt"
    break
  done
  [[ $rc == 0 ]] || fail=1
done
for e in naa-out-of-memory unknown-function too-many-regions; do
  sleep 1  # upstream's NAA frees a connection's slot when its worker ends
  host "$e" -e "$e" || fail=1
  report "$e"
done
ip netns exec "$RXE_VM_NETNS" ip addr add "$stop_ip/32" dev br0
finish && theirs=0 || theirs=1
grep -q "naaice_server exit 0" "$out/vm.txt" ||
  { echo "  naaice_server did not end cleanly: $(grep -o "naaice_server exit [0-9]*" "$out/vm.txt")"; theirs=1; }
ibv=skipped
if [[ -n $ibv_client ]]; then
  ibv=$(grep -c "^ibverbs .*: PASS " "$out/vm.txt" || true)
  grep -q "ibverbs phase done fail=0" "$out/vm.txt" || { echo "  rdma-core host failed"; fail=1; }
  stalls=$((stalls + $(grep -c "^ibverbs-stall" "$out/vm.txt" || true)))
  grep "^ibverbs .*: \(PASS\|FAIL\)" "$out/vm.txt" | sed 's/^/  /'
fi
# The NAA's log, repeated lines counted (it logs every refused connection).
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/\x1b\[[0-9;]*m//g' | grep . | uniq -c |
  sed 's/^ *1 /  vm: /; s/^ *\([0-9]*\) /  vm (x\1): /' | tail -150
cap=0 errs="" imms="" se_naa="" se_host="" flags="" calls=""
ts=(tshark --disable-heuristic rpcrdma_infiniband -o infiniband.identify_payload:FALSE)
for f in "$out"/*.pcap; do
  "$here/../integration/check_capture.sh" "$pcap" "$f" 1 > "$out/capture.txt" 2>&1 || {
    cap=1; sed "s|^|  capture $(basename "$f"): |" "$out/capture.txt"; }
  # The NAA's SENDs (opcode 4): MRSP error messages (type 0x00) and advertisements (0x02).
  errs+=$("${ts[@]}" -r "$f" -Y 'ip.src == 192.0.2.1 && infiniband.bth.opcode == 4' -T fields \
          -e data.data 2>/dev/null | grep '^00' | cut -c1-8 | tr '\n' ' ' || true)
  # The Solicited Event bit of the NAA's SENDs and WRITE Last/Only with Immediate (4, 9, 11).
  se_naa+=$("${ts[@]}" -r "$f" -Y 'ip.src == 192.0.2.1 && (infiniband.bth.opcode == 4 || infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)' \
            -T fields -e infiniband.bth.se 2>/dev/null | tr '\n' ' ' || true)
  imms+=$("${ts[@]}" -r "$f" -Y 'ip.src == 192.0.2.1 && (infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)' \
          -T fields -e infiniband.immdt 2>/dev/null | cut -d, -f1 | tr '\n' ' ' || true)
  # Ours: the requests' and calls' SE, the requests' flag bytes, the calls' immediates.
  se_host+=$("${ts[@]}" -r "$f" -Y 'ip.src == 192.0.2.100 && (infiniband.bth.opcode == 4 || infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)' \
             -T fields -e infiniband.bth.se 2>/dev/null | tr '\n' ' ' || true)
  flags+=$("${ts[@]}" -r "$f" -Y 'ip.src == 192.0.2.100 && infiniband.bth.opcode == 4' -T fields \
           -e data.data 2>/dev/null | grep '^01' | cut -c9-10 | tr '\n' ' ' || true)
  calls+=$("${ts[@]}" -r "$f" -Y 'ip.src == 192.0.2.100 && (infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)' \
           -T fields -e infiniband.immdt 2>/dev/null | cut -d, -f1 | tr '\n' ' ' || true)
done
# tshark prints booleans as 1 or True, immediates with or without 0x, by version.
uniq_words() { tr ' ' '\n' <<< "$1" | sed 's/^0x//; s/^True$/1/; s/^False$/0/' | grep . | sort -u | tr '\n' ' '; }
echo "NAA: MRSP errors:$(uniq_words "$errs"); result immediates: $(uniq_words "$imms"); SE bits: $(uniq_words "$se_naa")"
echo "host: first flags of the requests: $(uniq_words "$flags"); call immediates: $(uniq_words "$calls"); SE bits: $(uniq_words "$se_host")"
wire=1
[[ $(uniq_words "$errs") == *00010000* ]] || { echo "  no MRSP error 0x01 from the NAA on the wire"; wire=0; }
[[ $(uniq_words "$se_naa") == "1 " ]] ||
  { echo "  an NAA message without SE"; wire=0; }
[[ $(uniq_words "$se_host") == "1 " ]] ||
  { echo "  a host request or call without SE"; wire=0; }
[[ $(uniq_words "$imms") == "00000000 " ]] || { echo "  result immediates other than 0"; wire=0; }
for want in 00000081 00000082 00000083 000000f7; do
  [[ $(uniq_words "$calls") == *$want* ]] || { echo "  no call with immediate $want"; wire=0; }
done
[[ $flags == *06* ]] || { echo "  no request with INPUT|SINGLESEND (0x06) first"; wire=0; }
passes=$(cat "$out"/*.txt | grep -c "^PASS " || true)
echo "upstream NAA stalls (a missed completion event, retried): $stalls; rdma-core host checks passed: $ibv"
if [[ $fail == 0 && $theirs == 0 && $cap == 0 && $wire == 1 ]]; then
  echo "PASS naa upstream server interop: appliance host library -> upstream naaice_server on rxe ($passes checks passed, $run host runs; rdma-core host: $ibv)"
else
  echo "FAIL naa upstream server interop: hosts=$fail vm=$theirs capture=$cap wire=$wire"
  exit 1
fi
