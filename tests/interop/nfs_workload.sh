#!/usr/bin/env bash
# A workload on the Linux kernel client's NFSv3 mount over RDMA of roce-nfsd, and the file
# handles across a restart of the server. The mount names nothing but proto=rdma, port=20049
# and where MOUNT's kernel TCP is (mountaddr=: the RoCE address carries no kernel TCP) and
# nolock (no NLM): MOUNT's port, protocol and version come from the service's port mapper.
#   1. untar a source tree (a tarball of the project's apps/ made on the host), then rename
#      files across directories, hard-link and symlink some, take checksums of every file;
#   2. with the export still mounted, an open file descriptor and a working directory inside:
#      roce-nfsd is stopped and started again on the same export; the descriptor reads on, the
#      directory lists, the checksums are the same (the client's handles, taken before, work);
#   3. unmount, remount, the checksums again; the host's copy of the tree compared too.
#   nfs_workload.sh ROCE_NFSD   (root; exits 77 when VMs cannot run here)
set -euo pipefail
nfsd=$(realpath "$1")
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-nfsw}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
out=$(mktemp -d)
spid=
trap '[[ -n $spid ]] && kill "$spid" 2>/dev/null; rm -rf "$out"' EXIT
mkdir -p "$out/export" "$out/share"
tar -C "$here/../.." -cf "$out/share/tree.tar" apps
export RXE_VM_9P=$out/share
m=/mnt/roce
opts=vers=3,proto=rdma,port=20049,mountaddr=192.0.2.254,nolock
sums='find . -type f | sort | xargs md5sum'
boot "mkdir -p $m && ln -sf /proc/mounts /etc/mtab && rxe_wait_peer 192.0.2.254 60 &&
      retry mount.nfs 192.0.2.100:/ $m -o $opts && echo MOUNTED &&
      cd $m && tar -xf /mnt/host/tree.tar && mkdir moved &&
      mv apps/nfs/nfs_server.cc moved/ && mv apps/nfs moved/nfs-dir && ln moved/nfs_server.cc hard &&
      ln -s moved/nfs-dir/nfs3.h soft && echo lock > lockfile && mv lockfile lockfile.2 &&
      ($sums) > /tmp/sums1 && echo FILES \$(wc -l < /tmp/sums1) &&
      cd moved/nfs-dir && exec 3< $m/hard && head -c 100 <&3 > /dev/null &&
      touch /mnt/host/phase1 && n=0 && while [ ! -e /mnt/host/restarted ] && [ \$n -lt 300 ]; do sleep 1; n=\$((n+1)); done &&
      echo AFTER-RESTART && ls > /dev/null && echo CWD-OK && cat <&3 | wc -c | sed 's/^/FD-REST /' &&
      cd $m && ($sums) > /tmp/sums2 && cmp /tmp/sums1 /tmp/sums2 && echo SUMS-AFTER-RESTART-OK &&
      cd / && exec 3<&- && umount $m && retry mount.nfs 192.0.2.100:/ $m -o $opts &&
      cd $m && ($sums) > /tmp/sums3 && cmp /tmp/sums1 /tmp/sums3 && echo SUMS-AFTER-REMOUNT-OK &&
      cp /tmp/sums1 /mnt/host/sums && cd / && umount $m && echo UNMOUNTED" 1500
start_nfsd() {
  ip netns exec "$RXE_VM_NETNS" timeout 1400 "$nfsd" --iface dp0 --root "$out/export" \
    --export-options rw,no_root_squash --clients 192.0.2.0/24 --mount-address 192.0.2.254 \
    --timeout 1400 >> "$out/nfsd.txt" 2>&1 &
  spid=$!
}
start_nfsd
restarted=0
for _ in $(seq 1200); do
  if [[ -e $out/share/phase1 ]]; then
    kill -TERM "$spid"; wait "$spid" || true
    echo "---- roce-nfsd restarted" >> "$out/nfsd.txt"
    start_nfsd
    sleep 2
    touch "$out/share/restarted"
    restarted=1
    break
  fi
  kill -0 "$vmpid" 2>/dev/null || break
  sleep 1
done
finish && theirs=0 || theirs=1
kill -TERM "$spid" 2>/dev/null || true
wait "$spid" || true
spid=
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -40
grep -E "serving|restarted|nfs:|service nfs" "$out/nfsd.txt" | sed 's/^/  nfsd: /'
# The host's side: the same checksums over the export.
host_ok=0
if [[ -f $out/share/sums ]] && (cd "$out/export" && find . -type f | LC_ALL=C sort | xargs md5sum) |
   cmp -s - "$out/share/sums"; then
  host_ok=1
fi
echo "checksums on the host equal to the VM's: $host_ok"
ok=1
for w in MOUNTED SUMS-AFTER-RESTART-OK CWD-OK SUMS-AFTER-REMOUNT-OK UNMOUNTED; do
  grep -q "$w" "$out/vm.txt" || { ok=0; echo "missing: $w"; }
done
if [[ $theirs == 0 && $ok == 1 && $restarted == 1 && $host_ok == 1 ]]; then
  echo "PASS nfs workload: untar, rename, link; handles across a roce-nfsd restart; remount"
else
  echo "FAIL nfs workload: vm=$theirs checks=$ok restarted=$restarted host=$host_ok"
  exit 1
fi
