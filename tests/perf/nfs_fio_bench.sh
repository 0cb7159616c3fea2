#!/usr/bin/env bash
# fio from the Linux kernel NFS client in the rxe VM over RDMA, against the VM kernel's own nfsd
# and roce-nfsd, both INSIDE the VM and reached the same way: the client's rxe on one end of a
# veth pair, the server on the other end (the kernel's nfsd: rxe on a kernel address of that end;
# roce-nfsd: its DPDK port, net_af_packet on that end). Same kernel, same single vCPU for client
# and server, same kind of link, same client and mount options, both exports a tmpfs. roce-nfsd,
# its libraries and DPDK's af_packet, vdev and ring drivers come in over 9p.
#
# The guest's clock counts instructions (qemu -icount, FIO_ICOUNT: shift=2, 4 ns an instruction,
# idle time skipped; "off" for the host's clock): every time the guest measures (fio's IOPS and
# MB/s, the poll loop's busy time, the threads' run time) is then instructions run, whatever
# the host's load.
#
# Jobs: 4 KiB random read and write (IOPS), 1 MiB sequential read and write (MB/s), O_DIRECT,
# libaio, 16 in flight, FIO_RUNTIME seconds each (5), on a 64 MiB file; FIO_REPS rounds (3),
# each round the kernel's nfsd then roce-nfsd (a fresh process, mounted afresh); the median and
# range of each. Per job also: roce-nfsd's poll loop busy share (SIGUSR1 before and after:
# PollLoop::time_stats); and the server's CPU time per fio I/O. For roce-nfsd that is its loop's
# busy time plus its other threads' run time (/proc/PID/task/*/schedstat): an upper bound, as
# the loop counts time it was preempted mid-work as busy. For the kernel's nfsd it is its
# threads' run time: a lower bound, as rxe's work in softirq is not in it. FIO_SERVERS="roced"
# runs one server only; FIO_MOUNT_OPTS adds mount options to both; FIO_NFSD_ARGS adds flags to
# roce-nfsd's (e.g. "--max-read-inflight 4M"). The VM is qemu TCG: the
# numbers are the emulated machine's, not an RNIC's.
#   nfs_fio_bench.sh ROCE_NFSD [3|4.1]   (root; exits 77 when VMs cannot run here)
set -euo pipefail
nfsd=$(realpath "$1") vers=${2:-3} rt=${FIO_RUNTIME:-5} reps=${FIO_REPS:-3}
[[ $vers == 3 || $vers == 4.1 ]] || { echo "FAIL: version $vers: 3 or 4.1"; exit 2; }
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-fio}
export RXE_VM_MEM=${RXE_VM_MEM:-2048}
icount=${FIO_ICOUNT:-shift=2}
[[ $icount == off ]] || export RXE_VM_QEMU_ARGS="-icount $icount,sleep=off"
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/../interop/lib.sh"
interop_preflight
cache=${RXE_VM_CACHE:-/var/tmp/rxe-vm}
image_ok() {  # (no grep -q in these pipes: cpio killed by SIGPIPE would fail them)
  cpio -i --quiet --to-stdout usr/bin/nfs_vm_server < "$cache/initramfs.cpio" 2>/dev/null |
    grep -c nfsv4gracetime > /dev/null &&
    cpio -t --quiet < "$cache/initramfs.cpio" 2>/dev/null | grep -cx usr/bin/fio > /dev/null &&
    cpio -i --quiet --to-stdout etc/rxe-vm/modules.load < "$cache/initramfs.cpio" 2>/dev/null |
    grep -c /veth.ko > /dev/null
}
if ! image_ok; then
  "$here/vm/build.sh" --force > /dev/null 2>&1 || true
  image_ok || { echo "skipped: cannot build the VM image"; exit 77; }
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/share/nfsd/lib"

