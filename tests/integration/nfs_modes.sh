#!/usr/bin/env bash
# The NFS client and server in each of their modes, one code on libroce (apps/nfs): files
# written through NFSv3 over RPC-over-RDMA, read back and compared, listed, removed.
#   client-attached: roce-nfs --attach to roced B, against the NFS server hosted in roced A (the
#                    two roced on a net_memif link); the connection torn down once after 8 calls
#                    (--break-after) and made again through the attach socket;
#   server-attached: roce-nfsd --attach to roced A, roce-nfs in-process on the memif peer;
#   in-process:      roce-nfsd and roce-nfs each on a DPDK port of its own (net_memif).
# MOUNT runs over kernel TCP on 127.0.0.1 in every mode. Every caller is squashed to the user
# running the test (all_squash,anonuid,anongid): no root needed, but a user with supplementary
# groups is refused by the service (skip).
#   nfs_modes.sh MODE ROCED ROCE_NFS ROCE_NFSD WORKDIR
set -euo pipefail
mode=$1 roced=$(realpath "$2") client=$(realpath "$3") nfsd=$(realpath "$4") work=$5
if [[ $(id -u) != 0 && -n $(id -G | tr ' ' '\n' | grep -vx "$(id -g)") ]]; then
  echo "SKIP: not root and in supplementary groups (the service refuses to lend them)"; exit 77
fi
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=nfsm$$
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
mkdir "$work/export"
mport=$((25000 + $$ % 4000))
squash="rw,all_squash,anonuid=$(id -u),anongid=$(id -g)"
head -c 3000001 /dev/urandom > "$work/blob"
echo "hello from the $mode test" > "$work/small"
bad_requests() {  # NAME: roced NAME's count of attach requests it refused (Prometheus)
  local url
  url=$(sed -n 's/^  counters: \(http:[^ ]*\)$/\1/p' "$work/$1.log")
  sleep 0.3  # published every 100 ms
  /usr/bin/python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
    "$url" | sed -n 's/^roce_attach_bad_requests{.*} \([0-9]*\)$/\1/p'
}
served() {  # LOG: wait until roce-nfsd serves
  for _ in $(seq 100); do grep -q "^roce-nfsd: serving" "$1" && return 0; sleep 0.1; done
  cat "$1"; echo "FAIL: roce-nfsd did not start"; exit 1
}
common=(--mount-server 127.0.0.1 --mount-port "$mport" --export /)
ops=(put "$work/blob" blob put "$work/small" small ls / get blob "$work/blob.back"
     cat small rm blob rm small ls /)
case $mode in
  client-attached)
    appliance a server 02:00:5e:00:10:01 192.0.2.121 0 "" "services:
  - test: nfs
    port: p0
    listen_port: 20049
    args: [\"--root\", \"$work/export\", \"--export\", \"/\", \"--mount-port\", \"$mport\", \"--export-options\", \"$squash\", \"--state-dir\", \"$work/state\"]"
    grep -q "service nfs: rdma_cm port 20049" "$work/a.log" || { cat "$work/a.log"; echo "FAIL: no nfs service"; exit 1; }
    appliance b client 02:00:5e:00:10:02 192.0.2.122 1
    "$client" --attach "$work/b.sock" --server 192.0.2.121 "${common[@]}" --break-after 8 \
      "${ops[@]}" > "$work/client.txt" 2>&1 || { cat "$work/client.txt"; echo "FAIL: roce-nfs --attach"; exit 1; }
    grep -q "^attached to roced at $work/b.sock" "$work/client.txt" || { cat "$work/client.txt"; echo "FAIL: not attached"; exit 1; }
    grep -q "reconnects 1 " "$work/client.txt" || { cat "$work/client.txt"; echo "FAIL: no reconnect"; exit 1; }
    # Every request of the attached client was one roced could serve.
    [[ $(bad_requests b) == 0 ]] || { echo "FAIL: roced b refused $(bad_requests b) attach requests"; exit 1; }
    ;;
  server-attached)
    appliance a server 02:00:5e:00:10:01 192.0.2.121 0
    "$nfsd" --attach "$work/a.sock" --root "$work/export" --export / --export-options "$squash" \
      --state-dir "$work/state" --mount-address 127.0.0.1 --mount-port "$mport" --timeout 60 > "$work/nfsd.txt" 2>&1 &
    pids+=($!)
    nfsd_pid=$!
    served "$work/nfsd.txt"
    grep -q "(attached to roced at $work/a.sock)" "$work/nfsd.txt" || { cat "$work/nfsd.txt"; echo "FAIL: not attached"; exit 1; }
    "$client" --memif "$work/memif.sock" --ip 192.0.2.122 --mac 02:00:5e:00:10:02 \
      --server 192.0.2.121 "${common[@]}" "${ops[@]}" > "$work/client.txt" 2>&1 ||
      { cat "$work/client.txt" "$work/nfsd.txt"; echo "FAIL: roce-nfs against roce-nfsd --attach"; exit 1; }
    kill -INT "$nfsd_pid"
    wait "$nfsd_pid" || true
    grep -q "rpcrdma: 1 connections" "$work/nfsd.txt" || { cat "$work/nfsd.txt"; echo "FAIL: no counters"; exit 1; }
    # Every request of the attached server was one roced could serve (the ARP cache asked
    # before the accept, the accept, the connection's end).
    [[ $(bad_requests a) == 0 ]] || { echo "FAIL: roced a refused $(bad_requests a) attach requests"; exit 1; }
    ;;
  in-process)
    "$nfsd" --memif "$work/memif.sock" --ip 192.0.2.121 --mac 02:00:5e:00:10:01 \
      --root "$work/export" --export / --export-options "$squash" --mount-address 127.0.0.1 \
      --state-dir "$work/state" --mount-port "$mport" --timeout 60 > "$work/nfsd.txt" 2>&1 &
    pids+=($!)
    nfsd_pid=$!
    served "$work/nfsd.txt"
    "$client" --memif "$work/memif.sock" --ip 192.0.2.122 --mac 02:00:5e:00:10:02 \
      --server 192.0.2.121 "${common[@]}" "${ops[@]}" > "$work/client.txt" 2>&1 ||
      { cat "$work/client.txt" "$work/nfsd.txt"; echo "FAIL: roce-nfs against roce-nfsd"; exit 1; }
    kill -INT "$nfsd_pid"
    wait "$nfsd_pid" || true
    ;;
  *) echo "FAIL: unknown mode $mode"; exit 2 ;;
esac
sed 's/^/client: /' "$work/client.txt"
cmp "$work/blob" "$work/blob.back" || { echo "FAIL: the file read back differs"; exit 1; }
grep -q "hello from the $mode test" "$work/client.txt" || { echo "FAIL: cat small"; exit 1; }
[[ -z $(ls "$work/export") ]] || { echo "FAIL: the export is not empty after rm"; exit 1; }
echo "PASS nfs_modes $mode"
