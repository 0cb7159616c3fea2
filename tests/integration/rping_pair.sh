#!/usr/bin/env bash
# roce-perf rping against itself: server and client on a veth pair between two private network
# namespaces (RoCE addresses .111/.112). rping has no TCP exchange: the client connects with
# rdma_cm to the server's RoCE IP. Both sides' captures must decode. Needs root and iproute2;
# exits 77 ("skipped") without them.
#   rping_pair.sh ROCE_PERF ROCE_PCAP [ARGS...]   (ARGS go to both sides, e.g. -C 200 -S 1024)
# Env: ROCE_RP_TOOL=ucmatose or udaddy runs that tool instead (-b/-s instead of -s -a/-c -a);
#      ROCE_RP_CLIENT_EXTRA: more arguments for the client only (e.g. --tx-drop 0.02);
#      ROCE_RP_KEEP=DIR keeps the captures.
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2"); shift 2
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
a=roce-rp-a-$$ b=roce-rp-b-$$
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
read -r -a extra <<< "${ROCE_RP_CLIENT_EXTRA:-}"
if [[ ${ROCE_RP_TOOL:-rping} == ucmatose || ${ROCE_RP_TOOL:-rping} == udaddy ]]; then
  server=("$ROCE_RP_TOOL" -b 192.0.2.111) client=("$ROCE_RP_TOOL" -s 192.0.2.111)
else
  server=(rping -s -a 192.0.2.111) client=(rping -c -a 192.0.2.111)
fi
ip netns exec "$a" "$perf" "${server[@]}" --iface veth-a --ip 192.0.2.111 \
  --mac 02:00:00:00:01:11 --pcap "$work/server.pcap" --timeout 60 "$@" > "$work/server.txt" 2>&1 &
spid=$!
rc=0
ip netns exec "$b" "$perf" "${client[@]}" --iface veth-b --ip 192.0.2.112 \
  --mac 02:00:00:00:01:12 --pcap "$work/client.pcap" --timeout 60 "$@" "${extra[@]}" \
  > "$work/client.txt" 2>&1 || rc=$?
wait "$spid" || rc=$?
sed 's/^/server: /' "$work/server.txt" | grep -v "ping data:" || true
sed 's/^/client: /' "$work/client.txt" | grep -v "ping data:" || true
cp "$work"/*.pcap "${ROCE_RP_KEEP:-$work}/" 2>/dev/null || true
[[ $rc == 0 ]] || { echo "FAIL: roce-perf exited with $rc"; exit 1; }
for side in server client; do
  "$(dirname "$0")/check_capture.sh" "$pcap" "$work/$side.pcap" 1 | tail -1
done
