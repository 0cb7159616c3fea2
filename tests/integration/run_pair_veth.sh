#!/usr/bin/env bash
# The two-appliance test over net_af_packet on a veth pair whose ends live in two private
# network namespaces (needs root and iproute2; exits 77, "skipped", without them).
#   run_pair_veth.sh PAIR_BIN ROCE_PCAP_BIN WORKDIR [LOSS]
set -euo pipefail
pair=$1 pcap=$2 work=$3 loss=${4:-0}
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
a=roce-pair-a-$$ b=roce-pair-b-$$
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$a" && ip netns add "$b" || { echo "skipped: cannot create network namespaces"; exit 77; }
ip -n "$a" link add veth-a type veth peer name veth-b netns "$b"
for pair_ns in "$a veth-a" "$b veth-b"; do
  read -r ns dev <<< "$pair_ns"
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
  ip -n "$ns" link set "$dev" mtu 1500 up
done
rm -rf "$work" && mkdir -p "$work"
"$pair" --workdir "$work" --pmd af_packet --iface-a veth-a --iface-b veth-b \
  --netns-a "$a" --netns-b "$b" --loss "$loss"
"$(dirname "$0")/check_capture.sh" "$pcap" "$work/a.pcap" 100
