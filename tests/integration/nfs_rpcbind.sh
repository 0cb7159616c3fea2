#!/usr/bin/env bash
# The NFS service and the host's port mapper (review17 item 10), against Debian's rpcbind and
# rpcinfo as real peers, in a network and mount namespace of the test's own (its own loopback,
# port 111 and /run: the host's rpcbind, if any, is not touched):
#   1. rpcbind runs on 111: roce-nfsd (--portmap auto, the default) finds the port taken and
#      registers MOUNT v3/tcp and NFS v3/rdma with it over its local socket; `rpcinfo -p` lists
#      mountd, `rpcinfo` (RPCBIND v4 DUMP) lists NFS on netid rdma at the RoCE address's
#      universal address; at exit roce-nfsd unregisters both.
#   2. no rpcbind: roce-nfsd answers as the port mapper itself; `rpcinfo` (v4 DUMP) and
#      `rpcinfo -p` (PMAP v2 DUMP) list its programs.
# roce-nfsd runs on a memif port with no peer (MOUNT and the port mapper are kernel TCP).
#   nfs_rpcbind.sh ROCE_NFSD
set -euo pipefail
nfsd=$(realpath "$1")
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
nfsd_start() {  # LOG ARGS...
  local log=$1
  shift
  rm -f "$work/memif.sock"  # a killed server's
  "$nfsd" --memif "$work/memif.sock" --ip 192.0.2.121 --mac 02:00:5e:00:10:01 \
    --root "$work/export" --export-options rw,no_root_squash --mount-address 127.0.0.1 \
    --mount-port "$mport" --timeout 60 "$@" > "$log" 2>&1 &
  nfsd_pid=$!
  pids+=("$nfsd_pid")
  wait_log "$log" "^roce-nfsd: serving"
}

# --- 1. the host's rpcbind on 111: roce-nfsd registers with it ---
/usr/sbin/rpcbind -f -w > "$work/rpcbind.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -S /run/rpcbind.sock ]] && rpcinfo -p 127.0.0.1 > /dev/null 2>&1 && break; sleep 0.1; done
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
grep -q "port 111 is taken" "$work/nfsd1.txt" || { cat "$work/nfsd1.txt"; echo "FAIL: auto did not say why it registers"; exit 1; }
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
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null || true

# --- 2. no rpcbind: roce-nfsd is the port mapper ---
nfsd_start "$work/nfsd4.txt"
for _ in $(seq 50); do rpcinfo 127.0.0.1 > "$work/own.txt" 2>&1 && break; sleep 0.1; done
rpcinfo -p 127.0.0.1 > "$work/own-pmap.txt" 2>&1 || true
sed 's/^/rpcinfo (own): /' "$work/own.txt"
sed 's/^/rpcinfo -p (own): /' "$work/own-pmap.txt"
grep -Eq "^ *100003 +3 +rdma +192\.0\.2\.121\.78\.81 " "$work/own.txt" ||
  { cat "$work/nfsd4.txt"; echo "FAIL: rpcinfo (RPCBIND v4 DUMP) against roce-nfsd's port mapper"; exit 1; }
grep -Eq "^ *100005 +3 +tcp +$mport " "$work/own-pmap.txt" ||
  { cat "$work/nfsd4.txt"; echo "FAIL: rpcinfo -p against roce-nfsd's port mapper"; exit 1; }
kill -INT "$nfsd_pid"
wait "$nfsd_pid" || true
echo "PASS nfs_rpcbind"
