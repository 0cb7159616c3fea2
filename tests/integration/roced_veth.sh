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
. "$(dirname "$0")/roced_ns.sh"
roced_ns_start "$ns" "$work" veth-test 19464
ip -n "$ns" addr add 192.0.2.254/24 dev veth-k
ip netns exec "$ns" ping -c 3 -i 0.2 -W 2 192.0.2.1
sleep 0.3
roced_counters
grep -Eq "icmp_echo_answered +3$" "$work/counters.txt"
grep -Eq "arp_requests_answered +[1-9]" "$work/counters.txt"
roced_stop
tail -2 "$work/roced.log"
