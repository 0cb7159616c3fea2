#!/usr/bin/env bash
# Debian's unmodified perftest through the provider against roce-perf's native perftest tools,
# on the same link in the same run (docs/benchmarks.md, "Unmodified perftest through the
# provider"): ib_write_bw / ib_write_lat under roce-run, roce-perf write_bw / write_lat, each a
# server and a client, with the same arguments (both apply perftest's defaults: TX depth 128,
# CQ moderation 100, 1 above 8 KiB; latency: one message at a time, t_typical = median of half
# round trips), in two modes:
#   inproc    each side an appliance of its own (the provider's in-process backend; roce-perf's
#             own engine) on one end of a net_memif link, no CPU pinning (the provider's
#             process runs the program's thread and the progress thread, roce-perf one thread);
#   attached1 ONE roced (its poll loop on CPU 0, its memif port without a peer), the server and
#             the client both attached to it: their QPs talk through the port's own MAC
#             (self-delivery, dataplane/port/self_delivery.h). Three busy threads at most (roced's
#             loop and the two programs), as on a host with a core each: what the provider's
#             post/poll translation costs against roce-perf --attach, not the scheduler;
#   attached  two roced on a memif link (poll loops on CPUs 0 and 1), the server a client of
#             roced B, the client of roced A (roce-run --attach; roce-perf --attach): four busy
#             threads, which a 2-vCPU host cannot run at once.
# Each (mode, test, size) runs the native pair and the provider pair RUNS times, alternating
# which goes first. Prints a table (median and min..max of the client's BW average and message
# rate, or of its t_typical) with the ratios provider/native, and writes WORKDIR/verbs_bench.json.
# A pair that fails is counted and the run goes on; the script then exits 1.
#   verbs_bench.sh ROCED ROCE_PERF ROCE_RUN CONNECT_SHIM WORKDIR [RUNS]
# Environment: MODES ("inproc attached1"; "attached" for two roced), BW_SIZES ("64 4096 65536"),
# CROSS=1 (in-process write_bw also crossed: the provider's client against roce-perf's server
# and roce-perf's client against the provider's server, to tell which side loses),
# LAT_SIZES ("8 64"),
# BW_ITERS (per size, default 200000 below 1 KiB, 100000 to 8 KiB, 20000 above; attached a
# tenth, ATTACHED_DIV), LAT_ITERS (10000). CONNECT_SHIM: build/tests/perftest_connect_retry.so (tests/perf/connect_retry_shim.cc).
set -euo pipefail
roced=$(realpath "$1") perf=$(realpath "$2") run=$(realpath "$3") shim=$(realpath "$4") work=$5
runs=${6:-3}
for p in ib_write_bw ib_write_lat; do
  command -v "$p" >/dev/null || { echo "skipped: $p not installed (perftest)"; exit 77; }
done
modes=${MODES:-inproc attached1}
bw_sizes=${BW_SIZES-64 4096 65536} lat_sizes=${LAT_SIZES-8 64}
lat_iters=${LAT_ITERS:-10000}
bw_iters() {
  if [[ -n ${BW_ITERS:-} ]]; then echo "$BW_ITERS"
  elif (($1 < 1024)); then echo 200000
  elif (($1 <= 8192)); then echo 100000
  else echo 20000; fi
}
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vbench$$
pids=()
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_ports.sh"
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_appliance.sh"
trap 'stop_all $?' EXIT
fail() { echo "FAIL: $*"; exit 1; }

wait_tcp() {  # wait_tcp PORT PID: until something listens on PORT (or PID ended)
  for _ in $(seq 200); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 0
    sleep 0.05
  done
}

# the roced each side attaches to: attached1 one for both, attached B (server) and A (client)
srv_roced() { if [[ $1 == attached1 ]]; then echo one; else echo b; fi; }
cli_roced() { if [[ $1 == attached1 ]]; then echo one; else echo a; fi; }

