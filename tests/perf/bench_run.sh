#!/bin/sh
# Runs roce-perf --config FILE in a fresh directory and checks that the JSON report has every
# expected field. Usage: bench_run.sh ROCE_PERF CONFIG WORKDIR [TOPOLOGY]
# TOPOLOGY (memif, the default, or remote) is the topology the JSON must report; on a remote
# link (af_packet on veth) the kernel drops frames when a side falls behind, so the checks that
# nothing was lost or resent without injected loss are for memif only.
set -eu
perf=$1 config=$2 dir=$3 topology=${4:-memif}
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
"$perf" --config "$config" > out.txt 2> err.txt || { cat out.txt err.txt; echo "FAIL: roce-perf exited $?"; exit 1; }
cat out.txt
json=$(sed -n 's/^ JSON: //p' out.txt)
svg=$(sed -n 's/^ SVG plot: //p' out.txt)
[ -n "$json" ] && [ -n "$svg" ] || { echo "FAIL: no JSON or SVG written"; exit 1; }
exec /usr/bin/python3 - "$json" "$svg" "$config" "$topology" <<'PY'
import json, sys, xml.etree.ElementTree as ET
j = json.load(open(sys.argv[1]))
ET.parse(sys.argv[2])  # well-formed SVG
topology = sys.argv[4]
errors = []
def need(obj, keys, where):
    for k in keys:
        if k not in obj:
            errors.append(f"{where}: no '{k}'")
need(j, ["name", "config_file", "config_text", "tsc_hz", "config", "workloads", "targets", "baselines"], "top")
if j["config"].get("topology", {}).get("kind") != topology:
    errors.append(f"topology {j['config'].get('topology')} is not {topology}")
if j.get("config_text") != open(sys.argv[3]).read():
    errors.append("config_text is not the configuration file")
