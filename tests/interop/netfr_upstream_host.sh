#!/usr/bin/env bash
# NetFR interop against upstream, the appliance as client: upstream NetFR's test/host
# (telescope-proj/netfr, built unchanged but for netfr_upstream_lib.sh's build flags, on Debian's
# libfabric verbs provider) on Linux rxe in the VM listens on 192.0.2.1:5010 and 5011;
# roce-netfr-check's client on a DPDK port (net_af_packet on dp0, RoCE IP 192.0.2.100) connects
# both channels and advertises one 128 MiB buffer. test/host writes its whole 128 MiB buffer into
# it (one RDMA WRITE and a buffer update), again each time our client gives the buffer back; it
# never writes that memory itself, so the test has its allocator fill it (ASan's malloc fill,
# 0xA5 over the whole allocation): our client checks every byte of each write. Meanwhile our
# client sends 64 datagrams on the secondary channel, more than its credits: test/host reads
# them (nfrHostReadData) and its acknowledgements must come back.
#   netfr_upstream_host.sh ROCE_NETFR_CHECK [WRITES]   (root; 77 without NETFR_UPSTREAM or VMs)
# Env: NETFR_UPSTREAM (the checkout), RXE_VM_NETNS (default rxevm-netfr), NETFR_UPSTREAM_SIZE
# (the client's buffer, default 128 MiB: test/host writes 128 MiB, so no smaller one can take it),
# NETFR_UPSTREAM_PCAP (a file: our side captures its frames there).
set -euo pipefail
check=$(realpath "$1")
writes=${2:-2}
size=${NETFR_UPSTREAM_SIZE:-134217728}
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-netfr}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}  # test/host's 128 MiB under ASan, rxe's copy of the MR
pcap=${NETFR_UPSTREAM_PCAP:+,pcap=$NETFR_UPSTREAM_PCAP}  # our side's frames (large: every write)
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/interop/netfr_upstream_lib.sh
source "$(dirname "$0")/netfr_upstream_lib.sh"
netfr_upstream_build
interop_preflight
RXE_VM_EXTRA_BINS="$up_host" "$here/vm/build.sh" >/dev/null 2>&1 ||
  { echo "skipped: cannot put $up_host into the VM image"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# In the VM: test/host in the background (its DEBUG log to a file: the serial console is slow),
# until our client has come and gone (its log says "Client disconnected on channel 0") or it died.
vmcmd="FI_PROVIDER=verbs ASAN_OPTIONS=malloc_fill_byte=165:max_malloc_fill_size=$size:detect_leaks=0"
vmcmd+=" netfr-host verbs 192.0.2.1 5010 > /tmp/h.log 2>&1 & p=\$!; i=0;"
vmcmd+=" while [ \$i -lt 900 ] && kill -0 \$p 2>/dev/null && ! grep -q 'Client disconnected on channel 0' /tmp/h.log;"
vmcmd+=" do sleep 1; i=\$((i+1)); done; kill -0 \$p 2>/dev/null && alive=1 || alive=0; kill \$p 2>/dev/null;"
vmcmd+=" echo \"netfr-host alive=\$alive writes_done=\$(grep -c 'Data rate' /tmp/h.log)\";"
vmcmd+=" grep -E 'Data rate|Client (dis)?connected|ERROR|FATAL|Assertion|Sanitizer|runtime error' /tmp/h.log | head -40;"
vmcmd+=" [ \$alive = 1 ]"
boot "$vmcmd" 1000
# test/host may still be starting: retry while nobody listens.
rc=1
for _ in $(seq 60); do
  NETFR_LINK="pmd=af_packet,iface=dp0,ip=192.0.2.100,mac=02:00:00:00:01:00$pcap" \
    ip netns exec "$RXE_VM_NETNS" timeout 900 "$check" client upstream 192.0.2.1 \
    --max-frame "$size" --ops "$writes" --fill 0xA5 > "$out/client.txt" 2>&1 && rc=0 || rc=$?
  [[ $rc != 0 ]] && grep -q "nfrClientInit: -1[01][0-9]" "$out/client.txt" && { sleep 2; continue; }
  break
done
finish && theirs=0 || theirs=1
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
sed 's/^/  client: /' "$out/client.txt"
if [[ $rc == 0 && $theirs == 0 ]] && grep -q "PASS netfr client upstream" "$out/client.txt"; then
  echo "PASS netfr upstream: appliance client <- upstream NetFR test/host ($up_commit) on rxe," \
    "$writes writes of $size bytes checked"
else
  echo "FAIL netfr upstream: client=$rc vm=$theirs"
  exit 1
fi
