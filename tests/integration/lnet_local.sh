#!/usr/bin/env bash
# The messaging API (client/lnet) on libroce's in-process backend (Context::open_local, with
# DomainOptions::serialize_context): roce-lnet-ping's server and client, each with its own
# engine and poll loop on one end of a net_memif link, no roced. The same checks as
# lnet_attach.sh: 12 messages 4 to a multi-message buffer, bulk both ways, ping-pongs.
#   lnet_local.sh LNET_PING WORKDIR
set -euo pipefail
ping=$(realpath "$1") work=$2
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
oob=$((21000 + ($$ % 20) * 2000))
"$ping" --local-memif "$work/memif.sock" --pid 0 --addr "192.0.2.81@roce:0:6:1" \
  --oob-host 127.0.0.1 --oob-base "$oob" > "$work/server.log" 2>&1 &
srv=$!
trap 'kill -9 $srv 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q "^server: transfer machine" "$work/server.log" && break; sleep 0.1; done
"$ping" --local-memif "$work/memif.sock" --pid 1 --addr "192.0.2.82@roce:1:6:*" \
  --peer "192.0.2.81@roce:0:6:1" --oob-host 127.0.0.1 --oob-base "$oob" --pingpong 20 \
  > "$work/client.log" 2>&1 || { cat "$work/server.log" "$work/client.log"; exit 1; }
wait "$srv" || { cat "$work/server.log" "$work/client.log"; exit 1; }
cat "$work/server.log" "$work/client.log"
grep -q "OK: 12 messages in 3 multi-message buffers, 12000 bytes" "$work/server.log"
[[ $(grep -c "^buffer [0-9]: 4 messages, 4000 bytes" "$work/server.log") == 3 ]]
grep -q "OK: active bulk receive (RDMA READ) of 65536 bytes, data verified" "$work/server.log"
grep -q "OK: passive bulk receive of 65536 bytes written by the peer, data verified" "$work/client.log"
grep -q "OK: 20 ping-pongs" "$work/client.log"
echo "lnet_local: OK"
