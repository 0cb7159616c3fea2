#!/usr/bin/env bash
# The messaging API (client/lnet) between client processes attached to two roced instances on a
# net_memif link (the set-up of roced_attach.sh): roce-lnet-ping's server (roced A, a pool of
# multi-message receive buffers, asynchronous events) and client (roced B, a dynamic "*"
# address, synchronous events) exchange messages (12 landing 4 to a buffer, counts, offsets
# and bytes checked), passive/active bulk both ways (RDMA READ and WRITE, data verified) and
# 50 ping-pongs.
#   lnet_attach.sh ROCED LNET_PING WORKDIR
set -euo pipefail
roced=$(realpath "$1") ping=$(realpath "$2") work=$3
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=lnet$$
oob=$((20000 + ($$ % 20) * 2000))  # the Tms' TCP listeners: oob + ((pid*64+portal)*64+tmid)
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
# quotas of 16 QPs and 64 MiB per client
quotas="  quotas:
    max_qps: 16
    max_memory: 67108864"
appliance a server 02:00:5e:00:0b:01 192.0.2.71 0 "" "$quotas"
appliance b client 02:00:5e:00:0b:02 192.0.2.72 1 "" "$quotas"

"$ping" --socket "$work/a.sock" --pid 0 --addr "192.0.2.71@roce:0:5:1" --oob-host 127.0.0.1 \
  --oob-base "$oob" > "$work/server.log" 2>&1 &
srv=$!
pids+=($srv)
for _ in $(seq 50); do grep -q "^server: transfer machine" "$work/server.log" && break; sleep 0.1; done
"$ping" --socket "$work/b.sock" --pid 1 --addr "192.0.2.72@roce:1:5:*" \
  --peer "192.0.2.71@roce:0:5:1" --oob-host 127.0.0.1 --oob-base "$oob" --pingpong 50 \
  > "$work/client.log" 2>&1 || { cat "$work/server.log" "$work/client.log"; exit 1; }
wait "$srv" || { cat "$work/server.log" "$work/client.log"; exit 1; }
cat "$work/server.log" "$work/client.log"
grep -q "client: transfer machine 192.0.2.72@roce:1:5:63 " "$work/client.log"
grep -q "OK: 12 messages in 3 multi-message buffers, 12000 bytes" "$work/server.log"
[[ $(grep -c "^buffer [0-9]: 4 messages, 4000 bytes" "$work/server.log") == 3 ]]
grep -q "OK: active bulk receive (RDMA READ) of 65536 bytes, data verified" "$work/server.log"
grep -q "OK: active bulk send (RDMA WRITE) of 65536 bytes" "$work/server.log"
grep -q "OK: passive bulk send of 65536 bytes" "$work/client.log"
grep -q "OK: passive bulk receive of 65536 bytes written by the peer, data verified" "$work/client.log"
grep -q "OK: 50 ping-pongs" "$work/client.log"
grep -q "client: pool 4/4 free after stop" "$work/client.log"
echo "lnet_attach: OK"
