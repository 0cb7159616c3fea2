#!/usr/bin/env bash
# A workload on the Linux kernel client's NFS mount over RDMA of roce-nfsd (or of roced hosting
# the NFS service), and the file handles across a restart of the server. NFSv3 mounts with
# nothing but proto=rdma, port=20049, where MOUNT's kernel TCP is (mountaddr=: the RoCE address
# carries no kernel TCP) and nolock (no NLM): MOUNT's port, protocol and version come from the
# service's port mapper. NFSv4.1 mounts with vers=4.1,proto=rdma,port=20049 alone.
#   1. untar a source tree (a tarball of the project's apps/ made on the host), then rename
#      files across directories, hard-link and symlink some; `git init`, `git add`, `git commit`
#      of the whole tree; fio writes with verify=crc32c, sequential and random, 4 KiB and 1 MiB
#      blocks, O_DIRECT (every block read back and checked); checksums of every file;
#   2. with the export still mounted, an open file descriptor and a working directory inside:
#      the server is stopped and started again on the same export (and, for NFSv4.1, the same
#      --state-dir: the client reclaims its open); the descriptor reads on, the directory lists,
#      the checksums are the same, `git fsck` is clean and `git log` shows the commit, fio
#      verifies every block it wrote (--verify_only): the client's handles, taken before, work;
#   3. unmount, remount, the same checks again; on the host, the export's checksums, git fsck
#      and its commit.
# NFSv3 also asks the port mapper and MOUNT what rpcinfo and showmount ask (printed, not judged).
# With ROCED, roced serves (a `kind: nfs` service on its port on the VM bridge's veth) and roced
# is what restarts.
#   nfs_workload.sh ROCE_NFSD [3|4.1] [ROCED]   (root; exits 77 when VMs cannot run here)
set -euo pipefail
nfsd=$(realpath "$1") vers=${2:-3} roced=${3:+$(realpath "$3")}
[[ $vers == 3 || $vers == 4.1 ]] || { echo "version: 3 or 4.1"; exit 2; }
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-nfsw}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
# An image without fio, git (image.d/tools.sh) or showmount (image.d/nfs.sh): build it again.
interop_vm_image_with "^usr/bin/fio$" "^usr/bin/git$" "^usr/bin/showmount$"
out=$(mktemp -d)
spid='' rp=''
trap '[[ -n $spid ]] && kill "$spid" 2>/dev/null; [[ -n $rp ]] && kill "$rp" 2>/dev/null
      [[ -n ${KEEP:-} ]] && echo "kept $out" || rm -rf "$out"' EXIT
mkdir -p "$out/export" "$out/share"
mkdir -m 700 "$out/state"
tar -C "$here/../.." -cf "$out/share/tree.tar" apps
cp "$here/nfs_workload_guest.sh" "$out/share/work.sh"
# Every block written with a crc32c header and read back (O_DIRECT: from the server); the same
# file run with --verify_only after the restart and the remount reads every block again.
cat > "$out/share/verify.fio" <<'FIO'
[global]
directory=/mnt/roce/fio
ioengine=psync
direct=1
verify=crc32c
verify_fatal=1
verify_state_save=0
stonewall
[seq4k]
rw=write
bs=4k
size=8m
filename=seq4k
[rand4k]
rw=randwrite
bs=4k
size=8m
filename=rand4k
[seq1m]
rw=write
bs=1m
size=32m
filename=seq1m
[rand1m]
rw=randwrite
bs=1m
size=32m
filename=rand1m
FIO
export RXE_VM_9P=$out/share
if [[ $vers == 3 ]]; then
  opts=vers=3,proto=rdma,port=20049,mountaddr=192.0.2.254,nolock
else
  opts=vers=4.1,proto=rdma,port=20049
