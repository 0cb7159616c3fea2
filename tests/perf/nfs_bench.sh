#!/usr/bin/env bash
# NFSv3 between two appliances on net_memif (roce-nfs -> roce-nfsd over RPC-over-RDMA), against
# the same NFS operations over kernel TCP on loopback (roce-nfs --tcp-port -> roce-nfsd's TCP
# listener): sequential write and read throughput of one file and small-file latency (create,
# 4 KiB FILE_SYNC write, read, remove) and the latency of GETATTR, 4 KiB READ and 4 KiB WRITE.
# The export lives in /dev/shm. Label perf.
#   nfs_bench.sh ROCE_NFS ROCE_NFSD [BYTES] [FILES]
set -euo pipefail
client=$(realpath "$1") server=$(realpath "$2") bytes=${3:-67108864} files=${4:-200}
dir=$(mktemp -d /dev/shm/nfsbench.XXXXXX)
spid=
trap '[[ -n $spid ]] && kill "$spid" 2>/dev/null; rm -rf "$dir"' EXIT
mkdir "$dir/export"
"$server" --memif "$dir/memif.sock" --ip 192.0.2.1 --mac 02:00:00:00:02:01 --root "$dir/export" --state-dir "$dir/state" --export / \
  --export-options "rw,all_squash,anonuid=$(id -u),anongid=$(id -g)" \
  --mount-address 127.0.0.1 --mount-port 20148 --tcp-port 20149 --timeout 600 \
  > "$dir/server.txt" 2>&1 &
spid=$!
for _ in $(seq 100); do grep -q "^roce-nfsd: serving" "$dir/server.txt" && break; sleep 0.1; done
common=(--server 192.0.2.1 --mount-server 127.0.0.1 --mount-port 20148 --export /)
rdma=(--memif "$dir/memif.sock" --ip 192.0.2.2 --mac 02:00:00:00:02:02)
ok=1
for depth in 1 8; do
  "$client" "${common[@]}" "${rdma[@]}" --depth $depth bench rdma.$depth "$bytes" \
    > "$dir/rdma.$depth.txt" 2>&1 || ok=0
  grep -E "^bench|roce-nfs:" "$dir/rdma.$depth.txt" | sed 's/^/  rdma: /'
  "$client" --server 127.0.0.1 --tcp-port 20149 --mount-server 127.0.0.1 --mount-port 20148 \
    --export / --depth $depth bench tcp.$depth "$bytes" > "$dir/tcp.$depth.txt" 2>&1 || ok=0
  grep -E "^bench|roce-nfs:" "$dir/tcp.$depth.txt" | sed 's/^/  tcp:  /'
done
"$client" "${common[@]}" "${rdma[@]}" smallbench / "$files" latency lat "$files" \
  > "$dir/rdma.small.txt" 2>&1 || ok=0
grep -E "^smallbench|^latency|roce-nfs:" "$dir/rdma.small.txt" | sed 's/^/  rdma: /'
"$client" --server 127.0.0.1 --tcp-port 20149 --mount-server 127.0.0.1 --mount-port 20148 \
  --export / smallbench / "$files" latency lat "$files" > "$dir/tcp.small.txt" 2>&1 || ok=0
grep -E "^smallbench|^latency|roce-nfs:" "$dir/tcp.small.txt" | sed 's/^/  tcp:  /'
kill -INT "$spid" 2>/dev/null || true
wait "$spid" || true
spid=
sed 's/^/  server: /' "$dir/server.txt"
if [[ $ok == 1 ]]; then echo "PASS nfs_bench"; else echo "FAIL nfs_bench"; exit 1; fi
