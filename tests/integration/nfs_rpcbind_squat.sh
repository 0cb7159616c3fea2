#!/usr/bin/env bash
# Attacker review 19, 1: an unprivileged local user squats MOUNT v3/tcp in the host's rpcbind
# (its local socket accepts SET from any uid; the entry's owner is that uid) before roce-nfsd
# starts. rpc.mountd (root) would UNSET and SET over it; roce-nfsd, since 7e4373e, treats any
# other address as "a host mountd" and leaves it alone:
#   --portmap register refuses to start (denial of service by any local user);
#   --portmap auto starts, and `rpcinfo -p` keeps sending clients' MNT to the squatter's port
#     (it sees the client's AUTH_SYS credentials and the export path it asks for, and answers
#     with the file handle and flavours it likes).
# Runs in a network and mount namespace of its own (its own /run and port 111), as
# nfs_rpcbind.sh does. PASS when roce-nfsd takes the entry back (or at least starts under
# register and serves MOUNT through rpcbind); FAIL while the squatter keeps it.
#   nfs_rpcbind_squat.sh ROCE_NFSD
set -euo pipefail
nfsd=$(realpath "$1")
rpcb_call=$(dirname "$(realpath "$0")")/rpcbind_call.py
if [[ ! -x /usr/sbin/rpcbind || ! -x /usr/sbin/rpcinfo ]]; then
  echo "SKIP: Debian's rpcbind is not installed"; exit 77
fi
if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root (namespaces, port 111)"; exit 77
fi
if [[ -z ${NFS_RPCBIND_INNER:-} ]]; then
  work=$(mktemp -d /tmp/nfs-squat-XXXXXX)
  chmod 0755 "$work"
  trap 'rm -rf "$work"' EXIT
  NFS_RPCBIND_INNER=1 WORK=$work unshare --net --mount --propagation private "$0" "$@"
  exit $?
fi
work=$WORK
mount -t tmpfs -o mode=0755 tmpfs /run
ip link set lo up
mkdir "$work/export"
mport=20048
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
/usr/sbin/rpcbind -f -w > "$work/rpcbind.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -S /run/rpcbind.sock ]] && "$rpcb_call" unset 1 1 x y > /dev/null 2>&1 && break; sleep 0.1; done
ls -l /run/rpcbind.sock
# The squatter: uid 65534 (nobody), no privilege, over rpcbind's world-writable local socket.
# 0.0.0.0.169.1 = port 43265, which any user may listen on.
got=$(setpriv --reuid 65534 --regid 65534 --clear-groups /usr/bin/python3 "$rpcb_call" set 100005 3 tcp 0.0.0.0.169.1)
echo "nobody's SET of MOUNT v3/tcp: $got"
[[ $got == true ]] || { echo "SKIP: rpcbind refused an unprivileged SET here"; exit 77; }
rpcinfo 127.0.0.1 | grep -E "^ *100005 " | sed 's/^/rpcinfo: /'
run() {  # LOG ARGS...
  local log=$1; shift
  rm -f "$work/memif.sock"
  "$nfsd" --memif "$work/memif.sock" --ip 192.0.2.121 --mac 02:00:5e:00:10:01 \
    --root "$work/export" --export-options rw,no_root_squash --mount-address 127.0.0.1 \
    --mount-port "$mport" --state-dir "$work/state" --timeout 8 "$@" > "$log" 2>&1 &
  pid=$!
  pids+=("$pid")
}
fail=0
# register: a local user can keep the service from starting.
run "$work/reg.txt" --portmap register
status=0
for _ in $(seq 50); do grep -q "^roce-nfsd: serving" "$work/reg.txt" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if ! kill -0 "$pid" 2>/dev/null; then
  wait "$pid" || status=$?
  sed 's/^/register: /' "$work/reg.txt" | grep -i "rpcbind" || true
  echo "FINDING: --portmap register did not start (exit $status) because uid 65534 registered MOUNT"
  fail=1
else
  kill -INT "$pid"; wait "$pid" || true
fi
# auto: starts, but rpcbind keeps sending clients to the squatter.
run "$work/auto.txt"
for _ in $(seq 50); do grep -q "^roce-nfsd: serving" "$work/auto.txt" && break; sleep 0.1; done
sleep 0.5
rpcinfo -p 127.0.0.1 > "$work/pmap.txt"
grep -E "^ *100005 " "$work/pmap.txt" | sed 's/^/rpcinfo -p (auto running): /'
grep -i "rpcbind serves another" "$work/auto.txt" | sed 's/^/auto: /' || true
if grep -Eq "^ *100005 +3 +tcp +43265 " "$work/pmap.txt"; then
  echo "FINDING: under --portmap auto, MOUNT v3/tcp still maps to nobody's port 43265, not $mport"
  fail=1
fi
kill -INT "$pid"; wait "$pid" || true
# 2. The squatter floods rpcbind's table instead (300 entries of a program of its own, long
# addresses): DUMP passes 64 KiB, RpcbindClient::dump() gives up, every register_entry() says
# "no answer", and the registrations never happen (retried for --rpcbind-wait, then given up).
"$rpcb_call" unset 100005 3 tcp "" > /dev/null  # root takes the squat away for this case
n=$(setpriv --reuid 65534 --regid 65534 --clear-groups /usr/bin/python3 \
  "$(dirname "$rpcb_call")/rpcbind_flood.py" 400000 300)
echo "nobody's SETs accepted: $n"
run "$work/flood.txt" --portmap register --rpcbind-wait 3
for _ in $(seq 80); do grep -Eq "gave up registering|registered with the host's rpcbind: program 100005" "$work/flood.txt" && break; sleep 0.1; done
rpcinfo -p 127.0.0.1 > "$work/pmap2.txt" 2>&1 || true
grep -E "no answer|gave up|registered with|larger than" "$work/flood.txt" | sed 's/^/flood: /' | head -5
if grep -q "no answer" "$work/flood.txt"; then
  echo "FINDING: rpcbind answered (a large DUMP), yet the log says \"no answer\""
  fail=1
fi
if ! grep -Eq "^ *100005 +3 +tcp +$mport " "$work/pmap2.txt"; then
  echo "FINDING: with rpcbind's DUMP past 64 KiB (uid 65534's entries), MOUNT v3/tcp is never registered"
  fail=1
fi
kill -INT "$pid" 2>/dev/null || true; wait "$pid" || true
rpcinfo -p 127.0.0.1 > "$work/pmap3.txt" 2>&1 || true
if grep -Eq "^ *100005 +3 +tcp +$mport " "$work/pmap3.txt"; then
  echo "FINDING: MOUNT v3/tcp left registered after the flooded server stopped"
  fail=1
fi
if [[ $fail == 1 ]]; then echo "FAIL nfs_rpcbind_squat"; exit 1; fi
echo "PASS nfs_rpcbind_squat"
