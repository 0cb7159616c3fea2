#!/usr/bin/env bash
# roced hosting the NFSv3 server as a configured service (services: - test: nfs) on a net_memif
# port, serving a temporary directory; roce-nfs on the other end of the link (RPC-over-RDMA,
# MOUNT over TCP on the management address): put, ls, get with the bytes compared, rm; the
# connection torn down once after 8 calls (--break-after) and made again. SIGTERM
# must stop the daemon with the service's counters in its log. No root needed.
#   nfs_roced.sh ROCED ROCE_NFS
set -euo pipefail
roced=$(realpath "$1") client=$(realpath "$2")
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
services:
  - test: nfs
    port: p0
    listen_port: 20049
    args: ["--root", "$work/export", "--mount-port", "$mport"]
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
kill -TERM "$pid"
wait "$pid" || rc=$?
pid=
sed 's/^/client: /' "$work/client.txt"
sed 's/^/roced: /' "$work/roced.log"
[[ $rc == 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
cmp "$work/blob" "$work/blob.back" || { echo "FAIL: the file read back differs"; exit 1; }
[[ -z $(ls "$work/export") ]] || { echo "FAIL: the export is not empty after rm"; exit 1; }
# --break-after: the client tore its connection down once and made it again.
grep -q "reconnects 1 " "$work/client.txt" || { echo "FAIL: the client did not reconnect"; exit 1; }
grep -q "rpcrdma: 2 connections" "$work/roced.log" || { echo "FAIL: no counters in the log"; exit 1; }
echo "PASS nfs_roced"
