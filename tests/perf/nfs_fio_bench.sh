#!/usr/bin/env bash
# fio from the Linux kernel NFS client in the rxe VM over RDMA: roce-nfsd (its export in
# /dev/shm, the appliance on the VM bridge's veth, net_af_packet) against the VM kernel's own
# nfsd (a tmpfs, over rxe's loopback), the same client, mount options and jobs, in one VM run:
# 4 KiB random read and write (IOPS), 1 MiB sequential read and write (MB/s), O_DIRECT, libaio,
# 16 in flight, FIO_RUNTIME seconds each (15) after 2 s of ramp, on a 64 MiB file; and the share
# of roce-nfsd's poll loop that was busy during each job (SIGUSR1 before and after: its
# PollLoop::time_stats). The VM is qemu TCG: the numbers are the emulator's, not a NIC's.
#   nfs_fio_bench.sh ROCE_NFSD [3|4.1]   (root; exits 77 when VMs cannot run here)
set -euo pipefail
nfsd=$(realpath "$1") vers=${2:-3} rt=${FIO_RUNTIME:-15}
[[ $vers == 3 || $vers == 4.1 ]] || { echo "FAIL: version $vers: 3 or 4.1"; exit 2; }
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-fio}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/../interop/lib.sh"
interop_preflight
cache=${RXE_VM_CACHE:-/var/tmp/rxe-vm}
if ! cpio -i --quiet --to-stdout usr/bin/nfs_vm_server < "$cache/initramfs.cpio" 2>/dev/null |
     grep -q nfsv4gracetime ||
   ! cpio -t --quiet < "$cache/initramfs.cpio" 2>/dev/null | grep -qx usr/bin/fio; then
  "$here/vm/build.sh" --force > /dev/null 2>&1 || { echo "skipped: cannot build the VM image"; exit 77; }
fi
out=$(mktemp -d)
exp=$(mktemp -d /dev/shm/nfsfio.XXXXXX)
spid=
trap '[[ -n $spid ]] && kill "$spid" 2>/dev/null; rm -rf "$out" "$exp"' EXIT
mkdir -p "$out/share"
if [[ $vers == 3 ]]; then
  ropts=vers=3,proto=rdma,port=20049,mountaddr=192.0.2.254,mountport=20048,mountproto=tcp,mountvers=3,nolock
  kopts=vers=3,proto=rdma,port=20049,mountport=20048,mountproto=tcp,mountvers=3,nolock
  kexp=/srv/nfs knfs=''
else
  ropts=vers=4.1,proto=rdma,port=20049 kopts=$ropts kexp=/ knfs=v4
fi
cat > "$out/share/bench.sh" <<SH
. /etc/rxe-vm/lib.sh
k=/mnt/knfs m=/mnt/roce
# A step the host brackets (the poll loop's time): ask, and wait for its answer.
host() { echo "\$1" > /mnt/host/req; while [ ! -e /mnt/host/ack ]; do sleep 1; done; rm -f /mnt/host/ack; }
mkdir -p \$k \$m && ln -sf /proc/mounts /etc/mtab && nfs_vm_server /srv/nfs $knfs > /dev/null || exit 1
retry mount.nfs 192.0.2.1:$kexp \$k -o $kopts || exit 1
rxe_wait_peer 192.0.2.254 60 || exit 1
n=0; until mount.nfs 192.0.2.100:/ \$m -o $ropts; do n=\$((n+1)); [ \$n -lt 90 ] || exit 1; sleep 1; done
grep -E " (\$k|\$m) " /proc/mounts
for srv in kernel roced; do
  d=\$k; [ \$srv = roced ] && d=\$m
  fio --name=layout --filename=\$d/bench --size=64m --rw=write --bs=1m --direct=1 > /dev/null || exit 1
  for job in randread4k randwrite4k read1m write1m; do
    case \$job in
      randread4k) a="--rw=randread --bs=4k" ;; randwrite4k) a="--rw=randwrite --bs=4k" ;;
      read1m) a="--rw=read --bs=1m" ;; write1m) a="--rw=write --bs=1m" ;;
    esac
    host "begin \$srv \$job"
    fio --name=\$job --filename=\$d/bench --size=64m \$a --ioengine=libaio --iodepth=16 --direct=1 \
        --time_based --runtime=$rt --ramp_time=2 --output-format=terse --terse-version=3 \
        > /tmp/\$job.out 2>&1 || { cat /tmp/\$job.out; exit 1; }
    host "end \$srv \$job"
    # terse v3: 5 error, 7/8 read KiB/s and IOPS, 48/49 write KiB/s and IOPS
    awk -F';' -v s=\$srv -v j=\$job '{print "FIO", s, j, \$5, \$7, \$8, \$48, \$49}' /tmp/\$job.out
  done
