#!/usr/bin/python3
"""The short benchmark table of scripts/demo.sh, from roce-perf --config's JSON report:
bandwidth of each operation next to the link's own ceiling and kernel TCP at the same size,
then round-trip latency (p50, p99) next to an L2 echo on the same link and a TCP ping-pong.
  demo_summary.py bench-demo.json
With --pingpong, the attached round trip of step 1 from roce-perf send_lat's JSON (perftest's
latencies are one way, half a round trip), with its mode, where the client ran and the load
average (above the CPUs + 2, a note that a round trip may include waiting for a CPU):
  demo_summary.py --pingpong pingpong.json PLACEMENT LOADAVG"""
import json
import os
import sys


def size(b):
    return f"{b // 1024} KiB" if b >= 1024 else f"{b} B"


def pingpong(path, placement, loadavg):
    j = json.load(open(path))
    r = j["results"][0]
    print(f"           OK: attached round trip of {r['bytes']} bytes (SEND): p50 "
          f"{2 * r['t_typical_usec']:.1f} us, p99 {2 * r['p99_usec']:.1f} us "
          f"({r['iterations']} timed)")
    print("           (mode: libroce's hybrid wait, -e: a spin on the completion ring, then the "
          "eventfd;")
    print(f"            client on {placement}, appliance-a's loop on CPU 0, far end: perftest's "
          "send_lat")
    print(f"            server hosted in appliance-a's loop; load average {loadavg})")
    cpus = os.cpu_count() or 1
    if float(loadavg.split()[0]) > cpus + 2:  # the demo's two appliances count 2 themselves
        print(f"           (load {loadavg.split()[0]} on {cpus} CPUs: on a busy host a round trip "
              "may include waiting for a CPU;")
        print("            on a quiet one p50 is 1-2 us)")


if len(sys.argv) > 1 and sys.argv[1] == "--pingpong":
    pingpong(*sys.argv[2:5])
    sys.exit(0)

j = json.load(open(sys.argv[1]))
base = j["baselines"]
tcp_bw = {b["bytes"]: b["gbit_per_sec"] for b in base if b["kind"] == "tcp_stream"}
lat_base = {b["kind"]: b["latency_usec"] for b in base if "latency_usec" in b}
print(f"  {'operation':<10}{'size':>8}{'ours Gb/s':>12}{'link Gb/s':>12}{'TCP Gb/s':>11}{'ours/link':>11}")
for w in j["workloads"]:
    if w["mode"] != "bw":
        continue
    for r in w["results"]:
        # the link baseline this row is compared with (measured right before it with
        # baselines.adjacent, else the run's own)
        ratio = r["ratios"].get("bytes_vs_link")
        link = r["gbit_per_sec"] / ratio if ratio else float("nan")
        tcp = tcp_bw.get(r["bytes"], float("nan"))
        print(f"  {w['operation'].upper():<10}{size(r['bytes']):>8}{r['gbit_per_sec']:>12.2f}"
              f"{link:>12.2f}{tcp:>11.2f}{ratio or 0:>10.2f}x")
print()
print(f"  {'round trip, 8 B':<22}{'p50 us':>10}{'p99 us':>10}")
for w in j["workloads"]:
    if w["mode"] != "lat":
        continue
    for r in w["results"]:
        lat = r["latency_usec"]
        print(f"  {w['operation'].upper() + ' (ours)':<22}{lat['p50']:>10.2f}{lat['p99']:>10.2f}")
for kind, label in (("l2_echo", "link: L2 echo"), ("tcp_pingpong", "kernel TCP ping-pong")):
    if kind in lat_base:
        print(f"  {label:<22}{lat_base[kind]['p50']:>10.2f}{lat_base[kind]['p99']:>10.2f}")
