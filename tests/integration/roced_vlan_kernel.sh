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
pid=
cleanup() {
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
  ip netns del "$ns" 2>/dev/null || true
  ip netns del "$ns2" 2>/dev/null || true
}
trap cleanup EXIT
rm -rf "$work" && mkdir -p "$work"
ip netns add "$ns" && ip netns add "$ns2" || { echo "skipped: cannot create network namespaces"; exit 77; }
ip -n "$ns" link set lo up
ip -n "$ns" link add veth-r type veth peer name veth-k
ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
ip netns exec "$ns2" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
if ! ip -n "$ns" link add link veth-k name veth-k.100 type vlan id 100 2>"$work/vlan.err"; then
  echo "skipped: no kernel VLAN interfaces here ($(cat "$work/vlan.err"))"; exit 77
fi
ip -n "$ns" link add link veth-k name veth-k.200 type vlan id 200
ip -n "$ns" link set veth-k.200 netns "$ns2"
ip -n "$ns" link set veth-r up
ip -n "$ns" link set veth-k up
ip -n "$ns" addr add 192.0.2.254/24 dev veth-k.100
ip -n "$ns" link set veth-k.100 up
ip -n "$ns2" addr add 192.0.2.253/24 dev veth-k.200
ip -n "$ns2" link set veth-k.200 up
cat > "$work/roced.yaml" <<YAML
name: vlan-kernel-test
eal:
  args: [--no-huge, --no-shconf, -m, "128", --no-pci, --file-prefix=rocedk$$, "--log-level=*:error"]
  lcores: [0]
ports:
  - name: p0
    device: net_af_packet0
    devargs: iface=veth-r,qpairs=1
    mac: 02:00:5e:00:02:51
    ipv4: 192.0.2.1/24
    vlan: 100
counters:
  prometheus: 127.0.0.1:19484
  telemetry: false
YAML
ip netns exec "$ns" "$roced" --config "$work/roced.yaml" > "$work/roced.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " up on lcore" "$work/roced.log" && break; sleep 0.2; done
cat "$work/roced.log"
grep -q " up on lcore" "$work/roced.log"
# VLAN 100: ARP resolved and every echo answered, through the kernel's 802.1Q code
ip netns exec "$ns" ping -c 3 -i 0.2 -W 2 192.0.2.1 || { echo "FAIL: no answer on VLAN 100"; exit 1; }
ip -n "$ns" neigh show 192.0.2.1 dev veth-k.100 | tee "$work/neigh.txt"
grep -q "02:00:5e:00:02:51" "$work/neigh.txt" || { echo "FAIL: ARP not resolved on VLAN 100"; exit 1; }
# VLAN 200: nothing comes back (neither ARP nor, with a static neighbour entry, echo replies)
if ip netns exec "$ns2" ping -c 2 -i 0.2 -W 1 192.0.2.1; then
  echo "FAIL: answered on VLAN 200"; exit 1
fi
ip -n "$ns2" neigh replace 192.0.2.1 lladdr 02:00:5e:00:02:51 dev veth-k.200
if ip netns exec "$ns2" ping -c 2 -i 0.2 -W 1 192.0.2.1; then
  echo "FAIL: echo answered on VLAN 200"; exit 1
fi
sleep 0.3
ip netns exec "$ns" "$ctl" -p 127.0.0.1:19484 counters | tee "$work/counters.txt"
count() { awk -v k="$1" '$2 == k {print $NF}' "$work/counters.txt"; }
[[ $(count icmp_echo_answered) == 3 ]] || { echo "FAIL: echo answers other than the 3 on VLAN 100"; exit 1; }
[[ $(count arp_requests_answered) -ge 1 ]] || { echo "FAIL: no ARP request answered"; exit 1; }
[[ $(count port_rx_vlan_dropped) -ge 3 ]] || { echo "FAIL: VLAN 200 frames not counted as dropped"; exit 1; }
kill -TERM "$pid"
wait "$pid"
pid=
grep -q "stopping (SIGTERM)" "$work/roced.log"
echo "PASS: the kernel's VLAN 100 interface pings roced, VLAN 200 is not answered"
