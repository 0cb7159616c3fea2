#!/usr/bin/env bash
# roce-nfs (NFSv3 over RPC-over-RDMA on the appliance's stack: net_af_packet on dp0, RoCE IP
# 192.0.2.100) against the Linux kernel's NFS server (nfsd + svcrdma) in the rxe VM exporting a
# tmpfs over RDMA port 20049: MOUNT over TCP, ls, stat, files of 0 B .. 64 MiB read (checksums
# compared with the VM's) and written back (checksummed inside the VM), rm. The capture must show
# RPC-over-RDMA with READs' data in write chunks and WRITEs' data in read chunks (tshark's
# rpcrdma dissector). A second connection offers no SEND with invalidate (LOCAL_INV for every
# chunk) and provokes RDMA_ERROR ERR_VERS and ERR_CHUNK. With "lossy", 1% of frames are dropped
# each way.
#   nfs.sh ROCE_NFS [lossy]   (root; exits 77 when VMs cannot run here)
# Env: RXE_VM_NETNS (default rxevm-nfs) names the VM's network namespace.
set -euo pipefail
nfs=$(realpath "$1") mode=${2:-plain}
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-nfs$([[ $mode == lossy ]] && echo l)}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
# An image built before image.d/nfs.sh came (its mtime older than the fragment's checkout) lacks
# the NFS pieces: build it again.
interop_vm_image_with usr/bin/nfs_vm_server
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sizes=(0 1 1000 4097 100000 1048583 8388608)
[[ $mode == lossy ]] || sizes+=(67108864)
drop=()
[[ $mode == lossy ]] && drop=(--tx-drop 0.01 --rx-drop 0.01)
# The VM: export, make the files, print their checksums, wait for the host's DONE, checksum what
# came back.
boot "nfs_vm_server /srv/nfs > /dev/null && cd /srv/nfs && mkdir -p sub && echo hello > sub/h &&
      for s in ${sizes[*]}; do head -c \$s /dev/urandom > f\$s; echo SUM f\$s \$(sha256sum < f\$s | cut -c1-64); done &&
      echo NFS-READY && i=0 && while [ ! -e DONE ] && [ \$i -lt 400 ]; do sleep 1; i=\$((i+1)); done &&
      for s in ${sizes[*]}; do echo BACK f\$s \$(sha256sum < back\$s | cut -c1-64); done &&
      echo INV \$(sha256sum < f1048583 | cut -c1-64) \$(sha256sum < inv | cut -c1-64) &&
      ls -l /srv/nfs | head -30" 900
for _ in $(seq 120); do grep -q NFS-READY "$out/vm.txt" && break; sleep 1; done
args=()
for s in "${sizes[@]}"; do args+=(get "f$s" "$out/f$s"); done
for s in "${sizes[@]}"; do args+=(put "$out/f$s" "back$s"); done
: > "$out/DONE"
ip netns exec "$RXE_VM_NETNS" timeout 600 "$nfs" --iface dp0 --server 192.0.2.1 \
  --mount-server 192.0.2.1 --pcap "$out/nfs.pcap" "${drop[@]}" \
  ls / ls sub stat sub/h cat sub/h "${args[@]}" rm f1 > "$out/nfs.txt" 2>&1 && ours=0 || ours=$?
# A second connection that does not offer SEND with invalidate (every chunk gets a LOCAL_INV),
# provokes RDMA_ERROR (a header of version 2: ERR_VERS; RDMA_MSGP: ERR_CHUNK), and is torn down
# once with calls in flight: it is made again and those calls are sent again, registered anew.
ip netns exec "$RXE_VM_NETNS" timeout 300 "$nfs" --iface dp0 --server 192.0.2.1 \
  --pcap "$out/nfs2.pcap" --no-remote-invalidate --break-after 12 "${drop[@]}" errprobe \
  get f1048583 "$out/inv" put "$out/inv" inv put "$out/DONE" DONE \
  > "$out/nfs2.txt" 2>&1 && ours2=0 || ours2=$?
# Whatever happened on our side, let the VM stop waiting.
[[ $ours2 == 0 ]] || ip netns exec "$RXE_VM_NETNS" timeout 60 "$nfs" --iface dp0 \
  --server 192.0.2.1 put "$out/DONE" DONE 2>&1 | sed 's/^/  nfs (DONE): /' || true
finish && theirs=0 || theirs=1
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
sed 's/^/  nfs: /' "$out/nfs.txt"
sed 's/^/  nfs2: /' "$out/nfs2.txt"
inv=$(awk '$1 == "INV" && $2 == $3 {print "same"}' "$out/vm.txt" | tr -d '\r')
local_inv=$(grep -o "[0-9]* local" "$out/nfs2.txt" | cut -d' ' -f1 || true)
probe=$(grep -c "errprobe: as RFC 8166 says" "$out/nfs2.txt" || true)
again=$(grep -o "reconnects [0-9]*" "$out/nfs2.txt" | cut -d' ' -f2 || true)
sums=0
for s in "${sizes[@]}"; do
  want=$(awk -v f="f$s" '$1 == "SUM" && $2 == f {print $3}' "$out/vm.txt" | tr -d '\r')
  back=$(awk -v f="f$s" '$1 == "BACK" && $2 == f {print $3}' "$out/vm.txt" | tr -d '\r')
  got=$(sha256sum < "$out/f$s" 2>/dev/null | cut -c1-64 || true)
  if [[ -n $want && $want == "$got" && $want == "$back" ]]; then sums=$((sums + 1)); else
    echo "  f$s: vm $want, read $got, written back $back"; fi
done
ts=(tshark -r "$out/nfs.pcap" --enable-heuristic rpcrdma_infiniband)
rdma=$("${ts[@]}" -Y rpcordma 2>/dev/null | wc -l || true)
wchunks=$("${ts[@]}" -Y 'rpcordma.writes_count > 0 && ip.src == 192.0.2.100' -T fields -e rpcordma.xid 2>/dev/null | wc -l || true)
rchunks=$("${ts[@]}" -Y 'rpcordma.reads_count > 0 && ip.src == 192.0.2.100' -T fields -e rpcordma.xid 2>/dev/null | wc -l || true)
echo "checksums equal: $sums/${#sizes[@]}; rpcrdma frames $rdma, calls with write chunks $wchunks, with read chunks $rchunks; without remote invalidation: file $inv, ${local_inv:-0} LOCAL_INVs; RDMA_ERROR probes answered: $probe; reconnects ${again:-0}"
if [[ $ours == 0 && $ours2 == 0 && $theirs == 0 && $sums == "${#sizes[@]}" && $wchunks -gt 0 &&
      $rchunks -gt 0 && $inv == same && ${local_inv:-0} -gt 0 && $probe == 1 && ${again:-0} == 1 ]]; then
  echo "PASS nfs interop ($mode): roce-nfs -> Linux nfsd over RDMA"
else
  echo "FAIL nfs interop ($mode): nfs=$ours/$ours2 vm=$theirs sums=$sums rpcrdma=$rdma writes=$wchunks reads=$rchunks inv=$inv local=$local_inv probe=$probe reconnects=$again"
  exit 1
fi
