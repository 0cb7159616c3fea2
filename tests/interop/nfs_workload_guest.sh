#!/bin/sh
# In the rxe VM (busybox sh), for tests/interop/nfs_workload.sh: the workload on roce-nfsd's
# export mounted on /mnt/roce, a line per step ("MOUNTED", "GIT-COMMIT <hash>", "...-OK"; the
# host script looks for them), and "FAILED: ..." with the step that failed.
#   nfs_workload_guest.sh MOUNT_OPTIONS   (the share: tree.tar, verify.fio; phase1/restarted
#                                          the handshake with the host around the restart)
. /etc/rxe-vm/lib.sh
m=/mnt/roce opts=$1
fail() { echo "FAILED: $*"; exit 1; }
sums() { (cd $m && find . -type f | sort | xargs md5sum); }
# check LABEL: every checksum as before, the repository whole with its one commit, every block
# fio wrote read back and verified.
check() {
  sums > /tmp/sums.$1 && cmp /tmp/sums1 /tmp/sums.$1 && echo SUMS-$1-OK
  (cd $m && git fsck --no-progress > /tmp/fsck.$1 2>&1 &&
   git --no-pager log --format='%H %s' > /tmp/log.$1 && cmp -s /tmp/log1 /tmp/log.$1) &&
    echo GIT-$1-OK || { cat /tmp/fsck.$1 /tmp/log.$1; }
  # fio runs in /tmp: whatever it leaves in its working directory stays out of the export.
  if (cd /tmp && fio --verify_only /mnt/host/verify.fio > /tmp/fio.$1 2>&1); then
    echo FIO-$1-OK
  else
    tail -20 /tmp/fio.$1
  fi
}
# mnt: mount, tried again while the server is not up yet (a v4 mount then says only "Protocol
# error", which retry does not know).
mnt() {
  n=0
  until mount.nfs 192.0.2.100:/ $m -o "$opts"; do
    n=$((n+1)); [ $n -lt 90 ] || return 1; sleep 1
  done
}
mkdir -p $m && ln -sf /proc/mounts /etc/mtab || fail setup
rxe_wait_peer 192.0.2.254 60 || fail "no peer"
mnt || fail mount
echo MOUNTED
case $opts in vers=3*)
  # What an administrator asks the port mapper and MOUNT (printed; the host does not judge).
  for c in "rpcinfo 192.0.2.254" "rpcinfo -p 192.0.2.254" "showmount -e 192.0.2.254" \
           "showmount -a 192.0.2.254"; do
    echo "RPC-TOOL \$ $c"; $c > /tmp/rpctool 2>&1; rc=$?
    sed 's/^/RPC-TOOL   /' /tmp/rpctool; echo "RPC-TOOL   (exit $rc)"
  done
esac
cd $m || fail cd
tar -xf /mnt/host/tree.tar || fail untar
mkdir moved && mv apps/nfs/nfs_server.cc moved/ && mv apps/nfs moved/nfs-dir &&
  ln moved/nfs_server.cc hard && ln -s moved/nfs-dir/nfs3.h soft && echo lock > lockfile &&
  mv lockfile lockfile.2 || fail "rename and link"
git init -q && git config user.name workload && git config user.email workload@example.org &&
  git config gc.auto 0 && git add -A && git commit -q -m "the untarred tree" || fail git
git --no-pager log --format='%H %s' > /tmp/log1 && echo "GIT-COMMIT $(cat /tmp/log1)" &&
  echo "GIT-COMMITTED $(git ls-files | wc -l) files" || fail "git log"
mkdir fio && (cd /tmp && fio /mnt/host/verify.fio > /tmp/fio1 2>&1) || { tail -30 /tmp/fio1; fail fio; }
grep -E "^ *(write|read): |err=" /tmp/fio1
echo FIO-WRITE-VERIFY-OK
sums > /tmp/sums1 || fail sums
echo "FILES $(wc -l < /tmp/sums1)"
cd moved/nfs-dir && exec 3< $m/hard && head -c 100 <&3 > /dev/null || fail "open fd"
touch /mnt/host/phase1
n=0
while [ ! -e /mnt/host/restarted ] && [ $n -lt 300 ]; do sleep 1; n=$((n+1)); done
echo AFTER-RESTART
ls > /dev/null && echo CWD-OK
rest=$(cat <&3 | wc -c)
echo "FD-REST $rest"
[ "$rest" -eq $(($(wc -c < $m/hard) - 100)) ] && echo FD-OK
check AFTER-RESTART
cd / && exec 3<&- && umount $m || fail umount
mnt || fail remount
check AFTER-REMOUNT
cp /tmp/sums1 /mnt/host/sums
cd / && umount $m && echo UNMOUNTED
