#!/usr/bin/env bash
# rdma_cm through the attach socket against Linux rxe: roce-cm-example, a client process of
# roced (net_af_packet on the VM's bridge), and librdmacm's rdma_server / rdma_client in the
# rxe VM, both directions: each side's exchange (connect, 16 bytes each way, disconnect)
# must complete on both ends.
#   cm_attach.sh ROCED ROCE_CM_EXAMPLE   (root; exits 77 where VMs cannot run)
set -euo pipefail
roced=$(realpath "$1") ex=$(realpath "$2")
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
out=$(mktemp -d)
ns=${RXE_VM_NETNS:-rxevm}
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$out"' EXIT
fail=0
for dir in vm-server us-server; do
  if [[ $dir == vm-server ]]; then
    boot "rdma_server -p 7471"
  else
    boot "retry rdma_client -s 192.0.2.100 -p 7471"
  fi
  roced_on_dp0 "$roced" roced
  if [[ $dir == vm-server ]]; then
    timeout 120 "$ex" --socket "$out/roced.sock" --connect 192.0.2.1:7471 > "$out/us.txt" 2>&1 \
      && ours=0 || ours=$?
  else
    timeout 120 "$ex" --socket "$out/roced.sock" --listen 7471 > "$out/us.txt" 2>&1 \
      && ours=0 || ours=$?
  fi
  finish && theirs=0 || theirs=1
  kill "$rp" 2>/dev/null; wait "$rp" 2>/dev/null || true
  if [[ $ours == 0 && $theirs == 0 ]]; then
    echo "PASS rdma_cm attached ($dir): $(grep '^OK' "$out/us.txt")"
  else
    echo "FAIL rdma_cm attached ($dir): ours=$ours rxe=$theirs"
    sed 's/^/  us: /' "$out/us.txt"; sed 's/^/  roced: /' "$out/roced.log" | tail -5
    grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -20
    fail=1
  fi
done
exit $fail
