#!/usr/bin/env bash
# NetFR's host and client (roce-netfr-check, the library on the appliance's stack) as two
# processes on a net_memif link (no hugepages, no root).
#   netfr_pair.sh ROCE_NETFR_CHECK SCENARIO [MAX_FRAME] [LINK [ROCED]]
# LINK memif (default) or veth: net_af_packet on a veth pair between two network namespaces
# (root and iproute2; exits 77, "skipped", without them); or roced: each side a client of its
# own roced (ROCED; the two on a memif link), NETFR_LINK=attach=SOCKET (no faults injected).
# SCENARIO frames | order | credits | refuse | restart | threads (roce-netfr-check's usage), and
#   lossy: order with 1% of the frames lost and 1% reordered on each side;
#   killed: the first client is killed (SIGKILL) once connected, the second runs frames.
set -euo pipefail
check=$(realpath "$1") scenario=$2 max=${3:-default} link=${4:-memif}
work=$(mktemp -d /tmp/netfr-pair-XXXXXX)
pid= na= nb= pids=()
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [[ -n $na ]] && { ip netns del "$na" 2>/dev/null || true; ip netns del "$nb" 2>/dev/null || true; }
  if [[ -n ${NETFR_PAIR_KEEP:-} ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
sock=$work/memif.sock
hlink="pmd=memif,socket=$sock,role=server" clink="pmd=memif,socket=$sock,role=client"
hexec=() cexec=()
if [[ $link == veth ]]; then
  if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
    echo "skipped: needs root and iproute2"; exit 77
  fi
  na=netfr-a-$$ nb=netfr-b-$$
  ip netns add "$na" && ip netns add "$nb" || { echo "skipped: cannot create network namespaces"; exit 77; }
  ip -n "$na" link add veth-a type veth peer name veth-b netns "$nb"
  for nd in "$na veth-a" "$nb veth-b"; do
    read -r ns dev <<< "$nd"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
    ip -n "$ns" link set "$dev" mtu 1500 up
    ip -n "$ns" link set lo up
  done
  hlink="pmd=af_packet,iface=veth-a" clink="pmd=af_packet,iface=veth-b"
  hexec=(ip netns exec "$na") cexec=(ip netns exec "$nb")
fi
hostaddr=",ip=192.0.2.1,mac=02:00:00:00:00:01" clientaddr=",ip=192.0.2.2,mac=02:00:00:00:00:02"
if [[ $link == roced ]]; then
  roced=$(realpath "$5") tag=nfp$$
  # shellcheck source=tests/integration/lib_appliance.sh
  source "$(dirname "$0")/lib_appliance.sh"
  appliance a server 02:00:00:00:00:01 192.0.2.1 0
  appliance b client 02:00:00:00:00:02 192.0.2.2 1
  hlink="attach=$work/a.sock" clink="attach=$work/b.sock" hostaddr="" clientaddr=""
fi
faults="" run=$scenario sessions=1 ops=1500 hpin="" cpin=""
case $scenario in
  lossy) run=order faults=",tx_drop=0.01,reorder=0.01" ops=600
         [[ $max == default ]] && max=32768 ;;
  restart) sessions=3 ;;
  killed) sessions=2 ;;
  bench) hpin=",lcore=0" cpin=",lcore=1" ;;  # one CPU each: latency, not scheduling
  threads) ops=500 ;;
  frames|order|credits|refuse) ;;
  *) echo "FAIL: unknown scenario $scenario"; exit 1 ;;
esac
[[ $max == default ]] && max=4194304
if [[ $link == roced ]]; then
  [[ -z $faults ]] || { echo "FAIL: no fault injection through roced"; exit 1; }
  hpin="" cpin="" hseed="" seeded=""
else
  hseed=",seed=3" seeded=1
fi
NETFR_LINK="$hlink$hostaddr$hseed$faults$hpin" \
  "${hexec[@]}" ${NETFR_PAIR_HOST_WRAP:-} "$check" host "$run" --sessions "$sessions" --max-frame "$max" --ops "$ops" \
  > "$work/host.log" 2>&1 &
pid=$!
for _ in $(seq 150); do grep -qs "listening" "$work/host.log" && break; sleep 0.1; done
rc=0
for s in $(seq "$sessions"); do
  cseed=""
  [[ -n $seeded ]] && cseed=",seed=$((5 + s))"
  crun=$run
  [[ $scenario == killed && $s == 2 ]] && crun=frames
  if [[ $scenario == killed && $s == 1 ]]; then
    NETFR_LINK="$clink$clientaddr$cseed$faults$cpin" \
      "${cexec[@]}" "$check" client killed 192.0.2.1 --max-frame "$max" > "$work/client1.log" 2>&1 &
    victim=$!
    pids+=("$victim")
    for _ in $(seq 300); do grep -qs "waiting to be killed" "$work/client1.log" && break; sleep 0.1; done
    kill -9 "$victim" 2>/dev/null || rc=1
    wait "$victim" 2>/dev/null || true
    echo "client1 killed (SIGKILL)" >> "$work/client1.log"
    sed "s/^/client1: /" "$work/client1.log"
    continue
  fi
  for _ in $(seq 40); do
    rc=0
    NETFR_LINK="$clink$clientaddr$cseed$faults$cpin" \
      "${cexec[@]}" timeout 300 "$check" client "$crun" 192.0.2.1 --max-frame "$max" --ops "$ops" \
      > "$work/client$s.log" 2>&1 || rc=$?
    # killed: refused while the host still holds the killed client's slot; try again.
    [[ $scenario == killed && $rc != 0 ]] && grep -q "nfrClientInit: -111" "$work/client$s.log" &&
      { echo "client$s refused (the slot is still held), again in 1 s"; sleep 1; continue; }
    break
  done
  sed "s/^/client$s: /" "$work/client$s.log"
  [[ $rc == 0 ]] || break
done
wait "$pid" || rc=$?
pid=
sed 's/^/host: /' "$work/host.log"
[[ $rc == 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
grep -q "PASS netfr host" "$work/host.log" || { echo "FAIL: the host did not pass"; exit 1; }
echo "PASS netfr_pair $scenario ($link)"
