#!/usr/bin/env bash
# A roced memif client turned away before its server's port started dials again. The client
# roced (rb) starts first, against a stand-in that accepts its one dial and hangs up, as a
# server whose process is up but whose port has not started answers ("ID not found"; DPDK
# 22.11's client never dials again by itself). Then the real server roced (ra) starts on the
# same socket path: rb must dial again (its log says so) and two attached applications must
# move 1 MiB across the link.
#   roced_memif_redial.sh ROCED ROCE_ATTACH_EXAMPLE WORKDIR
set -euo pipefail
roced=$(readlink -f "$1") example=$(readlink -f "$2") work=$3
rm -rf "$work" && mkdir -p "$work"
work=$(cd "$work" && pwd)
tag=rmr$$
pids=()
. "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
# The stand-in: one dial accepted and hung up on, then the socket file removed.
/usr/bin/python3 - "$work/memif.sock" > "$work/standin.log" 2>&1 <<'PY' &
import os, socket, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(path)
s.listen(1)
s.settimeout(60)
c, _ = s.accept()
c.close()
s.close()
os.unlink(path)
print("stand-in: turned one dial away")
PY
standin=$!
for _ in $(seq 100); do [[ -S $work/memif.sock ]] && break; sleep 0.1; done
appliance rb client 02:00:5e:00:0d:02 192.0.2.102 1
wait "$standin"
cat "$work/standin.log"
appliance ra server 02:00:5e:00:0d:01 192.0.2.101 0
for _ in $(seq 200); do grep -q "dialled the server again" "$work/rb.log" && break; sleep 0.1; done
grep "dialled the server again" "$work/rb.log" || { echo "FAIL: rb never dialled again"; exit 1; }
port=$((20000 + $$ % 20000))
timeout 60 "$example" --socket "$work/ra.sock" --listen "$port" --size $((1 << 20)) > "$work/app-a.log" 2>&1 &
app=$!
timeout 60 "$example" --socket "$work/rb.sock" --connect "127.0.0.1:$port" --size $((1 << 20)) \
  > "$work/app-b.log" 2>&1 || { cat "$work"/app-*.log; echo "FAIL: no transfer over the link"; exit 1; }
wait "$app" || { cat "$work/app-a.log"; echo "FAIL: the listening application"; exit 1; }
grep "OK:" "$work/app-b.log"
echo "PASS: the turned-away memif client dialled again and carried the transfer"
