#!/usr/bin/env bash
# verbs_ex_pingpong (the extended verbs API end to end: every ibv_wr_* builder, ibv_start_poll
# and the ibv_wc_read_* accessors) between two in-process appliances under libroce-verbs.so,
# net_af_packet on a veth pair between two network namespaces (ns_pair.sh); its TCP exchange on
# the management veths. Needs root and iproute2; exits 77 ("skipped") without them.
#   verbs_ex_pingpong.sh LIBROCE_VERBS VERBS_EX_PINGPONG
set -euo pipefail
lib=$(realpath "$1") prog=$(realpath "$2")
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
# shellcheck source=tests/integration/ns_pair.sh
source "$(dirname "$(realpath "$0")")/ns_pair.sh"
port=$(port_base 1)
a=roce-vx-a-$$ b=roce-vx-b-$$
work=$(mktemp -d)
spid=
cleanup() {
  [[ -n $spid ]] && kill "$spid" 2>/dev/null
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$work"
  return 0
}
trap cleanup EXIT
ns_pair_up "$a" "$b"
ip netns exec "$a" env LD_PRELOAD="$lib" \
  ROCE_LINK="--pmd af_packet --iface veth-a --ip 192.0.2.123 --mac 02:00:5e:00:1e:03 --lcore 1" \
  timeout 60 "$prog" "$port" > "$work/server.txt" 2>&1 &
spid=$!
rc=0
ip netns exec "$b" env LD_PRELOAD="$lib" \
  ROCE_LINK="--pmd af_packet --iface veth-b --ip 192.0.2.124 --mac 02:00:5e:00:1e:04 --lcore 0" \
  timeout 60 "$prog" "$port" 192.0.2.11 > "$work/client.txt" 2>&1 || rc=$?
wait "$spid" || rc=$?
spid=
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ $rc == 0 ]] || { echo "FAIL: verbs_ex_pingpong exited with $rc"; exit 1; }
grep -q "verbs_ex_pingpong server: PASS" "$work/server.txt" &&
  grep -q "verbs_ex_pingpong client: PASS" "$work/client.txt" || { echo "FAIL: no PASS"; exit 1; }
echo "PASS verbs_ex_pingpong"
