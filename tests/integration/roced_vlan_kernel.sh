#!/usr/bin/env bash
# roced on a VLAN (ports[].vlan: 100) against the kernel's own 802.1Q code: in a private network
# namespace, roced's port (net_af_packet on veth-r) and a kernel VLAN interface on the other
# end (veth-k.100, 192.0.2.254/24) ping it: ARP and ICMP echo over VLAN 100 are answered. A
# second kernel VLAN interface (veth-k.200, VLAN 200) in a namespace of its own pings the same
# address and must get no answer; the port counts those frames as VLAN drops. Exits 77
# (skipped) without root, iproute2, ping, network namespaces or the kernel's 802.1Q support
# (module 8021q); roced_vlan.sh checks the same with scapy where the kernel has none.
#   roced_vlan_kernel.sh ROCED ROCE_CTL WORKDIR
set -euo pipefail
roced=$1 ctl=$2 work=$3
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v ping >/dev/null; then
  echo "skipped: needs root, iproute2 and ping"; exit 77
fi
ns=roced-vk-$$ ns2=roced-vk2-$$
roced_ns_more_cleanup() { ip netns del "$ns2" 2>/dev/null || true; }
. "$(dirname "$0")/roced_ns.sh"
roced_ns_start "$ns" "$work" vlan-kernel-test 19484 "vlan: 100"
ip netns add "$ns2" || { echo "skipped: cannot create network namespaces"; exit 77; }
ip netns exec "$ns2" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
if ! ip -n "$ns" link add link veth-k name veth-k.100 type vlan id 100 2>"$work/vlan.err"; then
  echo "skipped: no kernel VLAN interfaces here ($(cat "$work/vlan.err"))"; exit 77
fi
ip -n "$ns" link add link veth-k name veth-k.200 type vlan id 200
ip -n "$ns" link set veth-k.200 netns "$ns2"
ip -n "$ns" addr add 192.0.2.254/24 dev veth-k.100
ip -n "$ns" link set veth-k.100 up
ip -n "$ns2" addr add 192.0.2.253/24 dev veth-k.200
ip -n "$ns2" link set veth-k.200 up
# VLAN 100: ARP resolved and every echo answered, through the kernel's 802.1Q code
ip netns exec "$ns" ping -c 3 -i 0.2 -W 2 192.0.2.1 || { echo "FAIL: no answer on VLAN 100"; exit 1; }
ip -n "$ns" neigh show 192.0.2.1 dev veth-k.100 | tee "$work/neigh.txt"
grep -q "02:00:5e:00:02:31" "$work/neigh.txt" || { echo "FAIL: ARP not resolved on VLAN 100"; exit 1; }
# VLAN 200: nothing comes back (neither ARP nor, with a static neighbour entry, echo replies)
if ip netns exec "$ns2" ping -c 2 -i 0.2 -W 1 192.0.2.1; then
  echo "FAIL: answered on VLAN 200"; exit 1
fi
ip -n "$ns2" neigh replace 192.0.2.1 lladdr 02:00:5e:00:02:31 dev veth-k.200
if ip netns exec "$ns2" ping -c 2 -i 0.2 -W 1 192.0.2.1; then
  echo "FAIL: echo answered on VLAN 200"; exit 1
fi
sleep 0.3
roced_counters
[[ $(roced_count icmp_echo_answered) == 3 ]] || { echo "FAIL: echo answers other than the 3 on VLAN 100"; exit 1; }
[[ $(roced_count arp_requests_answered) -ge 1 ]] || { echo "FAIL: no ARP request answered"; exit 1; }
[[ $(roced_count port_rx_vlan_dropped) -ge 3 ]] || { echo "FAIL: VLAN 200 frames not counted as dropped"; exit 1; }
roced_stop
echo "PASS: the kernel's VLAN 100 interface pings roced, VLAN 200 is not answered"
