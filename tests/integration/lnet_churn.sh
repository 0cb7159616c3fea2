#!/usr/bin/env bash
# A long-running server transfer machine and short-lived client processes (client/lnet) through
# two roced instances on a net_memif link: roce-lnet-churn's server (roced A, whose quota of 16
# QPs per client allows it 8 connections at once) answers 1,000 client processes run in turn
# (roced B), each at one of 24 addresses (so an address comes back: the peer restarted), every
# other one killed (no goodbye) instead of stopping. The server must release the connections of
# clients that are gone: all 1,000 answered, never more than 8 connections live. Then roce-ctl
# lnet reads the server's per-queue statistics from its metrics endpoint.
#   lnet_churn.sh ROCED ROCE_CTL LNET_CHURN WORKDIR
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") churn=$(realpath "$3") work=$4
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=lchurn$$
oob=$((20000 + ($$ % 6) * 2000))  # below the ephemeral ports
clients=1000
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
quotas="  quotas:
    max_qps: 16
    max_memory: 67108864"
appliance a server 02:00:5e:00:0d:01 192.0.2.91 0 "" "$quotas"
appliance b client 02:00:5e:00:0d:02 192.0.2.92 1 "" "$quotas"

mport=$((oob + 1900))
"$churn" --socket "$work/a.sock" --pid 0 --addr "192.0.2.91@roce:0:7:1" --serve "$clients" \
  --oob-host 127.0.0.1 --oob-base "$oob" --metrics "127.0.0.1:$mport" > "$work/server.log" 2>&1 &
srv=$!
pids+=($srv)
for _ in $(seq 50); do grep -q "^server: transfer machine" "$work/server.log" && break; sleep 0.1; done
start=$(date +%s)
for i in $(seq 0 $((clients - 1))); do
  kill=""
  ((i % 2)) && kill=--kill
  "$churn" --socket "$work/b.sock" --pid 1 --addr "192.0.2.92@roce:1:7:$((i % 24))" \
    --peer "192.0.2.91@roce:0:7:1" --id "$i" --oob-host 127.0.0.1 --oob-base "$oob" $kill \
    >> "$work/clients.log" 2>&1 || { cat "$work/clients.log"; echo "FAIL: client $i"; exit 1; }
  if ((i == clients / 2)); then
    "$ctl" --prometheus "127.0.0.1:$mport" lnet > "$work/ctl.txt"
  fi
done
echo "clients: $clients in $(( $(date +%s) - start )) s"
wait "$srv" || { cat "$work/server.log"; exit 1; }
cat "$work/server.log" "$work/ctl.txt"
grep -q "^OK: served $clients clients" "$work/server.log"
live_max=$(sed -n 's/.*live at most \([0-9]*\).*/\1/p' "$work/server.log")
((live_max <= 8)) || { echo "FAIL: $live_max connections live at once"; exit 1; }
grep -q "hellos refused 0" "$work/server.log"
# roce-ctl lnet: the receive and send queues' rows, half-way through.
grep -Eq "^192\.0\.2\.91@roce:0:7:1 +msg-recv +[0-9]+ +0 +[0-9]+ " "$work/ctl.txt"
grep -Eq "^192\.0\.2\.91@roce:0:7:1 +msg-send +[0-9]+ " "$work/ctl.txt"
grep -q "connections_released_total" "$work/ctl.txt"
echo "lnet_churn: OK"
