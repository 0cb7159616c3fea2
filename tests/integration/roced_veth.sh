#!/usr/bin/env bash
# roced as a host on a veth in a private network namespace (net_af_packet): the kernel on the
# other end pings it (ARP + ICMP echo answered by the appliance), roce-ctl reads its counters,
# and SIGTERM shuts it down cleanly. Exits 77 (skipped) without root or network namespaces.
#   roced_veth.sh ROCED ROCE_CTL WORKDIR
set -euo pipefail
roced=$1 ctl=$2 work=$3
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v ping >/dev/null; then
  echo "skipped: needs root, iproute2 and ping"; exit 77
fi
ns=roced-test-$$
pid=
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null; ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$ns" || { echo "skipped: cannot create a network namespace"; exit 77; }
ip -n "$ns" link set lo up
ip -n "$ns" link add veth-r type veth peer name veth-k
ip -n "$ns" link set veth-r up
ip -n "$ns" addr add 192.0.2.254/24 dev veth-k
ip -n "$ns" link set veth-k up
rm -rf "$work" && mkdir -p "$work"
cat > "$work/roced.yaml" <<YAML
name: veth-test
eal:
  args: [--no-huge, --no-shconf, -m, "128", --no-pci, --file-prefix=roced$$, "--log-level=*:error"]
  lcores: [0]
ports:
  - name: p0
    device: net_af_packet0
    devargs: iface=veth-r,qpairs=1
    mac: 02:00:5e:00:02:31
    ipv4: 192.0.2.1/24
counters:
  prometheus: 127.0.0.1:19464
  telemetry: false
YAML
ip netns exec "$ns" "$roced" --config "$work/roced.yaml" > "$work/roced.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q " up on lcore" "$work/roced.log" && break; sleep 0.2; done
cat "$work/roced.log"
grep -q " up on lcore" "$work/roced.log"
ip netns exec "$ns" ping -c 3 -i 0.2 -W 2 192.0.2.1
sleep 0.3
ip netns exec "$ns" "$ctl" -p 127.0.0.1:19464 counters | tee "$work/counters.txt"
grep -Eq "icmp_echo_answered +3$" "$work/counters.txt"
grep -Eq "arp_requests_answered +[1-9]" "$work/counters.txt"
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
cat "$work/roced.log" | tail -2
grep -q "stopping (SIGTERM)" "$work/roced.log"
exit $rc