# roce-nfsd for the VM: the binary (without its debug sections), the shared libraries it links
# and DPDK's plugin drivers it needs (EAL loads every driver in its plugin directory; the VM's
# holds these three only, as links to the copies in lib: a driver loaded under two names would
# be two copies, and the af_packet driver would register with a vdev bus EAL never probes).
objcopy --strip-debug "$nfsd" "$out/share/nfsd/roce-nfsd"
pmds=$(ldd "$nfsd" | awk '/librte_eal/ {print $3}' | xargs strings | sed -n 's/^DPDK_PLUGIN_PATH=//p' | head -1)
[[ -n $pmds && -d $pmds ]] || pmds=$(ls -d /usr/lib/x86_64-linux-gnu/dpdk/pmds-* 2>/dev/null | head -1)
[[ -n $pmds && -f $pmds/librte_net_af_packet.so ]] ||
  { echo "skipped: DPDK's net_af_packet driver not found (dpdk package)"; exit 77; }
drivers=()
for d in net_af_packet bus_vdev mempool_ring; do
  so=$(objdump -p "$pmds/librte_$d.so" | awk '$1 == "SONAME" {print $2}')
  cp -L "$pmds/librte_$d.so" "$out/share/nfsd/lib/$so"
  drivers+=("$so")
done
ldd "$nfsd" "$pmds"/librte_{net_af_packet,bus_vdev,mempool_ring}.so |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r l; do cp -nL "$l" "$out/share/nfsd/lib/"; done

if [[ $vers == 3 ]]; then
  kopts=vers=3,proto=rdma,port=20049,mountport=20048,mountproto=tcp,mountvers=3,nolock
  ropts=vers=3,proto=rdma,port=20049,mountaddr=127.0.0.1,mountport=20050,mountproto=tcp,mountvers=3,nolock
  kexp=/srv/nfs knfs=''
else
  kopts=vers=4.1,proto=rdma,port=20049 ropts=$kopts kexp=/ knfs=v4
fi
# FIO_MOUNT_OPTS: more options for both mounts, e.g. ",rsize=262144,wsize=262144" (the kernel
# nfsd's largest; roce-nfsd offers 1 MiB).
kopts+=${FIO_MOUNT_OPTS:-} ropts+=${FIO_MOUNT_OPTS:-}
cat > "$out/share/bench.sh" <<SH
. /etc/rxe-vm/lib.sh
IP=ip.full
k=/mnt/knfs m=/mnt/roce
fail() { echo "BENCH-FAIL \$*"; exit 1; }
# The links. vc1-vs1: the client's rxe1 on vc1 (198.18.1.1), the kernel nfsd's rxe2 on vs1
# (198.18.1.2). Both addresses are this kernel's own, so locally sent packets between them are
# routed out of their veth (rules ahead of the local table), not through the loopback; received
# ones are still delivered locally. vc2-vs2: the client's rxe3 on vc2 (198.18.2.1), roce-nfsd's
# net_af_packet port on vs2 (198.18.2.2; vs2 has no kernel address).
for p in 1 2; do \$IP link add vc\$p type veth peer name vs\$p || fail veth; done
for l in vc1 vs1 vc2 vs2; do
  \$IP link set \$l up
  echo 1 > /proc/sys/net/ipv6/conf/\$l/disable_ipv6
  echo 0 > /proc/sys/net/ipv4/conf/\$l/rp_filter
  echo 1 > /proc/sys/net/ipv4/conf/\$l/accept_local
done
echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter
# A veth hands every frame to the one CPU's backlog, 1000 frames by default: a burst of RDMA
# WRITEs (1 MiB is 1024 frames) from either server would overflow it and be dropped. A NIC would
# have a ring of its own; give the backlog room for a few bursts. Kernel messages (rxe's "Failed
# sending ACK") stay off the console, which costs the emulator dearly.
echo 16384 > /proc/sys/net/core/netdev_max_backlog
echo 1 > /proc/sys/kernel/printk
echo 0 > /proc/sys/net/ipv4/ip_forward
\$IP addr add 198.18.1.1/32 dev vc1
\$IP addr add 198.18.1.2/32 dev vs1
\$IP addr add 198.18.2.1/24 dev vc2
\$IP route add 198.18.1.2/32 dev vc1 src 198.18.1.1 table 101
\$IP route add 198.18.1.1/32 dev vs1 src 198.18.1.2 table 102
# iif lo: what this kernel sends (rdma_cm resolving the server, rxe's route per packet); oif:
# rdma_cm's check of the route back to the client of a connection request.
\$IP rule add pref 10 iif lo to 198.18.1.2 lookup 101
\$IP rule add pref 11 iif lo to 198.18.1.1 lookup 102
\$IP rule add pref 12 oif vc1 to 198.18.1.2 lookup 101
\$IP rule add pref 13 oif vs1 to 198.18.1.1 lookup 102
\$IP rule add pref 100 lookup local
\$IP rule del pref 0
rdma link add rxe1 type rxe netdev vc1 && rdma link add rxe2 type rxe netdev vs1 &&
  rdma link add rxe3 type rxe netdev vc2 || fail rxe
