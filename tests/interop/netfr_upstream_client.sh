#!/usr/bin/env bash
# NetFR interop against upstream, the appliance as host: upstream NetFR's test/client
# (telescope-proj/netfr, built unchanged but for netfr_upstream_lib.sh's build flags, on Debian's
# libfabric verbs provider) on Linux rxe in the VM connects both channels from 192.0.2.1:6010 and
# 6011 to roce-netfr-check's host on a DPDK port (net_af_packet on dp0, RoCE IP 192.0.2.100,
# ports 5010 and 5011) and advertises one 128 MiB buffer. Our host writes 128 MiB of a pattern
# into it, again each time test/client gives it back (it answers each buffer update with a new
# buffer state: it took the update's index and range), and reads test/client's own datagrams,
# which must be "Hello server". test/client only prints what it got: its memory is not for us to
# read, so the check of its side is its log (one "Received memory write event" per write, no
# assertion, no sanitizer report). No datagrams go to it: upstream's client cannot take them
# (netfr_check.cc host_upstream and docs/netfr.md say why).
#   netfr_upstream_client.sh ROCE_NETFR_CHECK [WRITES]   (root; 77 without NETFR_UPSTREAM or VMs)
# Env: NETFR_UPSTREAM (the checkout), RXE_VM_NETNS (default rxevm-netfr), NETFR_UPSTREAM_SIZE
# (the write, default 128 MiB, test/client's buffer), NETFR_UPSTREAM_PCAP (a file: our side
# captures its frames there).
set -euo pipefail
check=$(realpath "$1")
writes=${2:-2}
size=${NETFR_UPSTREAM_SIZE:-134217728}
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-netfr}
export RXE_VM_MEM=${RXE_VM_MEM:-1024}
pcap=${NETFR_UPSTREAM_PCAP:+,pcap=$NETFR_UPSTREAM_PCAP}  # our side's frames (large: every write)
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/interop/netfr_upstream_lib.sh
source "$(dirname "$0")/netfr_upstream_lib.sh"
netfr_upstream_build
interop_preflight
RXE_VM_EXTRA_BINS="$up_client" "$here/vm/build.sh" >/dev/null 2>&1 ||
  { echo "skipped: cannot put $up_client into the VM image"; exit 77; }
out=$(mktemp -d)
hpid=
trap '[[ -n $hpid ]] && kill "$hpid" 2>/dev/null; rm -rf "$out"' EXIT
# In the VM: test/client, again while our host is not listening yet (it gives up at a refusal);
# it runs until our host ends the session (then it reports the reset and exits).
vmcmd="i=0; while [ \$i -lt 60 ]; do FI_PROVIDER=verbs ASAN_OPTIONS=detect_leaks=0"
vmcmd+=" timeout 900 netfr-client verbs 192.0.2.1 6010 192.0.2.100 5010 > /tmp/c.log 2>&1;"
vmcmd+=" grep -q 'Client connected' /tmp/c.log && break; sleep 2; i=\$((i+1)); done;"
vmcmd+=" echo \"netfr-client writes=\$(grep -c 'Received memory write event' /tmp/c.log)\";"
vmcmd+=" grep -E 'Client connected|Failed|ERROR|FATAL|Assertion|Sanitizer|runtime error' /tmp/c.log | head -40;"
vmcmd+=" ! grep -qE 'Assertion|Sanitizer|runtime error' /tmp/c.log"
boot "$vmcmd" 1000
NETFR_LINK="pmd=af_packet,iface=dp0,ip=192.0.2.100,mac=02:00:00:00:01:00$pcap" \
  ip netns exec "$RXE_VM_NETNS" timeout 900 "$check" host upstream --max-frame "$size" \
  --ops "$writes" > "$out/host.txt" 2>&1 &
hpid=$!
wait "$hpid" && ours=0 || ours=$?
hpid=
finish && theirs=0 || theirs=1
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /'
sed 's/^/  host: /' "$out/host.txt"
vw=$(sed -n 's/.*netfr-client writes=\([0-9]*\).*/\1/p' "$out/vm.txt")
vw=${vw:-0}
if [[ $ours == 0 && $theirs == 0 ]] && grep -q "PASS netfr host upstream" "$out/host.txt" &&
   ((vw >= writes)); then
  echo "PASS netfr upstream: upstream NetFR test/client ($up_commit) on rxe <- appliance host," \
    "$vw writes of $size bytes"
else
  echo "FAIL netfr upstream: host=$ours vm=$theirs test/client saw $vw writes"
  exit 1
fi
