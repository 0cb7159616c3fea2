#!/usr/bin/env bash
# roce-perf --config with a remote topology: config/bench/remote.yaml run from one network
# namespace against `roce-perf --bench-peer` in another. The RoCE link is a veth pair under
# net_af_packet (veth-a, veth-b), the control channel TCP over a second veth pair (the
# management link, 192.0.2.11/.12). The driver's JSON is checked by bench_run.sh; the peer must
# have served the benchmark and exited cleanly. Needs root and iproute2 (exits 77 without).
#   bench_remote.sh ROCE_PERF CONFIG WORKDIR
set -euo pipefail
perf=$(realpath "$1") config=$(realpath "$2") work=$3
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
a=roce-br-a-$$ b=roce-br-b-$$
cleanup() {
  [[ -n ${ppid:-} ]] && kill "$ppid" 2>/dev/null || true
  ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true
}
trap cleanup EXIT
# shellcheck source=tests/integration/ns_pair.sh
. "$(dirname "$0")/ns_pair.sh"
ns_pair_up "$a" "$b"
mkdir -p "$work"
ip netns exec "$b" "$perf" --bench-peer --iface veth-b --ip 192.0.2.112 --mac 02:00:00:00:01:12 \
  --lcore 1 > "$work/peer.txt" 2>&1 &
ppid=$!
rc=0
ip netns exec "$a" "$(dirname "$0")/../perf/bench_run.sh" "$perf" "$config" "$work/driver" remote || rc=$?
wait "$ppid" || { echo "FAIL: the bench peer exited with $?"; rc=1; }
ppid=
sed 's/^/peer: /' "$work/peer.txt"
grep -q "^roce-perf bench peer: 'remote' done" "$work/peer.txt" || { echo "FAIL: the peer did not finish"; rc=1; }
exit "$rc"
