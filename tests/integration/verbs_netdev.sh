#!/usr/bin/env bash
# In-process on a kernel interface (ROCE_LINK --pmd af_packet) without --mac and --ip, as rxe
# on its netdev: the device takes the interface's own MAC (GUID) and IPv4 address (GID 0),
# the interface keeps its MAC, and its promiscuous flag is off again once the program exits.
# With --mac and --ip the link uses those (and the interface's MAC and flag are put back). An
# interface without an IPv4 address and no --ip: no device, and a message naming the fix.
#   verbs_netdev.sh LIBROCE_VERBS WORKDIR   (root: a network namespace with a veth pair)
set -euo pipefail
lib=$(realpath "$1") work=$2
command -v ibv_devinfo >/dev/null || { echo "skipped: ibverbs-utils not installed"; exit 77; }
[[ $(id -u) == 0 ]] || { echo "skipped: needs root for a network namespace"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
ns=vnd$$
fail() { echo "FAIL: $*"; exit 1; }
trap 'ip netns del $ns 2>/dev/null || true' EXIT
ip netns add $ns
ip netns exec $ns sysctl -qw net.ipv4.ip_forward=0
ip -n $ns link add vnd0 address 02:11:22:33:44:55 type veth peer name vnd1
ip -n $ns addr add 192.0.2.61/24 dev vnd0
ip -n $ns link set vnd0 up
ip -n $ns link set vnd1 up
run() {  # OUT LINK: ibv_devinfo -v in the namespace over LINK
  ip netns exec $ns env LD_PRELOAD="$lib" ROCE_LINK="$2" timeout 60 ibv_devinfo -v > "$work/$1.txt" 2>&1 || true
}
flags() { ip -n $ns -o link show vnd0; }

run own "--pmd af_packet --iface vnd0"
cat "$work/own.txt"
grep -Eq "GID\[  0\]:[[:space:]]+::ffff:192.0.2.61, RoCE v2" "$work/own.txt" || fail "GID 0 is not the interface's address"
grep -Eq "node_guid:[[:space:]]+0011:22ff:fe33:4455" "$work/own.txt" || fail "the GUID is not the interface's MAC's EUI-64"
flags | grep -q "link/ether 02:11:22:33:44:55" || fail "the interface's MAC changed: $(flags)"
! flags | grep -q PROMISC || fail "the interface is left promiscuous: $(flags)"
echo "ok: the interface's own MAC and address, MAC kept, PROMISC off again"

run named "--pmd af_packet --iface vnd0 --ip 192.0.2.62 --mac 02:00:00:00:00:62"
grep -Eq "GID\[  0\]:[[:space:]]+::ffff:192.0.2.62, RoCE v2" "$work/named.txt" || fail "--ip not used: $(cat "$work/named.txt")"
! flags | grep -q PROMISC || fail "the interface is left promiscuous after --mac: $(flags)"
flags | grep -q "link/ether 02:11:22:33:44:55" || fail "the interface keeps --mac after the program: $(flags)"
echo "ok: --ip and --mac as named, the interface's MAC and PROMISC back"

ip -n $ns addr flush dev vnd0
run noaddr "--pmd af_packet --iface vnd0"
cat "$work/noaddr.txt"
grep -q "ROCE_LINK: --iface 'vnd0' has no IPv4 address.*give --ip" "$work/noaddr.txt" || fail "no message for an interface without an address"
echo "OK"
