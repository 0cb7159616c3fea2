#!/usr/bin/env bash
# The README's main command: installs the dependencies (Debian 12, root), builds, runs two
# appliances on a virtual DPDK link (net_memif, no hugepages) that move data with RC WRITE, SEND,
# READ and atomics and check every byte, then writes one RoCEv2 frame of every opcode (IPv4,
# IPv6, VLAN), checks them with the stack's own parser and shows how tshark decodes them.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default

out=build/demo
mkdir -p "$out"
echo
echo "== Two appliances on a virtual link (net_memif) ============================"
build/bin/roce-link-demo --workdir "$out/link" --size $((4 * 1024 * 1024))
build/bin/roce-pcap --check "$out/link/a.pcap"
echo "tshark, first frames of appliance A's capture:"
tshark -r "$out/link/a.pcap" --disable-heuristic rpcrdma_infiniband -c 12 2>/dev/null | sed 's/^/  /'

echo
echo "== Sample frames, IPv4 ====================================================="
build/bin/roce-pcap --out "$out/roce-ipv4.pcap"
build/bin/roce-pcap --quiet --ipv6 --out "$out/roce-ipv6.pcap"
build/bin/roce-pcap --quiet --ipv6 --vlan 100 --out "$out/roce-ipv6-vlan.pcap"

echo
echo "== Own parser (ICRC, lengths, headers) ====================================="
for f in "$out"/roce-*.pcap; do build/bin/roce-pcap --check "$f"; done

echo
echo "== tshark's view of the IPv6 + VLAN capture ================================"
tshark -r "$out/roce-ipv6-vlan.pcap" --disable-heuristic rpcrdma_infiniband \
  -o udp.check_checksum:TRUE -T fields -E separator=$'\t' \
  -e frame.number -e vlan.id -e ipv6.src -e ipv6.dst -e udp.checksum.status \
  -e _ws.col.Info 2>/dev/null | column -t -s $'\t' -N 'frame,vlan,src,dst,udp_csum_ok,info'

echo
echo "demo.sh: captures are in $out/ (open them in Wireshark, or: tshark -V -r $out/link/a.pcap)"
