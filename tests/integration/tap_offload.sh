#!/usr/bin/env bash
# Checksum offload on a PMD that offers it: two roce-perf processes on net_tap (each PMD creates
# its kernel tap), the taps bridged in one private network namespace, the exchange on loopback.
# Our frames leave the engine with IPv4 checksum 0 (seen in our own capture) and the PMD fills it
# in: on the bridge, every RoCEv2 frame must carry a good IPv4 checksum (tshark verifies). Needs
# root, iproute2 and tcpdump; exits 77 ("skipped") without them.
#   tap_offload.sh ROCE_PERF ROCE_PCAP TEST [ARGS...]
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2") test=$3; shift 3
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tcpdump >/dev/null; then
  echo "skipped: needs root, iproute2 and tcpdump"; exit 77
fi
ns=roce-tap-$$
work=$(mktemp -d)
cleanup() {
  [[ -n ${ROCE_TAP_KEEP:-} ]] && cp "$work"/* "$ROCE_TAP_KEEP"/ 2>/dev/null

  [[ -n ${dump:-} ]] && kill "$dump" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns" || { echo "skipped: cannot create a network namespace"; exit 77; }
ip -n "$ns" link set lo up
ip -n "$ns" link add br0 type bridge
ip -n "$ns" link set br0 up
ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
# Enslaves a tap to the bridge as soon as its PMD has created it.
join() {
  for _ in $(seq 100); do
    if ip -n "$ns" link show "$1" >/dev/null 2>&1; then
      ip -n "$ns" link set "$1" master br0 up && return 0
    fi
    sleep 0.1
  done
  echo "FAIL: tap $1 did not appear"; return 1
}
ip netns exec "$ns" tcpdump -i br0 -w "$work/bridge.pcap" -U udp port 4791 2> "$work/tcpdump.txt" &
dump=$!
ip netns exec "$ns" "$perf" "$test" --pmd tap --iface rtap-a --ip 192.0.2.111 \
  --mac 02:00:00:00:01:11 --pcap "$work/server.pcap" --timeout 60 "$@" > "$work/server.txt" 2>&1 &
spid=$!
join rtap-a
ip netns exec "$ns" "$perf" "$test" --pmd tap --iface rtap-b --ip 192.0.2.112 \
  --mac 02:00:00:00:01:12 --pcap "$work/client.pcap" --timeout 60 "$@" 127.0.0.1 \
  > "$work/client.txt" 2>&1 &
cpid=$!
join rtap-b
rc=0
wait "$cpid" || rc=$?
wait "$spid" || rc=$?
sleep 0.5
kill "$dump" 2>/dev/null || true
wait "$dump" 2>/dev/null || true
dump=
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ $rc == 0 ]] || { echo "FAIL: roce-perf exited with $rc"; exit 1; }
grep -q "offloads: tx-ipv4-checksum" "$work/client.txt" ||
  { echo "FAIL: the tap port did not report the TX checksum offload"; exit 1; }
# Our capture sees frames before the PMD: the checksum we left to it is 0.
ours=$(tshark -r "$work/client.pcap" -Y "udp.dstport == 4791 && ip.src == 192.0.2.112" -T fields \
  -e ip.checksum | sort | uniq -c | sort -rn | head -1)
[[ $ours == *0x0000 ]] || { echo "FAIL: our frames carry an IPv4 checksum ($ours)"; exit 1; }
# On the bridge: every RoCE frame has a good IPv4 checksum, filled in by the PMD.
total=$(tshark -r "$work/bridge.pcap" -Y "udp.port == 4791" | wc -l)
good=$(tshark -r "$work/bridge.pcap" -o ip.check_checksum:TRUE \
  -Y "udp.port == 4791 && ip.checksum.status == 1" | wc -l)
echo "bridge: $total RoCEv2 frames, $good with a verified good IPv4 checksum"
[[ $total -gt 100 && $good == "$total" ]] || { echo "FAIL: checksums not filled in by the PMD"; exit 1; }
"$(dirname "$0")/check_capture.sh" "$pcap" "$work/bridge.pcap" 100 | tail -1
