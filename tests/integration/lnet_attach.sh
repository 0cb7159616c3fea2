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
cleanup() {
  local rc=$?
  [[ $rc != 0 ]] && tail -n 20 "$work"/*.log
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
appliance() {  # NAME ROLE MAC IP LCORE
  cat > "$work/$1.yaml" <<YAML
name: $1
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=$tag$1, "--log-level=*:error"]
  lcores: [$5]
ports:
  - name: p0
    device: net_memif0
    devargs: role=$2,id=0,socket-abstract=no,socket=$work/memif.sock
    mac: $3
    ipv4: $4/24
counters:
  telemetry: false
attach:
  socket: $work/$1.sock
  mode: "0600"
  quotas:
    max_qps: 16
    max_memory: 67108864
YAML
  "$roced" --config "$work/$1.yaml" > "$work/$1.log" 2>&1 &
  pids+=($!)
}
up() {
  for _ in $(seq 100); do grep -q " up on lcore" "$work/$1.log" && [[ -S $work/$1.sock ]] && break; sleep 0.1; done
  grep -q "attach: $work/$1.sock" "$work/$1.log" || { cat "$work/$1.log"; echo "FAIL: roced $1"; exit 1; }
}
appliance a server 02:00:5e:00:0b:01 192.0.2.71 0
up a
appliance b client 02:00:5e:00:0b:02 192.0.2.72 1
up b

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
