#!/usr/bin/python3
"""Cross-check of the CM MAD codec against Wireshark's InfiniBand CM dissector.

roce-cm-pcap writes one RoCEv2 frame per CM message (each MAD a UD SEND Only to QP1) and a
manifest of (frame, tshark field, expected value); tshark decodes the capture independently.
Every frame must be dissected as InfiniBand with a MAD, with no malformed-packet or expert-info
items, and every listed infiniband.mad.* / infiniband.cm.* field must hold the manifest's value.
tshark 4.0.17 has no MRA or SIDR fields, so those frames are checked on the MAD header only.
"""
import argparse
import csv
import ipaddress
import os
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--roce-cm-pcap", required=True, help="path of build/bin/roce-cm-pcap")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()

    os.makedirs(args.workdir, exist_ok=True)
    pcap = os.path.join(args.workdir, "cm.pcap")
    manifest = os.path.join(args.workdir, "cm.tsv")
    subprocess.run([args.roce_cm_pcap, "--out", pcap, "--manifest", manifest], check=True)
    with open(manifest, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows:
        sys.exit("roce-cm-pcap wrote an empty manifest")

    fields = sorted({r["field"] for r in rows})
    extra = ["frame.number", "frame.protocols", "_ws.malformed", "_ws.expert.message"]
    names = extra + fields
    cmd = ["tshark", "-r", pcap, "--disable-heuristic", "rpcrdma_infiniband",
           "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for n in names:
        cmd += ["-e", n]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    decoded = {}
    for line in out.splitlines():
        cols = line.split("\t")
        decoded[cols[0]] = dict(zip(names, cols))

    errors = []
    frames = sorted({int(r["frame"]) for r in rows})
    if len(decoded) != len(frames):
        errors.append(f"tshark decoded {len(decoded)} frames, manifest has {len(frames)}")
    for n in frames:
        got = decoded.get(str(n))
        if got is None:
            errors.append(f"frame {n}: missing from tshark's output")
            continue
        protocols = got["frame.protocols"].split(":")
        if "infiniband" not in protocols:
            errors.append(f"frame {n}: not dissected as InfiniBand: {got['frame.protocols']}")
        if got["_ws.malformed"] or got["_ws.expert.message"]:
            errors.append(f"frame {n}: malformed/expert: {got['_ws.malformed']} "
                          f"{got['_ws.expert.message']}")
    checked = 0
    for r in rows:
        got = decoded.get(r["frame"])
        if got is None:
            continue
        where = f"frame {r['frame']} ({r['name']})"
        have = got[r["field"]]
        if have == "":
            errors.append(f"{where}: tshark shows no {r['field']} (want {r['value']})")
            continue
        if r["kind"] == "ip":
            ok = ipaddress.ip_address(have) == ipaddress.ip_address(r["value"])
        else:
            ok = int(have, 0) == int(r["value"])
        if not ok:
            errors.append(f"{where}: {r['field']} is {have}, roce-cm-pcap wrote {r['value']}")
        checked += 1

    if errors:
        print("\n".join(errors))
        print(f"FAIL: {len(errors)} mismatches over {len(frames)} frames")
        return 1
    print(f"OK: tshark decoded {len(frames)} CM frames, {checked} fields as written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
