#!/usr/bin/env bash
# The appliance image built by podman from containers/Containerfile (test deploy_image, the
# fixture of the other deployment tests): FROM localhost/roce-debian:bookworm (Debian 12 from
# Debian's archive, containers/podman/debian-base.sh: no registry is reachable here), with the
# layer cache (a rebuild after source changes rebuilds only the compile layer) and a ccache
# mounted from ROCE_DEPLOY_CACHE. Then the image's user, entrypoint, health check and stop
# signal are checked, that it holds no setuid or setgid file, and one container of it runs under
# the project's engine settings.
# Exits 77 (skipped) when podman cannot run here.
set -euo pipefail
# shellcheck source=tests/deploy/podman_env.sh
source "$(dirname "$0")/podman_env.sh"
"$c/podman/debian-base.sh"
can_run "$base_image" || skip "podman cannot run a container here: $(tail -1 "$ROCE_DEPLOY_CACHE/probe.log")"
mkdir -p "$ROCE_DEPLOY_CACHE/ccache"
log=$ROCE_DEPLOY_CACHE/podman-build.log
echo "== podman build (log: $log)"
start=$(date +%s)
# --network host: the build's RUN steps fetch Debian packages and need no network of their own.
podman build --layers --format docker --network host \
  --ignorefile "$c/Containerfile.dockerignore" \
  --build-arg BASE="$base_image" --build-arg CCACHE_DIR=/ccache --build-arg ROCE_JOBS="${ROCE_JOBS:-2}" \
  -v "$ROCE_DEPLOY_CACHE/ccache:/ccache" \
  -f "$c/Containerfile" -t "$image" "$repo" > "$log" 2>&1 || { tail -40 "$log"; fail "podman build"; }
echo "podman build took $(( $(date +%s) - start )) s"
grep -E '^(STEP|\[|-->|COMMIT)' "$log" | grep -c 'Using cache' | sed 's/^/layers from the cache: /' || true
echo "== the image"
cfg=$(podman image inspect -f '{{.Config.User}}|{{json .Config.Entrypoint}}|{{.Config.StopSignal}}|{{json .Config.Healthcheck.Test}}' "$image")
echo "$cfg"
[[ $cfg == 'roce|["roced"]|SIGTERM|["CMD","roce-ctl","--prometheus","127.0.0.1:9464","counters"]' ]] \
  || fail "image configuration: $cfg"
out=$(podman run --rm --network none "$image" --help 2>&1) || true
grep -q "Usage: roced" <<<"$out" || fail "roced does not start in the image: $out"
for b in roced roce-ctl roce-perf roce-naa roce-attach-example; do
  podman run --rm --network none --entrypoint /bin/sh "$image" -c "command -v $b" >/dev/null || fail "$b missing"
done
# no setuid or setgid file: a container run without no-new-privileges (plain podman/docker run)
# would otherwise hand the unprivileged user su, mount, passwd ... (docs/security.md)
suid=$(podman run --rm --network none --user 0 --entrypoint /bin/sh "$image" -c 'find / -xdev -type f -perm /6000' 2>/dev/null) \
  || fail "cannot list the image's files"
[[ -z $suid ]] || fail "setuid/setgid files in the image: ${suid//$'\n'/ }"
echo "no setuid or setgid file in the image"
echo "PASS deploy image"
