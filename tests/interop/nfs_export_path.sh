#!/usr/bin/env bash
# roce-nfsd without --export, as an administrator starts it: the export is --root's canonical
# host path, and the Linux kernel client in the rxe VM mounts it by that path as with knfsd.
# In one VM:
#   - NFSv4.1 mount of ADDR:<root> (through the pseudo-root), a file read and one written;
#   - NFSv3 mount of ADDR:<root>/sub (MNT of a directory beneath the export), likewise;
#   - NFSv3 mount of ADDR:/ refused (it is not the export);
#   - NFSv4.1 mount of ADDR:/ shows the pseudo-root: the export is reached by walking its path
#     (the client crosses into the export's file system) and its file reads back.
# The files the VM wrote are checked on the appliance's side.
#   nfs_export_path.sh ROCE_NFSD   (root; exits 77 when VMs cannot run here)
set -euo pipefail
nfsd=$(realpath "$1")
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-nfsx}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
interop_vm_image_with fs/nfs/nfsv4.ko
out=$(mktemp -d)
spid=
trap '[[ -n $spid ]] && kill "$spid" 2>/dev/null; rm -rf "$out"' EXIT
root=$(realpath "$out")/srv/export  # what the client names: the host path of --root
mkdir -p "$root/sub"
echo "made on the appliance" > "$root/hello.txt"
echo "beneath the export" > "$root/sub/inner.txt"
m=/mnt/roce
v3=vers=3,proto=rdma,port=20049,mountaddr=192.0.2.254,mountport=20048,mountproto=tcp,mountvers=3,nolock
boot "mkdir -p $m && ln -sf /proc/mounts /etc/mtab && rxe_wait_peer 192.0.2.254 60 &&
      n=0; until mount.nfs 192.0.2.100:$root $m -o vers=4.1,proto=rdma,port=20049; do
        n=\$((n+1)); [ \$n -lt 90 ] || exit 1; sleep 1; done && echo V4 MOUNTED after \$n retries &&
      echo V4READ \$(cat $m/hello.txt) && echo by-v4 > $m/v4.txt && ls $m && umount $m &&
      retry mount.nfs 192.0.2.100:$root/sub $m -o $v3 && echo V3 MOUNTED &&
      echo V3READ \$(cat $m/inner.txt) && echo by-v3 > $m/v3.txt && ls $m && umount $m &&
      if mount.nfs 192.0.2.100:/ $m -o $v3; then echo V3ROOT MOUNTED; umount $m; exit 1; fi &&
      echo V3ROOT REFUSED &&
      mount.nfs 192.0.2.100:/ $m -o vers=4.1,proto=rdma,port=20049 && echo V4ROOT \$(ls $m) &&
      echo V4ROOTREAD \$(cat $m$root/hello.txt) && grep ' $m' /proc/mounts &&
      umount -l $m && echo UNMOUNTED" 420
ip netns exec "$RXE_VM_NETNS" timeout 400 "$nfsd" --iface dp0 --root "$root" --state-dir "$out/state" \
  --export-options rw,no_root_squash --clients 192.0.2.0/24 --mount-address 192.0.2.254 \
  --timeout 380 > "$out/nfsd.txt" 2>&1 &
spid=$!
finish && theirs=0 || theirs=1
kill -TERM "$spid" 2>/dev/null || true
wait "$spid" || true
spid=
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
sed 's/^/  nfsd: /' "$out/nfsd.txt"
ok=1
first=${root#/}
first=${first%%/*}
grep -q "V4READ made on the appliance" "$out/vm.txt" || { ok=0; echo "v4.1 by path: no read"; }
grep -q "V3READ beneath the export" "$out/vm.txt" || { ok=0; echo "v3 beneath: no read"; }
grep -q "V3ROOT REFUSED" "$out/vm.txt" || { ok=0; echo "v3 ADDR:/ was not refused"; }
grep -q "V4ROOT $first" "$out/vm.txt" || { ok=0; echo "v4.1 ADDR:/ does not show $first"; }
grep -q "V4ROOTREAD made on the appliance" "$out/vm.txt" || { ok=0; echo "v4.1 ADDR:/: export not reached"; }
[[ $(cat "$root/v4.txt" 2>/dev/null) == by-v4 ]] || { ok=0; echo "v4.txt wrong on the appliance"; }
[[ $(cat "$root/sub/v3.txt" 2>/dev/null) == by-v3 ]] || { ok=0; echo "sub/v3.txt wrong on the appliance"; }
if [[ $theirs == 0 && $ok == 1 ]]; then
  echo "PASS nfs export path: the Linux client mounts roce-nfsd's default export by its host path (v4.1, v3 beneath it; ADDR:/ is the v4 pseudo-root, refused for v3)"
else
  echo "FAIL nfs export path: vm=$theirs checks=$ok"
  exit 1
fi
