#!/usr/bin/env bash
# A read delegation recalled over the RDMA back channel (RFC 8167) by the Linux kernel client in
# the rxe VM: client A mounts roce-nfsd with vers=4.1,proto=rdma,port=20049 (its session's back
# channel is that connection's reverse direction), holds a file open for reading (a read
# delegation); client B (the same VM, another client owner: nfs4_unique_id set before its mount,
# over roce-nfsd's TCP port so that the kernel makes a second client) opens the file for
# writing: roce-nfsd recalls A's delegation with CB_SEQUENCE + CB_RECALL on A's RDMA connection,
# A returns it, B's write goes through. The capture, decoded by tshark, shows the CB_RECALL in an
# RPC-over-RDMA message.
#   nfs4_recall.sh ROCE_NFSD   (root; exits 77 when VMs cannot run here)
set -euo pipefail
nfsd=$(realpath "$1")
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-nfs4cb}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
command -v tshark > /dev/null || { echo "skipped: tshark missing"; exit 77; }
out=$(mktemp -d)
spid=
trap '[[ -n $spid ]] && kill "$spid" 2>/dev/null; [[ -n ${KEEP:-} ]] && echo "kept $out" || rm -rf "$out"' EXIT
mkdir -p "$out/export"
echo "first" > "$out/export/shared"
a=/mnt/a b=/mnt/b
tcp=20050
boot "mkdir -p $a $b && ln -sf /proc/mounts /etc/mtab && rxe_wait_peer 192.0.2.254 60 &&
      n=0; until mount.nfs 192.0.2.100:/ $a -o vers=4.1,proto=rdma,port=20049; do
        n=\$((n+1)); [ \$n -lt 90 ] || exit 1; sleep 1; done && echo MOUNTED-A &&
      echo second-client > /sys/module/nfs/parameters/nfs4_unique_id &&
      mount.nfs 192.0.2.254:/ $b -o vers=4.1,proto=tcp,port=$tcp && echo MOUNTED-B &&
      exec 3< $a/shared && cat $a/shared && echo A-HOLDS &&
      echo 'from B' >> $b/shared && echo B-WROTE &&
      exec 3<&- && echo A-SEES \$(tail -1 $a/shared) &&
      umount $b && umount $a && echo UNMOUNTED" 600
ip netns exec "$RXE_VM_NETNS" timeout 580 "$nfsd" --iface dp0 --root "$out/export" --state-dir "$out/state" --export / \
  --export-options rw,no_root_squash --clients 192.0.2.0/24 --mount-address 192.0.2.254 \
  --tcp-port $tcp --timeout 560 --pcap "$out/nfsd.pcap" > "$out/nfsd.txt" 2>&1 &
spid=$!
finish && theirs=0 || theirs=1
kill -TERM "$spid" 2>/dev/null || true
wait "$spid" || true
spid=
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
sed 's/^/  nfsd: /' "$out/nfsd.txt"
ts=(tshark -r "$out/nfsd.pcap" --enable-heuristic rpcrdma_infiniband)
# The server's calls on the RDMA connection: CB_COMPOUND's operations (CB_SEQUENCE 11, CB_RECALL 4).
echo "the back channel in the capture (frame, source, RPC-over-RDMA xid, callback operations):"
"${ts[@]}" -Y 'nfs.cb.operation' -T fields -e frame.number -e ip.src -e rpcordma.xid \
  -e nfs.cb.operation 2>/dev/null | sed 's/^/  /' || true
recall=$("${ts[@]}" -Y 'rpcordma && nfs.cb.operation == 4 && ip.src == 192.0.2.100' 2>/dev/null | wc -l || true)
ok=1
[[ $recall -ge 1 ]] || { ok=0; echo "no CB_RECALL from the appliance in the capture"; }
[[ $(tail -1 "$out/export/shared") == "from B" ]] || { ok=0; echo "B's write is not on the appliance"; }
grep -q "A-SEES from B" "$out/vm.txt" || { ok=0; echo "A does not see B's write"; }
if [[ $theirs == 0 && $ok == 1 ]]; then
  echo "PASS nfs4 recall: a read delegation recalled over the RDMA back channel"
else
  echo "FAIL nfs4 recall: vm=$theirs checks=$ok"
  exit 1
fi
