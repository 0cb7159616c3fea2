#!/usr/bin/env bash
# Debian's unmodified perftest tool (ib_write_bw, ib_send_lat, ...) in two network namespaces,
# each side in-process under libroce-verbs.so on net_af_packet over a veth pair (RoCE addresses
# .111/.112; the exchange on the kernel's TCP over the management veth pair, .11/.12); -x 0: the
# port's RoCE v2 GID. A veth's link is up whether or not the peer runs, as a NIC's is (perftest
# gives up on a port that is down). Both sides must print their result row.
#   verbs_perftest.sh LIBROCE_VERBS TOOL [ARGS...]     (ARGS go to both sides)
set -euo pipefail
lib=$(realpath "$1") tool=$2; shift 2
command -v "$tool" >/dev/null || { echo "skipped: $tool not installed (perftest)"; exit 77; }
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
a=roce-vp-a-$$ b=roce-vp-b-$$
work=$(mktemp -d)
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
# shellcheck source=tests/integration/ns_pair.sh
. "$(dirname "$0")/ns_pair.sh"
ns_pair_up "$a" "$b" 1500
# shellcheck source=tests/integration/lib_ports.sh
. "$(dirname "$0")/lib_ports.sh"
port=$(port_base 1)
ip netns exec "$a" env LD_PRELOAD="$lib" \
  ROCE_LINK="--pmd af_packet --iface veth-a --ip 192.0.2.111 --mac 02:00:00:00:01:11" \
  timeout 60 "$tool" -d roce0 -x 0 -p "$port" "$@" > "$work/server.txt" 2>&1 &
spid=$!
for _ in $(seq 100); do
  ip netns exec "$a" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
  sleep 0.1
done
rc=0
ip netns exec "$b" env LD_PRELOAD="$lib" \
  ROCE_LINK="--pmd af_packet --iface veth-b --ip 192.0.2.112 --mac 02:00:00:00:01:12" \
  timeout 60 "$tool" -d roce0 -x 0 -p "$port" "$@" 192.0.2.11 > "$work/client.txt" 2>&1 || rc=$?
wait "$spid" || rc=$?
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ $rc == 0 ]] || { echo "FAIL: $tool exited with $rc"; exit 1; }
for side in server client; do
  # the result row: the message size first, then numbers
  awk '$1 ~ /^[0-9]+$/ && NF >= 4 { found = 1 } END { exit !found }' "$work/$side.txt" ||
    { echo "FAIL: $side printed no result row"; exit 1; }
done
echo "OK: $tool $*"
