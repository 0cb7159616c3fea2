#!/usr/bin/env bash
# One of Debian's perftest tools in its rdma_cm mode (-R: connection and exchange by
# librdmacm alone) between two processes, each with the appliance in-process under
# libroce-verbs.so on one end of a veth pair between two private network namespaces
# (net_af_packet), over our librdmacm.so.1. Both must exit 0 and print their result row.
#   rdmacm_perftest.sh LIBROCE_VERBS RDMACM_DIR TOOL [ARGS...]   (e.g. ib_send_bw -n 500)
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") tool=$3; shift 3
command -v "$tool" >/dev/null || { echo "skipped: $tool not installed (perftest)"; exit 77; }
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
a=roce-cmpt-a-$$ b=roce-cmpt-b-$$
work=$(mktemp -d)
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
if ! ip netns add "$a" || ! ip netns add "$b"; then echo "skipped: cannot create network namespaces"; exit 77; fi
ip -n "$a" link add veth-a type veth peer name veth-b netns "$b"
for nd in "$a veth-a" "$b veth-b"; do
  read -r ns dev <<< "$nd"
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
  ip -n "$ns" link set "$dev" up
  ip -n "$ns" link set lo up
done
run() {  # run NETNS IFACE IP MAC CMD...
  local ns=$1 dev=$2 ip=$3 mac=$4; shift 4
  ip netns exec "$ns" env LD_PRELOAD="$lib" LD_LIBRARY_PATH="$cmdir" \
    ROCE_LINK="--pmd af_packet --iface $dev --ip $ip --mac $mac" timeout 60 "$@"
}
run "$a" veth-a 192.0.2.121 02:00:00:00:01:21 "$tool" -R -d roce0 "$@" > "$work/server.txt" 2>&1 &
spid=$!
# perftest says when its server listens; a REQ that came earlier would wait for its
# retransmission.
for _ in $(seq 100); do
  grep -q "Waiting for client rdma_cm QP to connect" "$work/server.txt" && break
  sleep 0.1
done
rc=0
run "$b" veth-b 192.0.2.122 02:00:00:00:01:22 "$tool" -R -d roce0 "$@" 192.0.2.121 \
  > "$work/client.txt" 2>&1 || rc=$?
src=0
wait "$spid" || src=$?
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ $rc == 0 ]] || { echo "FAIL: client $tool exited with $rc"; exit 1; }
[[ $src == 0 ]] || { echo "FAIL: server $tool exited with $src"; exit 1; }
for side in server client; do
  grep -q "Data ex. method : rdma_cm" "$work/$side.txt" || { echo "FAIL: $side: not rdma_cm"; exit 1; }
done
# (The server of a READ or atomic latency test measures nothing: the client's row it is.)
grep -Eq "^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+" "$work/client.txt" ||
  { echo "FAIL: the client printed no result"; exit 1; }
echo "OK: $tool -R $*"
