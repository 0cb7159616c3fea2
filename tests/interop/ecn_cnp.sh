#!/usr/bin/env bash
# ECN interop with Linux rxe (docs/congestion.md): roce-perf's ib_write_bw client with DCQCN,
# whose frames carry ECT(0) (ECN-capable with an algorithm that reacts), against rxe's ib_write_bw server, while CNPs (BTH
# opcode 0x81, built by scapy) are sent from our address to rxe's QP throughout the run. rxe
# has no reaction point: it must accept the ECT(0) frames as any others and drop the CNPs
# without harm. Passes when both sides finish with a result row, our capture shows ECT(0) on
# our requests, CNPs went out during the transfer, and rxe's error counters stayed 0 (its
# rcvd_pkts, printed, counts the WRITE packets only: rxe drops a CNP before counting it).
#   ecn_cnp.sh ROCE_PERF   (root; exits 77 when VMs cannot run here)
set -euo pipefail
perf=$(realpath "$1")
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight
out=$(mktemp -d)
ns=${RXE_VM_NETNS:-rxevm}
trap 'rm -rf "$out"' EXIT
counters=/sys/class/infiniband/rxe0/ports/1/hw_counters
boot "ib_write_bw -d rxe0 -x \$(rxe_gid_idx) -n 10000 -s 4096; for f in $counters/*; do echo \"rxe-counter \${f##*/} \$(cat \$f)\"; done" 240

# The CNP source: reads rxe's QPN from our tool's "remote address" line (our transmissions are
# invisible to a sniffer: the PMD bypasses the qdisc) and sends a CNP to it every 2 ms from our
# address (any host on the segment could), until told to stop.
cat > "$out/cnp.py" <<'PY'
import logging, os, re, sys, time
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, UDP, conf, load_contrib
load_contrib("roce")
from scapy.contrib.roce import cnp
log, stop = sys.argv[1], sys.argv[2]
qpn = None
for _ in range(12000):
    m = re.search(r"remote address: .*QPN (0x[0-9a-fA-F]+)", open(log).read() if os.path.exists(log) else "")
    if m:
        qpn = int(m.group(1), 16)
        break
    time.sleep(0.01)
if qpn is None:
    print("cnp: no QPN seen"); sys.exit(1)
f = (Ether(src=open("/sys/class/net/dp0/address").read().strip(), dst="52:54:00:00:00:01") /
     IP(src="192.0.2.100", dst="192.0.2.1", tos=0xC2, id=1) / UDP(sport=49152, dport=4791, chksum=0) /
     cnp(qpn))
s = conf.L2socket(iface="dp0")
n = 0
while not os.path.exists(stop) and n < 20000:
    s.send(f)
    n += 1
    time.sleep(0.002)
print(f"cnp: sent {n} CNPs to rxe QP {qpn:#x}")
PY
ip netns exec "$ns" /usr/bin/python3 "$out/cnp.py" "$out/us.txt" "$out/stop" > "$out/cnp.txt" 2>&1 &
cnppid=$!
ip netns exec "$ns" "$perf" write_bw --iface dp0 --cc dcqcn --timeout 180 --pcap "$out/us.pcap" \
  --json "$out/us.json" -n 10000 -s 4096 192.0.2.1 > "$out/us.txt" 2>&1 && rc=0 || rc=$?
touch "$out/stop"
wait "$cnppid" || true
wait "$vmpid" || true
theirs=1; grep -q "cmd-end rc=0" "$out/vm.txt" && theirs=0
row=$(grep -m1 -E '^ [0-9]+ +[0-9]+ ' "$out/us.txt" | tr -s ' \t' ' ' || true)
vmrow=$(grep -v '^\[rxe-vm\]' "$out/vm.txt" | grep -m1 -E '^ [0-9]+ +[0-9]+ ' | tr -s ' \t' ' ' || true)
cnps=$(sed -n 's/^cnp: sent \([0-9]*\) .*/\1/p' "$out/cnp.txt")
# ECT(0) on our RoCE requests in the capture (roce-pcap's file: both directions).
ect=$(/usr/bin/python3 - "$out/us.pcap" <<'PY'
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, rdpcap
# (the capture also holds the CNPs of cnp.py, looped back to the port's socket: not ours)
ours = [p for p in rdpcap(sys.argv[1]) if IP in p and UDP in p and p[UDP].dport == 4791 and
        p[IP].src == "192.0.2.100" and bytes(p[UDP].payload)[:1] != b"\x81"]
print(len(ours), sum(1 for p in ours if p[IP].tos & 3 == 2))
PY
)
read -r n_ours n_ect <<< "$ect"
errs=$(grep -E "^rxe-counter (rcvd_seq_err|out_of_seq_request|retry_exceeded_err|rcvd_rnr_err|completer_retry_err|send_err|link_downed) " "$out/vm.txt" \
       | awk '$3 != 0' || true)
grep "^rxe-counter" "$out/vm.txt" | tr '\n' ' ' | sed 's/rxe-counter //g'; echo
summary="us:[${row:-none}] rxe:[${vmrow:-none}] CNPs sent to rxe: ${cnps:-0}; our RoCE frames ${n_ours:-0}, ECT(0) ${n_ect:-0}"
if [[ $rc == 0 && $theirs == 0 && -n $row && -n $vmrow && ${cnps:-0} -gt 0 && ${n_ours:-0} -gt 0 &&
      ${n_ect:-0} == "${n_ours:-0}" && -z $errs ]]; then
  echo "PASS ecn_cnp: $summary"
  exit 0
fi
echo "FAIL ecn_cnp: ours=$rc rxe=$theirs; $summary; rxe errors: ${errs:-none}"
cat "$out/cnp.txt"
sed 's/^/  us: /' "$out/us.txt" | tail -20
grep -v "^\[rxe-vm\]" "$out/vm.txt" | sed 's/^/  vm: /' | tail -25
exit 1
