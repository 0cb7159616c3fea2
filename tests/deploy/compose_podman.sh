#!/usr/bin/env bash
# containers/compose.yaml (memif) or compose.yaml + compose.bridge.yaml (bridge) run by
# podman-compose, as a user runs them:
#   1. the network roce-mgmt created in 198.18.23.0/24 (podman-compose 1.0.3 ignores the compose
#      file's ipam), then `podman-compose up --exit-code-from bench`: appliance-a and
#      appliance-b (roced, the image's entrypoint) on the memif socket volume (memif) or with
#      net_af_packet on the bridge (bridge), and bench, whose two attached clients move RC SEND,
#      WRITE and READ of 1 MiB through the appliances with every byte checked, then 500
#      ping-pongs; bench's exit status is up's;
#   2. the image's health check in both appliances, their counters over the Prometheus ports
#      published on the host's 127.0.0.1 only (frames both ways, the attached client counted, no QP left), the user
#      and capabilities of their PID 1;
#   3. SIGTERM (podman stop): each roced exits 0 by itself and logs it; then down.
# Exits 77 (skipped) when podman, runc or podman-compose cannot run here.
#   compose_podman.sh memif|bridge
set -euo pipefail
variant=${1:-memif}
# shellcheck source=tests/deploy/podman_env.sh
source "$(dirname "$0")/podman_env.sh"
command -v podman-compose >/dev/null || skip "podman-compose missing (scripts/install-deps.sh)"
podman image exists "$image" || skip "no image $image (test deploy_image builds it)"
can_run "$image" || skip "podman cannot run a container here: $(tail -1 "$ROCE_DEPLOY_CACHE/probe.log")"
files=(-f "$c/compose.yaml")
[[ $variant == bridge ]] && files+=(-f "$c/compose.bridge.yaml")
compose() { podman-compose -p roce "${files[@]}" "$@"; }
a=roce_appliance-a_1 b=roce_appliance-b_1 bench=roce_bench_1
cleanup() {
  local rc=$?
  if [[ $rc != 0 ]]; then
    for s in $a $b $bench; do echo "== $s"; podman logs --tail 15 "$s" 2>&1 || true; done
  fi
  compose down -v >/dev/null 2>&1 || true
  podman network rm -f roce-mgmt >/dev/null 2>&1 || true
  restore_ip_forward
}
trap cleanup EXIT
compose down -v >/dev/null 2>&1 || true  # a run that was interrupted
network_up roce-mgmt 198.18.23.0/24
# Published ports that are free here (9464 and 9465 by default).
read -r ROCE_METRICS_A ROCE_METRICS_B < <(/usr/bin/python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
export ROCE_METRICS_A ROCE_METRICS_B

echo "== 1. podman-compose up --exit-code-from bench ($variant)"
start=$(date +%s)
rc=0
timeout 300 podman-compose -p roce "${files[@]}" up --no-build --exit-code-from bench \
  > "$ROCE_DEPLOY_CACHE/compose-$variant.log" 2>&1 || rc=$?
echo "up and the benchmark took $(( $(date +%s) - start )) s, exit status $rc"
podman logs "$bench" 2>&1 | sed 's/^/  /'
[[ $rc == 0 ]] || fail "podman-compose up exited $rc"
[[ $(podman inspect -f '{{.State.ExitCode}}' "$bench") == 0 ]] || fail "bench did not exit 0"
log=$(podman logs "$bench" 2>&1)
grep -q "OK: SEND of 1048576 bytes, WRITE of 1048576 bytes, READ of 1048576 bytes, data verified" <<<"$log" \
  || fail "no verified transfer"
grep -q "OK: 500 ping-pongs" <<<"$log" || fail "no ping-pongs"
grep -q "^app-a: .*data verified" <<<"$log" || fail "the client of A did not verify its data"

echo "== 2. health, counters over the published ports, user and capabilities"
for s in $a $b; do healthy "$s" 10 || fail "$s unhealthy"; echo "$s: healthy (podman healthcheck run)"; done
# published on the host's loopback only (compose.yaml; docs/security.md, "Deployments")
[[ $(podman port "$a" 9464/tcp) == "127.0.0.1:$ROCE_METRICS_A" && $(podman port "$b" 9464/tcp) == "127.0.0.1:$ROCE_METRICS_B" ]] \
  || fail "metrics published on $(podman port "$a" 9464/tcp) and $(podman port "$b" 9464/tcp), not 127.0.0.1 only"
counters_ok appliance-a "$(scrape "127.0.0.1:$ROCE_METRICS_A")"
counters_ok appliance-b "$(scrape "127.0.0.1:$ROCE_METRICS_B")"
for s in $a $b; do
  pid=$(podman inspect -f '{{.State.Pid}}' "$s")
  uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status") capbnd=$(awk '/^CapBnd:/ { print $2 }' "/proc/$pid/status")
  echo "$s: PID 1 is $(tr '\0' ' ' < "/proc/$pid/cmdline")(uid $uid, capability bounding set $capbnd, address $(ip_of "$s"))"
  if [[ $variant == memif ]]; then
    [[ $uid == 10001 && $capbnd == 0000000000000000 ]] || fail "$s: not the unprivileged user without capabilities"
  else
    # NET_ADMIN (12) and NET_RAW (13) only
    [[ $uid == 0 && $capbnd == 0000000000003000 ]] || fail "$s: capabilities $capbnd, not NET_ADMIN and NET_RAW"
  fi
done

# a client (bench's uid 10002 in the group roce) cannot unlink roced's attach socket and listen
# in its place: /run/roce is sticky (docs/security.md, "Deployments")
podman exec "$a" test -S /run/roce/a.sock || fail "no attach socket /run/roce/a.sock in $a"
if podman run --rm --network none --user 10002:10001 -v roce_memif:/run/roce --entrypoint /bin/rm \
    "$image" /run/roce/a.sock >/dev/null 2>&1; then
  fail "a client's uid unlinked roced's attach socket"
fi
echo "a client's uid cannot unlink roced's attach socket ($(podman exec "$a" stat -c '%A %U:%G' /run/roce))"

echo "== 3. SIGTERM"
for s in $b $a; do stop_checked "$s"; done
compose down -v >/dev/null 2>&1
echo "PASS deploy compose $variant"
