#!/usr/bin/env bash
# Debian's rdmacm-utils over our librdmacm.so.1 (and the provider, in-process on a DPDK
# net_af_packet port on dp0, 192.0.2.100) against the same tools in the Linux rxe VM, in both
# roles: rping (10 pings, -V in the VM), ucmatose (2 connections, 20 messages), udaddy (SIDR,
# 2 UD ids). Both sides must exit 0 and print what the tool prints when it worked. give_up (not
# in the default list; CM_GIVE_UP names tests/integration/cm_give_up.c's program): ours gives
# its connect up at once, and the VM's rping server must be told REJECTED, reason 4. ece (not
# in the default list; attached; RDMACM_ECE names tests/integration/rdmacm_ece.c's program):
# ours offers selective repeat in its ECE through a roced that allows it, to the VM's
# rdma_server, whose librdmacm answers with our vendor ID (rdma-core returns the REQ's) and
# options 0: the connection must stay go-back-N (ibv_query_ece 0) and its exchange complete.
#   rdmacm_rxe.sh LIBROCE_VERBS RDMACM_DIR [TOOL...]   (root; exits 77 when VMs cannot run here)
# Env: RXE_VM_NETNS (default rxevm) names the VM's network namespace; ROCED=build/bin/roced:
# attached mode, ours a client of a roced whose port is on dp0 (192.0.2.100, started after
# each boot, lib.sh's roced_on_dp0).
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2"); shift 2
tools=("${@:-rping ucmatose udaddy}")
read -r -a tools <<< "${tools[*]}"
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
command -v rping >/dev/null || { echo "skipped: rdmacm-utils not installed"; exit 77; }
roced=""
[[ -z ${ROCED:-} ]] || roced=$(realpath "$ROCED")
interop_preflight
out=$(mktemp -d)
rp=""
attach_up() {
  [[ -n $roced ]] || return 0
  if [[ $tool == ece ]]; then
    roced_on_dp0 "$roced" cm "" "transport: {selective_repeat: true}"
  else
    roced_on_dp0 "$roced" cm
  fi
  [[ -S $out/cm.sock ]] || { echo "FAIL roced did not start:"; cat "$out/cm.log"; exit 1; }
}
attach_down() {
  [[ -n $rp ]] || return 0
  kill "$rp" 2> /dev/null || true
  wait "$rp" 2> /dev/null || true
  rp=""
}
trap 'attach_down; rm -rf "$out"' EXIT
fail=0
ours() {  # ours CMD...: one of Debian's tools here, the appliance in-process on dp0 (or roced's)
  local mode=(ROCE_LINK="--pmd af_packet --iface dp0 --ip 192.0.2.100 --mac 02:00:00:00:01:00")
  [[ -z $roced ]] || mode=(ROCE_ATTACH="$out/cm.sock")
  ip netns exec "$RXE_VM_NETNS" env LD_PRELOAD="$lib" LD_LIBRARY_PATH="$cmdir" "${mode[@]}" \
    timeout 60 "$@" > "$out/us.txt" 2>&1
}
# Our client until the VM's server listens (rejected, or unreachable, while it comes up).
ours_retry() {
  local rc
  for _ in $(seq 30); do
    rc=0
    ours "$@" || rc=$?
    [[ $rc != 0 ]] && grep -Eq "REJECTED|UNREACHABLE|ADDR_ERROR" "$out/us.txt" || return "$rc"
    sleep 0.5
  done
  return "$rc"
}
ok_output() {  # ok_output TOOL FILE: the lines the tool prints when it worked
  case $1 in
    rping) [[ $(grep -o "rdma-ping-[0-9]*:" "$2" | sort -u | wc -l) -ge 10 ]] ;;
    ucmatose | udaddy) grep -q "data transfers complete" "$2" && grep -q "return status 0" "$2" ;;
    give_up) grep -Eq "gave the connect up|RDMA_CM_EVENT_REJECTED, error 4" "$2" ;;
    ece)  # ours: connected on go-back-N and exchanged; the VM's rdma_server: ended with 0
      grep -q "rdma_server: end 0" "$2" ||
        { grep -q "^client: in force rc 0 vendor 0xffffff options 0x0$" "$2" &&
          grep -q "^client: exchanged" "$2"; } ;;
  esac
}
for tool in "${tools[@]}"; do
  case $tool in
    rping)
      vm_server="rping -s -a 192.0.2.1 -C 10 -v" us_client=(rping -c -a 192.0.2.1 -C 10 -v)
      vm_client="retry rping -c -a 192.0.2.100 -C 10 -v -V" us_server=(rping -s -a 192.0.2.100 -C 10 -v) ;;
    ucmatose)
      vm_server="ucmatose -b 192.0.2.1 -c 2 -C 20" us_client=(ucmatose -s 192.0.2.1 -c 2 -C 20)
      vm_client="retry ucmatose -s 192.0.2.100 -c 2 -C 20" us_server=(ucmatose -b 192.0.2.100 -c 2 -C 20) ;;
    give_up)  # ours destroys its id right after rdma_connect: Linux's rping is told REJECTED 4
      vm_server="rping -s -a 192.0.2.1 -v -C 1"
      us_client=("${CM_GIVE_UP:?the cm_give_up program in CM_GIVE_UP}" 192.0.2.1 7174 2000)
      vm_client="" us_server=() ;;
    ece)
      [[ -n $roced ]] || { echo "rdmacm_rxe.sh: ece needs ROCED"; exit 2; }
      vm_server="rdma_server -s 192.0.2.1"
      us_client=("${RDMACM_ECE:?the rdmacm_ece program in RDMACM_ECE}" client 192.0.2.1 7471
        offer-exchange)
      vm_client="" us_server=() ;;
    udaddy)
      vm_server="udaddy -b 192.0.2.1 -c 2 -C 10" us_client=(udaddy -s 192.0.2.1 -c 2 -C 10)
      vm_client="retry udaddy -s 192.0.2.100 -c 2 -C 10" us_server=(udaddy -b 192.0.2.100 -c 2 -C 10) ;;
    *) echo "rdmacm_rxe.sh: unknown tool $tool"; exit 2 ;;
  esac
  for dir in vm-server us-server; do
    rc=0
    [[ $tool == ece && $dir == us-server ]] && continue  # the offer is the client's
    if [[ $tool == give_up ]]; then
      [[ $dir == vm-server ]] || continue  # the client's side is the one under test
      boot "$vm_server"
      attach_up
      sleep 5  # the VM's rping listening (no retry: a REJ 8 would end ours the same way)
      ip netns exec "$RXE_VM_NETNS" tcpdump -q -i dp0-br -w "$out/cm.pcap" udp port 4791 \
        > /dev/null 2>&1 &
      cap=$!
      sleep 1
      ours "${us_client[@]}" || rc=$?
      # rping's server ends with status 255 in either of the two ways Linux's CM shows the REJ:
      # the request already gone when rping creates its QP or accepts (rdma_create_qp or
      # rdma_accept: EINVAL, the usual case in the slow VM), or RDMA_CM_EVENT_REJECTED with
      # reason 4 after it accepted
      finish || true
      kill -INT "$cap" 2> /dev/null || true
      wait "$cap" 2> /dev/null || true
      attach_down
      grep -v "^\[rxe-vm\]" "$out/vm.txt" > "$out/theirs.txt" || true
      # and on the wire (dp0-br: DPDK's af_packet bypasses the qdisc, so dp0 shows no frame we
      # send): our REJ, reason 4 "timeout", with an 8-byte ARI (our CA GUID)
      rej=$(tshark -r "$out/cm.pcap" \
        -Y "infiniband.mad.attributeid == 0x0012" -T fields -e ip.src \
        -e infiniband.cm.rej.reason -e infiniband.cm.rej.rejinfolen 2> /dev/null | sort -u)
      echo "REJ on the wire (source, reason, ARI length): ${rej:-none}"
      if [[ $rc == 0 ]] && grep -q "gave the connect up" "$out/us.txt" &&
         grep -Eq "RDMA_CM_EVENT_REJECTED, error 4|rdma_(create_qp|accept): Invalid argument" \
           "$out/theirs.txt" && grep -Eq "^192\.0\.2\.100\s+(0x0004|4)\s+(0x08|8)$" <<< "$rej"; then
        echo "PASS $tool (${roced:+attached, }$dir)"
      else
        echo "FAIL $tool (${roced:+attached, }$dir): ours=$rc"
        sed 's/^/  us: /' "$out/us.txt" | tail -10
        sed 's/^/  vm: /' "$out/theirs.txt" | tail -10
        echo "  capture: $(tshark -r "$out/cm.pcap" 2> /dev/null | wc -l) frames"
        fail=1
      fi
      continue
    fi
    if [[ $dir == vm-server ]]; then
      boot "$vm_server"
      attach_up
      ours_retry "${us_client[@]}" || rc=$?
    else
      boot "$vm_client"
      attach_up
      ours "${us_server[@]}" || rc=$?
    fi
    finish && theirs=0 || theirs=1
    attach_down
    grep -v "^\[rxe-vm\]" "$out/vm.txt" > "$out/theirs.txt" || true
    if [[ $rc == 0 && $theirs == 0 ]] && ok_output "$tool" "$out/us.txt" &&
       ok_output "$tool" "$out/theirs.txt"; then
      echo "PASS $tool (${roced:+attached, }$dir)"
    else
      echo "FAIL $tool (${roced:+attached, }$dir): ours=$rc rxe=$theirs"
      grep -v "ping data:" "$out/us.txt" | sed 's/^/  us: /' | tail -20
      grep -v "ping data:" "$out/theirs.txt" | sed 's/^/  vm: /' | tail -20
      [[ -z $roced ]] || tail -10 "$out/cm.log" | sed 's/^/  roced: /'
      fail=1
    fi
  done
done
exit $fail
