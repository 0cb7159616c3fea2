#!/usr/bin/env python3
"""Sends rdma_cm connect requests (CM REQ MADs to QP1, RoCEv2 UD SEND) from addresses that
never answer ARP, as a host on the segment can: the REQ names the source as its primary path's
GID and in its CMA header, so the receiver has to resolve it before it can answer.
    cm_req_spoof.py IFACE DST_MAC DST_IP PORT SRC_IP [SRC_IP ...]
The REQ is the project's own encoding (tests/fuzz/make_seeds.cc, make_req) with the service ID,
the GIDs, the CMA addresses and the IDs patched."""
import os
import socket
import struct
import sys

from scapy.all import Ether, IP, UDP, Raw
from scapy.contrib.roce import BTH

REQ = bytes.fromhex(
    "0107020300000000000000000000000100100000000000001a2b3c4d00000000"
    "0000000001061c0202005efffe00020200000000000000000000110400000002"
    "000000a0abcdef9effff35f0ffffffff00000000000000000000ffffc0000210"
    "00000000000000000000ffffc00002010000000000400090ffffffff00000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "004000000040d431000000000000000000000000c00002100000000000000000"
    "00000000c0000201000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000")


def req(src_ip, dst_ip, port):
    m = bytearray(REQ)
    m[8:16] = os.urandom(8)                                  # transaction ID
    m[0x18:0x1C] = os.urandom(4)                             # local communication ID
    m[0x28:0x30] = os.urandom(8)                             # local CA GUID
    m[0x38:0x3B] = os.urandom(3)                             # local QPN
    m[0x20:0x28] = struct.pack("!Q", 0x0000000001060000 | port)  # rdma_cm TCP port space
    m[0x5C:0x60] = socket.inet_aton(src_ip)                  # primary local GID ::ffff:src
    m[0x6C:0x70] = socket.inet_aton(dst_ip)                  # primary remote GID
    m[0xB4:0xB8] = socket.inet_aton(src_ip)                  # CMA header: source, destination
    m[0xC4:0xC8] = socket.inet_aton(dst_ip)
    return bytes(m)


def main():
    iface, dst_mac, dst_ip, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    for i, src in enumerate(sys.argv[5:]):
        deth = struct.pack("!II", 0x80010000, 1)             # GSI Q_Key, source QP 1
        f = (Ether(src="02:00:00:00:7e:%02x" % i, dst=dst_mac) /
             IP(src=src, dst=dst_ip, flags="DF") / UDP(sport=49152 + i, dport=4791) /
             BTH(opcode=0x64, dqpn=1, psn=i) / Raw(deth + req(src, dst_ip, port)))  # ICRC: BTH's
        s.send(bytes(f))
    print("sent %d connect requests from %s" % (len(sys.argv) - 5, " ".join(sys.argv[5:])))


if __name__ == "__main__":
    main()
