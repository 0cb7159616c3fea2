#!/usr/bin/env bash
# Debian's unmodified ibverbs-utils and perftest binaries on the appliance against the same
# binaries on Linux rxe in the interop VM, in both roles (the VM serves and ours connects, then
# ours serves and the VM connects). Our side is the packaged binary itself under roce-run,
# in-process on the VM bridge's veth end dp0 (net_af_packet, 192.0.2.100: the link roce-perf
# uses there, `--iface dp0`), never roce-perf. Every run of ours is captured by the link's own
# --pcap and checked (our parser accepts every RoCEv2 frame, tshark dissects them cleanly).
#   verbs_binaries.sh ROCE_RUN ROCE_PCAP ibv_{rc,uc,ud,srq}_pingpong [SIZES...]
#   verbs_binaries.sh ROCE_RUN ROCE_PCAP ib_write_bw|ib_read_bw|... [ARGS...]  (ARGS to both sides)
# (root; exits 77 when VMs cannot run here, when the tool is not installed, or for -R when our
# librdmacm is not built next to roce-run). One VM boot per direction; a pingpong's sizes run
# one after the other in that boot. Our GID index is 0 (the port's RoCE v2 GID), rxe's
# $(rxe_gid_idx). Environment: ITERS (pingpongs, default 100); RXE_VM_NETNS (default rxevm_vt);
# RXE_VM_MTU=9000: path MTU 4096 (-m 4096 on both sides but UD's, our link --netdev-mtu 9000);
# WR_API_SHIM=tests/perftest_wr_api_shim.so: preloaded on our side only, perftest there posts
# with ibv_wr_* (the extended API) and must say so, rxe's with ibv_post_send; ROCED=build/bin/roced:
# attached mode, ours is `roce-run --attach` to a roced whose port is on dp0 (192.0.2.100),
# captured by tcpdump on the veth's other end dp0-br (roced writes no pcap).
set -euo pipefail
run=$(realpath "$1") pcap=$(realpath "$2") tool=$3; shift 3
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm_vt}
command -v "$tool" > /dev/null || { echo "skipped: $tool not installed"; exit 77; }
rdma_cm=0
case $tool in
  ibv_rc_pingpong|ibv_uc_pingpong|ibv_srq_pingpong) kind=pingpong; sizes=("${@:-1 4096}") ;;
  ibv_ud_pingpong) kind=pingpong; sizes=("${@:-1 1024}") ;;
  ib_*_bw|ib_*_lat) kind=perftest; args=("$@")
    for a in "${args[@]}"; do [[ $a == -R ]] && rdma_cm=1; done ;;
  *) echo "usage: $0 ROCE_RUN ROCE_PCAP ibv_{rc,uc,ud,srq}_pingpong [SIZES...] | ib_TEST [ARGS...]"
     exit 2 ;;
esac
[[ $kind == pingpong ]] && read -r -a sizes <<< "${sizes[*]}"
link_extra="" mtu_args=""
if [[ ${RXE_VM_MTU:-1500} -ge 9000 ]]; then
  link_extra=" --netdev-mtu 9000"
  # ibv_ud_pingpong has no -m: its datagrams may fill the port's MTU
  [[ $tool == ibv_ud_pingpong ]] || mtu_args="-m 4096"
fi
roced=""
if [[ -n ${ROCED:-} ]]; then
  roced=$(realpath "$ROCED")
  [[ -z $link_extra ]] || { echo "usage: ROCED (attached) runs at the default MTU only"; exit 2; }
  command -v tcpdump > /dev/null || { echo "skipped: attached runs are captured by tcpdump"; exit 77; }
fi
shim=""
if [[ -n ${WR_API_SHIM:-} ]]; then
  [[ $kind == perftest ]] || { echo "usage: WR_API_SHIM is for perftest"; exit 2; }
  shim=$(realpath "$WR_API_SHIM")
fi
# roce-run needs our librdmacm.so.1 beside it (it puts it first on the library path). Until it
# is built, the programs that never call rdma_cm run with the environment roce-run would give
# them for --link (the provider preloaded, ROCE_LINK); -R needs it and is skipped.
provider=""
if [[ $rdma_cm == 1 && ! -f $(dirname "$run")/../lib/rdmacm/librdmacm.so.1 ]]; then
  echo "skipped: -R needs our librdmacm (build/lib/rdmacm/librdmacm.so.1)"; exit 77
fi
if ! "$run" --link "--iface dp0" -- true > /dev/null 2>&1; then
  provider=$(realpath "$(dirname "$run")/../lib/libroce-verbs.so")
  echo "note: roce-run refuses to start without our librdmacm: its environment set here (LD_PRELOAD, ROCE_LINK or ROCE_ATTACH)"
fi
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
out=$(mktemp -d)
trap 'attach_down; [[ -n ${KEEP_OUT:-} ]] || rm -rf "$out"' EXIT
fail=0
declare -A rcs

