#!/usr/bin/env bash
# NFSv4.1 locks with the Linux kernel client in the rxe VM, across the wire (not one client's own
# lock table): client A mounts roce-nfsd with vers=4.1,proto=rdma,port=20049; client B is a
# second NFSv4 client of the same VM (nfs4_unique_id set before its mount, over roce-nfsd's
# --tcp-port, so that the kernel makes a client of its own); host processes lock the exported
# file directly (Python's fcntl.lockf: POSIX locks; fcntl.flock). tests/interop/nfs_lock_tool.c
# (built static here, run in the VM) holds and contends; tests/interop/nfs4_locks_guest.sh drives
# the VM.
#   reclaim: a process on A holds an fcntl write lock and appends a line every 0.5 s (fsync'd);
#     roce-nfsd is killed (SIGKILL) and started again on the same --state-dir; A's process writes
#     on, through its descriptor (the client reclaims its open with CLAIM_PREVIOUS and its lock
#     with reclaim true, then RECLAIM_COMPLETE: each decoded by tshark in the new server's
#     capture); B, mounted right after the restart, tries F_SETLK in the grace period (its OPEN
#     answered GRACE until A has reclaimed) and is refused, a host process's lockf too, until A
#     unlocks, then B gets it; the file holds every line A wrote; the server says the grace
#     period ended early, all recorded clients back.
#   contend: B's F_SETLK refused while A holds; B's F_SETLKW blocks and gets the lock after A's
#     unlock (the delay printed: no CB_NOTIFY_LOCK to B, which has no back channel, so the client
#     polls); the other way round, A's F_SETLKW gets B's lock at once after B's unlock (the
#     server's CB_NOTIFY_LOCK over A's RDMA back channel, counted in the capture); a host process
#     against A's lock (fcntl refused; flock another domain), A against the host's (F_SETLK
#     refused; F_SETLKW gets it within 5 s of the host's unlock: the server asks the host once a
#     second and sends CB_NOTIFY_LOCK); A's flock
#     against the host's fcntl locks; and with a read delegation A holds (an fcntl read lock on a
#     read-only open, kept on the client), the host's read lock, its flock, and its write lock
#     (its open for writing recalls the delegation first: refused), printed. Each holder has a
#     release file of its own (one that exists already ends the hold at once).
# With ROCED, roced serves instead (a `kind: nfs` service on its port on the VM bridge's veth, the
# same arguments), and roced is what is killed and started again; the frames are captured on the
# bridge's side of the veth (dumpcap), one capture per run.
#   nfs4_locks.sh ROCE_NFSD reclaim|contend [ROCED]   (root; exits 77 when VMs cannot run here)
set -euo pipefail
nfsd=$(realpath "$1") mode=${2:-reclaim} roced=${3:+$(realpath "$3")}
[[ $mode == reclaim || $mode == contend ]] || { echo "mode: reclaim or contend"; exit 2; }
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-nfs4lk}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
command -v tshark > /dev/null || { echo "skipped: tshark missing"; exit 77; }
[[ -z $roced ]] || command -v dumpcap > /dev/null || { echo "skipped: dumpcap missing"; exit 77; }
out=$(mktemp -d)
spid='' hpid='' cpid='' rp=''
trap '[[ -n $spid ]] && kill "$spid" 2>/dev/null; [[ -n $hpid ]] && kill "$hpid" 2>/dev/null;
      [[ -n $cpid ]] && kill "$cpid" 2>/dev/null;
      [[ -n ${KEEP:-} ]] && echo "kept $out" || rm -rf "$out"' EXIT
mkdir -p "$out/export" "$out/share"
mkdir -m 700 "$out/state"
cc -static -O2 -o "$out/share/nfslock" "$here/nfs_lock_tool.c" 2> "$out/cc.txt" ||
  { cat "$out/cc.txt"; echo "skipped: no static C library to build nfs_lock_tool.c"; exit 77; }
