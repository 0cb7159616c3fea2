#!/usr/bin/env bash
# Several host processes at once on one NAA: roce-naa and three naaice_client_roce processes,
# each on its own DPDK net_af_packet port (its own MAC and IP) in its own network namespace
# (DPDK's af_packet fanout groups are per namespace and may collide between processes), all
# joined by a kernel bridge in the NAA's namespace. Every host runs every kernel with 2 connections and 3 calls each, all at
# the same time; every result is checked by its host. Needs root (exits 77 without).
#   naa_hosts.sh ROCE_NAA NAAICE_CLIENT_ROCE
set -euo pipefail
naa=$(realpath "$1") client=$(realpath "$2")
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then echo "skipped: needs root"; exit 77; fi
ns=naa-hosts-$$
work=$(mktemp -d /tmp/naa-hosts-XXXXXX)
pids=()
hosts=3 conns=2
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for i in $(seq "$hosts"); do ip netns del "$ns-h$i" 2>/dev/null || true; done
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns" || { echo "skipped: cannot create a network namespace"; exit 77; }
X=(ip netns exec "$ns")
"${X[@]}" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
"${X[@]}" ip link add br0 type bridge
"${X[@]}" ip link set br0 up
"${X[@]}" ip link add v0 type veth peer name v0b
for i in $(seq "$hosts"); do
  ip netns add "$ns-h$i"
  ip netns exec "$ns-h$i" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
  "${X[@]}" ip link add "v$i" type veth peer name "v${i}b"
  "${X[@]}" ip link set "v$i" netns "$ns-h$i"
  ip netns exec "$ns-h$i" ip link set "v$i" up
done
for i in 0 $(seq "$hosts"); do
  "${X[@]}" ip link set "v${i}b" master br0
  "${X[@]}" ip link set "v${i}b" up
done
"${X[@]}" ip link set v0 up
"${X[@]}" "$naa" --pmd af_packet --iface v0 --ip 192.0.2.1 --mac 02:00:00:00:00:01 \
  --exit-after $((hosts * 5 * conns)) --timeout 150 > "$work/naa.log" 2>&1 &
naapid=$!
pids+=("$naapid")
for _ in $(seq 150); do grep -q "listening on rdma_cm port" "$work/naa.log" && break; sleep 0.1; done
cpids=()
for i in $(seq "$hosts"); do
  NAAICE_ROCE="pmd=af_packet,iface=v$i,ip=192.0.2.1$i,mac=02:00:00:00:00:1$i" \
    ip netns exec "$ns-h$i" "$client" -k all -s 4096 -n 3 -H "$conns" 192.0.2.1 > "$work/host$i.txt" 2>&1 &
  cpids+=($!)
  pids+=($!)
done
rc=0
for p in "${cpids[@]}"; do wait "$p" || rc=1; done
wait "$naapid" || rc=1
pids=()
for i in $(seq "$hosts"); do grep -v "offloads" "$work/host$i.txt" | sed "s/^/host $i: /"; done
grep -v "(conn" "$work/naa.log" | sed 's/^/naa: /'
peers=$(grep -o "host 192.0.2.1[0-9] " "$work/naa.log" | sort -u | wc -l)
passes=$(cat "$work"/host*.txt | grep -c "^PASS " || true)
# The hosts overlapped: the NAA held connections of more than one host address at once.
most=$(awk '/: accepted$/ { split($3, a, " "); up[$3]++ } /disconnected after/ { up[$3]-- }
            { n = 0; for (h in up) if (up[h] > 0) n++; if (n > m) m = n } END { print m + 0 }' \
       "$work/naa.log")
[[ $rc == 0 && $peers == "$hosts" && $passes == $((hosts * 5)) && $most -ge 2 ]] ||
  { echo "FAIL naa_hosts: rc=$rc peers=$peers passes=$passes most_at_once=$most"; exit 1; }
echo "PASS naa_hosts: $hosts host processes ($peers addresses, up to $most at once), $passes kernel runs checked"
