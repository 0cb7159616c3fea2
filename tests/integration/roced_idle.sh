#!/usr/bin/env bash
# roced's idle mode (poll: idle_after_polls): an idle appliance sleeps between empty polls
# instead of spinning. Its CPU time over 2 idle seconds must stay far below the busy-polling
# appliance's (a core's worth), and it must still answer: the kernel on the other end of its
# veth pings it, with every echo answered. Exits 77 without root or network namespaces.
#   roced_idle.sh ROCED ROCE_CTL WORKDIR
set -euo pipefail
roced=$1 ctl=$2 work=$3
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v ping >/dev/null; then
  echo "skipped: needs root, iproute2 and ping"; exit 77
fi
ns=roced-idle-$$
. "$(dirname "$0")/roced_ns.sh"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$roced_pid/stat"; }
# CPU ticks (1/100 s) roced takes in 2 s of doing nothing.
idle_ticks() {
  local a b
  sleep 0.5
  a=$(cpu_ticks); sleep 2; b=$(cpu_ticks)
  echo $((b - a))
}
ROCED_NS_TOP=$'poll:\n  idle_after_polls: 1000\n  idle_sleep_us: 100' \
  roced_ns_start "$ns" "$work" idle-test 19468
grep -q "idle mode: after 1000 empty polls, 100 us sleeps" "$work/roced.log"
ip -n "$ns" addr add 192.0.2.254/24 dev veth-k
sleeping=$(idle_ticks)
ip netns exec "$ns" ping -c 5 -i 0.2 -W 2 192.0.2.1 | tail -2
sleep 0.3  # counters are published every 100 ms
roced_counters > /dev/null
grep -Eq "icmp_echo_answered +5$" "$work/counters.txt"
roced_stop
echo "idle mode: $sleeping ticks of CPU in 2 s"
# The same appliance polling busily, for comparison (on this machine's own scale).
rm -f "$work/counters.txt"
ip netns del "$ns"
roced_ns_start "$ns" "$work" busy-test 19468
busy=$(idle_ticks)
roced_stop
echo "busy polling: $busy ticks of CPU in 2 s"
if (( sleeping * 4 > busy )); then
  echo "FAIL: idle mode took $sleeping ticks, busy polling $busy: not a quarter"; exit 1
fi
