#!/usr/bin/env bash
# roce-perf's memif benchmark beside a running roced pair, as the README demo runs it (step 2
# after step 1): appliance A of the benchmark shares CPU 0 with a busy-polling roced, so its
# port starts late while B, on CPU 1, comes up fast. B used to dial A's memif socket as soon as
# the file existed (from A's EAL set-up on), got "ID not found" from a server whose port had
# not started, and DPDK 22.11's client never dials again: both sides "link did not come up".
# Runs a tiny benchmark three times; each must bring its link up.
#   bench_beside_roced.sh ROCED ROCE_PERF WORKDIR
set -euo pipefail
roced=$(readlink -f "$1") perf=$(readlink -f "$2") work=$3
rm -rf "$work" && mkdir -p "$work"
work=$(cd "$work" && pwd)
tag=bbr$$
pids=()
. "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
if (($(nproc) < 2)); then echo "skipped: needs two CPUs"; exit 77; fi
# A busy-polling on CPU 0 (the default poll: no idle mode), B idle on CPU 1 (as demo.sh's).
appliance ra server 02:00:5e:00:0c:01 192.0.2.91 0
appliance rb client 02:00:5e:00:0c:02 192.0.2.92 1 127.0.0.1:0 $'poll:\n  idle_after_polls: 2000\n  idle_sleep_us: 1000'
cat > "$work/bench.yaml" <<'YAML'
name: beside
baselines: {link: false, tcp: false}
defaults: {mtu: 1024, queue_depth: 8, iterations: 100}
workloads:
  - {name: send_lat, operation: send, mode: lat, sizes: [8]}
YAML
for i in 1 2 3; do
  start=$SECONDS
  if ! (cd "$work" && ROCE_BENCH_LINK_WAIT_S=20 "$perf" --config bench.yaml > "bench$i.txt" 2>&1); then
    cat "$work/bench$i.txt"
    echo "FAIL: run $i of the benchmark beside the roced pair"
    exit 1
  fi
  echo "run $i: link up, benchmark done in $((SECONDS - start)) s"
done
echo "PASS: the benchmark's memif link came up three times beside a running roced pair"
