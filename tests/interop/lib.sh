# shellcheck shell=bash disable=SC2154
# Shared by the interop scripts (sourced): the preflight and the VM's life cycle. Expects `out`
# (a scratch directory) to be set before boot is called.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vm=$here/vm/run-vm.sh

# Exits 77 (skipped) where VMs cannot run: no root, no /dev/net/tun, no VM image.
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
  for _ in $(seq 90); do grep -q RXEVM-WAIT "$out/vm.txt" && return 0; sleep 1; done
  echo "VM did not come up:"; cat "$out/vm.txt"; return 1
}

finish() {  # wait for the VM to end; return its command's status
  wait "$vmpid" || true
  grep -q "cmd-end rc=0" "$out/vm.txt"
}
