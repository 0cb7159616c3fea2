#!/usr/bin/env bash
# The NFS service and the host's port mapper (review17 item 10), against Debian's rpcbind and
# rpcinfo as real peers, in a network and mount namespace of the test's own (its own loopback,
# port 111 and /run: the host's rpcbind, if any, is not touched):
#   1. rpcbind runs on 111: roce-nfsd (--portmap auto, the default) finds the port taken and
#      registers MOUNT v3/tcp and NFS v3/rdma with it over its local socket; `rpcinfo -p` lists
#      mountd, `rpcinfo` (RPCBIND v4 DUMP) lists NFS on netid rdma at the RoCE address's
#      universal address; at exit roce-nfsd unregisters both.
#      A host mountd that replaced roce-nfsd's MOUNT entry while it ran (its UNSET and SET at
#      start) keeps it after roce-nfsd stops (review31a-4: rpcbind's UNSET takes any address).
#      With a host mountd registered first, `--portmap register` refuses to start with a clear
#      error and `--portmap auto` says so, registers NFS alone and leaves mountd's entry
#      (review31u-N3).
#   2. no rpcbind running, --portmap own: roce-nfsd answers as the port mapper itself;
#      `rpcinfo` (v4 DUMP) and `rpcinfo -p` (PMAP v2 DUMP) list its programs. An rpcbind started
#      after it (its local socket) is registered with too.
#   2b. no rpcbind running but one installed, --portmap auto (review19-user 2): roce-nfsd leaves
#      port 111 alone and registers once rpcbind starts, which then has IPv4 111 (before, auto
#      took 127.0.0.1:111 itself and the later rpcbind lost all of IPv4 111).
#   3. rpcbind started after roce-nfsd --portmap register: registered once it answers
#      (review31u-N2: tried again once a second for --rpcbind-wait seconds).
# roce-nfsd runs on a memif port with no peer (MOUNT and the port mapper are kernel TCP).
#   nfs_rpcbind.sh ROCE_NFSD
set -euo pipefail
nfsd=$(realpath "$1")
rpcb_call=$(dirname "$(realpath "$0")")/rpcbind_call.py
if [[ ! -x /usr/sbin/rpcbind || ! -x /usr/sbin/rpcinfo ]]; then
  echo "SKIP: Debian's rpcbind is not installed (scripts/install-deps.sh)"; exit 77
fi
if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root (network and mount namespaces, port 111)"; exit 77
fi
if [[ -z ${NFS_RPCBIND_INNER:-} ]]; then
  work=$(mktemp -d /tmp/nfs-rpcbind-XXXXXX)
  trap 'rm -rf "$work"' EXIT
  # A private /run (rpcbind's socket, lock and state) and a private network (its port 111).
  NFS_RPCBIND_INNER=1 WORK=$work unshare --net --mount --propagation private "$0" "$@"
  exit $?
fi
work=$WORK
mount -t tmpfs -o mode=0755 tmpfs /run
ip link set lo up
sysctl -qw net.ipv4.ip_forward=0
mkdir "$work/export"
mport=20048
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_log() {  # LOG PATTERN
  for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  sed 's/^/log: /' "$1"; echo "FAIL: no '$2' in $1"; exit 1
}
nfsd_run() {  # LOG ARGS...: started, not waited for
  local log=$1
  shift
  rm -f "$work/memif.sock"  # a killed server's
  "$nfsd" --memif "$work/memif.sock" --ip 192.0.2.121 --mac 02:00:5e:00:10:01 \
    --root "$work/export" --export-options rw,no_root_squash --mount-address 127.0.0.1 \
    --mount-port "$mport" --state-dir "$work/state" --timeout 60 "$@" > "$log" 2>&1 &
  nfsd_pid=$!
  pids+=("$nfsd_pid")
}
nfsd_start() {  # LOG ARGS...
  nfsd_run "$@"
  wait_log "$1" "^roce-nfsd: serving"
}
rpcbind_start() {
  /usr/sbin/rpcbind -f -w > "$work/rpcbind.log" 2>&1 &
  rpcbind_pid=$!
  pids+=("$rpcbind_pid")
  for _ in $(seq 100); do [[ -S /run/rpcbind.sock ]] && "$rpcb_call" unset 1 1 x y > /dev/null 2>&1 && break; sleep 0.1; done
}

# --- 1. the host's rpcbind on 111: roce-nfsd registers with it ---
rpcbind_start
rpcinfo -p 127.0.0.1 > /dev/null || { cat "$work/rpcbind.log"; echo "FAIL: rpcbind did not start"; exit 1; }
nfsd_start "$work/nfsd1.txt"
wait_log "$work/nfsd1.txt" "registered with the host's rpcbind: program 100003"
rpcinfo -p 127.0.0.1 > "$work/pmap.txt"
rpcinfo 127.0.0.1 > "$work/rpcb.txt"
sed 's/^/rpcinfo -p: /' "$work/pmap.txt"
sed 's/^/rpcinfo: /' "$work/rpcb.txt"
grep -Eq "^ *100005 +3 +tcp +$mport " "$work/pmap.txt" ||
  { cat "$work/nfsd1.txt"; echo "FAIL: rpcinfo -p does not list MOUNT v3/tcp on $mport"; exit 1; }