# ours client|server LOG PCAP ARGS...: the tool on our side (in-process on dp0, captured to
# PCAP), in the VM's namespace, output to LOG. A client whose server is not listening yet (the
# VM's tool starts a while after the VM is ready) runs again, 1 s later, for at most 90 s, as
# the VM's `retry`.
ours() {
  local role=$1 log=$2 cap=$3 rc n=0 dump=""; shift 3
  # dp0 has no address of its own in the VM's namespace: name the appliance's (the provider
  # takes an af_packet interface's own MAC and IPv4 address when ROCE_LINK names none)
  local link="--iface dp0 --ip 192.0.2.100 --mac 02:00:00:00:00:64 --pcap $cap$link_extra"
  local mode=(--link "$link")
  local vars=(ROCE_LINK="$link")
  if [[ -n $roced ]]; then
    mode=(--attach "$out/vt.sock") vars=(ROCE_ATTACH="$out/vt.sock")
    # on the bridge's end of the veth: roced's af_packet port bypasses the qdisc, so its own
    # transmissions never reach a capture on dp0
    ip netns exec "$RXE_VM_NETNS" tcpdump -i dp0-br --immediate-mode -U -w "$cap" > "$cap.log" 2>&1 &
    dump=$!
    for _ in $(seq 50); do grep -q "listening on" "$cap.log" && break; sleep 0.1; done
  fi
  while :; do
    if [[ -n $provider ]]; then
      ip netns exec "$RXE_VM_NETNS" env LD_PRELOAD="$provider${shim:+:$shim}" "${vars[@]}" \
        timeout 300 "$tool" "$@" > "$log" 2>&1 && rc=0 || rc=$?
    else
      # roce-run puts the provider before a preload already set (the shim)
      ip netns exec "$RXE_VM_NETNS" env ${shim:+LD_PRELOAD="$shim"} \
        timeout 300 "$run" "${mode[@]}" -- "$tool" "$@" > "$log" 2>&1 && rc=0 || rc=$?
    fi
    if [[ $role == client && $rc != 0 && $n -lt 90 ]] &&
       grep -q -i -E "couldn't connect|unable to init the socket|connection refused|REJECTED|UNREACHABLE|ADDR_ERROR|ROUTE_ERROR" "$log"; then
      n=$((n + 1)); sleep 1; continue
    fi
    [[ $n == 0 ]] || echo "(ours retried $n times while the VM's server came up)" >> "$log"
    # the last frames reach tcpdump a moment later on a busy host
    if [[ -n $dump ]]; then sleep 2; kill -INT "$dump"; wait "$dump" || true; fi
    return "$rc"
  done
}

# vm_end SECONDS: wait for the VM's command to end, at most SECONDS (then stop the VM: its
# tool may wait forever for a peer of ours that failed)
vm_end() {
  for _ in $(seq "$1"); do kill -0 "$vmpid" 2> /dev/null || break; sleep 1; done
  kill -0 "$vmpid" 2> /dev/null && kill -TERM "$vmpid" 2> /dev/null
  wait "$vmpid" || true
}

# attach_up / attach_down: attached mode's roced on dp0 in the VM's namespace (after the boot
# made it), socket $out/vt.sock; its log goes with a failure's output
attach_up() {
  [[ -n $roced ]] || return 0
  roced_on_dp0 "$roced" vt
  [[ -S $out/vt.sock ]] || { echo "FAIL roced did not start:"; cat "$out/vt.log"; exit 1; }
}
attach_down() {
  [[ -n $roced ]] || return 0
  [[ -n ${rp:-} ]] || return 0
  kill "$rp" 2> /dev/null || true
  wait "$rp" 2> /dev/null || true
  rp=""
}

# vm_part NAME: the VM's console output between "=== NAME" and the next "=== " marker
vm_part() { grep -v '^\[rxe-vm\]' "$out/vm.txt" | awk -v m="=== $1" '$0 == m { on = 1; next } /^=== / { on = 0 } on'; }

report() {  # report OK LABEL SUMMARY US_LOG VM_PART_NAME
  if [[ $1 == 1 ]]; then
    echo "PASS $2: $3"
  else
    echo "FAIL $2: $3"
    sed 's/^/  capture: /' "$out/capture.txt"
    sed 's/^/  us: /' "$4" | tail -25
    [[ -z $roced ]] || sed 's/^/  roced: /' "$out/vt.log" | tail -10
    vm_part "$5" | sed 's/^/  vm: /' | tail -25
    fail=1
  fi
}

