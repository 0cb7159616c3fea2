#!/usr/bin/env bash
# The reverse of naa.sh: an NAA on rdma-core (roce-naa-ibverbs: the same NAA server on
# libibverbs + librdmacm) on Linux rxe in the VM, driven by the appliance's host library
# (naaice_client_roce on a DPDK net_af_packet port on dp0, RoCE IP 192.0.2.100): every kernel
# with results checked, then every MRSP error code and every application error provoked. Each
# host run is captured on our side; the captures must decode and show the NAA's MRSP error
# messages and completion statuses. Both programs are the project's own; their protocol is
# upstream NAAICE's (naa-communication-library f7b72fc), checked against upstream's own programs
# by naa_upstream_client.sh and naa_upstream_server.sh.
#   naa_reverse.sh ROCE_NAA_IBVERBS NAAICE_CLIENT_ROCE ROCE_PCAP   (root; 77 when VMs cannot run)
# Env: RXE_VM_NETNS (default rxevm-naar) names the VM's network namespace.
set -euo pipefail
naa=$(realpath "$1") client=$(realpath "$2") pcap=$(realpath "$3")
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-naar}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
RXE_VM_EXTRA_BINS="$naa" "$here/vm/build.sh" >/dev/null 2>&1 ||
  { echo "skipped: cannot put $naa into the VM image"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
errors=(too-many-regions invalid-address not-enough-memory unknown-function bad-param-count
        bad-param-size)
boot "$(basename "$naa") --exit-after $((5 + ${#errors[@]})) --timeout 400" 450
run=0 fail=0
host() {  # host NAME ARGS...: one client process with its own capture
  local name=$1; shift
  run=$((run + 1))
  NAAICE_ROCE="pmd=af_packet,iface=dp0,ip=192.0.2.100,mac=02:00:00:00:01:00,pcap=$out/$name.pcap" \
    ip netns exec "$RXE_VM_NETNS" timeout 120 "$client" "$@" 192.0.2.1 > "$out/$name.txt" 2>&1
}
# The NAA in the VM may still be starting: retry while it rejects (no listener yet).
for _ in $(seq 60); do
  host kernels -k all -s 1024 -n 2 && rc=0 || rc=$?
  [[ $rc != 0 ]] && grep -q "rejected" "$out/kernels.txt" && { sleep 1; continue; }
  break
done
sed 's/^/  host: /' "$out/kernels.txt"
[[ $rc == 0 ]] || fail=1
for e in "${errors[@]}"; do
  host "$e" -e "$e" || fail=1
  sed 's/^/  host: /' "$out/$e.txt"
done
finish && theirs=0 || theirs=1
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
cap=0 errs="" imms=""
ts=(tshark --disable-heuristic rpcrdma_infiniband -o infiniband.identify_payload:FALSE)
for f in "$out"/*.pcap; do
  "$here/../integration/check_capture.sh" "$pcap" "$f" 5 > "$out/capture.txt" 2>&1 || {
    cap=1; sed "s|^|  capture $(basename "$f"): |" "$out/capture.txt"; }
  errs+=$("${ts[@]}" -r "$f" -Y 'ip.src == 192.0.2.1 && infiniband.bth.opcode == 4' -T fields \
          -e data.data 2>/dev/null | grep '^00' | cut -c1-8 | tr '\n' ' ' || true)
  imms+=$("${ts[@]}" -r "$f" -Y 'ip.src == 192.0.2.1 && (infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)' \
          -T fields -e infiniband.immdt 2>/dev/null | cut -d, -f1 | sed 's/^0x//' | cut -c5-6 |
          tr '\n' ' ' || true)
done
errs=$(tr ' ' '\n' <<< "$errs" | sort -u | tr '\n' ' ')
imms=$(tr ' ' '\n' <<< "$imms" | sort -u | tr '\n' ' ')
echo "MRSP errors on the wire:$errs; return codes:$imms"
wire=1
for want in 00010000 00020000 00030000; do [[ $errs == *$want* ]] || wire=0; done
# Return codes above the immediate's lowest byte (upstream's host: ntohl(imm) >> 8).
for want in 00 10 12 13; do [[ $imms == *$want* ]] || wire=0; done
passes=$(cat "$out"/*.txt | grep -c "^PASS " || true)
if [[ $fail == 0 && $theirs == 0 && $cap == 0 && $wire == 1 ]]; then
  echo "PASS naa reverse interop: appliance host library -> NAA on rdma-core/rxe ($passes checks passed, $run host runs)"
else
  echo "FAIL naa reverse interop: hosts=$fail vm=$theirs capture=$cap wire=$wire"
  exit 1
fi
