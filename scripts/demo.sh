#!/usr/bin/env bash
# The README's main command: installs the dependencies (Debian 12, root), builds, then shows in
# a few minutes what the appliance is for, with a progress line per step:
#   1. two appliances (roced) on a virtual DPDK link (net_memif, no hugepages, no NIC), each
#      on a CPU of its own, and two application processes attached to them that move RC SEND,
#      WRITE and READ of 4 MiB with every byte checked and ping-pong; printed: the transfers,
#      then the attached ping-pong's own latency (roce-perf send_lat --attach -e, a core of its
#      own; mode and placement printed), then the two applications' ping-pong, marked as the
#      scheduler's figure (its clients share the CPUs with both appliances' poll loops);
#   2. a short benchmark: WRITE, SEND and READ bandwidth and round-trip latency next to the
#      link's own ceiling and kernel TCP (config/bench/demo.yaml; table, JSON and SVG plot);
#   3. the accelerator call: an appliance hosting the NAA service, a host calling its kernels
#      over RDMA with the results checked (docs/naa.md);
#   4. further application demos dropped into scripts/demo.d/ (NFS, frame relay, ...);
#   5. the appliances' counters (roce-ctl, the Prometheus endpoint);
#   6. RoCEv2 frames of every opcode checked by our parser and decoded by tshark.
#   ROCE_DEMO_SKIP_BUILD=1  use the existing build/ (no install, no build)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z ${ROCE_DEMO_SKIP_BUILD:-} ]]; then
  ./scripts/install-deps.sh
  cmake --preset default >/dev/null
  cmake --build --preset default
fi

repo=$PWD
bin=$repo/build/bin
out=$PWD/build/demo
rm -rf "$out" && mkdir -p "$out"
t0=$SECONDS
step() { printf '\n[%3d s] == %s\n' $((SECONDS - t0)) "$*"; }
note() { printf '[%3d s]    %s\n' $((SECONDS - t0)) "$*"; }
tag=demo$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# An appliance: NAME ROLE MAC IP PROMETHEUS SOCKET [services YAML]; its poll loop on CPU
# ${lcore:-0} (lcore=1 appliance ...): two appliances on one CPU take turns at the scheduler's
# pace, which made every message of the attached ping-pong wait for a time slice (0.7 ms). Once
# idle it sleeps ${nap:-20} us between polls.
appliance() {
  cat > "$out/$1.yaml" <<YAML
name: $1
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=$tag$1, "--log-level=*:error"]
  lcores: [${lcore:-0}]
ports:
  - name: p0
    device: net_memif0
    devargs: role=$2,id=0,socket-abstract=no,socket=$6
    mac: $3
    ipv4: $4/24
poll:  # sleep between polls once idle: the appliances leave the CPU to the benchmark
  idle_after_polls: 2000
  idle_sleep_us: ${nap:-20}
counters:
  prometheus: $5
  telemetry: false
attach:
  socket: $out/$1.sock
  mode: "0600"
${7:-}
YAML
  "$bin/roced" --config "$out/$1.yaml" > "$out/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q " up on lcore" "$out/$1.log" && break; sleep 0.1; done
  grep -q " up on lcore" "$out/$1.log" || { cat "$out/$1.log"; echo "demo.sh: roced $1 did not start"; exit 1; }
  note "roced $1 up: $4 on net_memif ($2 side), counters on http://$5/metrics"
}

step "1. Two appliances on a virtual link (net_memif, no hugepages, no NIC)"
prom_a=127.0.0.1:$((20000 + $$ % 10000)) prom_b=127.0.0.1:$((30000 + $$ % 10000))
tcp=$((40000 + $$ % 10000)) pp=$((40001 + $$ % 10000)) pp_n=5000
# appliance-a also hosts perftest's send_lat server in its poll loop: the far end of the
# attached round trip below.
appliance appliance-a server 02:00:5e:00:0a:01 192.0.2.61 "$prom_a" "$out/link.sock" "services:
  - test: send_lat
    port: p0
    listen_port: $pp
    args: [-s, '8', -n, '$pp_n', --timeout, '30']"
# appliance-b shares CPU 1 with the client of that round trip: idle, it wakes once a millisecond
# (every 20 us its wake-ups preempted the client, and under load the client then waited
# behind the other runnable tasks: p50 2 us or 12-19 us, against 2.0-2.1 us).
nap=1000 lcore=1 appliance appliance-b client 02:00:5e:00:0a:02 192.0.2.62 "$prom_b" "$out/link.sock"
note "two applications attach (libroce) and move 4 MiB each way, every byte checked"
"$bin/roce-attach-example" --socket "$out/appliance-a.sock" --listen "$tcp" --size $((4 << 20)) \
  --pingpong 500 > "$out/app-a.log" 2>&1 &
app=$!
"$bin/roce-attach-example" --socket "$out/appliance-b.sock" --connect "127.0.0.1:$tcp" \
  --size $((4 << 20)) --pingpong 500 > "$out/app-b.log" 2>&1 || { cat "$out"/app-*.log; exit 1; }