# 20049 = 78 * 256 + 81
grep -Eq "^ *100003 +3 +rdma +192\.0\.2\.121\.78\.81 " "$work/rpcb.txt" ||
  { cat "$work/nfsd1.txt"; echo "FAIL: rpcinfo does not list NFS v3 on rdma at 192.0.2.121:20049"; exit 1; }
grep -q "the host's rpcbind answers" "$work/nfsd1.txt" || { cat "$work/nfsd1.txt"; echo "FAIL: auto did not say why it registers"; exit 1; }
kill -INT "$nfsd_pid"
wait "$nfsd_pid" || true
rpcinfo 127.0.0.1 > "$work/rpcb-after.txt"
if grep -Eq "^ *10000[35] " "$work/rpcb-after.txt"; then
  cat "$work/rpcb-after.txt"; echo "FAIL: roce-nfsd's registrations are left after it stopped"; exit 1
fi
echo "ok: registered with rpcbind and unregistered at exit"
# A killed server leaves its entries; the next one at the same address replaces them.
nfsd_start "$work/nfsd2.txt"
wait_log "$work/nfsd2.txt" "registered with the host's rpcbind: program 100003"
kill -9 "$nfsd_pid"
wait "$nfsd_pid" 2>/dev/null || true
nfsd_start "$work/nfsd3.txt"
wait_log "$work/nfsd3.txt" "registered with the host's rpcbind: program 100003"
kill -INT "$nfsd_pid"
wait "$nfsd_pid" || true
echo "ok: a killed server's entries replaced by the next"

# A host mountd (re)starting while roce-nfsd runs replaces its MOUNT entry (UNSET, SET at its
# own address): roce-nfsd, stopping, takes away its NFS entry and leaves mountd's.
nfsd_start "$work/nfsd5.txt"
wait_log "$work/nfsd5.txt" "registered with the host's rpcbind: program 100003"
"$rpcb_call" unset 100005 3 tcp "" > /dev/null
[[ $("$rpcb_call" set 100005 3 tcp 0.0.0.0.3.233) == true ]] || { echo "FAIL: cannot register the host mountd's entry"; exit 1; }
kill -INT "$nfsd_pid"
wait "$nfsd_pid" || true
rpcinfo 127.0.0.1 > "$work/rpcb-mountd.txt"
grep -Eq "^ *100005 +3 +tcp +0\.0\.0\.0\.3\.233 " "$work/rpcb-mountd.txt" ||
  { cat "$work/rpcb-mountd.txt" "$work/nfsd5.txt"; echo "FAIL: roce-nfsd took away the host mountd's entry at its stop"; exit 1; }
if grep -Eq "^ *100003 " "$work/rpcb-mountd.txt"; then
  cat "$work/rpcb-mountd.txt"; echo "FAIL: roce-nfsd's NFS entry left after it stopped"; exit 1
fi
grep -q "100005 version 3 tcp alone" "$work/nfsd5.txt" || { cat "$work/nfsd5.txt"; echo "FAIL: not said that mountd's entry was left"; exit 1; }
echo "ok: a host mountd's entry survives roce-nfsd's stop"

# The host mountd registered first: register refuses to start, auto warns and goes on.
nfsd_run "$work/nfsd6.txt" --portmap register
status=0
wait "$nfsd_pid" || status=$?
[[ $status != 0 ]] || { cat "$work/nfsd6.txt"; echo "FAIL: --portmap register started over a host mountd"; exit 1; }
grep -q "portmap register: the host's rpcbind serves another server's: MOUNT v3/tcp is registered at 0.0.0.0.3.233" "$work/nfsd6.txt" ||
  { cat "$work/nfsd6.txt"; echo "FAIL: no clear error for the host mountd under --portmap register"; exit 1; }
sed 's/^/register over mountd: /' "$work/nfsd6.txt" | grep -i "mountd"
nfsd_start "$work/nfsd7.txt"
wait_log "$work/nfsd7.txt" "registered with the host's rpcbind: program 100003"
grep -q "portmap auto: the host's rpcbind serves another server's: MOUNT v3/tcp" "$work/nfsd7.txt" ||
  { cat "$work/nfsd7.txt"; echo "FAIL: auto did not say a host mountd holds MOUNT"; exit 1; }
kill -INT "$nfsd_pid"
wait "$nfsd_pid" || true
rpcinfo 127.0.0.1 > "$work/rpcb-auto.txt"
grep -Eq "^ *100005 +3 +tcp +0\.0\.0\.0\.3\.233 " "$work/rpcb-auto.txt" ||
  { cat "$work/rpcb-auto.txt"; echo "FAIL: the host mountd's entry went"; exit 1; }