ping -c 1 -W 5 198.18.1.2 > /dev/null || fail "no route over vc1-vs1"

# The kernel's nfsd.
mkdir -p \$k \$m /srv/roce && ln -sf /proc/mounts /etc/mtab
mount -t tmpfs -o size=400m tmpfs /srv/roce
nfs_vm_server /srv/nfs $knfs > /dev/null || fail nfs_vm_server
knfsd=\$(for c in /proc/[0-9]*/comm; do [ "\$(cat \$c 2>/dev/null)" = nfsd ] && { p=\${c%/comm}; echo \${p#/proc/}; }; done)
echo "kernel nfsd threads:" \$knfsd

# roce-nfsd from the share; DPDK's plugin directory holds the three drivers it needs (EAL refuses
# a plugin directory below a world-writable one, such as /tmp).
mkdir -p /opt $pmds /var/run && cp -r /mnt/host/nfsd /opt/roce-nfsd || fail "roce-nfsd's files"
for so in ${drivers[*]}; do ln -s /opt/roce-nfsd/lib/\$so $pmds/\${so%.so.*}.so; done

ns_sum() { awk '{s += \$1} END {printf "%.0f", s}'; }
# worker_ns: the run time of the server's threads (roce-nfsd: all but the poll loop's, which
# never sleeps; kernel: the nfsd threads).
worker_ns() {
  if [ \$1 = roced ]; then
    for t in /proc/\$rpid/task/*; do [ \${t##*/} = \$rpid ] || cat \$t/schedstat; done | ns_sum
  else
    for p in \$knfsd; do cat /proc/\$p/schedstat; done | ns_sum
  fi
}
# cpu_ticks: the vCPU's idle and all ticks (/proc/stat): whether it had time to spare.
cpu_ticks() { awk '\$1 == "cpu" {for (i = 2; i <= NF; i++) a += \$i; print \$5 + \$6, a}' /proc/stat; }
# loop_ns: roce-nfsd's poll loop "busy idle" in ns since it started (SIGUSR1: a line in its log).
loop_ns() {
  [ \$1 = roced ] || { echo "0 0"; return; }
  n0=\$(grep -c "poll loop:" /tmp/roced.log)
  kill -USR1 \$rpid
  i=0; while [ \$(grep -c "poll loop:" /tmp/roced.log) -le \$n0 ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done
  grep "poll loop:" /tmp/roced.log | tail -1 | awk '{print \$5, \$8}'
}
start_roced() {
  env LD_LIBRARY_PATH=/opt/roce-nfsd/lib /opt/roce-nfsd/roce-nfsd --iface vs2 --ip 198.18.2.2 \
    --root /srv/roce --export / --export-options rw,no_root_squash --clients 198.18.0.0/15,127.0.0.0/8 \
    --mount-address 127.0.0.1 --mount-port 20050 --portmap-port 0 --state-dir /tmp/state.\$1 ${FIO_NFSD_ARGS:-} \
    > /tmp/roced.log 2>&1 &
  rpid=\$!
  i=0; until grep -q "serving" /tmp/roced.log 2> /dev/null; do
    kill -0 \$rpid 2> /dev/null && [ \$i -lt 120 ] || { cat /tmp/roced.log; fail "roce-nfsd did not start"; }
    sleep 1; i=\$((i+1))
  done
}
stop_roced() {
  kill -TERM \$rpid; wait \$rpid
  { grep -E "^(nfs|rpcrdma|nfs4|rpcrdma read window): " /tmp/roced.log
    grep "^roce-nfsd: port: " /tmp/roced.log | tail -1; } | sed "s/^/ROCED-REPORT \$1 /"
  cat /tmp/roced.log >> /mnt/host/roced.log
}
for r in \$(seq $reps); do
  for srv in ${FIO_SERVERS:-kernel roced}; do
    d=\$k
    if [ \$srv = roced ]; then
      d=\$m; start_roced \$r
      n=0; until timeout 60 mount.nfs 198.18.2.2:/ \$m -o $ropts; do n=\$((n+1)); [ \$n -lt 60 ] || fail "mount roced"; sleep 1; done
    else
      n=0; until timeout 60 mount.nfs 198.18.1.2:$kexp \$k -o $kopts; do n=\$((n+1)); [ \$n -lt 5 ] || fail "mount kernel"; sleep 1; done
    fi
    echo "round \$r \$srv: mounted \$(date)"; [ \$r = 1 ] && grep -E " (\$k|\$m) " /proc/mounts
    [ -e \$d/bench ] || fio --name=layout --filename=\$d/bench --size=64m --rw=write --bs=1m --direct=1 > /dev/null || fail layout
    for job in randread4k randwrite4k read1m write1m; do
      case \$job in
        randread4k) a="--rw=randread --bs=4k" ;; randwrite4k) a="--rw=randwrite --bs=4k" ;;
        read1m) a="--rw=read --bs=1m" ;; write1m) a="--rw=write --bs=1m" ;;
      esac
      l0=\$(loop_ns \$srv) w0=\$(worker_ns \$srv) c0=\$(cpu_ticks)
      fio --name=\$job --filename=\$d/bench --size=64m \$a --ioengine=libaio --iodepth=16 \
          --direct=1 --time_based --runtime=$rt --output-format=terse --terse-version=3 \
          > /tmp/\$job.out 2>&1 || { cat /tmp/\$job.out; fail "fio \$job"; }
      l1=\$(loop_ns \$srv) w1=\$(worker_ns \$srv) c1=\$(cpu_ticks)
      # terse v3: 5 error, 6/7/8 read KiB, KiB/s, IOPS, 47/48/49 the same for writes
      awk -F';' -v s=\$srv -v r=\$r -v j=\$job -v l="\$l0 \$l1" -v w="\$w0 \$w1" -v c="\$c0 \$c1" \
        '{split(l, L, " "); split(w, W, " "); split(c, C, " ");
          print "FIO", s, r, j, \$5, \$6, \$7, \$8, \$47, \$48, \$49, L[3] - L[1], L[3] + L[4] - L[1] - L[2], W[2] - W[1], C[3] - C[1], C[4] - C[2]}' /tmp/\$job.out
    done
    umount \$d || fail "umount \$d"
    [ \$srv = roced ] && stop_roced \$r
  done
