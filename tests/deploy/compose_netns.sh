#!/usr/bin/env bash
# The composed deployment, started from the built image's root filesystem in network
# namespaces exactly as containers/compose.yaml wires it (containers/netns-compose.py):
#   1. the image is built (containers/build-rootfs.sh: buildah with chroot isolation where it
#      runs, else the Containerfile's steps in chroots; cached, so a rebuild is quick);
#   2. `up`: appliance-a and appliance-b (roced as the image's entrypoint, user roce, no
#      capabilities) on the memif socket volume, each healthy by the image's health check
#      (roce-ctl) before the next starts, then app-a and bench (attached clients) move RC SEND,
#      WRITE and READ of 1 MiB with every byte checked and 500 ping-pongs;
#   3. the counters of both appliances scraped over their Prometheus port from the compose
#      network (frames in both directions, the attached client counted, no QP left), the
#      health checks run again, the user and capabilities of PID 1 checked;
#   4. `down`: SIGTERM to each PID 1, which must exit 0 and say "stopping (SIGTERM)".
# VARIANT bridge adds containers/compose.bridge.yaml: net_af_packet on the compose network
# itself, root in the container with NET_RAW and NET_ADMIN only.
# Exits 77 (skipped) without root, network namespaces or debootstrap.
#   compose_netns.sh [memif|bridge]
set -euo pipefail
variant=${1:-memif}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
c=$repo/containers
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v debootstrap >/dev/null; then
  echo "skipped: needs root, iproute2 and debootstrap"; exit 77
fi
if ! ip netns add "deploy-probe-$$" 2>/dev/null; then echo "skipped: no network namespaces"; exit 77; fi
ip netns del "deploy-probe-$$"
cache=${ROCE_DEPLOY_CACHE:-/var/tmp/roce-deploy}
image=${ROCE_DEPLOY_IMAGE:-$cache/image}
files=(-f "$c/compose.yaml")
[[ $variant == bridge ]] && files+=(-f "$c/compose.bridge.yaml")
project=deploy-$variant
compose() { "$c/netns-compose.py" "${files[@]}" --project "$project" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
run=$cache/run/$project
cleanup() {
  local rc=$?
  if [[ $rc != 0 && -d $run ]]; then
    for s in appliance-a appliance-b app-a bench; do
      [[ -f $run/$s/log ]] && { echo "== $s"; tail -n 15 "$run/$s/log"; }
    done
  fi
  compose down >/dev/null 2>&1 || true
}
trap cleanup EXIT
compose down >/dev/null 2>&1 || true  # a run that was interrupted

echo "== 1. the image"
if [[ -z ${ROCE_DEPLOY_IMAGE:-} ]]; then
  "$c/build-rootfs.sh" --out "$image"
fi
[[ -f $image/.complete ]] || fail "no image in $image"
cat "$image/image.json"; echo

echo "== 2. up ($variant)"
start=$(date +%s)
compose --image "$image" up --exit-code-from bench || fail "bench exited with an error"
echo "up and the benchmark took $(( $(date +%s) - start )) s"
sed 's/^/bench: /' "$run/bench/log"
grep -q "OK: SEND of 1048576 bytes, WRITE of 1048576 bytes, READ of 1048576 bytes, data verified" \
  "$run/bench/log" || fail "no verified transfer"
grep -q "OK: 500 ping-pongs" "$run/bench/log" || fail "no ping-pongs"
grep -q "data verified" "$run/app-a/log" || grep -q "OK" "$run/app-a/log" || fail "app-a did not finish"

echo "== 3. counters over Prometheus, health, user and capabilities"
scrape() {  # ADDRESS -> the metrics text, fetched from the compose network
  compose exec-net mgmt /usr/bin/python3 -c \
    "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen('http://$1:9464/metrics', timeout=5).read().decode())"
}
metric() { awk -v n="roce_$2{" 'index($0, n) == 1 && /port="p0"/ { print $2; exit }' <<<"$1"; }
# shellcheck disable=SC2034  # read through ${!side}
a=$(scrape 198.18.23.11) b=$(scrape 198.18.23.12)
for side in a b; do
  text=${!side}
  rx=$(metric "$text" port_rx_frames) tx=$(metric "$text" port_tx_frames) qps=$(metric "$text" qps)
  clients=$(metric "$text" attach_clients_total)
  echo "appliance-$side: rx $rx tx $tx frames, qps $qps, attached clients $clients"
  # 3 MiB crossed the link at path MTU 1024: 1024 frames each way at least
  [[ ${rx:-0} -ge 1024 && ${tx:-0} -ge 1024 ]] || fail "appliance-$side moved too few frames"
  [[ ${qps:-x} == 0 ]] || fail "appliance-$side: QPs left behind ($qps)"
  [[ ${clients:-0} -ge 1 ]] || fail "appliance-$side: no attached client counted"
done
for s in appliance-a appliance-b; do compose health "$s" || fail "$s unhealthy"; done
for s in appliance-a appliance-b; do
  pid=$(/usr/bin/python3 -c "import json; print(json.load(open('$run/state.json'))['services']['$s']['pid1'])")
  uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status") capbnd=$(awk '/^CapBnd:/ { print $2 }' "/proc/$pid/status")
  echo "$s: PID 1 is $(tr '\0' ' ' < "/proc/$pid/cmdline")(uid $uid, capability bounding set $capbnd)"
  if [[ $variant == memif ]]; then
    [[ $uid == 10001 && $capbnd == 0000000000000000 ]] || fail "$s: not the unprivileged user without capabilities"
  else
    # NET_ADMIN (12) and NET_RAW (13) only
    [[ $uid == 0 && $capbnd == 0000000000003000 ]] || fail "$s: capabilities $capbnd, not NET_ADMIN and NET_RAW"
  fi
done

echo "== 4. down (SIGTERM)"
compose down | tee "$run/../$project-down.log"
trap - EXIT
for s in appliance-a appliance-b; do
  grep -q "$s: exit status 0" "$run/../$project-down.log" || fail "$s did not exit 0 on SIGTERM"
  grep -q "stopping (SIGTERM)" "$run/$s/log" || fail "$s did not log its SIGTERM stop"
done
echo "PASS deploy $variant"
