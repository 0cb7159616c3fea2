# Sourced by the two-namespace tests: ns_pair_up A B [MTU] creates the network namespaces A and
# B joined by two veth pairs: the RoCE link veth-a/veth-b (no kernel address: a DPDK port owns
# each end; MTU 1500 unless given) and the management link mgmt-a/mgmt-b (192.0.2.11 and .12,
# for the kernel's TCP), with IPv6 off and loopback up. Exits 77 ("skipped") when namespaces
# cannot be made. The caller deletes them (ip netns del) on exit.
ns_pair_up() {
  local a=$1 b=$2 mtu=${3:-1500} ns dev mgmt nd l
  ip netns add "$a" && ip netns add "$b" || { echo "skipped: cannot create network namespaces"; exit 77; }
  ip -n "$a" link add veth-a type veth peer name veth-b netns "$b"
  ip -n "$a" link add mgmt-a type veth peer name mgmt-b netns "$b"
  ip -n "$a" addr add 192.0.2.11/24 dev mgmt-a
  ip -n "$b" addr add 192.0.2.12/24 dev mgmt-b
  for nd in "$a veth-a mgmt-a" "$b veth-b mgmt-b"; do
    read -r ns dev mgmt <<< "$nd"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
    ip -n "$ns" link set "$dev" mtu "$mtu"
    for l in "$dev" "$mgmt" lo; do ip -n "$ns" link set "$l" up; done
  done
}