done
umount \$m; umount \$k; echo BENCH-DONE
SH
export RXE_VM_9P=$out/share
load0=$(cut -d' ' -f1-3 /proc/loadavg)
boot "sh /mnt/host/bench.sh" 1800
# Not under timeout(1) (roce-nfsd's own --timeout bounds it): SIGUSR1 must reach roce-nfsd, and
# would end timeout instead.
ip netns exec "$RXE_VM_NETNS" "$nfsd" --iface dp0 --root "$exp" --export / \
  --export-options rw,no_root_squash --clients 192.0.2.0/24 --mount-address 192.0.2.254 \
  --timeout 1800 > "$out/nfsd.txt" 2>&1 &
spid=$!
# The host's half of each step: the poll loop's counters (SIGUSR1: one line in nfsd.txt), then
# the answer.
while kill -0 "$vmpid" 2>/dev/null; do
  if [[ -e $out/share/req ]]; then
    req=$(cat "$out/share/req"); rm -f "$out/share/req"
    before=$(grep -c "poll loop:" "$out/nfsd.txt" || true)
    kill -USR1 "$spid" 2>/dev/null || true
    for _ in $(seq 50); do
      [[ $(grep -c "poll loop:" "$out/nfsd.txt" || true) -gt $before ]] && break; sleep 0.1
    done
    echo "$req $(grep "poll loop:" "$out/nfsd.txt" | tail -1 | awk '{print $5, $8}')" >> "$out/loop.txt"
    touch "$out/share/ack"
  fi
  sleep 0.2
done
finish && theirs=0 || theirs=1
load1=$(cut -d' ' -f1-3 /proc/loadavg)
kill -TERM "$spid" 2>/dev/null || true
wait "$spid" || true
spid=
tr -d '\r' < "$out/vm.txt" > "$out/vm.clean"
grep -vE "^(FIO) " "$out/vm.clean" | grep -v "^\[rxe-vm\]" | sed 's/^/  vm: /' | tail -15
grep -E "serving|nfs:|rpcrdma:|poll loop" "$out/nfsd.txt" | tail -4 | sed 's/^/  nfsd: /'
# busy share of a job: (busy at its end - busy at its begin) / (all at its end - all at its begin)
share() {
  awk -v j="$1" '$2 == "roced" && $3 == j && $1 == "begin" {b0 = $4; a0 = $4 + $5}
                 $2 == "roced" && $3 == j && $1 == "end" {b1 = $4; a1 = $4 + $5}
                 END {if (a1 > a0) printf "%.0f%%", 100 * (b1 - b0) / (a1 - a0); else print "-"}' \
    "$out/loop.txt"
}
val() {  # val SERVER JOB: IOPS for the 4 KiB jobs, MB/s for the 1 MiB ones (0 when it failed)
  # FIO SERVER JOB ERROR READ_KIB/S READ_IOPS WRITE_KIB/S WRITE_IOPS
  awk -v s="$1" -v j="$2" '$1 == "FIO" && $2 == s && $3 == j {
      if ($4 != 0) v = 0
      else if (j ~ /4k$/) v = (j ~ /read/) ? $6 : $8
      else v = ((j ~ /read/) ? $5 : $7) * 1024 / 1e6
      printf (j ~ /4k$/) ? "%.0f" : "%.1f", v; found = 1 }
      END {if (!found) printf "-"}' "$out/vm.clean"
}
echo "fio on the kernel client's NFSv$vers mount over RDMA (rxe, qemu TCG), load average $load0 before, $load1 after:"
echo "| fio job (libaio, O_DIRECT, iodepth 16, ${rt} s) | kernel nfsd | roce-nfsd | roce-nfsd poll loop busy |"
echo "|---|---|---|---|"
ok=$((1 - theirs))
for j in randread4k:"4 KiB random read, IOPS" randwrite4k:"4 KiB random write, IOPS" \
         read1m:"1 MiB sequential read, MB/s" write1m:"1 MiB sequential write, MB/s"; do
  k=$(val kernel "${j%%:*}") r=$(val roced "${j%%:*}")
  echo "| ${j#*:} | $k | $r | $(share "${j%%:*}") |"
  [[ $k == - || $r == - || $r == 0 ]] && ok=0
done
if [[ $ok == 1 ]]; then
  echo "PASS nfs fio bench (NFSv$vers)"
else
  echo "FAIL nfs fio bench (NFSv$vers): vm=$theirs, a job missing or failed"
  exit 1
fi