n=0 failures=0
results=$work/results.txt
: > "$results"
# pair MODE IMPL TEST(write_bw|write_lat) SIZE ITERS: one server and one client; appends
# "MODE IMPL TEST SIZE ROW..." (the client's result row) to $results. IMPL: native, provider,
# or in-process crossed (CROSS=1): pcli (perftest via the provider as the client, roce-perf's
# server), psrv (roce-perf's client, perftest via the provider as the server). Each provider
# side writes its counters (ROCE_VERBS_STATS) to the pair's directory, server.stats and
# client.stats.
pair() {
  local mode=$1 impl=$2 test=$3 size=$4 iters=$5
  n=$((n + 1))
  local d=$work/$n-$mode-$impl-$test-$size port
  mkdir -p "$d"
  port=$(port_base 1)
  local args=(-s "$size" -n "$iters" -p "$port")
  local pargs=(-d roce0 -x 0 -F) nargs=(--timeout 170)
  local srv cli psrv=0 pcli=0
  case $impl in
    provider) psrv=1 pcli=1 ;;
    pcli) pcli=1 ;;
    psrv) psrv=1 ;;
  esac
  local sl=(--pmd memif-server --iface "$d/memif.sock" --ip 192.0.2.91 --mac 02:00:00:00:00:91)
  local cl=(--pmd memif --iface "$d/memif.sock" --ip 192.0.2.92 --mac 02:00:00:00:00:92)
  if ((psrv)); then
    if [[ $mode == inproc ]]; then
      srv=(env ROCE_LINK_WAIT=60 ROCE_VERBS_STATS="$d/server.stats" "$run" --link "${sl[*]}"
           -- "ib_$test" "${args[@]}" "${pargs[@]}")
    else
      srv=(env ROCE_VERBS_STATS="$d/server.stats" "$run"
           --attach "$work/$(srv_roced "$mode").sock" -- "ib_$test" "${args[@]}" "${pargs[@]}")
    fi
  elif [[ $mode == inproc ]]; then
    srv=("$perf" "$test" "${sl[@]}" "${args[@]}" "${nargs[@]}")
  else
    srv=("$perf" "$test" --attach "$work/$(srv_roced "$mode").sock" "${args[@]}" "${nargs[@]}")
  fi
  if ((pcli)); then
    if [[ $mode == inproc ]]; then
      cli=(env LD_PRELOAD="$shim" ROCE_VERBS_STATS="$d/client.stats" "$run" --link "${cl[*]}"
           -- "ib_$test" "${args[@]}" "${pargs[@]}" 127.0.0.1)
    else
      cli=(env ROCE_VERBS_STATS="$d/client.stats" "$run"
           --attach "$work/$(cli_roced "$mode").sock" -- "ib_$test" "${args[@]}" "${pargs[@]}"
           127.0.0.1)
    fi
  elif [[ $mode == inproc ]]; then
    cli=("$perf" "$test" "${cl[@]}" "${args[@]}" "${nargs[@]}" 127.0.0.1)
  else
    cli=("$perf" "$test" --attach "$work/$(cli_roced "$mode").sock" "${args[@]}" "${nargs[@]}"
         127.0.0.1)
  fi
  echo "${srv[*]}" > "$d/cmd.txt"
  echo "${cli[*]}" >> "$d/cmd.txt"
  timeout 180 "${srv[@]}" > "$d/server.txt" 2>&1 &
  local spid=$! rc=0 src=0
  if ((psrv)) && [[ $mode == inproc ]]; then
    # the server opens its device (the memif server) and waits there for the client's end
    for _ in $(seq 200); do [[ -S $d/memif.sock ]] && break; sleep 0.05; done
  else
    wait_tcp "$port" "$spid"
  fi
  timeout 180 "${cli[@]}" > "$d/client.txt" 2>&1 || rc=$?
  wait "$spid" || src=$?
  local row
  row=$(grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+" "$d/client.txt" | tail -1 | xargs || true)
  if [[ $rc != 0 || $src != 0 || -z $row ]]; then
    # counted in the table and the JSON ("failed"), the run goes on
    echo "$mode $impl $test $size failed" >> "$results"
    echo "  $mode $impl $test $size: FAILED (client $rc, server $src: $d)" >&2
    failures=$((failures + 1))
    return 0
  fi
  echo "$mode $impl $test $row" >> "$results"
  echo "  $mode $impl $test: $row" >&2
}

for mode in $modes; do
  case $mode in
    inproc) ;;
    attached)
      appliance a server 02:00:5e:00:0d:41 192.0.2.93 0
      appliance b client 02:00:5e:00:0d:42 192.0.2.94 1
      ;;
    attached1)
      # a memif server without a client: the port's link stays down, and nothing leaves it
      memif_sock=one-memif.sock appliance one server 02:00:5e:00:0d:43 192.0.2.95 0
      ;;
    *) fail "unknown mode $mode (inproc, attached1, attached)" ;;
  esac
  for r in $(seq "$runs"); do
    echo "$mode run $r/$runs" >&2
    order=(native provider)
    ((r % 2 == 0)) && order=(provider native)
    for s in $bw_sizes; do
      it=$(bw_iters "$s")
      # attached, every message crosses two roced: a tenth of the messages, as long a run
      [[ $mode == attached ]] && it=$((it / ${ATTACHED_DIV:-10}))
      for impl in "${order[@]}"; do pair "$mode" "$impl" write_bw "$s" "$it"; done
      # which side of the pair loses (CROSS=1, in-process): each provider side against the
      # native other side
      if [[ ${CROSS:-0} == 1 && $mode == inproc ]]; then
        for impl in pcli psrv; do pair "$mode" "$impl" write_bw "$s" "$it"; done
      fi
    done
    for s in $lat_sizes; do
      for impl in "${order[@]}"; do pair "$mode" "$impl" write_lat "$s" "$lat_iters"; done
    done
  done
  # shellcheck disable=SC2154  # set by appliance() (lib_appliance.sh)
  if [[ $mode == attached ]]; then
    kill "$pid_a" "$pid_b" 2>/dev/null || true
    wait "$pid_a" "$pid_b" 2>/dev/null || true
  elif [[ $mode == attached1 ]]; then
    kill "$pid_one" 2>/dev/null || true
    wait "$pid_one" 2>/dev/null || true
  fi
