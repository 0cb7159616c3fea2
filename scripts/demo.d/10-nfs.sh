# shellcheck shell=bash disable=SC2154
# NFS file copy (apps/nfs, docs/nfs.md): roced hosts the NFSv3 server (services: - test: nfs)
# over RPC-over-RDMA on a net_memif port; roce-nfs on the other end of the link writes a 32 MiB
# file, lists the export, reads the file back and compares it, removes it.
mkdir -p "$out/export"
free_port() {
  /usr/bin/python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}
mport=$(free_port)
appliance nfsd server 02:00:5e:00:10:01 192.0.2.81 "127.0.0.1:$(free_port)" "$out/memif.sock" "services:
  - kind: nfs
    port: p0
    listen_port: 20049
    args: [\"--root\", \"$out/export\", \"--export\", \"/\", \"--mount-port\", \"$mport\", \"--export-options\", \"rw,all_squash,anonuid=$(id -u),anongid=$(id -g)\"]"
for _ in $(seq 100); do grep -q "service nfs: rdma_cm port" "$out/nfsd.log" && break; sleep 0.1; done
note "roced serves $out/export over NFSv3 on RPC-over-RDMA (rdma_cm port 20049)"
head -c 33554432 /dev/urandom > "$out/file"
"$bin/roce-nfs" --memif "$out/memif.sock" --ip 192.0.2.82 --mac 02:00:5e:00:10:02 \
  --server 192.0.2.81 --mount-server 127.0.0.1 --mount-port "$mport" --export / \
  put "$out/file" file ls / get file "$out/file.back" rm file > "$out/client.txt" 2>&1 \
  || { cat "$out/client.txt"; echo "demo: roce-nfs failed"; exit 1; }
grep -E "^(put|get) " "$out/client.txt" | sed 's/^/           /'
cmp -s "$out/file" "$out/file.back" || { echo "demo: the file read back differs"; exit 1; }
note "32 MiB written and read back over NFS/RDMA, identical ($(sha256sum < "$out/file" | cut -c1-16)...)"
