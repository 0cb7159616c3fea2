#!/usr/bin/env bash
# Debian's unmodified fi_info (libfabric-bin 1.17) and ucx_info (ucx-utils 1.13) list the
# appliance's device (libroce-verbs.so in-process on net_memif, our librdmacm): libfabric's
# verbs provider with its FI_EP_MSG domain (which needs the interface getifaddrs lists for the
# device, verbs/provider/sysfs.cc) and its FI_EP_DGRAM domain; UCX's ib memory domain with
# rc_verbs and ud_verbs on roce0:1 (which needs /dev/infiniband/roce0 and the GID's type in
# sysfs). The other end of the link is an ibv_rc_pingpong server: both tools skip a port that
# is down. Also checks what sysfs.cc answers to a plain cat.
#   fabric_info.sh LIBROCE_VERBS RDMACM_DIR WORKDIR
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") work=$3
for t in fi_info ucx_info ibv_rc_pingpong; do
  command -v $t >/dev/null || { echo "skipped: $t not installed (libfabric-bin, ucx-utils, ibverbs-utils)"; exit 77; }
done
# shellcheck source=tests/integration/lib_ports.sh
. "$(dirname "$0")/lib_ports.sh"
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
fail() { echo "FAIL: $*"; exit 1; }
port=$(port_base 1)
export LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir
ROCE_LINK="--pmd memif-server --iface $work/memif.sock --ip 192.0.2.76 --mac 02:00:00:00:00:76 --netdev-mtu 1500" \
  timeout 60 ibv_rc_pingpong -d roce0 -g 0 -p "$port" > "$work/peer.txt" 2>&1 &
peer=$!
trap 'kill $peer 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -S $work/memif.sock ]] && break; sleep 0.1; done
export ROCE_LINK="--pmd memif --iface $work/memif.sock --ip 192.0.2.77 --mac 02:00:00:00:00:77 --netdev-mtu 1500"

timeout 60 fi_info -p verbs > "$work/fi_info.txt" 2>&1 || fail "fi_info -p verbs: $(cat "$work/fi_info.txt")"
cat "$work/fi_info.txt"
# Each entry: provider, fabric, domain, version, type, protocol (one per line).
entry() {  # DOMAIN TYPE
  awk -v d="$1" -v t="$2" '$1 == "domain:" { dom = $2 } $1 == "type:" && dom == d && $2 == t { ok = 1 }
    END { exit !ok }' "$work/fi_info.txt"
}
entry roce0 FI_EP_MSG || fail "fi_info: no FI_EP_MSG domain roce0"
entry roce0-dgram FI_EP_DGRAM || fail "fi_info: no FI_EP_DGRAM domain roce0-dgram"

timeout 60 ucx_info -d > "$work/ucx_info.txt" 2>&1 || fail "ucx_info -d: $(cat "$work/ucx_info.txt")"
grep -E "Memory domain|Transport|Device" "$work/ucx_info.txt"
# The transports that follow "Memory domain: roce0", each with its device.
tl=$(awk '/# Memory domain:/ { md = $4 } md == "roce0" && /Transport:/ { t = $3 }
  md == "roce0" && /Device:/ { print t "@" $3 }' "$work/ucx_info.txt" | sort | tr '\n' ' ')
[[ $tl == "rc_verbs@roce0:1 ud_verbs@roce0:1 " ]] ||
  fail "ucx_info -d: memory domain roce0 has '$tl', not rc_verbs and ud_verbs on roce0:1"

sys=/sys/class/infiniband/roce0/ports/1
[[ $(cat $sys/gid_attrs/types/0) == "RoCE v2" ]] || fail "sysfs: GID 0's type is not 'RoCE v2'"
[[ $(cat $sys/gids/0) == "0000:0000:0000:0000:0000:ffff:c000:024d" ]] || fail "sysfs: GID 0 is $(cat $sys/gids/0)"
[[ $(cat $sys/gid_attrs/ndevs/0) == "roce0" ]] || fail "sysfs: GID 0's interface is not roce0"
[[ $(cat /sys/class/infiniband/roce0/node_guid) == "0000:00ff:fe00:0077" ]] || fail "sysfs: node_guid"
echo "PASS fabric_info"