if [[ $kind == pingpong ]]; then
  iters=${ITERS:-100}
  for dir in vm-server us-server; do
    # one boot: the sizes in turn, each marked in the console output
    cmd="rc=0; for s in ${sizes[*]}; do echo \"=== \$s\"; "
    if [[ $dir == vm-server ]]; then
      cmd+="$tool -d rxe0 -g \$(rxe_gid_idx) -s \$s -n $iters $mtu_args -c || rc=1; done; exit \$rc"
    else
      cmd+="retry $tool -d rxe0 -g \$(rxe_gid_idx) -s \$s -n $iters $mtu_args -c 192.0.2.254 || rc=1; done; exit \$rc"
    fi
    boot "$cmd" 600
    attach_up
    rcs=() any=0
    for s in "${sizes[@]}"; do
      if [[ $dir == vm-server ]]; then
        # shellcheck disable=SC2086 # mtu_args: none or two words
        ours client "$out/us-$s.txt" "$out/us-$s.pcap" -d roce0 -g 0 -s "$s" -n "$iters" $mtu_args -c 192.0.2.1 &&
          rcs[$s]=0 || rcs[$s]=$?
      else
        # shellcheck disable=SC2086
        ours server "$out/us-$s.txt" "$out/us-$s.pcap" -d roce0 -g 0 -s "$s" -n "$iters" $mtu_args -c &&
          rcs[$s]=0 || rcs[$s]=$?
      fi
      [[ ${rcs[$s]} == 0 ]] || any=1
    done
    vm_end $((any ? 20 : 180))
    attach_down
    for s in "${sizes[@]}"; do
      ok=1
      [[ ${rcs[$s]} == 0 ]] || ok=0
      vm_part "$s" > "$out/vm-$s.txt"
      for f in "$out/us-$s.txt" "$out/vm-$s.txt"; do
        # both sides finish (their two result lines) and, -c, the server found its data intact
        grep -Eq "^[0-9]+ iters in [0-9.]+ seconds = [0-9.]+ usec/iter" "$f" || ok=0
        ! grep -q "invalid data" "$f" || ok=0
      done
      grep -q "GID ::ffff:192.0.2.100" "$out/us-$s.txt" || ok=0
      "$here/../integration/check_capture.sh" "$pcap" "$out/us-$s.pcap" $((2 * iters)) \
        > "$out/capture.txt" 2>&1 || ok=0
      us=$(grep -m1 "usec/iter" "$out/us-$s.txt" || echo "no result")
      them=$(grep -m1 "usec/iter" "$out/vm-$s.txt" || echo "no result")
      report "$ok" "$tool -s $s -n $iters${mtu_args:+ $mtu_args} -c (${roced:+attached, }$dir)" \
        "us:[$us] rxe:[$them]; ours rc=${rcs[$s]}; $(tail -1 "$out/capture.txt")" "$out/us-$s.txt" "$s"
    done
    grep -q "cmd-end rc=0" "$out/vm.txt" || { echo "FAIL $tool ($dir): the VM's command failed"; fail=1; }
  done
  exit $fail
fi

# perftest: one run per direction
# shellcheck disable=SC2206 # mtu_args: none or two words
[[ -z $mtu_args ]] || args+=($mtu_args)
us=192.0.2.254  # where the VM's client finds us: the bridge, for the TCP exchange
[[ $rdma_cm == 0 ]] || us=192.0.2.100  # -R: rdma_cm to our RoCE address, no TCP
for dir in vm-server us-server; do
  if [[ $dir == vm-server ]]; then
    boot "echo '=== run'; $tool -d rxe0 -x \$(rxe_gid_idx) ${args[*]}" 600
    attach_up
    ours client "$out/us.txt" "$out/us.pcap" -d roce0 -x 0 "${args[@]}" 192.0.2.1 && rc=0 || rc=$?
  else
    boot "echo '=== run'; retry $tool -d rxe0 -x \$(rxe_gid_idx) ${args[*]} $us" 600
    attach_up
    ours server "$out/us.txt" "$out/us.pcap" -d roce0 -x 0 "${args[@]}" && rc=0 || rc=$?
  fi
  vm_end $((rc ? 20 : 180))
  attach_down
  ok=1
  [[ $rc == 0 ]] || ok=0
  grep -q "cmd-end rc=0" "$out/vm.txt" || ok=0
  "$here/../integration/check_capture.sh" "$pcap" "$out/us.pcap" 1 > "$out/capture.txt" 2>&1 || ok=0
  # the result row: a line that starts with the message size; both sides print one, but the
  # servers of the READ and atomic latency tests (only their client measures)
  row=$(grep -m1 -E '^ [0-9]+ +[0-9]+ ' "$out/us.txt" | tr -s ' \t' ' ' || true)
  vmrow=$(vm_part run | grep -m1 -E '^ [0-9]+ +[0-9]+ ' | tr -s ' \t' ' ' || true)
  quiet_server=0
  [[ $tool =~ ^ib_(read|atomic)_lat$ ]] && quiet_server=1
  [[ -n $row || ($quiet_server == 1 && $dir == us-server) ]] || ok=0
  [[ -n $vmrow || ($quiet_server == 1 && $dir == vm-server) ]] || ok=0
  api=$(grep -m1 -o "ibv_wr\* API *: *[A-Z]*" "$out/us.txt" | tr -s ' ' || true)
  # with the shim, ours must have taken the ibv_wr_* path
  [[ -z $shim || $api == "ibv_wr* API : ON" ]] || ok=0
  report "$ok" "$tool ${args[*]}${shim:+ (ours on ibv_wr_*)} (${roced:+attached, }$dir)" \
    "us:[${row:-none}] rxe:[${vmrow:-none}] ours rc=$rc ${api:+($api)}; $(tail -1 "$out/capture.txt")" \
    "$out/us.txt" run
done
exit $fail
