#!/usr/bin/python3
"""Cross-check of the frame builder against Wireshark's InfiniBand dissector.

roce-pcap writes one frame per opcode plus a manifest of the field values it encoded; tshark
decodes the capture independently. Every frame must be dissected as InfiniBand (RRoCE) with the
manifest's opcode, destination QP, PSN and extension-header fields, and with no malformed-packet
or expert-info items. Opcodes that Debian 12's tshark 4.0.17 does not know (FLUSH 0x1C, ATOMIC
WRITE 0x1D, CNP 0x81; our selective repeat's manufacturer-specific 0xE0-0xE3) are checked for the
BTH fields only.
"""
import argparse
import subprocess
import sys

from common import add_variant_flags, generate, variant_args

# tshark field -> (manifest column, how to read tshark's text)
FIELDS = [
    ("infiniband.bth.opcode", "opcode", int),
    ("infiniband.bth.destqp", "dest_qp", lambda s: int(s, 0)),
    ("infiniband.bth.psn", "psn", int),
    ("infiniband.bth.se", "se", int),
    ("infiniband.bth.a", "ack_req", int),
    ("infiniband.bth.padcnt", "pad", int),
    ("infiniband.reth.va", "reth_va", lambda s: int(s, 0)),
    ("infiniband.reth.r_key", "reth_rkey", lambda s: int(s, 0)),
    ("infiniband.reth.dmalen", "reth_len", int),
    ("infiniband.aeth.syndrome", "aeth_syndrome", int),
    ("infiniband.aeth.msn", "aeth_msn", int),
    ("infiniband.atomiceth.swapdt", "atomic_swap_add", int),
    ("infiniband.atomiceth.cmpdt", "atomic_compare", int),
    ("infiniband.atomicacketh.origremdt", "atomic_orig", int),
    ("infiniband.immdt", "imm", lambda s: int(s, 16)),
    ("infiniband.ieth", "ieth_rkey", lambda s: int(s, 16)),
    ("infiniband.deth.q_key", "deth_qkey", lambda s: int(s, 0)),
    ("infiniband.deth.srcqp", "deth_src_qp", lambda s: int(s, 0)),
]
EXTRA = ["frame.number", "frame.protocols", "_ws.col.Info", "_ws.malformed",
         "_ws.expert.message", "infiniband.invariant.crc"]
UNKNOWN_TO_TSHARK_4_0 = {0x1C, 0x1D, 0x81, 0xE0, 0xE1, 0xE2, 0xE3}
BTH_ONLY = {"opcode", "dest_qp", "psn"}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    add_variant_flags(parser)
    args = parser.parse_args()
    pcap, rows = generate(args.roce_pcap, args.workdir, variant_args(args))

    names = EXTRA + [f for f, _, _ in FIELDS]
    cmd = ["tshark", "-r", pcap, "--disable-heuristic", "rpcrdma_infiniband",
           "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
           "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for n in names:
        cmd += ["-e", n]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    decoded = [line.split("\t") for line in out.splitlines()]
    errors = []
    if len(decoded) != len(rows):
        errors.append(f"tshark decoded {len(decoded)} frames, manifest has {len(rows)}")

    for row, cols in zip(rows, decoded):
        got = dict(zip(names, cols))
        op = int(row["opcode"])
        where = f"frame {row['index']} ({row['name']})"
        if "infiniband" not in got["frame.protocols"].split(":"):
            errors.append(f"{where}: not dissected as InfiniBand: {got['frame.protocols']}")
            continue
        if got["_ws.malformed"] or got["_ws.expert.message"]:
            errors.append(f"{where}: malformed/expert: {got['_ws.malformed']} "
                          f"{got['_ws.expert.message']}")
        if op not in UNKNOWN_TO_TSHARK_4_0 and "Unknown" in got["_ws.col.Info"]:
            errors.append(f"{where}: tshark does not recognise it: {got['_ws.col.Info']}")
        for field, column, conv in FIELDS:
            if op in UNKNOWN_TO_TSHARK_4_0 and column not in BTH_ONLY:
                continue
            want = row[column]
            have = got[field]
            if want == "-":
                continue
            if have == "":
                # tshark files the AtomicETH VA and R_Key under the reth fields; others must show.
                errors.append(f"{where}: tshark shows no {field} (want {want})")
                continue
            if conv(have) != int(want):
                errors.append(f"{where}: {field} is {have}, roce-pcap wrote {want}")
        if op not in UNKNOWN_TO_TSHARK_4_0:
            # tshark shows the four ICRC bytes read big-endian; the CRC value is little-endian.
            shown = int(got["infiniband.invariant.crc"], 16)
            value = int.from_bytes(shown.to_bytes(4, "big"), "little")
            if value != int(row["icrc"]):
                errors.append(f"{where}: ICRC trailer {shown:#010x} does not hold {int(row['icrc']):#x}")

    if errors:
        print("\n".join(errors))
        print(f"FAIL: {len(errors)} mismatches over {len(rows)} frames")
        return 1
    print(f"OK: tshark decoded all {len(rows)} frames as expected "
          f"({len(UNKNOWN_TO_TSHARK_4_0)} opcodes unknown to tshark 4.0 checked on BTH only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
