#!/usr/bin/env bash
# A client that vanishes mid-connection, without a DREQ: roce-perf rping -s -P (persistent
# server) on one end of a veth pair, roce-perf rping -c pinging without end on the other, killed
# with SIGKILL after a while. The server must notice (keepalive probe, the transport's retries
# run out, the QP goes to error), disconnect, free the QP (the engine's QP count back at its
# baseline) and serve the next client, which must complete its pings. Needs root and iproute2;
# exits 77 ("skipped") without them.
#   rping_vanish.sh ROCE_PERF ROCE_PCAP [ARGS...]   (ARGS go to both sides, e.g. -S 1024)
set -euo pipefail
perf=$(realpath "$1") pcap=$(realpath "$2"); shift 2
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
a=roce-rv-a-$$ b=roce-rv-b-$$
work=$(mktemp -d)
spid= cpid=
cleanup() {
  for p in $cpid $spid; do kill -9 "$p" 2>/dev/null || true; done
  ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$work"
}
trap cleanup EXIT
if ! ip netns add "$a" || ! ip netns add "$b"; then echo "skipped: cannot create network namespaces"; exit 77; fi
ip -n "$a" link add veth-a type veth peer name veth-b netns "$b"
for nd in "$a veth-a" "$b veth-b"; do
  read -r ns dev <<< "$nd"
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
  ip -n "$ns" link set "$dev" up
  ip -n "$ns" link set lo up
done
fail() { echo "FAIL: $*"; sed 's/^/server: /' "$work/server.txt"; for f in "$work"/client*.txt; do
  sed "s/^/$(basename "$f" .txt): /" "$f"; done; exit 1; }
client=(rping -c -a 192.0.2.111 --iface veth-b --ip 192.0.2.112 --mac 02:00:00:00:01:12 --timeout 60)
ip netns exec "$a" "$perf" rping -s -P --max-connections 2 --keepalive 1 -a 192.0.2.111 \
  --iface veth-a --ip 192.0.2.111 --mac 02:00:00:00:01:11 --timeout 60 \
  --pcap "$work/server.pcap" --json "$work/server.json" "$@" > "$work/server.txt" 2>&1 &
spid=$!
t0=$(date +%s.%N)
# 1. a client pinging without end, killed once it is connected and busy (ip netns exec execs
# the program: $! is roce-perf itself)
ip netns exec "$b" "$perf" "${client[@]}" -C 0 "$@" > "$work/client1.txt" 2>&1 &
cpid=$!
for _ in $(seq 100); do grep -q "^accepted" "$work/server.txt" && break; sleep 0.1; done
grep -q "^accepted" "$work/server.txt" || fail "the first client did not connect"
sleep 1
kill -9 "$cpid"; wait "$cpid" 2>/dev/null || true; cpid=
tk=$(date +%s.%N)
# 2. the server notices, frees the QP, and is back at its baseline
for _ in $(seq 300); do grep -q "^connection 1 ended" "$work/server.txt" && break; sleep 0.1; done
grep -q "^connection 1 ended" "$work/server.txt" || fail "the server did not notice the vanished client in 30 s"
td=$(date +%s.%N)
# 3. a new client connects and runs
ip netns exec "$b" "$perf" "${client[@]}" -C 100 "$@" > "$work/client2.txt" 2>&1 ||
  fail "the second client failed"
wait "$spid" || fail "the server exited with $?"
spid=
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client2: /' "$work/client2.txt"
num() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$work/server.json"; }
[[ $(num connections) == 2 && $(num failed_connections) == 1 ]] ||
  fail "expected 2 connections, the first failed: $(cat "$work/server.json")"
[[ $(num qps_after) == "$(num qps_baseline)" && $(num qps_in_use) == "$(num qps_baseline)" ]] ||
  fail "the QP count is not back at its baseline: $(cat "$work/server.json")"
grep -E -q "^connection 1 failed: .*(retry counter exceeded|keepalive probe went unanswered)" "$work/server.txt" ||
  fail "the first connection did not end by an unanswered probe or the transport's retries"
grep -q "^100 pings" "$work/client2.txt" || fail "the second client did not complete 100 pings"
"$(dirname "$0")/check_capture.sh" "$pcap" "$work/server.pcap" 1 | tail -1
printf 'PASS: vanished client noticed %.1f s after SIGKILL; the next client served; QPs back at %s\n' \
  "$(echo "$td - $tk" | bc)" "$(num qps_baseline)"
