#!/usr/bin/env bash
# Boot ONE Soft-RoCE VM (192.0.2.1, MAC 52:54:00:00:00:01) on a bare tap "tap0" inside the
# network namespace $RXE_VM_NETNS (default "rxevm"), for interop work with a host program
# (e.g. DPDK net_af_packet on tap0, run with: ip netns exec rxevm <program>).
#
# Usage:
#   tests/interop/vm/run-vm.sh                    interactive: shell on the serial console
#                                             (Ctrl-A X quits qemu); netns kept until exit
#   tests/interop/vm/run-vm.sh -c 'SHELL SNIPPET' run the snippet in the VM, print its output, stop
#   tests/interop/vm/run-vm.sh -f FILE            same with a script file
# Options: -n  no rxe0 (plain NIC)
#          -b  bridge mode: tap0 (VM) + veth "dp0" (host program end; its peer dp0-br) on br0,
#              and br0 gets 192.0.2.254/24 so kernel TCP in the netns can carry the
#              out-of-band QPN/PSN/GID exchange of ibv_*_pingpong / perftest (port 18515)
#          -i IP/PREFIX (default 192.0.2.1/24)   -t SECONDS VM timeout for -c/-f (default 300)
#          -w  wait mode (with -c/-f), for a driver that runs this script in the background: once
#              the VM is ready print "RXEVM-WAIT netns=<ns> ip=<vm ip> ready_s=<s>" on stdout and
#              keep the VM up until its command ends, the -t timeout passes, or this script gets
#              SIGTERM/SIGINT; then print the command's console output so far and clean up (qemu,
#              netns) as usual. Example: tests/interop/rc_pingpong.sh
# Env: RXE_VM_9P=/some/dir shares a host directory, mounted in the VM on /mnt/host (add
#      RXE_VM_APPEND=rxe.9p=1); other RXE_VM_* as in run-pair.sh.
set -euo pipefail
RXE_VM_NETNS="${RXE_VM_NETNS:-rxevm}"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CMD="" FILE="" NORXE=0 MODE=nobridge IP=192.0.2.1/24 TO=300 WAIT=0
while getopts "c:f:nbi:t:wh" o; do
  case "$o" in
    c) CMD="$OPTARG" ;; f) FILE="$OPTARG" ;; n) NORXE=1 ;; b) MODE=bridge ;;
    i) IP="$OPTARG" ;; t) TO="$OPTARG" ;; w) WAIT=1 ;; *) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 2 ;;
  esac
done
if [[ $WAIT == 1 && -z "$CMD" && -z "$FILE" ]]; then echo "-w needs -c or -f" >&2; exit 2; fi
if ip netns list | grep -qw "$RXE_NS"; then
  echo "netns $RXE_NS already exists (another run-vm.sh?); set RXE_VM_NETNS=other" >&2; exit 1
fi

rxe_need_build
rxe_workdir
trap rxe_cleanup EXIT
trap 'exit 130' INT TERM
W="$RXE_WORK"
extra="rxe.norxe=$NORXE"
[[ -n "${RXE_VM_9P:-}" ]] && extra+=" rxe.9p=1"
if [[ -n "$CMD" ]]; then printf '%s\n' "$CMD" > "$W/cmd.sh"; FILE="$W/cmd.sh"; fi
rxe_netns 1 "$MODE"
if [[ "$MODE" == bridge ]]; then
  X="ip netns exec $RXE_NS"
  $X ip link add dp0 type veth peer name dp0-br
  $X ip link set dp0-br master br0
  [[ -z "${RXE_VM_MTU:-}" ]] || { $X ip link set dp0 mtu "$RXE_VM_MTU"; $X ip link set dp0-br mtu "$RXE_VM_MTU"; }
  $X ip link set dp0-br up
  $X ip link set dp0 up
  $X ip addr add 192.0.2.254/24 dev br0
fi

if [[ -z "$FILE" ]]; then
  rxe_overlay "$W/ov" "" "$W/vm.cpio"
  rxe_log "netns $RXE_NS: tap0$([[ $MODE == bridge ]] && echo ' + veth dp0 on br0 (br0 = 192.0.2.254)'); VM $IP; Ctrl-A X quits"
  rxe_log "e.g. in another shell: ip netns exec $RXE_NS dpdk-testpmd --no-huge -m 512 --no-pci --file-prefix=x --vdev=net_af_packet0,iface=tap0 -l 0-1 -- --no-mlockall --total-num-mbufs=8192 --forward-mode=rxonly"
  RXE_FOREGROUND=1 RXE_SERIAL=mon:stdio rxe_start_vm vm1 tap0 52:54:00:00:00:01 "$IP" "$W/vm.cpio" "$W/vm.log" "$extra rxe.shell=1"
  exit 0
fi
rxe_overlay "$W/ov" "$FILE" "$W/vm.cpio"
t0=$(date +%s.%N)
rxe_start_vm vm1 tap0 52:54:00:00:00:01 "$IP" "$W/vm.cpio" "$W/vm.log" "$extra"; VP=$RXE_LAST_PID
b=$(rxe_wait_ready "$W/vm.log" "$VP" "$TO" "$t0" || true)
rxe_log "VM ready after ${b}s (netns $RXE_NS, tap0)"
if [[ $WAIT == 1 ]]; then
  trap 'rxe_cmd_output "$W/vm.log"; exit 143' TERM
  trap 'rxe_cmd_output "$W/vm.log"; exit 130' INT
  if [[ "$b" == - ]]; then rxe_cmd_output "$W/vm.log"; exit 1; fi
  echo "RXEVM-WAIT netns=$RXE_NS ip=${IP%/*} ready_s=$b"
fi
rxe_wait_exit "$VP" "$TO" || true
rxe_cmd_output "$W/vm.log"
rc=$(rxe_cmd_rc "$W/vm.log")
[[ "${rc:-1}" == 0 ]]
