# Sourced by the deployment tests (tests/deploy/*.sh): podman with the project's engine
# settings (containers/podman/containers.conf: runc, ulimits the machine allows, networks in
# 198.18.0.0/15), the skip rule (exit 77 with the reason when podman cannot run containers
# here), and the host's net.ipv4.ip_forward put back as it was (a container network's bridge
# turns it on, and every network namespace created afterwards inherits it).
# shellcheck shell=bash
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
c=$repo/containers
export CONTAINERS_CONF=$c/podman/containers.conf
export ROCE_DEPLOY_CACHE=${ROCE_DEPLOY_CACHE:-/var/tmp/roce-deploy}
# shellcheck source=tests/deploy/cache_dir.sh
source "$repo/tests/deploy/cache_dir.sh"
# shellcheck disable=SC2034  # used by the scripts that source this file
image=localhost/roce-appliance:latest base_image=localhost/roce-debian:bookworm
skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[[ $(id -u) == 0 ]] || skip "needs root (podman with runc, networks, host paths)"
# root writes, imports and runs what is in the cache: one another user could change is refused
safe_dir "$ROCE_DEPLOY_CACHE" || fail "ROCE_DEPLOY_CACHE $ROCE_DEPLOY_CACHE is not safe to use as root"
for t in podman runc; do command -v "$t" >/dev/null || skip "$t missing (scripts/install-deps.sh)"; done
podman info >/dev/null 2>&1 || skip "podman does not work here: $(podman info 2>&1 | tail -1)"
# The value before our first network is kept in the cache until put back, so that a run killed
# before its cleanup (SIGKILL at ctest's timeout) leaves it for the next run to restore; INT, TERM
# and HUP run the scripts' EXIT cleanup.
ip_forward_file=$ROCE_DEPLOY_CACHE/ip_forward.before
restore_ip_forward() {
  [[ -f $ip_forward_file ]] || return 0
  cat "$ip_forward_file" > /proc/sys/net/ipv4/ip_forward 2>/dev/null || true
  rm -f "$ip_forward_file"
}
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
# can_run IMAGE: podman starts a container of IMAGE here (no network, the configured limits)
can_run() { podman run --rm --network none --entrypoint /bin/true "$1" >/dev/null 2>"$ROCE_DEPLOY_CACHE/probe.log"; }
# network_up NAME SUBNET: a bridge network of ours (never podman's default one)
network_up() {
  [[ -f $ip_forward_file ]] || cat /proc/sys/net/ipv4/ip_forward > "$ip_forward_file"
  podman network exists "$1" && podman network rm -f "$1" >/dev/null
  podman network create --subnet "$2" "$1" >/dev/null
}
# healthy CONTAINER [TRIES]: the image's health check (podman runs it here on request: its
# timers are systemd units and no systemd runs on the development machines)
healthy() {
  local i
  for ((i = 0; i < ${2:-30}; i++)); do
    podman healthcheck run "$1" >/dev/null 2>&1 && return 0
    sleep 1
  done
  return 1
}
# ip_of CONTAINER: its address on its (only) network
ip_of() { podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }
# scrape ADDRESS:PORT -> the Prometheus text of a roced
scrape() {
  /usr/bin/python3 -c "import urllib.request, sys
sys.stdout.write(urllib.request.urlopen('http://$1/metrics', timeout=5).read().decode())"
}
metric() { awk -v n="roce_$2{" 'index($0, n) == 1 && /port="p0"/ { print $2; exit }' <<<"$1"; }
# counters_ok NAME TEXT: frames both ways (3 MiB at path MTU 1024), no QP left, a client seen
counters_ok() {
  local rx tx qps clients
  rx=$(metric "$2" port_rx_frames) tx=$(metric "$2" port_tx_frames) qps=$(metric "$2" qps)
  clients=$(metric "$2" attach_clients_total)
  echo "$1: rx $rx tx $tx frames, qps $qps, attached clients $clients"
  [[ ${rx:-0} -ge 1024 && ${tx:-0} -ge 1024 ]] || fail "$1 moved too few frames"
  [[ ${qps:-x} == 0 ]] || fail "$1: QPs left behind ($qps)"
  [[ ${clients:-0} -ge 1 ]] || fail "$1: no attached client counted"
}
# stop_checked CONTAINER: SIGTERM (the image's stop signal) with 10 s of grace; roced must
# exit 0 by itself and log it
stop_checked() {
  podman stop -t 10 "$1" >/dev/null
  local rc
  rc=$(podman inspect -f '{{.State.ExitCode}}' "$1")
  echo "$1: exit status $rc after SIGTERM"
  [[ $rc == 0 ]] || fail "$1 exited $rc on SIGTERM"
  local log
  log=$(podman logs "$1" 2>&1)  # whole: grep -q closing the pipe early would fail pipefail
  grep -q "stopping (SIGTERM)" <<<"$log" || fail "$1 did not log its SIGTERM stop"
}
