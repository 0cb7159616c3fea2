#!/usr/bin/python3
"""Incast 8:1 through the software switch (roce-incast, docs/congestion.md): five seeds per
algorithm, medians with their range, for 64 KiB WRITEs (eight senders to one receiver) and for
64 KiB READs (one requester reading from eight responders: their READ responses converge), and
a plot of the per-QP rate while the eighth sender joins late. Usage:

    tests/perf/incast_bench.py BUILD_DIR OUT_DIR [--runs 5] [--duration-ms 100]

Writes OUT_DIR/incast.md (the tables), OUT_DIR/incast-[read-]<alg>-<seed>[-join].json
(dcqcn-connectx: ConnectX's defaults) and
OUT_DIR/incast-join-<alg>.svg (dcqcn, delay).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


# ConnectX's DCQCN defaults (NVIDIA's "DCQCN CC parameters"; mlxconfig q of a ConnectX;
# docs/configuration.md "ConnectX's names and defaults"), min_time_between_cnps 4 us being
# roce-incast's --cnp-interval-us default. Review 20 finding 1: before a CNP's alpha update came
# ahead of its cut these gave 0.29-0.31 of the output and ~19k drops.
CONNECTX = ("--g", "1019", "--alpha-period-us", "1", "--monitor-us", "4", "--defer-cut",
            "--ai-mbps", "5", "--hai-mbps", "50", "--time-reset-us", "300",
            "--byte-reset", "32767", "--threshold", "1", "--initial-alpha", "1023",
            "--min-dec-fac", "50")
# Its checked floor: no drop, and at least 0.80 of the output (5 seeds gave 0.82-0.84 after the
# fix; the old order 0.29-0.31, no congestion control 0.489). The issue's 0.90 is for our
# defaults: with R_AI 5 Mb/s per 300 us and a halving per CNP the senders leave the queue
# empty part of the time (p50 5 KiB), docs/congestion.md.
CONNECTX_FLOOR = 0.80


def run(perf, out, alg, seed, duration_ms, extra=(), samples=False, op="write", name=None):
    tag = "read-" if op == "read" else ""
    path = os.path.join(out, f"incast-{tag}{name or alg}-{seed}{'-join' if samples else ''}.json")
    cmd = [perf, "--op", op, "--cc", alg, "--seed", str(seed), "--duration-ms",
           str(duration_ms), "--warmup-ms", "10", "--json", path, *extra]
    if samples:
        cmd.append("--samples")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)


def med(values):
    return statistics.median(values), min(values), max(values)


def fmt(values, spec):
    m, lo, hi = med(values)
    return f"{m:{spec}} ({lo:{spec}}-{hi:{spec}})"


def plot(result, path, join_ms, conv10):
    """Each sender's rate (its engine's counter, roce-ctl rates) and 1 ms goodput over time,
    as SVG."""
    samples = result["samples"]
    n = len(samples[0]["rate"])
    t_end = samples[-1]["t_us"] / 1000.0
    w, h, left, top, ph = 1000, 640, 70, 40, 240
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f"]
    link = result["options"]["link_mbps"]
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' "
           "font-family='sans-serif' font-size='12'>",
           "<rect width='100%' height='100%' fill='white'/>",
           f"<text x='{w/2}' y='20' text-anchor='middle' font-size='15'>incast 8:1, "
           f"{result['options']['algorithm']}: sender 8 joins at {join_ms} ms, within 10% of the "
           f"others' rate after {'never' if conv10 is None else f'{conv10:.1f} ms'}</text>"]

    def panel(y0, title, series, vmax):
        out.append(f"<text x='{left}' y='{y0-6}'>{title}</text>")
        out.append(f"<rect x='{left}' y='{y0}' width='{w-left-20}' height='{ph}' fill='none' "
                   "stroke='#999'/>")
        for k in range(0, 5):
            v = vmax * k / 4
            y = y0 + ph - ph * k / 4
            out.append(f"<text x='{left-6}' y='{y+4}' text-anchor='end'>{v/1000:.1f}</text>")
        for i in range(n):
            pts = []
            for s, v in series(i):
                x = left + (w - left - 20) * s / t_end
                y = y0 + ph - ph * min(v, vmax) / vmax
                pts.append(f"{x:.1f},{y:.1f}")
            out.append(f"<polyline fill='none' stroke='{colours[i % 8]}' stroke-width='1' "
                       f"points='{' '.join(pts)}'/>")
        for k in range(0, int(t_end) + 1, 10):
            x = left + (w - left - 20) * k / t_end
            out.append(f"<text x='{x:.1f}' y='{y0+ph+14}' text-anchor='middle'>{k}</text>")
        xj = left + (w - left - 20) * join_ms / t_end
        out.append(f"<line x1='{xj}' y1='{y0}' x2='{xj}' y2='{y0+ph}' stroke='black' "
                   "stroke-dasharray='4,3'/>")

    panel(top + 20, "rate per QP, roce_cc_qp_rate_mbps (Gb/s)",
          lambda i: [(s["t_us"] / 1000.0, s["rate"][i]) for s in samples], link)

    def avg(i):
        pts, win = [], []
        for s in samples:
            win.append(s["goodput"][i])
            if len(win) > 50:
                win.pop(0)
            pts.append((s["t_us"] / 1000.0, sum(win) / len(win)))
        return pts

    # 5 ms: a 1 ms window holds two or three 64 KiB WRITEs of a sender's fair share.
    panel(top + 60 + ph, "goodput per QP, 5 ms average (Gb/s)", avg, link / 4)
    out.append(f"<text x='{w/2}' y='{h-8}' text-anchor='middle'>time (ms)</text>")
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def convergence_ms(result, join_ms, within):
    """From the join until the joiner's rate (its engine's counter, roce-ctl rates; 1 ms
    averages) is within `within` (0.1: 10%) of the mean rate of the senders already there, and
    stays there for 2 ms; None if it never does."""
    samples = result["samples"]
    n = len(samples[0]["rate"])
    step_ms = (samples[1]["t_us"] - samples[0]["t_us"]) / 1000.0
    width = max(1, round(1.0 / step_ms))
    hold = max(1, round(2.0 / step_ms))
    joiner = [s["rate"][n - 1] for s in samples]
    others = [sum(s["rate"][:n - 1]) / (n - 1) for s in samples]

    def mean(xs, k):
        w = xs[max(0, k - width + 1):k + 1]
        return sum(w) / len(w)
    ok = [abs(mean(joiner, k) - mean(others, k)) <= within * mean(others, k)
          for k in range(len(samples))]
    for k, s in enumerate(samples):
        t = s["t_us"] / 1000.0
        if t > join_ms and k + hold <= len(ok) and all(ok[k:k + hold]):
            return t - join_ms
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration-ms", type=int, default=100)
    a = ap.parse_args()
    perf = os.path.join(a.build, "bin", "roce-incast")
    os.makedirs(a.out, exist_ok=True)
    rows, read_rows = [], []
    for alg in ("none", "dcqcn", "delay"):
        rs = [run(perf, a.out, alg, seed, a.duration_ms) for seed in range(1, a.runs + 1)]
        rows.append((alg, rs))
    rows.append(("dcqcn, ConnectX's defaults",
                 [run(perf, a.out, "dcqcn", seed, a.duration_ms, CONNECTX, name="dcqcn-connectx")
                  for seed in range(1, a.runs + 1)]))
    for alg in ("none", "dcqcn", "delay"):
        rs = [run(perf, a.out, alg, seed, a.duration_ms, op="read")
              for seed in range(1, a.runs + 1)]
        read_rows.append((alg, rs))
    lines = ["| operation | algorithm | goodput / output | of the payload rate | Jain | "
             "p99 queue (KiB) | max queue (KiB) | drops | marks | CNPs sent | retransmitted |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for op, alg, rs in [("WRITE", *x) for x in rows] + [("READ", *x) for x in read_rows]:
        lines.append(
            f"| {op} | {alg} | {fmt([r['of_output'] for r in rs], '.3f')} | "
            f"{fmt([r['of_payload_max'] for r in rs], '.3f')} | "
            f"{fmt([r['jain'] for r in rs], '.3f')} | "
            f"{fmt([r['p99_depth'] / 1024 for r in rs], '.0f')} | "
            f"{fmt([r['max_depth'] / 1024 for r in rs], '.0f')} | "
            f"{fmt([r['drops'] for r in rs], '.0f')} | {fmt([r['marks'] for r in rs], '.0f')} | "
            f"{fmt([r['cnp_sent'] for r in rs], '.0f')} | "
            f"{fmt([r['retransmitted'] for r in rs], '.0f')} |")
    join_ms = 30
    lines.append("")
    lines.append(f"Sender 8 joins at {join_ms} ms (80 ms runs): the time until its rate (1 ms "
                 "mean) is within 20% / 10% of the mean rate of the seven already there and stays "
                 "there for 2 ms, medians of "
                 f"{a.runs} seeds (range; runs that never got there: n of {a.runs}), and what the "
                 "join costs:")
    lines.append("")
    lines.append("| algorithm | within 20% (ms) | within 10% (ms) | Jain | drops | "
                 "retransmitted |")
    lines.append("|---|---|---|---|---|---|")
    for alg in ("none", "dcqcn", "delay"):
        c20, c10, rs = [], [], []
        for seed in range(1, a.runs + 1):
            r = run(perf, a.out, alg, seed, 80, ("--join-at-ms", str(join_ms)), samples=True)
            rs.append(r)
            c20.append(convergence_ms(r, join_ms, 0.2))
            c10.append(convergence_ms(r, join_ms, 0.1))
            if seed == 1 and alg != "none":
                plot(r, os.path.join(a.out, f"incast-join-{alg}.svg"), join_ms,
                     convergence_ms(r, join_ms, 0.1))

        def conv(cs):
            ok = [c for c in cs if c is not None]
            never = len(cs) - len(ok)
            text = fmt(ok, ".1f") if ok else "never"
            return text + (f" ({never} of {len(cs)} never)" if never and ok else "")
        if alg == "none":  # no rate to converge: every sender at the link rate
            c20 = c10 = None
        lines.append(f"| {alg} | {conv(c20) if c20 else '- (unpaced)'} | "
                     f"{conv(c10) if c10 else '- (unpaced)'} | {fmt([r['jain'] for r in rs], '.3f')} | "
                     f"{fmt([r['drops'] for r in rs], '.0f')} | "
                     f"{fmt([r['retransmitted'] for r in rs], '.0f')} |")
    # The issue's targets for DCQCN (medians): >= 0.9 of the output, Jain >= 0.95, p99 queue
    # below Kmax, no drop; for the WRITE incast and the READ one alike.
    missed = []
    for op, table in (("WRITE", rows), ("READ", read_rows)):
        d = dict(table)["dcqcn"]
        kmax = d[0]["options"]["kmax"]
        if med([r["of_output"] for r in d])[0] < 0.9:
            missed.append(f"{op}: goodput below 0.9 of the output")
        if med([r["jain"] for r in d])[0] < 0.95:
            missed.append(f"{op}: Jain's index below 0.95")
        if med([r["p99_depth"] for r in d])[0] >= kmax:
            missed.append(f"{op}: p99 queue depth not below Kmax")
        if any(r["drops"] for r in d):
            missed.append(f"{op}: drops")
    cx = dict(rows)["dcqcn, ConnectX's defaults"]
    if med([r["of_output"] for r in cx])[0] < CONNECTX_FLOOR:
        missed.append(f"ConnectX's defaults: goodput below {CONNECTX_FLOOR} of the output")
    if any(r["drops"] for r in cx):
        missed.append("ConnectX's defaults: drops")
    lines.append("")
    lines.append("targets: " + ("met" if not missed else "MISSED: " + ", ".join(missed)))
    with open(os.path.join(a.out, "incast.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
