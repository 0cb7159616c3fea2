# shellcheck shell=bash disable=SC2154
# Shared by the integration scripts that run roced instances with an attach socket on one
# net_memif link (sourced). Expects `roced`, `work` (an absolute scratch directory), `tag` (unique
# per run: EAL file prefixes) and the array `pids` to be set.

# appliance NAME ROLE MAC IP LCORE [PROMETHEUS [EXTRA_YAML]]: writes $work/NAME.yaml (memif ROLE
# server|client on $work/memif.sock, attach socket $work/NAME.sock, Prometheus on PROMETHEUS or
# an ephemeral port), starts roced, waits until its port is up and its socket exists; pid_NAME
# is its pid. EXTRA_YAML follows the attach block: indented it extends it ("  quotas: ..."),
# unindented it adds top-level keys ("services: ..."). Optional variables: port_yaml (more keys
# of the port, indented by four: "    offload: datapath") and memif_sock (the link's socket file
# in $work, default memif.sock) and appliance_wait (tenths of a second to wait, default 300).
appliance() {
  cat > "$work/$1.yaml" <<YAML
name: $1
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=$tag$1, "--log-level=*:error"]
  lcores: [$5]
ports:
  - name: p0
    device: net_memif0
    devargs: role=$2,id=0,socket-abstract=no,socket=$work/${memif_sock:-memif.sock}
    mac: $3
    ipv4: $4/24
${port_yaml:-}
counters:
  telemetry: false
  prometheus: ${6:-127.0.0.1:0}
attach:
  socket: $work/$1.sock
  mode: "0600"
${7:-}
YAML
  "$roced" --config "$work/$1.yaml" > "$work/$1.log" 2>&1 &
  pids+=($!)
  eval "pid_$1=$!"
  # up to ${appliance_wait:-300} tenths of a second (a loaded host starts the EAL slowly)
  for _ in $(seq "${appliance_wait:-300}"); do
    grep -q " up on lcore" "$work/$1.log" && [[ -S $work/$1.sock ]] && break
    sleep 0.1
  done
  grep -q "attach: $work/$1.sock" "$work/$1.log" || { cat "$work/$1.log"; echo "FAIL: roced $1"; exit 1; }
}

# stop_all: kills what `pids` holds (the scripts' EXIT trap), printing the logs' tails on failure.
stop_all() {
  local rc=$1
  [[ $rc != 0 ]] && tail -n 20 "$work"/*.log
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