wait "$app" || { cat "$out/app-a.log"; exit 1; }
grep -E "OK: SEND" "$out/app-b.log" | sed 's/^attach-example: /           /'
# The attached path's own latency first: a client with a CPU of its own (CPU 1; appliance-a's
# loop is on CPU 0, appliance-b sleeps when idle), libroce's hybrid wait (-e: a short spin on
# the completion ring, then the eventfd), against the send_lat server appliance-a hosts.
note "attached ping-pong, the path's own latency: roce-perf send_lat --attach -e, client on a core of its own"
cpu=() where="the one CPU"
(($(nproc) >= 2)) && cpu=(taskset -c 1) where="CPU 1 (taskset -c 1)"
"${cpu[@]}" "$bin/roce-perf" send_lat --attach "$out/appliance-a.sock" -e -p "$pp" -s 8 \
  -n "$pp_n" --json "$out/pingpong.json" 127.0.0.1 > "$out/pingpong.log" 2>&1 \
  || { cat "$out/pingpong.log"; exit 1; }
/usr/bin/python3 scripts/demo_summary.py --pingpong "$out/pingpong.json" \
  "$where" "$(cut -d' ' -f1-3 /proc/loadavg)"
# The two applications' own ping-pong (run with the transfers above) crosses both appliances
# and the link, but its four processes share the CPUs with two polling loops: a message waits
# until its client is scheduled again, so it measures the scheduler (p50 36-235 us on the
# 2-CPU test host, 2026-11-28/29), not the path.
note "the two applications' ping-pong across the link (four processes on $(nproc) CPUs):"
grep -E "OK: [0-9]+ ping-pongs" "$out/app-b.log" | sed 's/^attach-example: /           /'
note "(not the path's latency: the clients share the CPUs with both appliances' polling"
note " loops, so each message waits for its client to be scheduled; the -e line above is the"
note " attached path's own latency)"

step "2. Benchmark: our RC WRITE, SEND, READ vs the link's own ceiling and kernel TCP"
note "roce-perf --config config/bench/demo.yaml (about 10 s)"
(cd "$out" && "$bin/roce-perf" --config "$repo/config/bench/demo.yaml" > bench.txt 2> bench.err) \
  || { cat "$out/bench.txt" "$out/bench.err"; exit 1; }
/usr/bin/python3 scripts/demo_summary.py "$out/bench-demo.json"
note "full report: $out/bench.txt; plot: $out/bench-demo.svg; JSON: $out/bench-demo.json"
note "(link ceiling: raw frames blasted over the same memif link; TCP: the kernel on loopback)"

step "3. Accelerator call: a host offloads kernels to an appliance over RDMA (NAAICE)"
appliance accelerator server 02:00:5e:00:0b:01 192.0.2.71 127.0.0.1:$((50000 + $$ % 10000)) \
  "$out/naa.sock" "services:
  - kind: naa
    port: p0
    listen_port: 12345
    args: [--max-hosts, '4', --memory-per-host, '16']"
for _ in $(seq 50); do grep -q "service naa: rdma_cm port" "$out/accelerator.log" && break; sleep 0.1; done
NAAICE_ROCE="pmd=memif,socket=$out/naa.sock,role=client,ip=192.0.2.72,mac=02:00:5e:00:0b:02" \
  "$bin/naaice_client_roce" -k all -n 2 192.0.2.71 > "$out/naa.log" 2>&1 || { cat "$out/naa.log"; exit 1; }
sed 's/^/           /' "$out/naa.log" | tail -n 12

step "4. Application demos (scripts/demo.d/)"
# Each scripts/demo.d/*.sh is sourced here (scripts/demo.d/README.md): bin, repo, out (its own
# directory), step/note (progress lines), appliance (a roced, stopped when the demo ends).
shopt -s nullglob
demos=(scripts/demo.d/*.sh)
if ((${#demos[@]} == 0)); then note "none installed"; fi
for d in "${demos[@]}"; do
  note "$(basename "$d" .sh)"
  # shellcheck disable=SC1090
  (
    pids=() out=$out/$(basename "$d" .sh)
    trap cleanup EXIT  # the demo's own appliances
    mkdir -p "$out"
    . "$d"
  )
done

step "5. Counters of the appliances (roce-ctl counters; Prometheus text on /metrics)"
for e in "appliance-a $prom_a" "appliance-b $prom_b"; do
  set -- $e
  echo "  $1:"
  "$bin/roce-ctl" -p "$2" counters | grep -E "port_(rx|tx)_frames|qps|mrs|attach_clients_total|retransmitted|ack_(sent|rcvd)|arp" \
    | sed 's/^/    /'
done

step "6. RoCEv2 frames of every opcode: our parser and tshark agree"
"$bin/roce-pcap" --quiet --out "$out/roce-ipv4.pcap" > /dev/null
"$bin/roce-pcap" --quiet --ipv6 --vlan 100 --out "$out/roce-ipv6-vlan.pcap" > /dev/null
for f in "$out"/roce-*.pcap; do
  v=$("$bin/roce-pcap" --check "$f") || { echo "$v"; echo "demo.sh: a bad frame in $f"; exit 1; }
  note "$(basename "$f"): our parser's verdicts: $(awk 'NR > 1 { printf "%s %s ", $1, $2 }' <<<"$v")"
done
n=$(tshark -r "$out/roce-ipv6-vlan.pcap" --disable-heuristic rpcrdma_infiniband -Y infiniband 2>/dev/null | wc -l)
want=$(sed -n 's/.*: \([0-9]*\) frames,.*/\1/p' <<<"$v")  # the last file's, as our parser counted
[[ $n == "$want" ]] || { echo "demo.sh: tshark decoded $n of $want frames"; exit 1; }
note "tshark decodes $n InfiniBand frames in $out/roce-ipv6-vlan.pcap (tshark -V -r ... for detail)"

step "done in $((SECONDS - t0)) s; logs, captures and the plot are in $out/"
