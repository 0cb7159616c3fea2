# shellcheck shell=bash disable=SC2154
# Shared by the interop scripts (sourced): the preflight and the VM's life cycle. Expects `out`
# (a scratch directory) to be set before boot is called.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vm=$here/vm/run-vm.sh

# Exits 77 (skipped) where VMs cannot run: no root, no /dev/net/tun, no VM image.
# interop_vm_image_with PATTERN...: the VM image in RXE_VM_CACHE holds a file whose name
# matches each extended PATTERN, else the image is built again (exit 77 when it cannot be).
interop_vm_image_with() {
  local list p
  list=$(cpio -t --quiet < "${RXE_VM_CACHE:-/var/tmp/rxe-vm}/initramfs.cpio" 2>/dev/null || true)
  for p in "$@"; do
    grep -qE -- "$p" <<< "$list" && continue
    "$here/vm/build.sh" --force > /dev/null 2>&1 || { echo "skipped: cannot build the VM image"; exit 77; }
    return 0
  done
}

interop_preflight() {
  if [[ $(id -u) -ne 0 ]] || [[ ! -e /dev/net/tun ]]; then
    echo "skipped: needs root and /dev/net/tun"; exit 77
  fi
  "$here/vm/build.sh" >/dev/null || { echo "skipped: cannot build the VM image"; exit 77; }
}

boot() {  # boot CMD [SECONDS]: boot the VM running CMD (for at most SECONDS); wait until ready
  : > "$out/vm.txt"  # so that the wait below never greps a file not created yet
  "$vm" -b -w -t "${2:-180}" -c "$1" > "$out/vm.txt" 2>&1 &
  vmpid=$!
  # TCG boots in 20-40 s on a quiet host; RXE_VM_BOOT_WAIT gives a loaded one longer.
  local wait=${RXE_VM_BOOT_WAIT:-90}
  for _ in $(seq "$wait"); do
    grep -q RXEVM-WAIT "$out/vm.txt" && return 0
    kill -0 "$vmpid" 2>/dev/null || break
    sleep 1
  done
  echo "VM did not come up within $wait s (RXE_VM_BOOT_WAIT; load average $(cut -d' ' -f1-3 /proc/loadavg)):"
  cat "$out/vm.txt"
  # Stop it, so that its network namespace is gone before the next test needs the name.
  kill "$vmpid" 2>/dev/null; wait "$vmpid" 2>/dev/null
  return 1
}

finish() {  # wait for the VM to end; return its command's status
  wait "$vmpid" || true
  grep -q "cmd-end rc=0" "$out/vm.txt"
}

# roced_on_dp0 ROCED NAME [PORT_YAML]: roced with its port on the VM bridge's veth end
# (net_af_packet on dp0, 192.0.2.100) and an attach socket $out/NAME.sock, started in the VM's
# network namespace; `rp` is its pid. Waits for the socket. PORT_YAML: more keys of the port
# (indented by four), e.g. "    offload: parse". TOP_YAML (4th): top-level keys, e.g. services
# (which listen on br0's 192.0.2.254, where the VM reaches the namespace's kernel).
roced_on_dp0() {
  cat > "$out/$2.yaml" <<YAML
name: $2
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=$2$$, "--log-level=*:error"]
  lcores: [0]
ports:
  - name: p0
    device: net_af_packet0
    devargs: iface=dp0,qpairs=1
    mac: 02:00:5e:00:0f:11
    ipv4: 192.0.2.100/24
${3:-}
counters:
  telemetry: false
attach:
  socket: $out/$2.sock
  mode: "0600"
${4:-}
YAML
  ip netns exec "${RXE_VM_NETNS:-rxevm}" "$1" --config "$out/$2.yaml" > "$out/$2.log" 2>&1 &
  rp=$!
  for _ in $(seq 100); do [[ -S $out/$2.sock ]] && break; sleep 0.1; done
}
