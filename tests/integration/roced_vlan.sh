#!/usr/bin/env bash
# roced on a VLAN (ports[].vlan: 100) on a veth in a private network namespace. A host on the
# other end (scapy on a packet socket: this kernel has no 802.1Q module) sends ARP requests and
# ICMP echoes tagged with VLAN 100, untagged, and on VLAN 200: only VLAN 100 is answered, with
# the tag, and the others are counted as VLAN drops. On net_af_packet the port uses the PMD's
# VLAN insert and strip offloads, which the counters show. Exits 77 (skipped) without root,
# network namespaces or Debian's scapy.
#   roced_vlan.sh ROCED ROCE_CTL WORKDIR
set -euo pipefail
roced=$1 ctl=$2 work=$3
py=/usr/bin/python3
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! "$py" -c "import scapy" 2>/dev/null; then
  echo "skipped: needs root, iproute2 and /usr/bin/python3 with scapy"; exit 77
fi
ns=roced-vlan-$$
. "$(dirname "$0")/roced_ns.sh"
roced_ns_start "$ns" "$work" vlan-test 19474 "vlan: 100"
# The host: ARP and ICMP echo on VLAN 100, untagged and on VLAN 200; prints what was answered.
ip netns exec "$ns" "$py" - > "$work/host.txt" 2>&1 <<'PY' || { cat "$work/host.txt"; exit 1; }
import logging
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import ARP, Dot1Q, Ether, ICMP, IP, conf, srp1
conf.verb = 0
me, it = "02:00:5e:00:02:99", "192.0.2.1"
def ask(tag, what):
    l2 = Ether(src=me, dst="ff:ff:ff:ff:ff:ff" if what == "arp" else "02:00:5e:00:02:31")
    l3 = (ARP(op=1, hwsrc=me, psrc="192.0.2.254", pdst=it) if what == "arp"
          else IP(src="192.0.2.254", dst=it) / ICMP(id=7, seq=1))
    pkt = l2 / Dot1Q(vlan=tag) / l3 if tag else l2 / l3
    r = srp1(pkt, iface="veth-k", timeout=1)
    if r is None:
        return "none"
    vid = r[Dot1Q].vlan if Dot1Q in r else 0
    kind = "arp-reply" if ARP in r and r[ARP].op == 2 else "echo-reply" if ICMP in r and r[ICMP].type == 0 else "other"
    return f"{kind}/vlan{vid}"
for tag in (100, 0, 200):
    for what in ("arp", "icmp"):
        print(f"{what} vlan{tag}: {ask(tag, what)}")
PY
cat "$work/host.txt"
grep -q "^arp vlan100: arp-reply/vlan100$" "$work/host.txt" || { echo "FAIL: no tagged ARP reply"; exit 1; }
grep -q "^icmp vlan100: echo-reply/vlan100$" "$work/host.txt" || { echo "FAIL: no tagged echo reply"; exit 1; }
for tag in 0 200; do
  [[ $(grep -c "^[a-z]* vlan$tag: none$" "$work/host.txt") == 2 ]] ||
    { echo "FAIL: answered on VLAN $tag"; exit 1; }
done
sleep 0.3
roced_counters
[[ $(roced_count port_rx_vlan_dropped) -ge 4 ]] || { echo "FAIL: wrong-VLAN frames not counted"; exit 1; }
grep -Eq "icmp_echo_answered +1$" "$work/counters.txt"
# af_packet offers both VLAN offloads: the tags went through them.
[[ $(roced_count port_tx_vlan_inserted) -ge 2 ]] || { echo "FAIL: no tag left to the TX VLAN offload"; exit 1; }
[[ $(roced_count port_rx_vlan_stripped) -ge 2 ]] || { echo "FAIL: no tag stripped by the PMD"; exit 1; }
roced_stop
echo "PASS: VLAN 100 answered, other VLANs and untagged frames dropped"
