#!/usr/bin/python3
"""Checks that the frames of the fuzz seeds are RoCEv2 as Wireshark reads it.

roce-fuzz-seeds writes the frames its seeds carry into frames.pcap (one of every opcode, four
encapsulations), engine.pcap (what the engine seeds send the engine, and its answers) and
cm.pcap (every CM MAD as a UD SEND to QP1). tshark must dissect every frame as InfiniBand over
UDP, with no malformed-packet or expert-info item and a correct IPv4 header checksum.
"""
import os
import subprocess
import sys


def decode(pcap):
    cmd = ["tshark", "-r", pcap, "--disable-heuristic", "rpcrdma_infiniband",
           "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
           "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f",
           "-e", "frame.number", "-e", "frame.protocols", "-e", "_ws.malformed",
           "-e", "_ws.expert.message", "-e", "ip.checksum.status"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def main():
    seeds = sys.argv[1]
    errors = []
    total = 0
    for name in ("frames.pcap", "engine.pcap", "cm.pcap"):
        need = "infiniband"
        rows = decode(os.path.join(seeds, name))
        if not rows:
            errors.append(f"{name}: no frames")
        for row in rows:
            num, protos, malformed, expert, ipsum = (row + [""] * 5)[:5]
            total += 1
            if need not in protos.split(":"):
                errors.append(f"{name} frame {num}: not {need} ({protos})")
            if malformed:
                errors.append(f"{name} frame {num}: malformed")
            if expert:
                errors.append(f"{name} frame {num}: {expert}")
            # 0 = bad (PROTO_CHECKSUM_E_BAD); tshark 4.0 does not check the ICRC, scapy_icrc.py
            # and the parser's own check do
            if ipsum == "0":
                errors.append(f"{name} frame {num}: bad IPv4 header checksum")
    for e in errors:
        print("FAIL", e)
    print(f"check_seeds: {total} frames, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