done

/usr/bin/python3 - "$results" "$work/verbs_bench.json" "$runs" <<'PY'
import json, statistics, sys
rows = {}
failed = {}
for line in open(sys.argv[1]):
    f = line.split()
    mode, impl, test, size = f[0], f[1], f[2], int(f[3])
    if f[4] == "failed":
        failed[(mode, test, size, impl)] = failed.get((mode, test, size, impl), 0) + 1
        rows.setdefault((mode, test, size, impl), [])
        continue
    v = [float(x) for x in f[5:]]
    # bw: BW peak, BW average [MB/s], MsgRate [Mpps]; lat: t_min t_max t_typical t_avg ...
    m = {"bw_avg_MBps": v[1], "mpps": v[2]} if test == "write_bw" else \
        {"t_typical_us": v[2], "t_avg_us": v[3]}
    rows.setdefault((mode, test, size, impl), []).append(m)
def stat(k, key):
    xs = [r[key] for r in rows[k]]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs,
            "failed": failed.get(k, 0)}
out = {"runs": int(sys.argv[3]), "results": []}
print(f"{'mode':<10}{'test':<10}{'size':>6}  {'native':>24}  {'provider':>24}  {'provider/native':>16}  target")
for (mode, test, size, impl) in sorted(k for k in rows if k[3] == "native"):
    if (mode, test, size, "provider") not in rows:
        continue
    key = "bw_avg_MBps" if test == "write_bw" else "t_typical_us"
    nat, prov = stat((mode, test, size, "native"), key), stat((mode, test, size, "provider"), key)
    e = {"mode": mode, "test": test, "size": size, "metric": key, "native": nat, "provider": prov}
    if nat is None or prov is None:
        out["results"].append(e)
        print(f"{mode:<10}{test:<10}{size:>6}  native failed {failed.get((mode, test, size, 'native'), 0)}x, "
              f"provider failed {failed.get((mode, test, size, 'provider'), 0)}x: no ratio")
        continue
    if test == "write_bw":
        for x in ("pcli", "psrv"):
            if rows.get((mode, test, size, x)):
                e[x] = stat((mode, test, size, x), key)
                e[x + "_ratio"] = e[x]["median"] / nat["median"]
        e["native_mpps"] = stat((mode, test, size, "native"), "mpps")
        e["provider_mpps"] = stat((mode, test, size, "provider"), "mpps")
        e["ratio"] = prov["median"] / nat["median"]
        e["target_met"] = e["ratio"] >= 0.9
        verdict = f"{e['ratio']:>16.3f}  {'met' if e['target_met'] else 'NOT met'} (>= 0.9)"
        fmt = lambda s: f"{s['median']:>8.0f} ({s['min']:.0f}..{s['max']:.0f})"
    else:
        e["extra_us"] = prov["median"] - nat["median"]
        e["ratio"] = prov["median"] / nat["median"]
        e["target_met"] = e["extra_us"] <= 1.0
        verdict = f"{e['extra_us']:>+13.2f} us  {'met' if e['target_met'] else 'NOT met'} (<= +1 us)"
        fmt = lambda s: f"{s['median']:>8.2f} ({s['min']:.2f}..{s['max']:.2f})"
    out["results"].append(e)
    nf = failed.get((mode, test, size, "native"), 0) + failed.get((mode, test, size, "provider"), 0)
    if nf:
        verdict += f"  ({nf} failed runs)"
    unit = "MB/s" if test == "write_bw" else "us"
    print(f"{mode:<10}{test:<10}{size:>6}  {fmt(nat):>24}  {fmt(prov):>24}  {verdict}  [{unit}]")
    if "pcli" in e or "psrv" in e:
        print(f"{'':<26}crossed: " + ", ".join(
            f"{w} {e[x]['median']:.0f} ({e[x + '_ratio']:.3f} of native)"
            for x, w in (("pcli", "provider client + native server"),
                         ("psrv", "native client + provider server")) if x in e))
json.dump(out, open(sys.argv[2], "w"), indent=1)
print("JSON:", sys.argv[2])
PY
((failures == 0)) || fail "$failures pairs failed (in the table)"