done
# What crossed each link, what was dropped on the way (the backlog: /proc/net/softnet_stat's
# second column), and what rxe counted (its retries, sequence errors).
for l in vc1 vc2; do
  st=/sys/class/net/\$l/statistics
  echo "LINK \$l: \$(cat \$st/tx_bytes) bytes sent, \$(cat \$st/rx_bytes) received"
done
echo "LINK backlog drops: \$(awk '{print \$2}' /proc/net/softnet_stat | tr '\\n' ' ')(hex)"
for d in rxe1 rxe2 rxe3; do
  echo "LINK \$d:" \$(cd /sys/class/infiniband/\$d/ports/1/hw_counters && for c in *; do v=\$(cat \$c); [ "\$v" = 0 ] || echo "\$c=\$v"; done)
done
echo BENCH-DONE
SH
export RXE_VM_9P=$out/share
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
boot "sh /mnt/host/bench.sh" $((900 + reps * 8 * (rt + 40)))
finish && theirs=0 || theirs=1
load1=$(cut -d' ' -f1-3 /proc/loadavg)
tr -d '\r' < "$out/vm.txt" > "$out/vm.clean"
grep -vE "^(FIO|ROCED-REPORT) " "$out/vm.clean" | grep -v "^\[rxe-vm\]" | sed 's/^/  vm: /' | tail -14
# (the rpcrdma line is long: its middle is cut, its end kept: the RDMA READs and chunk buffers a
# connection had at once; then the READ window's counters and the port's frames missed)
grep -E "^ROCED-REPORT [0-9]+ (nfs|rpcrdma|nfs4|rpcrdma read window|roce-nfsd: port):" \
  "$out/vm.clean" | tail -5 |
  sed -E 's/^(.{160}).*(; at most .*)$/\1 ...\2/' | cut -c1-300 | sed 's/^/  /' || true
