"""Shared helpers of the cross-check scripts: run roce-pcap and read its manifest."""
import csv
import os
import subprocess
import sys


def generate(roce_pcap, workdir, extra_args):
    """Runs roce-pcap into workdir; returns (pcap path, list of manifest rows as dicts)."""
    os.makedirs(workdir, exist_ok=True)
    pcap = os.path.join(workdir, "frames.pcap")
    manifest = os.path.join(workdir, "frames.tsv")
    subprocess.run([roce_pcap, "--quiet", "--out", pcap, "--manifest", manifest] + extra_args,
                   check=True)
    with open(manifest, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows:
        sys.exit("roce-pcap wrote an empty manifest")
    return pcap, rows


def variant_args(args):
    out = []
    if args.ipv6:
        out.append("--ipv6")
    if args.vlan is not None:
        out += ["--vlan", str(args.vlan)]
    return out


def add_variant_flags(parser):
    parser.add_argument("--roce-pcap", required=True, help="path of build/bin/roce-pcap")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--ipv6", action="store_true")
    parser.add_argument("--vlan", type=int)
