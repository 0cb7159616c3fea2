#!/usr/bin/env bash
# pjdfstest, the POSIX file system suite, on the Linux kernel client's mount over RDMA of
# roce-nfsd's export, and of the VM kernel's own nfsd (the reference, over rxe's loopback), in
# one VM run, NFSv3 (mountaddr, nolock) or NFSv4.1 (vers=4.1,proto=rdma,port=20049 alone). Every
# assertion the kernel's server passes, roced's must pass too.
#   nfs_pjdfstest.sh ROCE_NFSD [3|4.1]   (root; PJDFSTEST_DIR: a pjdfstest checkout with its
#                                 pjdfstest program built statically, e.g.
#                                 autoreconf -ifs && ./configure LDFLAGS=-static && make)
# Exits 77 when VMs cannot run here or PJDFSTEST_DIR is not set or not built.
# PJDFSTEST_ONLY="chmod rename/00.t": only those directories and files of the suite;
# PJDFSTEST_SKIP="rename/09.t chown/00.t": all but those files.
set -euo pipefail
nfsd=$(realpath "$1") vers=${2:-3}
[[ $vers == 3 || $vers == 4.1 ]] || { echo "FAIL: version $vers: 3 or 4.1"; exit 2; }
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-pjd$([[ $vers == 4.1 ]] && echo 4)}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
pjd=${PJDFSTEST_DIR:-}
if [[ -z $pjd || ! -x $pjd/pjdfstest || ! -f $pjd/tests/misc.sh ]]; then
  echo "skipped: PJDFSTEST_DIR does not name a pjdfstest checkout with pjdfstest built" \
       "(git clone https://github.com/pjd/pjdfstest; autoreconf -ifs; ./configure LDFLAGS=-static; make)"
  exit 77
fi
if ! file "$pjd/pjdfstest" | grep -q "statically linked"; then
  echo "skipped: $pjd/pjdfstest must be linked statically (./configure LDFLAGS=-static) to run in the VM"
  exit 77
fi
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
cache=${RXE_VM_CACHE:-/var/tmp/rxe-vm}
# An image whose nfs_vm_server predates its v4 option (image.d/nfs.sh): build it again.
if ! cpio -i --quiet --to-stdout usr/bin/nfs_vm_server < "$cache/initramfs.cpio" 2>/dev/null |
     grep -q nfsv4gracetime; then
  "$here/vm/build.sh" --force > /dev/null 2>&1 || { echo "skipped: cannot build the VM image"; exit 77; }
fi
out=$(mktemp -d)
spid=
trap '[[ -n $spid ]] && kill "$spid" 2>/dev/null; rm -rf "$out"' EXIT
mkdir -p "$out/export" "$out/share/shim"
cp -r "$pjd/tests" "$out/share/tests"
cp "$pjd/pjdfstest" "$out/share/pjdfstest"
# A failed test_check says what it compared (a copy of the suite's helper; nothing else changes).
sed -i 's/^\(\s*\)echo "not ok ${ntest}"$/\1echo "not ok ${ntest} - test_check $*"/' "$out/share/tests/misc.sh"
# The suite names its files with `openssl md5`; the VM has busybox's md5sum.
cat > "$out/share/shim/openssl" <<'SH'
#!/bin/sh
md5sum | cut -d' ' -f1
SH
chmod 755 "$out/share/shim/openssl"
only=${PJDFSTEST_ONLY:-}
if [[ -n ${PJDFSTEST_SKIP:-} ]]; then
  only=$(cd "$pjd/tests" && find ${only:-.} -name '*.t' | sed 's|^\./||' | sort |
         grep -vxF -f <(tr ' ' '\n' <<< "$PJDFSTEST_SKIP" | grep .) | tr '\n' ' ')
fi
echo "$only" > "$out/share/only"
cp "$here/pjdfstest_suite.sh" "$out/share/suite.sh"
m=/mnt/roce k=/mnt/knfs
if [[ $vers == 3 ]]; then
  opts=vers=3,proto=rdma,port=20049,mountaddr=192.0.2.254,mountport=20048,mountproto=tcp,mountvers=3,nolock
  kopts=vers=3,proto=rdma,port=20049,mountport=20048,mountproto=tcp,mountvers=3,nolock
  kexp=/srv/nfs knfs='' mnt="retry mount.nfs 192.0.2.100:/ $m -o $opts"
