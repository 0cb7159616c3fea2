#!/bin/sh
# In the rxe VM (busybox sh), for tests/interop/nfs4_locks.sh: client A mounts roce-nfsd with
# vers=4.1,proto=rdma,port=20049 on /mnt/a; client B (another client owner: nfs4_unique_id set
# before its mount, over roce-nfsd's TCP port, so that the kernel makes a second client) on
# /mnt/b. The host's share holds nfslock (nfs_lock_tool.c) and the handshake files: `step NAME`
# touches NAME and waits for NAME.done, which the host writes after doing its part (a host
# process's lock, a restart of roce-nfsd). Lines the host looks for: "OK-..." and "FAILED: ...".
#   nfs4_locks_guest.sh reclaim|contend
. /etc/rxe-vm/lib.sh
mode=$1 h=/mnt/host a=/mnt/a b=/mnt/b
L=$h/nfslock
fail() { echo "FAILED: $*"; exit 1; }
step() {
  touch $h/$1
  n=0
  while [ ! -e $h/$1.done ] && [ $n -lt 300 ]; do sleep 1; n=$((n+1)); done
  [ -e $h/$1.done ] || fail "the host did not answer $1"
  sed "s/^/host $1: /" $h/$1.done
}
# wait_line FILE WORD [SECONDS]: until FILE has a line starting with WORD
wait_line() {
  n=0
  while ! grep -q "^$2" $1 && [ $n -lt ${3:-60} ]; do sleep 1; n=$((n+1)); done
  grep -q "^$2" $1
}
# held LOG: the holder writing LOG has not let go yet (its release file did not exist already)
held() { grep -q ^RELEASED $1 && fail "a holder let go early ($1): its release file existed"; :; }
ms() { awk '{printf "%d\n", $1 * 1000}' /proc/uptime; }
mount_b() {
  echo second-client > /sys/module/nfs/parameters/nfs4_unique_id &&
    mount.nfs 192.0.2.254:/ $b -o vers=4.1,proto=tcp,port=20050 && echo MOUNTED-B
}
mkdir -p $a $b && ln -sf /proc/mounts /etc/mtab || fail setup
rxe_wait_peer 192.0.2.254 60 || fail "no peer"
n=0
until mount.nfs 192.0.2.100:/ $a -o vers=4.1,proto=rdma,port=20049; do
  n=$((n+1)); [ $n -lt 90 ] || fail "mount A"; sleep 1
done
echo MOUNTED-A

if [ "$mode" = reclaim ]; then
  # A process holds an fcntl write lock on `locked` and appends a line every 0.5 s (fsync'd).
  $L hold $a/locked w $h/release > /tmp/holder.log 2>&1 &
  holder=$!
  wait_line /tmp/holder.log HELD 60 || { cat /tmp/holder.log; fail "A's lock"; }
  sleep 2
  step before                      # a host process tries the same lock: refused
  before=$(grep -c ^WROTE /tmp/holder.log)
  echo "WROTE-BEFORE $before"
  t0=$(ms)
  step restart                     # roce-nfsd killed (SIGKILL), started on the same --state-dir
  t1=$(ms)
  # B, a client the server has no record of, mounts at once over TCP and tries the lock: its OPEN
  # gets GRACE (the client retries) until A has reclaimed, then its LOCK is DENIED.
  mount_b || fail "mount B"
  ($L try $b/locked w > /tmp/b.log 2>&1; echo "EXIT $?" >> /tmp/b.log) &
  bp=$!
  # The holder's next write finds the server gone: the client reconnects, its session is
  # BADSESSION, it makes a new client and session and reclaims its open and its lock.
  n=0
  while [ $(grep -c ^WROTE /tmp/holder.log) -lt $((before + 4)) ] && [ $n -lt 240 ]; do
    sleep 1; n=$((n+1))
  done
  grep -E "FAILED|WRITE-FAILED" /tmp/holder.log && fail "the holder's writes after the restart"
  [ $(grep -c ^WROTE /tmp/holder.log) -ge $((before + 4)) ] || { cat /tmp/holder.log; fail "the holder stalled"; }
  # The first write done after the new server is up (the one under way waited for the reclaim).
  first=$(awk -v t=$t1 '$1 == "WROTE" && $3 > t {print $3; exit}' /tmp/holder.log)
  echo "OK-HOLDER-WRITES-ON $((first - t0)) ms after the restart began"
  wait $bp
  cat /tmp/b.log
  grep -q ^DENIED /tmp/b.log || fail "B got the lock A holds (not reclaimed?)"
  echo "OK-B-REFUSED $(( $(awk '$1 == "DENIED" {print $NF}' /tmp/b.log) - t0 )) ms after the restart began"
  step after                       # a host process tries again: refused
  touch $h/release
  wait $holder
  cat /tmp/holder.log | grep -vE "^WROTE"
  grep -q ^DATA-OK /tmp/holder.log && echo OK-HOLDER-DATA || fail "the holder's data"
  $L try $b/locked w && echo OK-B-GOT-AFTER-RELEASE || fail "B after A's release"
  echo "B-SUM $(md5sum < $b/locked | cut -c1-32) $(grep -c . $b/locked) lines"
  umount $b && umount $a && echo UNMOUNTED
  exit 0
fi

