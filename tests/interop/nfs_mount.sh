#!/usr/bin/env bash
# The Linux kernel's NFS client (xprtrdma) in the rxe VM mounts roce-nfsd's export over RDMA
# (mount -t nfs -o vers=3,proto=rdma,port=20049; MOUNT over kernel TCP to 192.0.2.254 in the
# netns) and uses it: ls -l, a file made on the appliance's side read back, cp, dd, sha256sum,
# mkdir, rm; the files the VM wrote are checked on the appliance's side. With "lossy", roce-nfsd
# drops 1% of the frames each way.
#   nfs_mount.sh ROCE_NFSD [lossy]   (root; exits 77 when VMs cannot run here)
set -euo pipefail
nfsd=$(realpath "$1") mode=${2:-plain}
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-nfsm$([[ $mode == lossy ]] && echo l)}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
# An image built before image.d/nfs.sh came (its mtime older than the fragment's checkout) lacks
# the NFS pieces: build it again.
interop_vm_image_with usr/bin/nfs_vm_server
out=$(mktemp -d)
spid=
trap '[[ -n $spid ]] && kill "$spid" 2>/dev/null; rm -rf "$out"' EXIT
mkdir -p "$out/export/from-host"
head -c 3000000 /dev/urandom > "$out/export/from-host/blob"
echo "made on the appliance" > "$out/export/hello.txt"
host_blob=$(sha256sum < "$out/export/from-host/blob" | cut -c1-64)
drop=()
[[ $mode == lossy ]] && drop=(--tx-drop 0.01 --rx-drop 0.01)
m=/mnt/roce
opts=vers=3,proto=rdma,port=20049,mountaddr=192.0.2.254,mountport=20048,mountproto=tcp,mountvers=3,nolock
boot "mkdir -p $m && ln -sf /proc/mounts /etc/mtab && rxe_wait_peer 192.0.2.254 60 &&
      retry mount.nfs 192.0.2.100:/ $m -o $opts && echo MOUNTED &&
      ls -l $m $m/from-host && cat $m/hello.txt &&
      echo BLOB \$(sha256sum < $m/from-host/blob | cut -c1-64) &&
      head -c 8388608 /dev/urandom > /tmp/big && echo BIG \$(sha256sum < /tmp/big | cut -c1-64) &&
      cp /tmp/big $m/big && echo BIGBACK \$(sha256sum < $m/big | cut -c1-64) &&
      dd if=/dev/zero of=$m/zeros bs=65536 count=64 2>&1 | tail -1 &&
      dd if=$m/big of=/dev/null bs=1048576 2>&1 | tail -1 &&
      mkdir $m/dir && echo small > $m/dir/s && ls -l $m/dir && rm $m/dir/s && rmdir $m/dir &&
      echo gone > $m/gone && rm $m/gone && ls -l $m && sync && umount $m && echo UNMOUNTED" 600
ip netns exec "$RXE_VM_NETNS" timeout 580 "$nfsd" --iface dp0 --root "$out/export" --state-dir "$out/state" --export / \
  --export-options rw,no_root_squash --clients 192.0.2.0/24 --mount-address 192.0.2.254 --timeout 560 --pcap "$out/nfsd.pcap" "${drop[@]}" \
  > "$out/nfsd.txt" 2>&1 &
spid=$!
finish && theirs=0 || theirs=1
kill -TERM "$spid" 2>/dev/null || true
wait "$spid" || true
spid=
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
sed 's/^/  nfsd: /' "$out/nfsd.txt"
big=$(awk '$1 == "BIG" {print $2}' "$out/vm.txt" | tr -d '\r')
bigback=$(awk '$1 == "BIGBACK" {print $2}' "$out/vm.txt" | tr -d '\r')
blob=$(awk '$1 == "BLOB" {print $2}' "$out/vm.txt" | tr -d '\r')
ours=$(sha256sum < "$out/export/big" 2>/dev/null | cut -c1-64 || true)
zeros=$(stat -c %s "$out/export/zeros" 2>/dev/null || echo 0)
left=$(ls "$out/export" | tr '\n' ' ')
ok=1
[[ -n $big && $big == "$bigback" && $big == "$ours" ]] || { ok=0; echo "big: vm $big, read back $bigback, appliance $ours"; }
[[ $blob == "$host_blob" ]] || { ok=0; echo "blob: vm read $blob, appliance has $host_blob"; }
[[ $zeros == 4194304 ]] || { ok=0; echo "zeros: $zeros bytes on the appliance"; }
[[ $left == "big from-host hello.txt zeros " ]] || { ok=0; echo "left in the export: $left"; }
ts=(tshark -r "$out/nfsd.pcap" --enable-heuristic rpcrdma_infiniband)
rchunks=$("${ts[@]}" -Y 'rpcordma.reads_count > 0 && ip.src == 192.0.2.1' 2>/dev/null | wc -l || true)
wchunks=$("${ts[@]}" -Y 'rpcordma.writes_count > 0 && ip.src == 192.0.2.1' 2>/dev/null | wc -l || true)
echo "kernel calls with read chunks $rchunks, with write chunks $wchunks"
if [[ $theirs == 0 && $ok == 1 && $rchunks -gt 0 && $wchunks -gt 0 ]]; then
  echo "PASS nfs mount ($mode): the Linux NFS client over RDMA on roce-nfsd"
else
  echo "FAIL nfs mount ($mode): vm=$theirs files=$ok reads=$rchunks writes=$wchunks"
  exit 1
fi