else
  # NFSv4.1: nothing but the version and the transport; the kernel's export is its pseudo-root.
  # Tried again until roce-nfsd listens: the v4 mount says only "Protocol error" meanwhile.
  opts=vers=4.1,proto=rdma,port=20049 kopts=$opts kexp=/ knfs=v4
  mnt="{ n=0; until mount.nfs 192.0.2.100:/ $m -o $opts; do
           n=\$((n+1)); [ \$n -lt 90 ] || exit 1; sleep 1; done; }"
fi
export RXE_VM_9P=$out/share
boot "mkdir -p $m $k && ln -sf /proc/mounts /etc/mtab && nfs_vm_server /srv/nfs $knfs > /dev/null &&
      retry mount.nfs 192.0.2.1:$kexp $k -o $kopts && echo KMOUNTED &&
      rxe_wait_peer 192.0.2.254 60 && $mnt && echo MOUNTED &&
      grep -E ' ($k|$m) ' /proc/mounts &&
      /mnt/host/suite.sh $k kernel $m roced &&
      { umount $m || umount -l $m; umount $k || umount -l $k; echo UNMOUNTED; }" "${PJDFSTEST_VM_SECONDS:-5400}"
ip netns exec "$RXE_VM_NETNS" timeout "${PJDFSTEST_VM_SECONDS:-5400}" "$nfsd" --iface dp0 \
  --root "$out/export" --state-dir "$out/state" --export / --export-options rw,no_root_squash --clients 192.0.2.0/24 \
  --mount-address 192.0.2.254 --timeout "${PJDFSTEST_VM_SECONDS:-5400}" > "$out/nfsd.txt" 2>&1 &
spid=$!
finish && theirs=0 || theirs=1
kill -TERM "$spid" 2>/dev/null || true
wait "$spid" || true
spid=
tr -d '\r' < "$out/vm.txt" > "$out/vm.clean"
# PJDFSTEST_LOG=FILE keeps the VM's lines (R: per file and server, F: each failed assertion).
[[ -n ${PJDFSTEST_LOG:-} ]] && cp "$out/vm.clean" "$PJDFSTEST_LOG"
grep -vE "^(R|F) " "$out/vm.clean" | grep -v "^\[rxe-vm\]" | sed 's/^/  vm: /' | head -300 || true
tail -20 "$out/nfsd.txt" | sed 's/^/  nfsd: /'
sum() { awk -v l="$1" '$1 == "R" && $2 == l {p += $4; f += $5; n++} END {printf "%d %d %d", n, p, f}' "$out/vm.clean"; }
read -r kn kp kf <<< "$(sum kernel)"
read -r rn rp rf <<< "$(sum roced)"
echo "pjdfstest (NFSv$vers) on the kernel's nfsd over RDMA: $kn files, $kp assertions passed, $kf failed"
echo "pjdfstest (NFSv$vers) on roce-nfsd over RDMA:        $rn files, $rp assertions passed, $rf failed"
# What the kernel passes and roced fails: an assertion of a file that ran on both, failed by
# roced and not by the kernel.
awk '$1 == "F" && $2 == "kernel" {k[$3 " " $4] = 1} $1 == "F" && $2 == "roced" {r[$3 " " $4] = 1}
     $1 == "R" {ran[$2 " " $3] = $4 + $5}
     END {for (x in r) if (!(x in k)) print x}' "$out/vm.clean" | sort > "$out/worse"
awk '$1 == "F" && $2 == "kernel" {k[$3 " " $4] = 1} $1 == "F" && $2 == "roced" {r[$3 " " $4] = 1}
     END {for (x in k) if (!(x in r)) print x}' "$out/vm.clean" | sort > "$out/better"
echo "failed on roced but not on the kernel: $(wc -l < "$out/worse")"
sed 's/^/  worse: /' "$out/worse" | head -100
echo "failed on the kernel but not on roced: $(wc -l < "$out/better")"
sed 's/^/  better: /' "$out/better" | head -30
if [[ $theirs == 0 && $kn -gt 0 && $kn == "$rn" && ! -s $out/worse ]]; then
  echo "PASS nfs pjdfstest (NFSv$vers): roce-nfsd passes every assertion the kernel's nfsd passes"
else
  echo "FAIL nfs pjdfstest (NFSv$vers): vm=$theirs files kernel=$kn roced=$rn worse=$(wc -l < "$out/worse")"
  exit 1
fi
