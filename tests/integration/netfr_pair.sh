#!/usr/bin/env bash
# NetFR's host and client (roce-netfr-check, the library on the appliance's stack) as two
# processes on a net_memif link (no hugepages, no root).
#   netfr_pair.sh ROCE_NETFR_CHECK SCENARIO [MAX_FRAME]
# SCENARIO frames | order | credits | refuse | restart (roce-netfr-check's usage), and
#   lossy: order with 1% of the frames lost and 1% reordered on each side.
set -euo pipefail
check=$(realpath "$1") scenario=$2 max=${3:-4194304}
work=$(mktemp -d /tmp/netfr-pair-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
sock=$work/memif.sock
faults="" run=$scenario sessions=1 ops=1500 hpin="" cpin=""
case $scenario in
  lossy) run=order faults=",tx_drop=0.01,reorder=0.01" ops=600 max=${3:-32768} ;;
  restart) sessions=3 ;;
  bench) hpin=",lcore=0" cpin=",lcore=1" ;;  # one CPU each: latency, not scheduling
  frames|order|credits|refuse) ;;
  *) echo "FAIL: unknown scenario $scenario"; exit 1 ;;
esac
NETFR_LINK="pmd=memif,socket=$sock,role=server,ip=192.0.2.1,mac=02:00:00:00:00:01,seed=3$faults$hpin" \
  "$check" host "$run" --sessions "$sessions" --max-frame "$max" --ops "$ops" \
  > "$work/host.log" 2>&1 &
pid=$!
for _ in $(seq 150); do grep -qs "listening" "$work/host.log" && break; sleep 0.1; done
rc=0
for s in $(seq "$sessions"); do
  NETFR_LINK="pmd=memif,socket=$sock,role=client,ip=192.0.2.2,mac=02:00:00:00:00:02,seed=$((5 + s))$faults$cpin" \
    timeout 300 "$check" client "$run" 192.0.2.1 --max-frame "$max" --ops "$ops" \
    > "$work/client$s.log" 2>&1 || rc=$?
  sed "s/^/client$s: /" "$work/client$s.log"
  [[ $rc == 0 ]] || break
done
wait "$pid" || rc=$?
pid=
sed 's/^/host: /' "$work/host.log"
[[ $rc == 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
grep -q "PASS netfr host" "$work/host.log" || { echo "FAIL: the host did not pass"; exit 1; }
echo "PASS netfr_pair $scenario"
