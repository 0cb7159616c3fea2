#!/usr/bin/python3
"""Cross-check of the ICRC against scapy's contrib/roce module.

For every frame roce-pcap writes, the ICRC on the wire must equal what scapy computes:
- IPv4: scapy's own BTH.compute_icrc (the frame is dissected, the icrc field deleted, the
  packet rebuilt, and the new icrc compared with the one on the wire);
- IPv6: Debian 12's scapy 2.5 computes the ICRC for IPv4 only, so the IPv6 masking is done on
  scapy's dissected layers here (traffic class, flow label, hop limit, UDP checksum and the BTH
  FECN/BECN/reserved bits set to ones, 8 x 0xFF prepended, zlib CRC-32): a second, independent
  implementation of the same rule.
"""
import argparse
import logging
import sys
import zlib

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, IPv6, UDP, rdpcap, load_contrib  # noqa: E402

from common import add_variant_flags, generate, variant_args  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402


def icrc_ipv6(pkt):
    ip = pkt[IPv6].copy()
    ip.remove_payload()
    ip.tc, ip.fl, ip.hlim = 0xFF, 0xFFFFF, 0xFF
    udp = pkt[UDP].copy()
    udp.remove_payload()
    udp.chksum = 0xFFFF
    bth = pkt[BTH].copy()
    tail = bytes(bth.payload)
    bth.remove_payload()
    bth.fecn, bth.becn, bth.resv6 = 1, 1, 0x3F
    head = bytes(bth)[:12]  # without the trailing icrc field
    data = b"\xff" * 8 + bytes(ip) + bytes(udp) + head + tail
    return zlib.crc32(data) & 0xFFFFFFFF


def wire_icrc(raw):
    return int.from_bytes(raw[-4:], "little")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    add_variant_flags(parser)
    args = parser.parse_args()
    pcap, rows = generate(args.roce_pcap, args.workdir, variant_args(args))
    frames = rdpcap(pcap)
    errors = []
    if len(frames) != len(rows):
        errors.append(f"{len(frames)} frames in the capture, {len(rows)} in the manifest")
    for row, frame in zip(rows, frames):
        raw = bytes(frame)
        where = f"frame {row['index']} ({row['name']})"
        pkt = Ether(raw)
        if BTH not in pkt:
            errors.append(f"{where}: scapy does not see a BTH")
            continue
        if pkt[BTH].opcode != int(row["opcode"]) or pkt[BTH].psn != int(row["psn"]) or \
                pkt[BTH].dqpn != int(row["dest_qp"]):
            errors.append(f"{where}: scapy reads opcode {pkt[BTH].opcode} qp {pkt[BTH].dqpn} "
                          f"psn {pkt[BTH].psn}")
        if IP in pkt:
            del pkt[BTH].icrc
            rebuilt = Ether(bytes(pkt))
            # scapy shows the four wire bytes as a big-endian number (wire reference 1.8)
            computed = int.from_bytes(rebuilt[BTH].icrc.to_bytes(4, "big"), "little")
        else:
            computed = icrc_ipv6(pkt)
        if computed != wire_icrc(raw) or computed != int(row["icrc"]):
            errors.append(f"{where}: scapy ICRC {computed:#010x}, wire {wire_icrc(raw):#010x}")
    if errors:
        print("\n".join(errors))
        print(f"FAIL: {len(errors)} mismatches over {len(rows)} frames")
        return 1
    family = "IPv6 (masking on scapy layers)" if args.ipv6 else "IPv4 (scapy compute_icrc)"
    print(f"OK: scapy agrees on the ICRC of all {len(rows)} frames, {family}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
