#!/usr/bin/env bash
# rsockets on the wire against rdma-core's own: Debian's rstream / riostream over our
# librdmacm.so.1 (and the provider, in-process on a DPDK net_af_packet port on dp0, 192.0.2.100)
# against the same binaries over Debian's librdmacm on Linux rxe in the interop VM, in both
# roles. Every case verifies the data (-T v): a receiver exits non-zero on a wrong byte. Both
# sides must exit 0 and print their result line, and our side's capture must be clean
# (tests/integration/check_capture.sh: our parser takes every frame, tshark finds no error).
#   rsocket_rxe.sh LIBROCE_VERBS RDMACM_DIR ROCE_PCAP [CASE...]
# (root; exits 77 when VMs cannot run here)
# CASE: rstream (default mode: non-blocking), rstream_blocking, rstream_async, riostream,
# rstream_keepalive.
# Env: RXE_VM_NETNS (default rxevm) names the VM's network namespace.
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") pcap=$(realpath "$3"); shift 3
cases=("${@:-rstream rstream_blocking rstream_async riostream rstream_keepalive}")
read -r -a cases <<< "${cases[*]}"
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
command -v rstream >/dev/null || { echo "skipped: rdmacm-utils not installed"; exit 77; }
interop_preflight
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
ours() {  # ours CMD...: Debian's tool here, the appliance in-process on dp0
  ip netns exec "$RXE_VM_NETNS" env LD_PRELOAD="$lib" LD_LIBRARY_PATH="$cmdir" \
    ROCE_LINK="--pmd af_packet --iface dp0 --ip 192.0.2.100 --mac 02:00:00:00:01:00 --pcap $out/us.pcap" \
    timeout 120 "$@" > "$out/us.txt" 2>&1
}
# Our client until the VM's server listens (refused or unreachable while it comes up).
ours_retry() {
  local rc
  for _ in $(seq 40); do
    rc=0
    ours "$@" || rc=$?
    [[ $rc != 0 ]] && grep -Eqi "connection refused|timed out|no route" "$out/us.txt" || return "$rc"
    sleep 0.5
  done
  return "$rc"
}
ok_output() {  # ok_output FILE: one result line, no verification failure
  grep -Eq '^custom +[0-9]+[kmg]? ' "$1" && ! grep -q 'verification failed' "$1"
}
for c in "${cases[@]}"; do
  vm_client_args=
  case $c in
    rstream) tool=rstream args="-T v -S 4096 -C 100" ;;
    rstream_blocking) tool=rstream args="-T v -T b -S 100000 -C 30" ;;
    # rpoll on both sides while the VM serves; while we serve, the VM's client does not poll:
    # rdma-core's rpoll reports POLLHUP with POLLIN when the last data and the disconnect come
    # in together (slow TCG makes that likely), which rstream's do_poll takes for an error.
    rstream_async) tool=rstream args="-T v -T a -S 1000 -C 100" vm_client_args="-T v -S 1000 -C 100" ;;
    riostream) tool=riostream args="-T v -S 4096 -C 30" ;;
    # Keepalives every second both ways (rdma-core's: a zero-length RDMA WRITE, rkey 0).
    rstream_keepalive) tool=rstream args="-T v -T b -k 1 -S 65536 -C 200" ;;
    *) echo "rsocket_rxe.sh: unknown case $c"; exit 2 ;;
  esac
  read -r -a a <<< "$args"
  vm_client_args=${vm_client_args:-$args}
  for dir in vm-server us-server; do
    rc=0
    : > "$out/cap.txt"
    if [[ $dir == vm-server ]]; then
      boot "$tool -b 192.0.2.1 $args"
      ours_retry "$tool" -s 192.0.2.1 "${a[@]}" || rc=$?
    else
      # guest-lib's retry, plus "timed out": a blocking rconnect of rdma-core's reports ETIMEDOUT
      # when it resolves our address before our side is up.
      boot "rs_retry() { n=0; while :; do $tool -s 192.0.2.100 $vm_client_args > /tmp/rs.out 2>&1; rc=\$?; if [ \$rc -ne 0 ] && [ \$n -lt 90 ] && grep -qiE 'timed out|refused|no route' /tmp/rs.out; then n=\$((n+1)); sleep 1; continue; fi; [ \$n -gt 0 ] && echo \"(retried \$n times)\"; cat /tmp/rs.out; return \$rc; done; }; rs_retry"
      ours "$tool" -b 192.0.2.100 "${a[@]}" || rc=$?
    fi
    finish && theirs=0 || theirs=1
    grep -v "^\[rxe-vm\]" "$out/vm.txt" > "$out/theirs.txt" || true
    if [[ $rc == 0 && $theirs == 0 ]] && ok_output "$out/us.txt" && ok_output "$out/theirs.txt" &&
       "$here/../integration/check_capture.sh" "$pcap" "$out/us.pcap" 20 > "$out/cap.txt" 2>&1; then
      echo "PASS $c ($dir): $(grep -E '^custom' "$out/us.txt"); $(tail -1 "$out/cap.txt")"
    else
      echo "FAIL $c ($dir): ours=$rc rxe=$theirs"
      sed 's/^/  us: /' "$out/us.txt" | tail -20
      sed 's/^/  vm: /' "$out/theirs.txt" | tail -20
      sed 's/^/  capture: /' "$out/cap.txt" 2>/dev/null | tail -5
      fail=1
    fi
  done
done
exit $fail
