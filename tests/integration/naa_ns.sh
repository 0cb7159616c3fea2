# Sourced by the NAA's namespace tests (naa_arp_busy.sh, naa_unresolvable_req.sh): a network
# namespace "$ns" with a kernel bridge br0 (192.0.2.9/24) and a veth v0 for roce-naa's
# af_packet port, and a second namespace "$ns-h1" holding v1 for the host; both bridged.
# Sets X=(ip netns exec "$ns"), work (a temporary directory), pids (killed on exit).
#   naa_ns_setup NAME_PREFIX
naa_ns_setup() {
  ns=$1-$$
  work=$(mktemp -d "/tmp/$1-XXXXXX")
  pids=()
  trap naa_ns_cleanup EXIT
  ip netns add "$ns" || { echo "skipped: cannot create a network namespace"; exit 77; }
  X=(ip netns exec "$ns")
  "${X[@]}" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
  "${X[@]}" sysctl -qw net.ipv4.ip_forward=0 || true  # a container network may have set it
  "${X[@]}" ip link add br0 type bridge
  "${X[@]}" ip addr add 192.0.2.9/24 dev br0
  "${X[@]}" ip link set br0 up
  "${X[@]}" ip link add v0 type veth peer name v0b
  ip netns add "$ns-h1"
  ip netns exec "$ns-h1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
  ip netns exec "$ns-h1" sysctl -qw net.ipv4.ip_forward=0 || true
  "${X[@]}" ip link add v1 type veth peer name v1b
  "${X[@]}" ip link set v1 netns "$ns-h1"
  ip netns exec "$ns-h1" ip link set v1 up
  for i in 0 1; do
    "${X[@]}" ip link set "v${i}b" master br0
    "${X[@]}" ip link set "v${i}b" up
  done
  "${X[@]}" ip link set v0 up
}
naa_ns_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  ip netns del "$ns-h1" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