for w in j["workloads"]:
    need(w, ["name", "operation", "mode", "sizes", "queue_depth", "qps", "mtu", "inline",
             "drop_rate", "repeat", "results"], w["name"])
    if len(w["results"]) != len(w["sizes"]):
        errors.append(f"{w['name']}: {len(w['results'])} results for {len(w['sizes'])} sizes")
    for r in w["results"]:
        need(r, ["bytes", "iterations", "seconds", "bytes_per_sec", "gbit_per_sec",
                 "msg_rate_mpps", "counters", "ratios"], w["name"])
        if r["iterations"] <= 0 or r["msg_rate_mpps"] <= 0:
            errors.append(f"{w['name']} {r['bytes']} B: nothing measured")
        # memif: the two appliances' core-to-core round trip before every row (a cache line
        # bounced between them: tens to hundreds of ns); remote: not measured
        if topology == "memif" and not 5 < r.get("c2c_ns", 0) < 100000:
            errors.append(f"{w['name']} {r['bytes']} B: core-to-core probe {r.get('c2c_ns')}")
        if topology == "remote" and "c2c_ns" in r:
            errors.append(f"{w['name']} {r['bytes']} B: a core-to-core probe on a remote link")
        b = r.get("busy", {})
        if not all(0 <= b.get(k, -1) <= 1 for k in ("a", "b")):
            errors.append(f"{w['name']} {r['bytes']} B: busy shares missing or out of [0, 1]: {b}")
        if w["mode"] == "lat":
            need(r.get("latency_usec", {}), ["min", "p50", "avg", "p99", "p99_9", "max"], w["name"])
        # a row measured `repeat` times reports its median run and the range of them all
        if w.get("repeat", 1) > 1:
            runs = r.get("runs", {})
            fig, val = (("p50_usec", r.get("latency_usec", {}).get("p50")) if w["mode"] == "lat"
                        else ("msg_rate_mpps", r["msg_rate_mpps"]))
            rng = runs.get(fig, {})
            if runs.get("count") != w["repeat"] or not rng.get("min", 1e18) <= val <= rng.get("max", -1):
                errors.append(f"{w['name']} {r['bytes']} B: runs {runs} do not hold the "
                              f"{w['repeat']} runs of {fig} {val}")
        if w["drop_rate"] > 0 and r["counters"]["injected_drops"] == 0 and r["iterations"] > 1000:
            errors.append(f"{w['name']}: loss configured, none injected")
        # Without injected loss nothing should need resending, and a round trip over memif
        # takes microseconds: a broken RTT estimate shows as ~0 and as a storm of probes.
        packets = r["iterations"] * -(-max(r["bytes"], 1) // w["mtu"])
        c = r["counters"]
        if w["drop_rate"] == 0 and c["retransmitted_packets"] > 50 + packets // 50 and topology == "memif":
            errors.append(f"{w['name']} {r['bytes']} B: {c['retransmitted_packets']} "
                          f"packets resent of {packets} without loss")
        # On memif nothing is lost but what the fault injector drops: a sequence NAK without
        # it means the stack itself lost a frame (once: mbuf allocations failing under 1000 QPs).
        if w["drop_rate"] == 0 and c["seq_naks_received"] > 0 and topology == "memif":
            errors.append(f"{w['name']} {r['bytes']} B: {c['seq_naks_received']} sequence NAKs "
                          "without injected loss")
        # Probes fire on silence longer than twice the estimate: ~0.01% of packets here, 0.4%
        # and more when the estimate read 0.
        if w["drop_rate"] == 0 and c["retransmit_probes"] > 50 + packets // 400 and topology == "memif":
            errors.append(f"{w['name']} {r['bytes']} B: {c['retransmit_probes']} probes for "
                          f"{packets} packets without loss")
        # selective repeat (issue 32): used exactly when both sides announced it; with it,
        # what is sent again is about what was lost, and nothing is sent selectively without it
        sr = w.get("selective_repeat", False) and w.get("peer_announces", True)
        if r.get("selective_repeat", False) != sr:
            errors.append(f"{w['name']}: selective repeat used: {r.get('selective_repeat')}, "
                          f"announced by both: {sr}")
        if not sr and c.get("sr_retransmits", 0) != 0:
            errors.append(f"{w['name']}: {c['sr_retransmits']} selective retransmissions without it")
        if sr and w["drop_rate"] > 0 and c["lost_bytes"] > 0:
            if c["sr_retransmits"] == 0:
                errors.append(f"{w['name']}: losses, and none sent again selectively")
        if w["mode"] == "bw" and r["iterations"] >= 1000 and r.get("srtt_us", 0) < 0.5:
            errors.append(f"{w['name']} {r['bytes']} B: round-trip estimate {r.get('srtt_us')} us")
if j["config"]["baselines"]["link"] and j["config"]["baselines"].get("adjacent"):
    # every row has its own link baseline, measured right before it
    adjacent = [(b.get("for_workload"), b.get("for_bytes")) for b in j["baselines"]]
    rows = set(adjacent)
    for row in rows:  # only the median run's baseline of a repeated row
        if row[0] is not None and adjacent.count(row) != 1:
            errors.append(f"{row}: {adjacent.count(row)} adjacent baselines")
    for w in j["workloads"]:
        for r in w["results"]:
            if (w["name"], r["bytes"]) not in rows:
                errors.append(f"{w['name']} {r['bytes']} B: no adjacent link baseline")
kinds = {b["kind"] for b in j["baselines"]}
want = set()
if j["config"]["baselines"]["link"]:
    want |= {"l2_blast"} if any(w["mode"] == "bw" for w in j["workloads"]) else set()
    want |= {"l2_echo"} if any(w["mode"] == "lat" for w in j["workloads"]) else set()
if j["config"]["baselines"]["tcp"]:
    want |= {"tcp_stream"} if any(w["mode"] == "bw" for w in j["workloads"]) else set()
    want |= {"tcp_pingpong"} if any(w["mode"] == "lat" for w in j["workloads"]) else set()
if not want <= kinds:
    errors.append(f"baselines {sorted(want - kinds)} missing")
for t in j.get("targets", []):
    need(t, ["name", "workload", "bytes", "metric", "value", "met"], "target " + t.get("name", "?"))
    if t.get("value") is None:
        errors.append(f"target {t.get('name')}: no value")
out = open("out.txt").read()
if j.get("targets") and f"{sum(t['met'] for t in j['targets'])} of {len(j['targets'])} targets met" not in out:
    errors.append("the targets table is not printed")
for e in errors:
    print("FAIL:", e)
print("bench JSON check:", "FAIL" if errors else "OK", f"({sum(len(w['results']) for w in j['workloads'])} results, {len(j['baselines'])} baselines)")
sys.exit(1 if errors else 0)
PY