[[ -z ${FIO_RAW:-} ]] || grep "^FIO " "$out/vm.clean" > "$FIO_RAW"
# FIO SERVER ROUND JOB ERROR RKIB RKIB/S RIOPS WKIB WKIB/S WIOPS LOOP_BUSY_NS LOOP_ALL_NS WORKER_NS
#     IDLE_TICKS ALL_TICKS
# stat SERVER JOB WHAT: "median (min-max)" over the rounds of WHAT: val (IOPS for the 4 KiB jobs,
# MB/s for the 1 MiB ones, 0 when fio failed), busy (the poll loop's share), cpu (the server's
# CPU microseconds per fio I/O: loop busy + other threads).
stat() {
  awk -v s="$1" -v j="$2" -v w="$3" '
    $1 == "FIO" && $2 == s && $4 == j {
      rd = (j ~ /read/); bs = (j ~ /4k$/) ? 4 : 1024
      if (w == "val") v = ($5 != 0) ? 0 : (j ~ /4k$/) ? (rd ? $8 : $11) : (rd ? $7 : $10) * 1024 / 1e6
      else if (w == "busy") { if ($13 <= 0) next; v = 100 * $12 / $13 }
      else if (w == "idle") { if ($16 <= 0) next; v = 100 * $15 / $16 }
      else { ios = (rd ? $6 : $9) / bs; if (ios <= 0) next; v = ($12 + $14) / 1000 / ios }
      x[n++] = v }
    END {
      if (!n) { printf "-"; exit }
      for (i = 0; i < n; i++) for (k = i + 1; k < n; k++) if (x[k] < x[i]) { t = x[i]; x[i] = x[k]; x[k] = t }
      m = (n % 2) ? x[int(n / 2)] : (x[n / 2 - 1] + x[n / 2]) / 2
      f = (w == "busy" || w == "idle") ? "%.0f%%" : (w == "val" && j ~ /1m$/) ? "%.1f" : "%.0f"
      printf f, m; if (n > 1) { printf " (" f "-" f ")", x[0], x[n - 1] } }' "$out/vm.clean"
}
echo "fio on the kernel client's NFSv$vers mount over RDMA, both servers in the VM behind a veth" \
  "(rxe, qemu TCG, 1 vCPU, icount $icount), median (min-max) of $reps rounds, load average $load0 before," \
  "$load1 after, $(( $(date +%s) - t0 )) s:"
echo "| fio job (libaio, O_DIRECT, iodepth 16, ${rt} s) | kernel nfsd | roce-nfsd | roce-nfsd loop busy | vCPU idle: nfsd | µs per I/O: nfsd threads (at least) | roce-nfsd (at most) |"
echo "|---|---|---|---|---|---|---|"
ok=$((1 - theirs))
for j in randread4k:"4 KiB random read, IOPS" randwrite4k:"4 KiB random write, IOPS" \
         read1m:"1 MiB sequential read, MB/s" write1m:"1 MiB sequential write, MB/s"; do
  k=$(stat kernel "${j%%:*}" val) r=$(stat roced "${j%%:*}" val)
  echo "| ${j#*:} | $k | $r | $(stat roced "${j%%:*}" busy) | $(stat kernel "${j%%:*}" idle) | $(stat kernel "${j%%:*}" cpu) | $(stat roced "${j%%:*}" cpu) |"
  ran=()  # only the servers FIO_SERVERS ran must have numbers
  [[ " ${FIO_SERVERS:-kernel roced} " == *" kernel "* ]] && ran+=("$k")
  [[ " ${FIO_SERVERS:-kernel roced} " == *" roced "* ]] && ran+=("$r")
  for v in "${ran[@]}"; do awk -v v="${v%% *}" 'BEGIN {exit !(v == "-" || v + 0 == 0)}' && ok=0; done
done
if [[ $ok == 1 ]]; then
  echo "PASS nfs fio bench (NFSv$vers)"
else
  echo "FAIL nfs fio bench (NFSv$vers): vm=$theirs, a job missing or failed"
  grep -E "BENCH-FAIL|roce-nfsd:" "$out/vm.clean" | tail -5
  exit 1
fi
