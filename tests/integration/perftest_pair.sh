#!/usr/bin/env bash
# Two roce-perf processes, server and client of one perftest-style test, over net_af_packet on a
# veth pair between two private network namespaces (RoCE addresses .111/.112). The exchange runs
# on the kernel's TCP over a second veth pair, the management link (.11/.12): the DPDK port owns
# its interface (af_packet sets its MAC). With -R (rdma_cm) there is no TCP: the client names the
# server's RoCE address, and both the exchange and the tested QPs are rdma_cm connections. Both
# sides' captures must decode. Needs root and iproute2; exits 77 ("skipped") without them.
#   perftest_pair.sh ROCE_PERF ROCE_PCAP TEST [ARGS...]   (ARGS go to both sides)
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2") test=$3; shift 3
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
mtu=1500 server=192.0.2.11
vlan= pmd=af_packet prev=
for a in "$@"; do
  [[ $prev == --vlan ]] && vlan=$a
  [[ $prev == --pmd ]] && pmd=$a
  prev=$a
  [[ $a == --netdev-mtu=* ]] && mtu=${a#--netdev-mtu=}
  [[ $a == -R || $a == --rdma_cm ]] && server=192.0.2.111
done
a=roce-pt-a-$$ b=roce-pt-b-$$
work=$(mktemp -d)
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
# shellcheck source=tests/integration/ns_pair.sh
. "$(dirname "$0")/ns_pair.sh"
ns_pair_up "$a" "$b" "$mtu"
ip netns exec "$a" "$perf" "$test" --iface veth-a --ip 192.0.2.111 --mac 02:00:00:00:01:11 \
  --pcap "$work/server.pcap" --json "$work/server.json" --timeout 60 "$@" > "$work/server.txt" 2>&1 &
spid=$!
rc=0
ip netns exec "$b" "$perf" "$test" --iface veth-b --ip 192.0.2.112 --mac 02:00:00:00:01:12 \
  --pcap "$work/client.pcap" --json "$work/client.json" --timeout 60 "$@" "$server" \
  > "$work/client.txt" 2>&1 || rc=$?
wait "$spid" || rc=$?
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ $rc == 0 ]] || { echo "FAIL: roce-perf exited with $rc"; exit 1; }
cp "$work"/*.pcap "${ROCE_PT_KEEP:-$work}/" 2>/dev/null || true
for side in server client; do
  "$(dirname "$0")/check_capture.sh" "$pcap" "$work/$side.pcap" 1 | tail -1
  if [[ -n $vlan ]]; then  # with --vlan, every RoCE frame carries the tag
    all=$(tshark -r "$work/$side.pcap" -Y "udp.port == 4791" 2>/dev/null | wc -l)
    tagged=$(tshark -r "$work/$side.pcap" -Y "udp.port == 4791 && vlan.id == $vlan" 2>/dev/null | wc -l)
    echo "$side: $tagged of $all RoCEv2 frames tagged with VLAN $vlan"
    [[ $all -gt 0 && $tagged == "$all" ]] || { echo "FAIL: untagged RoCE frames"; exit 1; }
    # ... and so does everything else, ARP requests (built untagged, tagged by the port) too
    other=$(tshark -r "$work/$side.pcap" -Y "!(vlan.id == $vlan)" 2>/dev/null | wc -l)
    arp=$(tshark -r "$work/$side.pcap" -Y "arp && vlan.id == $vlan" 2>/dev/null | wc -l)
    echo "$side: $arp tagged ARP frames, $other frames not on VLAN $vlan"
    [[ $other == 0 ]] || { echo "FAIL: frames not on VLAN $vlan"; exit 1; }
    # net_af_packet offers TX VLAN insert and RX VLAN strip: the port uses them and says so
    if [[ $pmd == af_packet ]]; then
      grep -Eq "^roce-perf: veth-[ab] offloads: .*tx-vlan-insert rx-vlan-strip" "$work/$side.txt" ||
        { echo "FAIL: $side did not report the VLAN offloads of net_af_packet"; exit 1; }
    fi
  fi
done
