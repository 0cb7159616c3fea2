#!/usr/bin/env bash
# Connect requests from addresses that never answer ARP must not hold up the NAA's other hosts:
# roce-naa on a DPDK af_packet port (its own network namespace, a kernel bridge); three rdma_cm
# REQs from 192.0.2.77-79 (cm_req_spoof.py, from the bridge), then a real host
# (naaice_client_roce in its own namespace) runs a call. The host must be done within 4 s (the
# NAA used to wait up to 5 s for each such REQ's ARP answer, serving nobody), and the NAA must
# drop each spoofed REQ when its ARP wait ends. Needs root (exits 77 without).
#   naa_unresolvable_req.sh ROCE_NAA NAAICE_CLIENT_ROCE
set -euo pipefail
naa=$(realpath "$1") client=$(realpath "$2")
spoof=$(dirname "$(realpath "$0")")/cm_req_spoof.py
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then echo "skipped: needs root"; exit 77; fi
/usr/bin/python3 -c "import scapy.contrib.roce" 2>/dev/null || { echo "skipped: no scapy"; exit 77; }
# shellcheck source=naa_ns.sh
source "$(dirname "$(realpath "$0")")/naa_ns.sh"
naa_ns_setup naa-unres
"${X[@]}" "$naa" --pmd af_packet --iface v0 --ip 192.0.2.1 --mac 02:00:00:00:00:01 \
  --timeout 60 > "$work/naa.log" 2>&1 &
naapid=$!
pids+=("$naapid")
for _ in $(seq 150); do grep -q "listening on rdma_cm port" "$work/naa.log" && break; sleep 0.1; done
"${X[@]}" /usr/bin/python3 "$spoof" br0 02:00:00:00:00:01 192.0.2.1 12345 \
  192.0.2.77 192.0.2.78 192.0.2.79
t0=$(date +%s.%N)
rc=0
NAAICE_ROCE="pmd=af_packet,iface=v1,ip=192.0.2.11,mac=02:00:00:00:00:11" \
  ip netns exec "$ns-h1" "$client" -k vector_add -s 4096 -n 1 192.0.2.1 > "$work/host.txt" 2>&1 || rc=$?
t1=$(date +%s.%N)
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
# Past the spoofed REQs' ARP wait, then a clean stop (the counters are printed).
while awk -v a="$t0" -v n="$(date +%s.%N)" 'BEGIN { exit !(n - a < 6.5) }'; do sleep 0.2; done
kill -TERM "$naapid"
wait "$naapid" || true
pids=()
sed 's/^/host: /' "$work/host.txt"
grep -v "(conn" "$work/naa.log" | sed 's/^/naa: /'
dropped=$(grep -c "dropped: no ARP answer" "$work/naa.log" || true)
echo "the host's call took ${took} s after the spoofed requests; ${dropped} of them dropped"
[[ $rc == 0 ]] || { echo "FAIL naa_unresolvable_req: the host's call failed (rc=$rc)"; exit 1; }
awk -v t="$took" 'BEGIN { exit !(t < 4) }' ||
  { echo "FAIL naa_unresolvable_req: the host waited ${took} s behind unresolvable requests"; exit 1; }
[[ $dropped == 3 ]] || { echo "FAIL naa_unresolvable_req: $dropped of 3 spoofed requests dropped"; exit 1; }
echo "PASS naa_unresolvable_req: served in ${took} s past 3 unresolvable connect requests, each dropped after its ARP wait"