# contend
mount_b || fail "mount B"
# 1. fcntl(F_SETLKW) across two clients: B blocks while A holds, gets it after A's unlock.
$L hold $a/c w $h/c-release > /tmp/ha.log 2>&1 &
ha=$!
wait_line /tmp/ha.log HELD 60 || { cat /tmp/ha.log; fail "A's lock"; }
$L try $b/c w && fail "B's F_SETLK got A's lock"
echo OK-B-TRY-DENIED
$L wait $b/c w > /tmp/wb.log 2>&1 &
wb=$!
sleep 6
grep -q ^GOT /tmp/wb.log && fail "B's F_SETLKW did not block"
echo OK-B-BLOCKS
touch $h/c-release
wait $ha
wait $wb
cat /tmp/ha.log /tmp/wb.log | grep -v ^WROTE
rel=$(awk '$1 == "RELEASED" {print $2}' /tmp/ha.log)
got=$(awk '$1 == "GOT" {print $2}' /tmp/wb.log)
[ -n "$got" ] || fail "B never got the lock"
echo "OK-B-GOT $((got - rel)) ms after A's unlock"
# 1b. The other way round: B (over TCP, no back channel) holds, A (over RDMA, whose session has
#    the back channel) waits in F_SETLKW. The server answered A's OPEN with MAY_NOTIFY_LOCK and
#    sends CB_NOTIFY_LOCK at B's unlock: A retries at once. Without it the Linux client polls
#    (1, 2, 4 s ...): released 5 s in, A would retry at 7 s, 2 s late. A release file of its own:
#    a holder whose file already exists lets go at once (step 4's d-release would end step 4's
#    hold before the host's attempt).
: > /tmp/hb.log
: > /tmp/wa.log
$L hold $b/c w $h/bc-release > /tmp/hb.log 2>&1 &
hb=$!
wait_line /tmp/hb.log HELD 60 || { cat /tmp/hb.log; fail "B's lock"; }
$L wait $a/c w > /tmp/wa.log 2>&1 &
wa=$!
sleep 5
held /tmp/hb.log
grep -q ^GOT /tmp/wa.log && fail "A's F_SETLKW did not block"
touch $h/bc-release
wait $hb
wait $wa
rel=$(awk '$1 == "RELEASED" {print $2}' /tmp/hb.log)
got=$(awk '$1 == "GOT" {print $2}' /tmp/wa.log)
[ -n "$got" ] || fail "A never got the lock"
echo "OK-A-GOT $((got - rel)) ms after B's unlock (CB_NOTIFY_LOCK to A)"
[ $((got - rel)) -lt 1500 ] || fail "A waited $((got - rel)) ms: no CB_NOTIFY_LOCK?"
# 2. A host process against a lock A holds, no delegation (A's open is read-write): an fcntl
#    lock on the host is refused; flock on the host is another lock domain.
$L hold $a/c w $h/n-release > /tmp/hn.log 2>&1 &
hn=$!
wait_line /tmp/hn.log HELD 60 || fail "A's second lock"
step host-vs-a-w
held /tmp/hn.log
touch $h/n-release
wait $hn
# The host holds an fcntl write lock: A's attempt is refused, then granted after the host's unlock.
step host-holds
$L try $a/c w && fail "A got the lock the host holds"
echo OK-A-DENIED-BY-HOST
# A's F_SETLKW while the host holds it: the host's lock is no v4 owner's, yet the server
#    tells A (CB_NOTIFY_LOCK) within about a second of the host's unlock (its tick asks the host
#    once a second). Without, A's client (told MAY_NOTIFY_LOCK by OPEN) sleeps up to 30 s.
#    Timed from the guest's asking the host to let go (the host sees it within 0.5 s).
: > /tmp/wh.log
$L wait $a/c w > /tmp/wh.log 2>&1 &
wh=$!
sleep 3
grep -q ^GOT /tmp/wh.log && fail "A's F_SETLKW got the lock the host holds"
t0=$(ms)
step host-unlock
wait $wh
cat /tmp/wh.log
got=$(awk '$1 == "GOT" {print $2}' /tmp/wh.log)
[ -n "$got" ] || fail "A's F_SETLKW never got the host's lock"
[ $((got - t0)) -lt 5000 ] || fail "A waited $((got - t0)) ms for the host's lock: no CB_NOTIFY_LOCK?"
echo "OK-A-WAITED-FOR-HOST $((got - t0)) ms after asking the host to unlock (CB_NOTIFY_LOCK to A)"
$L try $a/c w && echo OK-A-GOT-AFTER-HOST || fail "A after the host's unlock"
# 3. Without a delegation: A's flock(LOCK_EX) on a read-write open; the host's read lock, its
#    flock, its write lock.
$L hold $a/e x $h/e-release > /tmp/he.log 2>&1 &
he=$!
if wait_line /tmp/he.log HELD 60; then
  step host-vs-a-nodeleg
else
  echo "NOT-HELD: A's flock on a read-write open"; cat /tmp/he.log
fi
held /tmp/he.log
touch $h/e-release
wait $he
# 4. With a read delegation: A reads `d` (an open for reading: a read delegation), then holds
#    it open read-only with an fcntl read lock (flock(LOCK_EX) on a read-only open is EBADF on
#    Linux's v4 client, whatever the server), which the client keeps to itself while it holds the
#    delegation; the host's read lock (no lease break), its flock, its write lock (its open for
#    writing breaks the lease: the delegation is recalled, the client sends its lock first).
cat $a/d > /dev/null
$L hold $a/d r $h/d-release > /tmp/hd.log 2>&1 &
hd=$!
if wait_line /tmp/hd.log HELD 30; then
  step host-vs-a-deleg
else
  echo "NOT-HELD: A's read lock under a read delegation"; cat /tmp/hd.log
fi
held /tmp/hd.log
touch $h/d-release
wait $hd
# 5. flock(LOCK_EX) on a read-only open (what util-linux flock(1) tries first, then read-write).
$L try $a/e f
umount $b && umount $a && echo UNMOUNTED
