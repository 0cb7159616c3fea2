#!/usr/bin/env bash
# ROCE_LINK's --gateway (runtime::LinkOptions::gateway): an in-process program's off-subnet
# destination is reached through the gateway's MAC. Debian's rping, in-process on net_af_packet
# at one end of a veth pair in a namespace of its own, connects to 198.18.0.9 with
# --gateway 192.0.2.254; at the other end a scapy "router" answers ARP for 192.0.2.254 only and
# watches: the CM's first RoCE frame must carry the router's MAC and the far address, and nobody
# may ARP for the far address itself. Nothing answers the connect (rping then gives up).
#   verbs_gateway.sh LIBROCE_VERBS RDMACM_DIR WORKDIR
set -euo pipefail
lib=$(realpath "$1") rdmacm=$(realpath "$2") work=$3
py=/usr/bin/python3
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2 (a namespace with a veth pair)"; exit 77
fi
command -v rping >/dev/null || { echo "skipped: rping not installed (rdmacm-utils)"; exit 77; }
"$py" -c 'import scapy.all' 2>/dev/null || { echo "skipped: no scapy for $py"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
ns=roce-gw-$$
router=$work/router.txt
cleanup() {
  [[ -n ${rpid:-} ]] && kill "$rpid" 2>/dev/null
  ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link add gw0 type veth peer name gw1
ip -n "$ns" link set lo up
ip -n "$ns" link set gw0 up
ip -n "$ns" link set gw1 up
ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=0
ip netns exec "$ns" "$py" - > "$router" 2>&1 <<'EOF' &
import sys
from scapy.all import ARP, IP, UDP, Ether, AsyncSniffer, sendp, conf
conf.verb = 0
GW, GW_MAC, FAR = "192.0.2.254", "02:00:00:00:02:54", "198.18.0.9"
seen = {"arp_far": 0, "ok": False}
def on(p):
    if ARP in p and p[ARP].op == 1:
        if p[ARP].pdst == FAR:
            seen["arp_far"] += 1
        if p[ARP].pdst == GW:
            sendp(Ether(dst=p[Ether].src, src=GW_MAC) /
                  ARP(op=2, hwsrc=GW_MAC, psrc=GW, hwdst=p[ARP].hwsrc, pdst=p[ARP].psrc),
                  iface="gw1")
            print("router: answered ARP for", GW, flush=True)
    if IP in p and UDP in p and p[UDP].dport == 4791 and p[IP].dst == FAR:
        print("router: RoCE frame to", p[IP].dst, "via MAC", p[Ether].dst, flush=True)
        seen["ok"] = p[Ether].dst == GW_MAC
        return True
    return False
s = AsyncSniffer(iface="gw1", prn=lambda p: None, stop_filter=on, store=False)
s.start()
print("router: listening", flush=True)
s.join(timeout=25)
if s.running:
    s.stop()
print("router: ARP requests for the far address itself:", seen["arp_far"], flush=True)
print("OK" if seen["ok"] and seen["arp_far"] == 0 else "FAIL", flush=True)
EOF
rpid=$!
for _ in $(seq 100); do grep -q listening "$router" && break; sleep 0.1; done
ip netns exec "$ns" env LD_PRELOAD="$lib" LD_LIBRARY_PATH="$rdmacm" \
  ROCE_LINK="--pmd af_packet --iface gw0 --ip 192.0.2.91 --mac 02:00:00:00:00:91 --gateway 192.0.2.254" \
  timeout 6 rping -c -a 198.18.0.9 -p 7471 -C 1 > "$work/rping.txt" 2>&1 || true
wait "$rpid" || true
rpid=
sed 's/^/rping: /' "$work/rping.txt"
cat "$router"
grep -qx OK "$router" || { echo "FAIL: the frame to 198.18.0.9 did not go to the gateway"; exit 1; }
echo "OK: an off-subnet destination through the gateway's MAC"