echo "ok: a host mountd registered first: register refuses, auto warns"
kill "$rpcbind_pid"
wait "$rpcbind_pid" 2>/dev/null || true
rm -f /run/rpcbind.sock

# --- 2. no rpcbind, --portmap own: roce-nfsd is the port mapper ---
nfsd_start "$work/nfsd4.txt" --portmap own
for _ in $(seq 50); do rpcinfo 127.0.0.1 > "$work/own.txt" 2>&1 && break; sleep 0.1; done
rpcinfo -p 127.0.0.1 > "$work/own-pmap.txt" 2>&1 || true
sed 's/^/rpcinfo (own): /' "$work/own.txt"
sed 's/^/rpcinfo -p (own): /' "$work/own-pmap.txt"
grep -Eq "^ *100003 +3 +rdma +192\.0\.2\.121\.78\.81 " "$work/own.txt" ||
  { cat "$work/nfsd4.txt"; echo "FAIL: rpcinfo (RPCBIND v4 DUMP) against roce-nfsd's port mapper"; exit 1; }
grep -Eq "^ *100005 +3 +tcp +$mport " "$work/own-pmap.txt" ||
  { cat "$work/nfsd4.txt"; echo "FAIL: rpcinfo -p against roce-nfsd's port mapper"; exit 1; }
grep -q "portmap own: answering as the port mapper" "$work/nfsd4.txt" ||
  { cat "$work/nfsd4.txt"; echo "FAIL: own did not say why"; exit 1; }
# rpcbind comes up after it (its TCP and UDP 111 on 127.0.0.1 are roce-nfsd's now; its local
# socket answers): roce-nfsd registers with it too.
rpcbind_start
wait_log "$work/nfsd4.txt" "registering with it too"
wait_log "$work/nfsd4.txt" "registered with the host's rpcbind: program 100003"
kill -INT "$nfsd_pid"
wait "$nfsd_pid" || true
echo "ok: own port mapper, and an rpcbind started later registered with"
kill "$rpcbind_pid"
wait "$rpcbind_pid" 2>/dev/null || true
rm -f /run/rpcbind.sock

# --- 2b. no rpcbind running, but installed: auto waits for it instead of taking 111 ---
nfsd_start "$work/nfsd9.txt" --rpcbind-wait 30
wait_log "$work/nfsd9.txt" "no rpcbind answers yet, but one is installed"
if rpcinfo -p 127.0.0.1 > /dev/null 2>&1; then
  cat "$work/nfsd9.txt"; echo "FAIL: auto answers on port 111 with an rpcbind installed"; exit 1
fi
rpcbind_start
# (rpcbind -w restores part 1's host mountd entry of MOUNT: NFS is what gets registered)
wait_log "$work/nfsd9.txt" "registered with the host's rpcbind: program 100003"
rpcinfo -p 127.0.0.1 > /dev/null ||
  { cat "$work/rpcbind.log"; echo "FAIL: rpcbind started after auto has no IPv4 port 111"; exit 1; }
rpcinfo 127.0.0.1 > "$work/pmap-auto.txt"
grep -Eq "^ *100003 +3 +rdma +192\.0\.2\.121\.78\.81 " "$work/pmap-auto.txt" ||
  { cat "$work/pmap-auto.txt" "$work/nfsd9.txt"; echo "FAIL: not registered with the rpcbind started after auto"; exit 1; }
kill -INT "$nfsd_pid"
wait "$nfsd_pid" || true
echo "ok: auto with rpcbind installed waits for it, and rpcbind keeps port 111"
kill "$rpcbind_pid"
wait "$rpcbind_pid" 2>/dev/null || true
rm -f /run/rpcbind.sock

# --- 3. rpcbind started after roce-nfsd --portmap register ---
nfsd_start "$work/nfsd8.txt" --portmap register --rpcbind-wait 30
grep -q "does not answer yet: trying again" "$work/nfsd8.txt" ||
  { cat "$work/nfsd8.txt"; echo "FAIL: not said that rpcbind does not answer"; exit 1; }
sleep 1
rpcbind_start
wait_log "$work/nfsd8.txt" "registered with the host's rpcbind: program 100003"
rpcinfo 127.0.0.1 > "$work/rpcb-late.txt"
grep -Eq "^ *100003 +3 +rdma +192\.0\.2\.121\.78\.81 " "$work/rpcb-late.txt" ||
  { cat "$work/rpcb-late.txt" "$work/nfsd8.txt"; echo "FAIL: not registered with a late rpcbind"; exit 1; }
kill -INT "$nfsd_pid"
wait "$nfsd_pid" || true
echo "ok: registered with an rpcbind that started late"
echo "PASS nfs_rpcbind"
