# Sourced by the roced integration tests: roced as a host on a veth in a private network
# namespace. `roced_ns_start NS WORK NAME METRICS_PORT [PORT_YAML_LINES]` creates namespace NS
# with the pair veth-r (roced's, net_af_packet) and veth-k (the kernel's, up, no address),
# writes WORK/roced.yaml (port p0: 192.0.2.1/24, MAC 02:00:5e:00:02:31, plus PORT_YAML_LINES,
# each indented by four spaces, and $ROCED_NS_TOP's top-level lines), starts roced in the background (its pid in $roced_pid, its
# output in WORK/roced.log) and waits until it is up. Needs $roced. On exit, roced is killed
# (unless the caller cleared $roced_pid after stopping it), the namespace deleted, and
# roced_ns_more_cleanup run if the caller defined it.
#
# `roced_counters` then reads roced's counters (roce-ctl $ctl) into WORK/counters.txt and
# `roced_count NAME` prints one of them; `roced_stop` stops roced with SIGTERM and checks that
# it shut down cleanly.
roced_pid=
roced_ns_start() {
  local ns=$1 work=$2 name=$3 metrics=$4 extra=${5:-}
  roced_ns=$ns roced_work=$work roced_metrics=$metrics
  # shellcheck disable=SC2064
  trap "[[ -n \$roced_pid ]] && kill -9 \$roced_pid 2>/dev/null; ip netns del $ns 2>/dev/null
        declare -F roced_ns_more_cleanup >/dev/null && roced_ns_more_cleanup; true" EXIT
  ip netns add "$ns" || { echo "skipped: cannot create a network namespace"; exit 77; }
  ip -n "$ns" link set lo up
  ip -n "$ns" link add veth-r type veth peer name veth-k
  ip -n "$ns" link set veth-r up
  ip -n "$ns" link set veth-k up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
  rm -rf "$work" && mkdir -p "$work"
  {
    cat <<YAML
name: $name
eal:
  args: [--no-huge, --no-shconf, -m, "128", --no-pci, --file-prefix=roced$$, "--log-level=*:error"]
  lcores: [0]
ports:
  - name: p0
    device: net_af_packet0
    devargs: iface=veth-r,qpairs=1
    mac: 02:00:5e:00:02:31
    ipv4: 192.0.2.1/24
YAML
    [[ -n $extra ]] && sed 's/^/    /' <<< "$extra"
    cat <<YAML
counters:
  prometheus: 127.0.0.1:$metrics
  telemetry: false
YAML
    [[ -n ${ROCED_NS_TOP:-} ]] && printf '%s\n' "$ROCED_NS_TOP"
  } > "$work/roced.yaml"
  ip netns exec "$ns" "$roced" --config "$work/roced.yaml" > "$work/roced.log" 2>&1 &
  roced_pid=$!
  for _ in $(seq 100); do grep -q " up on lcore" "$work/roced.log" && break; sleep 0.2; done
  cat "$work/roced.log"
  grep -q " up on lcore" "$work/roced.log"
}

roced_counters() {
  ip netns exec "$roced_ns" "$ctl" -p "127.0.0.1:$roced_metrics" counters |
    tee "$roced_work/counters.txt"
}
roced_count() { awk -v k="$1" '$2 == k {print $NF}' "$roced_work/counters.txt"; }
roced_stop() {
  kill -TERM "$roced_pid"
  wait "$roced_pid"
  roced_pid=
  grep -q "stopping (SIGTERM)" "$roced_work/roced.log"
}
