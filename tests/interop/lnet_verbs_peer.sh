#!/usr/bin/env bash
# Linux rxe sends into a transfer machine owned by a client process attached to roced:
# ibv_rc_pingpong and ibv_srq_pingpong (rdma-core, in the rxe VM) as clients of
# roce-lnet-verbs-peer, whose Tm (client/lnet foreign connections) receives through a pool
# of multi-message buffers on roced's DPDK port (net_af_packet on the VM's bridge). The tool
# checks the count, bytes and contents of every message and that several landed in one
# buffer; the rdma-core tool checks its own side (exit status).
#   lnet_verbs_peer.sh ROCED ROCE_LNET_VERBS_PEER [rc|srq]...   (root; exits 77 without VMs)
set -euo pipefail
roced=$(realpath "$1") sink=$(realpath "$2"); shift 2
kinds=("${@:-rc srq}")
read -r -a kinds <<< "${kinds[*]}"
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
iters=${ITERS:-200}
out=$(mktemp -d)
ns=${RXE_VM_NETNS:-rxevm}
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$out"' EXIT
fail=0
for kind in "${kinds[@]}"; do
  boot "retry ibv_${kind}_pingpong -d rxe0 -g \$(rxe_gid_idx) -s 1000 -n $iters 192.0.2.254"
  roced_on_dp0 "$roced" roced
  ip netns exec "$ns" timeout 150 "$sink" --socket "$out/roced.sock" --kind "$kind" --size 1000 \
    --iters "$iters" --per-buffer 8 > "$out/sink.txt" 2>&1 && ours=0 || ours=$?
  finish && theirs=0 || theirs=1
  kill "$rp" 2>/dev/null; wait "$rp" 2>/dev/null || true
  if [[ $ours == 0 && $theirs == 0 ]] && grep -q "several to a buffer" "$out/sink.txt"; then
    echo "PASS ibv_${kind}_pingpong -> transfer machine: $(grep -m1 'messages (' "$out/sink.txt")"
  else
    echo "FAIL ibv_${kind}_pingpong -> transfer machine: ours=$ours rxe=$theirs"
    sed 's/^/  us: /' "$out/sink.txt"; sed 's/^/  roced: /' "$out/roced.log" | tail -5
    grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -20
    fail=1
  fi
done
exit $fail