fi
boot "sh /mnt/host/work.sh $opts" 1500
server=roce-nfsd
[[ -n $roced ]] && server=roced
runs=0
start_server() {
  runs=$((runs + 1))
  if [[ -n $roced ]]; then
    # roced_on_dp0 waits for the attach socket; the service says its port once it listens.
    roced_on_dp0 "$roced" "nfsw$runs" "" "services:
  - kind: nfs
    port: p0
    listen_port: 20049
    listen_address: 192.0.2.254
    args: ['--root', '$out/export', '--export', '/', '--export-options', 'rw,no_root_squash',
           '--clients', '192.0.2.0/24', '--state-dir', '$out/state', '--portmap', 'own']"
    spid=$rp rp=
    for _ in $(seq 100); do grep -q "service nfs: rdma_cm port" "$out/nfsw$runs.log" && break; sleep 0.1; done
  else
    # --portmap own: the service's own port mapper on 192.0.2.254:111 (the namespace has no
    # rpcbind; `auto` registers with an rpcbind installed on the host, which is not running here).
    ip netns exec "$RXE_VM_NETNS" "$nfsd" --iface dp0 --root "$out/export" --export / \
      --export-options rw,no_root_squash --clients 192.0.2.0/24 --mount-address 192.0.2.254 \
      --state-dir "$out/state" --portmap own --timeout 1400 >> "$out/nfsd.txt" 2>&1 &
    spid=$!
  fi
}
stop_server() {
  kill -TERM "$spid"
  wait "$spid" || true
  [[ -n $roced ]] && cat "$out/nfsw$runs.log" >> "$out/nfsd.txt"
  spid=
}
start_server
restarted=0
for _ in $(seq 1200); do
  if [[ -e $out/share/phase1 ]]; then
    stop_server
    echo "---- $server restarted" >> "$out/nfsd.txt"
    start_server
    sleep 2
    touch "$out/share/restarted"
    restarted=1
    break
  fi
  kill -0 "$vmpid" 2>/dev/null || break
  sleep 1
done
finish && theirs=0 || theirs=1
stop_server
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -90
grep -E "serving|restarted|nfs:|nfs4:|service nfs|grace" "$out/nfsd.txt" | sed 's/^/  server: /'
# The host's side: the same checksums over the export, the repository whole, its one commit the
# VM's.
host_ok=0
if [[ -f $out/share/sums ]] && (cd "$out/export" && find . -type f | LC_ALL=C sort | xargs md5sum) |
   cmp -s - "$out/share/sums"; then
  host_ok=1
fi
echo "checksums on the host equal to the VM's: $host_ok"
vm_head=$(awk '$1 == "GIT-COMMIT" {print $2}' "$out/vm.txt" | tr -d '\r')
host_head=$(git -c safe.directory='*' -C "$out/export" log --format=%H 2>/dev/null || true)
git_ok=0
git -c safe.directory='*' -C "$out/export" fsck --no-progress > "$out/fsck.txt" 2>&1 &&
  [[ -n $vm_head && $host_head == "$vm_head" ]] && git_ok=1
echo "the repository on the host: fsck clean and its commit the VM's ($vm_head): $git_ok"
ok=1
for w in MOUNTED GIT-COMMITTED FIO-WRITE-VERIFY-OK SUMS-AFTER-RESTART-OK CWD-OK FD-OK \
         GIT-AFTER-RESTART-OK FIO-AFTER-RESTART-OK SUMS-AFTER-REMOUNT-OK GIT-AFTER-REMOUNT-OK \
         FIO-AFTER-REMOUNT-OK UNMOUNTED; do
  grep -q "$w" "$out/vm.txt" || { ok=0; echo "missing: $w"; }
done
if [[ $vers == 4.1 ]]; then
  # The descriptor held open across the restart is an open the client reclaims.
  grep -q "grace period over early: all 1 recorded clients reclaimed" "$out/nfsd.txt" ||
    { ok=0; echo "the restarted server's grace period did not end with the client's reclaim"; }
fi
if [[ $theirs == 0 && $ok == 1 && $restarted == 1 && $host_ok == 1 && $git_ok == 1 ]]; then
  echo "PASS nfs workload (NFSv$vers, $server): untar, rename, link, git, fio verify; handles across a $server restart; remount"
else
  echo "FAIL nfs workload (NFSv$vers, $server): vm=$theirs checks=$ok restarted=$restarted host=$host_ok git=$git_ok"
  exit 1
fi
