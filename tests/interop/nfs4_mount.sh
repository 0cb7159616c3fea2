#!/usr/bin/env bash
# The Linux kernel's NFS client (xprtrdma) in the rxe VM mounts roce-nfsd's export with NFSv4.1
# over RDMA and nothing else (mount.nfs ADDR:/ DIR -o vers=4.1,proto=rdma,port=20049: no
# rpcbind, no MOUNT; tried again until roce-nfsd listens: the v4 mount says only "Protocol
# error" while nothing answers) and uses it: ls -l, a file made on the appliance's side read back, cp of
# 8 MiB and its checksum read back, dd, mkdir, mv across directories, ln and ln -s, a lock two
# processes contend on (flock), rm; the files the VM wrote are checked on the appliance's side.
# With "lossy", roce-nfsd drops 1% of the frames each way.
#   nfs4_mount.sh ROCE_NFSD [lossy]   (root; exits 77 when VMs cannot run here)
set -euo pipefail
nfsd=$(realpath "$1") mode=${2:-plain}
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-nfs4$([[ $mode == lossy ]] && echo l)}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
# An image without the NFSv4 client (image.d/nfs.sh before nfsv4 was in it): build it again.
interop_vm_image_with fs/nfs/nfsv4.ko
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
boot "mkdir -p $m && ln -sf /proc/mounts /etc/mtab && rxe_wait_peer 192.0.2.254 60 &&
      n=0; until mount.nfs 192.0.2.100:/ $m -o vers=4.1,proto=rdma,port=20049; do
        n=\$((n+1)); [ \$n -lt 90 ] || exit 1; sleep 1; done && echo MOUNTED after \$n retries &&
      grep ' $m ' /proc/mounts &&
      ls -l $m $m/from-host && cat $m/hello.txt &&
      echo BLOB \$(sha256sum < $m/from-host/blob | cut -c1-64) &&
      head -c 8388608 /dev/urandom > /tmp/big && echo BIG \$(sha256sum < /tmp/big | cut -c1-64) &&
      cp /tmp/big $m/big && echo BIGBACK \$(sha256sum < $m/big | cut -c1-64) &&
      dd if=/dev/zero of=$m/zeros bs=65536 count=64 2>&1 | tail -1 &&
      dd if=$m/big of=/dev/null bs=1048576 2>&1 | tail -1 &&
      mkdir $m/dir && echo small > $m/dir/s && mv $m/dir/s $m/moved && ln $m/moved $m/hard &&
      ln -s moved $m/sym && echo LINK \$(readlink $m/sym) \$(cat $m/sym) \$(stat -c %h $m/moved) &&
      ls -l $m/dir && rmdir $m/dir && rm $m/hard &&
      flock -x $m/moved -c \"flock -n -x $m/moved -c true && echo LOCK-NOT-HELD || echo LOCK-CONTENDED\" &&
      echo gone > $m/gone && rm $m/gone && ls -l $m && sync && umount $m && echo UNMOUNTED" 600
ip netns exec "$RXE_VM_NETNS" timeout 580 "$nfsd" --iface dp0 --root "$out/export" --state-dir "$out/state" --export / \
  --export-options rw,no_root_squash --clients 192.0.2.0/24 --mount-address 192.0.2.254 \
  --timeout 560 --pcap "$out/nfsd.pcap" "${drop[@]}" > "$out/nfsd.txt" 2>&1 &
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
[[ $left == "big from-host hello.txt moved sym zeros " ]] || { ok=0; echo "left in the export: $left"; }
[[ $(readlink "$out/export/sym" 2>/dev/null) == moved && $(cat "$out/export/moved" 2>/dev/null) == small ]] ||
  { ok=0; echo "sym/moved wrong on the appliance"; }
grep -q "LINK moved small 2" "$out/vm.txt" || { ok=0; echo "no LINK line: mv, ln or ln -s failed"; }
grep -q "LOCK-CONTENDED" "$out/vm.txt" || { ok=0; echo "the second flock was not refused"; }
ts=(tshark -r "$out/nfsd.pcap" --enable-heuristic rpcrdma_infiniband)
ops=$("${ts[@]}" -Y 'nfs && ip.src == 192.0.2.1' -T fields -e nfs.opcode 2>/dev/null | tr ',' '\n' |
  sort | uniq -c | sort -rn | awk '{printf "%s:%s ", $2, $1}' || true)
echo "NFSv4 operations the kernel sent (opcode:count): $ops"
if [[ $theirs == 0 && $ok == 1 ]]; then
  echo "PASS nfs4 mount ($mode): the Linux NFSv4.1 client over RDMA on roce-nfsd"
else
  echo "FAIL nfs4 mount ($mode): vm=$theirs files=$ok"
  exit 1
fi
