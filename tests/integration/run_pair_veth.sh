#!/usr/bin/env bash
# The two-appliance test over net_af_packet on a veth pair inside a private network namespace
# (needs root and iproute2; exits 77, "skipped", without them).
#   run_pair_veth.sh PAIR_BIN ROCE_PCAP_BIN WORKDIR [LOSS]
set -euo pipefail
pair=$1 pcap=$2 work=$3 loss=${4:-0}
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
ns=roce-pair-$$
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$ns" || { echo "skipped: cannot create a network namespace"; exit 77; }
ip -n "$ns" link add veth-a type veth peer name veth-b
for i in veth-a veth-b; do
  ip -n "$ns" link set "$i" mtu 1500 up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf."$i".disable_ipv6=1 || true
done
rm -rf "$work" && mkdir -p "$work"
ip netns exec "$ns" "$pair" --workdir "$work" --pmd af_packet --iface-a veth-a --iface-b veth-b \
  --loss "$loss"
"$(dirname "$0")/check_capture.sh" "$pcap" "$work/a.pcap" 100
