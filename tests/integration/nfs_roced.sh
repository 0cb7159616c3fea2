#!/usr/bin/env bash
# roced hosting the NFSv3 server as a configured service (services: - test: nfs) on a net_memif
# port, serving a temporary directory; roce-nfs on the other end of the link (RPC-over-RDMA,
# MOUNT over TCP on the management address): put, ls, get with the bytes compared, rm; the
# connection torn down once after 8 calls (--break-after) and made again. SIGTERM
# must stop the daemon with the service's counters in its log. The export lists its clients
# (192.0.2.2 over RDMA, 127.0.0.1 for MOUNT): MNT from 127.0.0.2 gets MNT3ERR_ACCES, and a
# client at 192.0.2.3 is refused at its connection request. No root needed: every caller is
# squashed to the user running the test (all_squash,anonuid,anongid); but an unprivileged roced
# refuses to lend supplementary groups to its callers, so such a user must have none (else: skip).
#   nfs_roced.sh ROCED ROCE_NFS
set -euo pipefail
roced=$(realpath "$1") client=$(realpath "$2")
if [[ $(id -u) != 0 && -n $(id -G | tr ' ' '\n' | grep -vx "$(id -g)") ]]; then
  echo "SKIP: not root and in supplementary groups (the service refuses to lend them)"; exit 77
fi
work=$(mktemp -d /tmp/nfs-roced-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
mkdir "$work/export"
mport=$((21000 + $$ % 4000))
cat > "$work/roced.yaml" <<YAML
name: nfs-test
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=rocednfs$$, "--log-level=*:error"]
ports:
  - name: p0
    device: net_memif0
    devargs: role=server,id=0,socket-abstract=no,socket=$work/memif.sock
    mac: 02:00:00:00:00:01
    ipv4: 192.0.2.1/24
counters:
  telemetry: false
  prometheus: 127.0.0.1:0
services:
  - test: nfs
    port: p0
    listen_port: 20049
    args: ["--root", "$work/export", "--export", "/", "--mount-port", "$mport",
           "--export-options", "rw,all_squash,anonuid=$(id -u),anongid=$(id -g)",
           "--clients", "192.0.2.2,127.0.0.1", "--state-dir", "$work/state"]
YAML
"$roced" --config "$work/roced.yaml" > "$work/roced.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "service nfs: rdma_cm port" "$work/roced.log" && break; sleep 0.1; done
grep -q "service nfs: rdma_cm port 20049" "$work/roced.log" || { cat "$work/roced.log"; echo "FAIL: no nfs service"; exit 1; }
head -c 3000001 /dev/urandom > "$work/blob"
rc=0
"$client" --memif "$work/memif.sock" --ip 192.0.2.2 --mac 02:00:00:00:00:02 --server 192.0.2.1 \
  --mount-server 127.0.0.1 --mount-port "$mport" --export / \
  --break-after 8 put "$work/blob" blob ls / get blob "$work/blob.back" rm blob ls / \
  > "$work/client.txt" 2>&1 || rc=$?
# MNT over TCP from an address the export does not list (127.0.0.2 is loopback too).
mnt=$(/usr/bin/python3 - "$mport" <<'PY'
import socket, struct, sys
s = socket.socket()
s.bind(("127.0.0.2", 0))
s.connect(("127.0.0.1", int(sys.argv[1])))
path = b"/"
call = struct.pack(">IIIIII", 7, 0, 2, 100005, 3, 1) + struct.pack(">IIII", 0, 0, 0, 0)
call += struct.pack(">I", len(path)) + path + b"\0" * (-len(path) % 4)
s.sendall(struct.pack(">I", 0x80000000 | len(call)) + call)
rec = b""
while len(rec) < 4 or len(rec) < 4 + (struct.unpack(">I", rec[:4])[0] & 0x7fffffff):
    rec += s.recv(4096)
# xid, REPLY, MSG_ACCEPTED, verifier (flavor, length 0), SUCCESS, then mountstat3
print(struct.unpack(">I", rec[4 + 24:4 + 28])[0])
PY
) || mnt=error
# NFS over RDMA from a RoCE address the export does not list.
"$client" --memif "$work/memif.sock" --ip 192.0.2.3 --mac 02:00:00:00:00:03 --server 192.0.2.1 \
  --mount-server 127.0.0.1 --mount-port "$mport" --export / ls / > "$work/stranger.txt" 2>&1 &&
  stranger=0 || stranger=$?
# The service's counters, as Prometheus scrapes them (the stranger's refusal among them).
sleep 0.3  # published every 100 ms
url=$(sed -n 's/^  counters: \(http:[^ ]*\)$/\1/p' "$work/roced.log")
/usr/bin/python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
  "$url" > "$work/metrics.txt" || { echo "FAIL: no metrics at '$url'"; exit 1; }
grep -q '^roce_rpcrdma_denied{appliance="nfs-test",port="p0"} 1$' "$work/metrics.txt" &&
  grep -q '^# TYPE roce_rpcrdma_connections_now gauge$' "$work/metrics.txt" &&
  grep -q '^roce_nfs_calls{' "$work/metrics.txt" ||
  { grep -E 'nfs|rpcrdma|mount' "$work/metrics.txt"; echo "FAIL: the NFS service's counters are not scraped"; exit 1; }
kill -TERM "$pid"
wait "$pid" || rc=$?
pid=
sed 's/^/client: /' "$work/client.txt"
sed 's/^/stranger: /' "$work/stranger.txt"
sed 's/^/roced: /' "$work/roced.log"
[[ $rc == 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
cmp "$work/blob" "$work/blob.back" || { echo "FAIL: the file read back differs"; exit 1; }
[[ -z $(ls "$work/export") ]] || { echo "FAIL: the export is not empty after rm"; exit 1; }
# --break-after: the client tore its connection down once and made it again.
grep -q "reconnects 1 " "$work/client.txt" || { echo "FAIL: the client did not reconnect"; exit 1; }
grep -q "rpcrdma: 2 connections" "$work/roced.log" || { echo "FAIL: no counters in the log"; exit 1; }
grep -Eq "nfs: .*, [1-9][0-9]* denied\)" "$work/roced.log" || { echo "FAIL: no refusals counted"; exit 1; }
[[ $mnt == 13 ]] || { echo "FAIL: MNT from 127.0.0.2 answered $mnt, not MNT3ERR_ACCES (13)"; exit 1; }
# Its connection is refused at the REQ (REJ 28): it never holds a slot of the transport.
[[ $stranger != 0 ]] && grep -q "connection rejected" "$work/stranger.txt" &&
  grep -q "1 (not listed)" "$work/roced.log" ||
  { echo "FAIL: the client at 192.0.2.3 was not refused at its connection request"; exit 1; }
echo "PASS nfs_roced"