cp "$here/nfs4_locks_guest.sh" "$out/share/guest.sh"
echo "made on the host" > "$out/export/d"
echo "made on the host" > "$out/export/e"
cat > "$out/hostlock.py" <<'PY'
# hostlock.py KIND FILE [UNTIL]: one non-blocking attempt by a host process on the exported file.
# KIND: w (lockf LOCK_EX, opened read-write), r (lockf LOCK_SH, read-only), f (flock LOCK_EX,
# read-only); hold (as w, then held until the file UNTIL exists).
import fcntl, os, sys, time
kind, path = sys.argv[1], sys.argv[2]
t = time.monotonic()
fd = os.open(path, os.O_RDWR if kind in ("w", "hold") else os.O_RDONLY)
opened = (time.monotonic() - t) * 1000
name = {"w": "fcntl write lock", "hold": "fcntl write lock", "r": "fcntl read lock",
        "f": "flock LOCK_EX"}[kind]
try:
    if kind == "f":
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:
        fcntl.lockf(fd, (fcntl.LOCK_SH if kind == "r" else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    res = "GOT"
except OSError as e:
    res = "DENIED (%s)" % e.strerror
print("%s %s: %s (its open took %.0f ms)" % (name, os.path.basename(path), res, opened), flush=True)
if kind == "hold" and res == "GOT":
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.2)
PY
hl() { /usr/bin/python3 "$out/hostlock.py" "$@"; }
runs=0
server=roce-nfsd
[[ -n $roced ]] && server=roced
start_nfsd() {
  runs=$((runs + 1))
  echo "---- $server run $runs" >> "$out/nfsd.txt"
  if [[ -n $roced ]]; then
    ip netns exec "$RXE_VM_NETNS" dumpcap -q -i dp0-br -w "$out/nfsd.$runs.pcap" 2> /dev/null &
    cpid=$!
    roced_on_dp0 "$roced" "nfsl$runs" "" "services:
  - kind: nfs
    port: p0
    listen_port: 20049
    listen_address: 192.0.2.254
    args: ['--root', '$out/export', '--export', '/', '--export-options', 'rw,no_root_squash',
           '--clients', '192.0.2.0/24', '--tcp-port', '20050', '--state-dir', '$out/state']"
    spid=$rp rp=
    for _ in $(seq 100); do
      grep -q "service nfs: rdma_cm port" "$out/nfsl$runs.log" && return 0
      sleep 0.1
    done
  else
    # Not under timeout(1): the kill below must reach roce-nfsd itself (--timeout ends it).
    ip netns exec "$RXE_VM_NETNS" "$nfsd" --iface dp0 --root "$out/export" --export / \
      --export-options rw,no_root_squash --clients 192.0.2.0/24 --mount-address 192.0.2.254 \
      --tcp-port 20050 --state-dir "$out/state" --timeout 860 --pcap "$out/nfsd.$runs.pcap" \
      >> "$out/nfsd.txt" 2>&1 &
    spid=$!
    for _ in $(seq 100); do
      [[ $(grep -c "roce-nfsd: serving" "$out/nfsd.txt") -ge $runs ]] && return 0
      sleep 0.1
    done
  fi
  echo "$server run $runs did not start"
}
# stop_nfsd SIGNAL: the server, its log, its capture.
stop_nfsd() {
  kill "-$1" "$spid" 2> /dev/null || true
  { wait "$spid"; } 2> /dev/null || true
  spid=
  if [[ -n $roced ]]; then
    cat "$out/nfsl$runs.log" >> "$out/nfsd.txt"
    sleep 0.5
    kill "$cpid" 2> /dev/null || true
    wait "$cpid" 2> /dev/null || true
    cpid=
  fi
}
# The host's part of each step the guest asks for (its output goes to the guest and the log).
do_before() { hl w "$out/export/locked"; }
do_after() { hl w "$out/export/locked"; }
do_restart() {
  stop_nfsd KILL
  start_nfsd
  echo "$server killed and started again (state dir: $(wc -l < "$out/state/clients" 2>/dev/null || echo 0) records)"
}
do_host-vs-a-w() { hl w "$out/export/c"; hl r "$out/export/c"; hl f "$out/export/c"; }
do_host-holds() {
  hl hold "$out/export/c" "$out/share/host-unlock" > "$out/hold.txt" &
  hpid=$!
  for _ in $(seq 50); do [[ -s $out/hold.txt ]] && break; sleep 0.1; done
  cat "$out/hold.txt"
}
do_host-unlock() { touch "$out/share/host-unlock"; wait "$hpid" || true; hpid=; echo "the host let go"; }
do_host-vs-a-deleg() { hl r "$out/export/d"; hl f "$out/export/d"; hl w "$out/export/d"; }
do_host-vs-a-nodeleg() { hl r "$out/export/e"; hl f "$out/export/e"; hl w "$out/export/e"; }
if [[ $mode == reclaim ]]; then
  steps=(before restart after)
else
  steps=(host-vs-a-w host-holds host-unlock host-vs-a-nodeleg host-vs-a-deleg)
fi
export RXE_VM_9P=$out/share
boot "sh /mnt/host/guest.sh $mode" 900
start_nfsd
for s in "${steps[@]}"; do
  while [[ ! -e $out/share/$s ]] && kill -0 "$vmpid" 2>/dev/null; do sleep 0.5; done
  [[ -e $out/share/$s ]] || break
  "do_$s" > "$out/share/$s.tmp" 2>&1 || true
  sed "s/^/  host $s: /" "$out/share/$s.tmp"
  mv "$out/share/$s.tmp" "$out/share/$s.done"
done
finish && theirs=0 || theirs=1
stop_nfsd TERM
grep -v "^\[rxe-vm\]" "$out/vm.txt" | grep -v "^WROTE" | sed 's/^/  vm: /'
grep -vE "^(roce-nfsd: poll|procedures)" "$out/nfsd.txt" | sed 's/^/  nfsd: /'
ok=1
need() { grep -q "$1" "$out/vm.txt" || { ok=0; echo "missing: $1"; }; }
ts() { tshark -r "$1" --enable-heuristic rpcrdma_infiniband -o tcp.desegment_tcp_streams:TRUE "${@:2}" 2>/dev/null; }
if [[ $mode == reclaim ]]; then
  for w in MOUNTED-A OK-HOLDER-WRITES-ON MOUNTED-B OK-B-REFUSED OK-HOLDER-DATA \
           OK-B-GOT-AFTER-RELEASE UNMOUNTED; do need "$w"; done
  grep -q "host before: fcntl write lock locked: DENIED" "$out/vm.txt" || { ok=0; echo "the host got A's lock before the restart"; }
  grep -q "host after: fcntl write lock locked: DENIED" "$out/vm.txt" || { ok=0; echo "the host got A's lock after the restart"; }
  # Every line A wrote is in the file on the host, in order.
  lines=$(awk '$1 == "DATA-OK" {print $2}' "$out/vm.txt" | tr -d '\r')
  expect=$(for ((i = 1; i <= ${lines:-0}; i++)); do echo "line $i"; done)
  [[ -n $lines && $(cat "$out/export/locked") == "$expect" ]] || { ok=0; echo "the file on the host is not A's $lines lines"; }
  echo "the file on the host: $(wc -l < "$out/export/locked") lines, all A wrote in order"
  # The reclaim, decoded from the second server's capture (the client's calls, by the RDMA
  # connection and by the TCP one).
  p=$out/nfsd.2.pcap
  echo "the restarted server's capture, decoded (frame, source, NFS; retransmissions left out):"
  ts "$p" -Y 'nfs' -T fields -e frame.number -e ip.src -e _ws.col.Info | grep -v "RPC retrans" |
    head -24 | sed 's/^/  /' || true   # head ends the pipe early (pipefail)
  prev=$(ts "$p" -Y 'nfs.open.claim_type == 1 && ip.src == 192.0.2.1' | wc -l)
  lockr=$(ts "$p" -Y 'nfs.lock.reclaim == 1 && ip.src == 192.0.2.1' | wc -l)
  rc=$(ts "$p" -Y 'nfs.opcode == 58 && rpc.msgtyp == 0 && ip.src == 192.0.2.1' | wc -l)
  echo "decoded: OPEN CLAIM_PREVIOUS $prev, LOCK reclaim=true $lockr, RECLAIM_COMPLETE $rc"
  [[ $prev -ge 1 ]] || { ok=0; echo "no OPEN CLAIM_PREVIOUS in the capture"; }
  [[ $lockr -ge 1 ]] || { ok=0; echo "no LOCK with reclaim true in the capture"; }
  [[ $rc -ge 1 ]] || { ok=0; echo "no RECLAIM_COMPLETE in the capture"; }
  grep -q "grace period: 1 recorded clients may reclaim" "$out/nfsd.txt" || { ok=0; echo "no grace period began"; }
  # The restarted server's report: one grace period, over (nfs4_grace_now 0), and the GRACE
  # answers B's OPEN got while A had not reclaimed yet.
  grace=$(sed -n "/^---- $server run 2/,\$p" "$out/nfsd.txt" | grep -o "nfs4 grace:.*" || true)
  echo "the restarted server: $grace"
  [[ $grace == "nfs4 grace: 1 periods, 0 now"* ]] || { ok=0; echo "not one grace period, over"; }
  grep -q "grace period over early: all 1 recorded clients reclaimed" "$out/nfsd.txt" ||
    { ok=0; echo "the grace period did not end early"; }
  what="an fcntl lock reclaimed over RDMA after $server was killed and restarted"
else
  for w in MOUNTED-A MOUNTED-B OK-B-TRY-DENIED OK-B-BLOCKS OK-B-GOT OK-A-DENIED-BY-HOST \
           OK-A-WAITED-FOR-HOST OK-A-GOT-AFTER-HOST OK-A-GOT UNMOUNTED; do need "$w"; done
  grep -q "host host-vs-a-w: fcntl write lock c: DENIED" "$out/vm.txt" || { ok=0; echo "the host got A's write lock"; }
  grep -q "host host-vs-a-w: fcntl read lock c: DENIED" "$out/vm.txt" || { ok=0; echo "the host got a read lock under A's write lock"; }
  grep -q "host host-vs-a-nodeleg: fcntl read lock e: DENIED" "$out/vm.txt" || { ok=0; echo "the host got a read lock under A's flock"; }
  grep -q "host host-vs-a-deleg: fcntl write lock d: DENIED" "$out/vm.txt" ||
    { ok=0; echo "the host got a write lock over A's read lock (the delegation recalled)"; }
  p=$out/nfsd.1.pcap
  echo "delegations granted (OPEN replies with a read delegation): $(ts "$p" -Y 'nfs.open.delegation_type == 1' | wc -l)," \
    "CB_RECALLs: $(ts "$p" -Y 'nfs.cb.operation == 4' | wc -l)," \
    "LOCK calls: $(ts "$p" -Y 'nfs.opcode == 12 && rpc.msgtyp == 0' | wc -l)," \
    "LOCK DENIED: $(ts "$p" -Y 'nfs.opcode == 12 && nfs.nfsstat4 == 10010' | wc -l)"
  nl=$(ts "$p" -Y 'nfs.cb.operation == 13 && rpc.msgtyp == 0' | wc -l)
  echo "CB_NOTIFY_LOCKs: $nl"
  [[ $nl -ge 1 ]] || { ok=0; echo "no CB_NOTIFY_LOCK in the capture"; }
  what="two NFSv4.1 clients and host processes contend on fcntl and flock locks"
fi
if [[ $theirs == 0 && $ok == 1 ]]; then
  echo "PASS nfs4 locks ($mode, $server): $what"
else
  echo "FAIL nfs4 locks ($mode, $server): vm=$theirs checks=$ok"
  exit 1
fi
