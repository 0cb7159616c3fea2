#!/usr/bin/env bash
# Function-call benchmarks of the NAA on a net_memif pair: roce-naa and naaice_bench_roce (the
# host library on the appliance's stack, echo kernel). Round-trip time against the payload size
# (64 B .. 64 MiB), then calls per second with 1..16 hosts at once (64 B payloads). Writes
# OUT/naa_rtt.csv, OUT/naa_rate.csv and OUT/naa_bench.svg (both plotted).
#   naa_bench.sh ROCE_NAA NAAICE_BENCH_ROCE OUT_DIR [MAX_SIZE]
set -euo pipefail
naa=$(realpath "$1") bench=$(realpath "$2") out=$(realpath "$3") max=${4:-67108864}
mkdir -p "$out"
work=$(mktemp -d /tmp/naa-bench-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
hosts=(1 2 4 8 16)
sizes=0
for ((s = 64; s <= max; s *= 4)); do sizes=$((sizes + 1)); done
"$naa" --memif-socket "$work/memif.sock" --memory-per-host 160 --max-hosts 16 \
  --exit-after $((sizes + 1 + 2 + 4 + 8 + 16)) --timeout 900 > "$work/naa.log" 2>&1 &
pid=$!
for _ in $(seq 150); do grep -q "listening on rdma_cm port" "$work/naa.log" && break; sleep 0.1; done
export NAAICE_ROCE="pmd=memif,socket=$work/memif.sock,role=client,ip=192.0.2.2,mac=02:00:00:00:00:02"
echo "size,calls,median_us,p90_us,min_us,mbps" > "$out/naa_rtt.csv"
"$bench" -m rtt -S 64 -L "$max" -n 500 192.0.2.1 | tee /dev/stderr | sed -n 's/^rtt,//p' \
  >> "$out/naa_rtt.csv"
echo "hosts,size,seconds,calls,calls_per_s" > "$out/naa_rate.csv"
for h in "${hosts[@]}"; do
  "$bench" -m rate -H "$h" -S 64 -t 3 192.0.2.1 | tee /dev/stderr | sed -n 's/^rate,//p' \
    >> "$out/naa_rate.csv"
done
wait "$pid"
pid=
tail -6 "$work/naa.log"
/usr/bin/python3 - "$out" <<'PY'
import csv, math, sys
out = sys.argv[1]
rtt = list(csv.DictReader(open(f"{out}/naa_rtt.csv")))
rate = list(csv.DictReader(open(f"{out}/naa_rate.csv")))
W, H, M = 420, 300, 60
def panel(x0, title, xs, ys, xlabel, ylabel, logx, logy, fmt):
    fx = (lambda v: math.log10(v)) if logx else (lambda v: v)
    fy = (lambda v: math.log10(v)) if logy else (lambda v: v)
    X = [fx(v) for v in xs]; Y = [fy(v) for v in ys]
    xmin, xmax = min(X), max(X); ymin, ymax = (min(Y), max(Y)) if logy else (0, max(Y) * 1.1)
    if xmax == xmin: xmax += 1
    if ymax == ymin: ymax += 1
    px = lambda v: x0 + M + (v - xmin) / (xmax - xmin) * (W - 2 * M)
    py = lambda v: H - M + 20 - (v - ymin) / (ymax - ymin) * (H - 2 * M)
    s = [f'<text x="{x0 + W/2}" y="24" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{x0+M}" y1="{H-M+20}" x2="{x0+W-M}" y2="{H-M+20}" stroke="black"/>',
         f'<line x1="{x0+M}" y1="{M-20}" x2="{x0+M}" y2="{H-M+20}" stroke="black"/>',
         f'<text x="{x0 + W/2}" y="{H-8}" text-anchor="middle" font-size="12">{xlabel}</text>',
         f'<text x="{x0+14}" y="{H/2}" transform="rotate(-90 {x0+14} {H/2})" text-anchor="middle" font-size="12">{ylabel}</text>']
    pts = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(X, Y))
    s.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for a, b, xv, yv in zip(X, Y, xs, ys):
        s.append(f'<circle cx="{px(a):.1f}" cy="{py(b):.1f}" r="3" fill="#1f77b4"/>')
        s.append(f'<text x="{px(a):.1f}" y="{py(b)-6:.1f}" font-size="9" text-anchor="middle">{fmt(yv)}</text>')
    for a, xv in zip(X, xs):
        lab = xv if not logx else (f"{xv//1048576}M" if xv >= 1048576 else f"{xv//1024}K" if xv >= 1024 else str(xv))
        s.append(f'<text x="{px(a):.1f}" y="{H-M+34}" font-size="9" text-anchor="middle">{lab}</text>')
    return s
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2*W}" height="{H}" font-family="sans-serif">',
       f'<rect width="{2*W}" height="{H}" fill="white"/>']
svg += panel(0, "NAA call round trip (echo, memif)", [int(r["size"]) for r in rtt],
             [float(r["median_us"]) for r in rtt], "payload (bytes, each way)", "median RTT (us)",
             True, True, lambda v: f"{v:.0f}")
svg += panel(W, "NAA calls per second (64 B)", [int(r["hosts"]) for r in rate],
             [float(r["calls_per_s"]) for r in rate], "hosts (connections) at once", "calls/s",
             False, False, lambda v: f"{v:.0f}")
svg.append("</svg>")
open(f"{out}/naa_bench.svg", "w").write("\n".join(svg))
PY
echo "PASS naa_bench: $out/naa_rtt.csv $out/naa_rate.csv $out/naa_bench.svg"
