#!/usr/bin/env bash
# The Kubernetes manifests run by `podman kube play` (podman 4.3): the memif test pair overlay
# (containers/k8s/overlays/memif-test, rendered by kustomize_lite.mjs as `kubectl apply -k`
# would apply it) on a network of ours (198.18.24.0/24):
#   1. ConfigMap, PersistentVolumeClaim and the two Deployments played; podman lists the kinds
#      it ignores (Service, PodDisruptionBudget, Job: docs/deploy.md); both roced healthy by
#      their liveness probe (podman's health check), the pods' limits and security context as
#      podman applied them;
#   2. the benchmark Job's pod template played as a Pod (podman 4.3 has no Job): its two
#      attached clients move RC SEND, WRITE and READ of 1 MiB with every byte checked and 500
#      ping-pongs, both exit 0;
#   3. the appliances' counters from their pod addresses, then SIGTERM: each roced exits 0 by
#      itself and logs it; then `podman kube down`.
# Exits 77 (skipped) when podman cannot run here or node/js-yaml are missing.
set -euo pipefail
# shellcheck source=tests/deploy/podman_env.sh
source "$(dirname "$0")/podman_env.sh"
node_modules=${ROCE_NPM_DIR:-$ROCE_DEPLOY_CACHE/npm}/node_modules
if ! command -v node >/dev/null || [[ ! -d $node_modules/js-yaml ]]; then skip "node or js-yaml missing (scripts/install-deps.sh)"; fi
safe_dir "$node_modules" --existing || fail "$node_modules: node would load modules another user can change"
podman image exists "$image" || skip "no image $image (test deploy_image builds it)"
can_run "$image" || skip "podman cannot run a container here: $(tail -1 "$ROCE_DEPLOY_CACHE/probe.log")"
work=$ROCE_DEPLOY_CACHE/kube
mkdir -p "$work"
a=roce-appliance-a-pod-0 b=roce-appliance-b-pod-0
cleanup() {
  local rc=$?
  if [[ $rc != 0 ]]; then
    for s in $a-roced $b-roced roce-bench-app roce-bench-bench; do
      echo "== $s"; podman logs --tail 15 "$s" 2>&1 | grep -v 'systemd connection' || true
    done
  fi
  podman kube down "$work/bench-pod.yaml" >/dev/null 2>&1 || true
  podman kube down "$work/memif-test.yaml" >/dev/null 2>&1 || true
  podman volume rm -f roce-run roce-link roce-appliance >/dev/null 2>&1 || true
  podman network rm -f roce-kube >/dev/null 2>&1 || true
  restore_ip_forward
}
trap cleanup EXIT
cleanup 2>/dev/null; trap cleanup EXIT  # a run that was interrupted
network_up roce-kube 198.18.24.0/24

echo "== 1. kube play of overlays/memif-test"
NODE_PATH=$node_modules node "$repo/tests/deploy/kustomize_lite.mjs" "$c/k8s/overlays/memif-test" > "$work/memif-test.yaml"
# The Job's pod template as a Pod, the form podman 4.3 plays (the tool docs/deploy.md names).
/usr/bin/python3 "$c/podman/job-pod.py" < "$work/memif-test.yaml" > "$work/bench-pod.yaml"
start=$(date +%s)
podman --log-level info kube play --network roce-kube "$work/memif-test.yaml" > "$work/play.log" 2>&1 \
  || { grep -v 'systemd connection' "$work/play.log" | tail -20; fail "podman kube play"; }
echo "played in $(( $(date +%s) - start )) s; podman skipped: $(grep -o 'Kube kind [A-Za-z]* not supported' "$work/play.log" | sort -u | awk '{ printf "%s ", $3 }')"
for p in $a $b; do
  healthy "$p-roced" 30 || fail "$p: roced unhealthy"
  echo "$p: roced healthy (the liveness probe as podman's health check)"
done
for p in $a $b; do
  s=$p-roced
  pid=$(podman inspect -f '{{.State.Pid}}' "$s")
  uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status") capbnd=$(awk '/^CapBnd:/ { print $2 }' "/proc/$pid/status")
  lim=$(podman inspect -f 'memory {{.HostConfig.Memory}}, cpu quota {{.HostConfig.CpuQuota}}/{{.HostConfig.CpuPeriod}}, read-only root {{.HostConfig.ReadonlyRootfs}}' "$s")
  echo "$s: uid $uid, capability bounding set $capbnd, $lim"
  [[ $uid == 10001 && $capbnd == 0000000000000000 ]] || fail "$s: not the unprivileged user without capabilities"
  [[ $lim == "memory 536870912, cpu quota 100000/100000, read-only root true" ]] || fail "$s: limits $lim"
done

echo "== 2. the benchmark Job's pod"
podman kube play --network roce-kube "$work/bench-pod.yaml" > "$work/bench-play.log" 2>&1 \
  || { tail -20 "$work/bench-play.log"; fail "podman kube play of the benchmark"; }
rc_bench=$(timeout 120 podman wait roce-bench-bench) || fail "the benchmark did not finish"
rc_app=$(timeout 30 podman wait roce-bench-app) || fail "the client of A did not finish"
podman logs roce-bench-bench 2>&1 | grep -v 'systemd connection' | sed 's/^/  bench: /'
podman logs roce-bench-app 2>&1 | grep -v 'systemd connection' | sed 's/^/  app: /'
echo "bench exit $rc_bench, app exit $rc_app"
[[ $rc_bench == 0 && $rc_app == 0 ]] || fail "the benchmark's clients exited $rc_bench and $rc_app"
bench_log=$(podman logs roce-bench-bench 2>&1) app_log=$(podman logs roce-bench-app 2>&1)
grep -q "OK: SEND of 1048576 bytes, WRITE of 1048576 bytes, READ of 1048576 bytes, data verified" <<<"$bench_log" \
  || fail "no verified transfer"
grep -q "OK: 500 ping-pongs" <<<"$bench_log" || fail "no ping-pongs"
grep -q "data verified" <<<"$app_log" || fail "the client of A did not verify its data"

# the Job's uid (10002 in roced's group) cannot unlink an attach socket: the claim's volume took
# the image's sticky /run/roce (docs/security.md, "Deployments")
podman exec "$a-roced" test -S /run/roce/a.sock || fail "no attach socket /run/roce/a.sock in $a"
if podman run --rm --network none --user 10002:10001 -v roce-run:/run/roce --entrypoint /bin/rm \
    "$image" /run/roce/a.sock >/dev/null 2>&1; then
  fail "the benchmark's uid unlinked roced's attach socket"
fi
echo "the benchmark's uid cannot unlink roced's attach socket"

echo "== 3. counters from the pod addresses, SIGTERM"
for p in $a $b; do
  ip=$(ip_of "$(podman pod inspect -f '{{.InfraContainerID}}' "$p")")
  counters_ok "$p ($ip)" "$(scrape "$ip:9464")"
done
for p in $b $a; do stop_checked "$p-roced"; done
echo "PASS deploy kube play"
