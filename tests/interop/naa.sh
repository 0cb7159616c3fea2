#!/usr/bin/env bash
# The NAAICE host library on rdma-core (naaice_client_ibverbs, libibverbs + librdmacm on Linux
# rxe in the VM) offloads to roce-naa on a DPDK port (net_af_packet on dp0, RoCE IP
# 192.0.2.100): every kernel, results checked against the host's reference, then every MRSP
# error code provoked. The NAA's capture must decode (our parser and tshark) and show the MRSP
# error messages and the completion statuses. Kept small: the VM runs under TCG. The host is the
# project's own; its protocol is upstream NAAICE's (naa-communication-library f7b72fc), checked
# against upstream's own programs by naa_upstream_client.sh and naa_upstream_server.sh.
#   naa.sh ROCE_NAA NAAICE_CLIENT_IBVERBS ROCE_PCAP   (root; exits 77 when VMs cannot run here)
# Env: RXE_VM_NETNS (default rxevm-naa) names the VM's network namespace.
set -euo pipefail
naa=$(realpath "$1") client=$(realpath "$2") pcap=$(realpath "$3")
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-naa}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
RXE_VM_EXTRA_BINS="$client" "$here/vm/build.sh" >/dev/null 2>&1 ||
  { echo "skipped: cannot put $client into the VM image"; exit 77; }
out=$(mktemp -d)
npid=
trap '[[ -n $npid ]] && kill "$npid" 2>/dev/null; rm -rf "$out"' EXIT
c=$(basename "$client")
# 5 kernel connections, then 3 MRSP errors (each but the first retried on the same connection)
# and one application error.
boot "retry $c -k all -s 1024 -n 2 192.0.2.100 && $c -e too-many-regions 192.0.2.100 &&
      $c -e invalid-address 192.0.2.100 && $c -e not-enough-memory 192.0.2.100 &&
      $c -e unknown-function 192.0.2.100" 400
# The host library calls vector_add and reduce_sum by their codes from before upstream's software
# NAA took 2 and 3 (docs/naa.md).
ip netns exec "$RXE_VM_NETNS" "$naa" \
  --pmd af_packet --iface dp0 --ip 192.0.2.100 \
  --mac 02:00:00:00:01:00 --exit-after 9 --timeout 380 --pcap "$out/naa.pcap" \
  > "$out/naa.txt" 2>&1 &
npid=$!
finish && theirs=0 || theirs=1
wait "$npid" && ours=0 || ours=$?
npid=
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
sed 's/^/  naa: /' "$out/naa.txt"
"$here/../integration/check_capture.sh" "$pcap" "$out/naa.pcap" 50 > "$out/capture.txt" 2>&1 &&
  cap=0 || cap=1
ts=(tshark -r "$out/naa.pcap" --disable-heuristic rpcrdma_infiniband -o infiniband.identify_payload:FALSE)
errs=$("${ts[@]}" -Y 'ip.src == 192.0.2.100 && infiniband.bth.opcode == 4' -T fields -e data.data \
       2>/dev/null | grep '^00' | cut -c1-8 | sort -u | tr '\n' ' ' || true)
imms=$("${ts[@]}" -Y 'ip.src == 192.0.2.100 && (infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)' \
       -T fields -e infiniband.immdt 2>/dev/null | cut -d, -f1 | sed 's/^0x//' | cut -c5-6 |
       sort -u | tr '\n' ' ' || true)
passes=$(grep -c "PASS " "$out/vm.txt" || true)
echo "$(tail -1 "$out/capture.txt"); MRSP errors on the wire: $errs; return codes (imm >> 8): $imms"
ok=1
for want in 00010000 00020000 00030000; do [[ $errs == *$want* ]] || ok=0; done
for want in 00 10; do [[ $imms == *$want* ]] || ok=0; done
# 5 kernels, 3 MRSP errors, 2 retried calls, 1 application error
if [[ $ours == 0 && $theirs == 0 && $cap == 0 && $ok == 1 && $passes -ge 11 ]]; then
  echo "PASS naa interop: rdma-core host on rxe -> roce-naa ($passes checks passed in the VM)"
else
  echo "FAIL naa interop: naa=$ours vm=$theirs capture=$cap wire=$ok vm_passes=$passes"
  sed 's/^/  capture: /' "$out/capture.txt"
  exit 1
fi
