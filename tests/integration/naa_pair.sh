#!/usr/bin/env bash
# roce-naa and the NAAICE host example (naaice_client_roce, the host library on the appliance's
# stack) as two processes on a net_memif link (no hugepages, no root). The NAA captures; the
# capture must decode with the stack's parser and tshark.
#   naa_pair.sh ROCE_NAA NAAICE_CLIENT ROCE_PCAP MODE
# MODE kernels: every kernel, 3 hosts at once, 3 calls each, results checked by the host.
#      lossy:   the same with 1% of the frames lost on each side (2 hosts, 5 calls).
#      rnr:     the NAA posts its receives 30 ms late: the host's MRSP SEND meets RNR NAKs and
#               is retried until it lands (as toward an RNIC without a posted receive).
#      errors:  every MRSP error code and every application error the NAA reports, provoked
#               one connection each, and seen on the wire: the NAA's SENDs carry MRSP error
#               messages 0x00 0x01/0x02/0x03, its WRITE_WITH_IMMs the statuses 0x10-0x13.
#      foreign: host B's RDMA WRITE with host A's rkey, on B's connection: the NAA answers a
#               remote access error NAK (on the wire) and A's NAA memory is unchanged.
#      slow:    every kernel takes 3 s (--kernel-delay-ms) and one call is queued at most:
#               while host A's call runs, host B connects and gets its advertisement (within
#               1.5 s), and its call is answered 0x01 at once; A's result is still correct.
# NAA_TIMEOUT (s, default 60) bounds the NAA's wait for its connections; NAA_KEEP=1 keeps the
# work directory (logs, capture).
set -euo pipefail
naa=$(realpath "$1") client=$(realpath "$2") pcap=$(realpath "$3") mode=$4
work=$(mktemp -d /tmp/naa-pair-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; [[ -n ${NAA_KEEP:-} ]] || rm -rf "$work"; }
trap cleanup EXIT
sock=$work/memif.sock
naa_drop=0 host_drop=0 naa_extra=()
case $mode in
  kernels) hosts=3 calls=3 conns=15 ;;
  lossy) hosts=2 calls=5 conns=10 naa_drop=0.01 host_drop=0.01 ;;
  errors) conns=6 ;;
  rnr) hosts=1 calls=2 conns=1 naa_extra=(--late-receives-ms 30) ;;
  foreign) conns=2 ;;
  slow) conns=2 naa_extra=(--kernel-delay-ms 3000 --kernel-queue 1) ;;
  *) echo "FAIL: unknown mode $mode"; exit 1 ;;
esac
"$naa" --memif-socket "$sock" --ip 192.0.2.1 --mac 02:00:00:00:00:01 --exit-after "$conns" \
  --timeout "${NAA_TIMEOUT:-60}" --pcap "$work/naa.pcap" --tx-drop "$naa_drop" --fault-seed 11 "${naa_extra[@]}" \
  > "$work/naa.log" 2>&1 &
pid=$!
for _ in $(seq 150); do grep -q "listening on rdma_cm port" "$work/naa.log" && break; sleep 0.1; done
export NAAICE_ROCE="pmd=memif,socket=$sock,role=client,ip=192.0.2.2,mac=02:00:00:00:00:02,tx_drop=$host_drop,seed=5"
rc=0
if [[ $mode == errors ]]; then
  for e in too-many-regions invalid-address not-enough-memory unknown-function \
           bad-param-count bad-param-size; do
    "$client" -e "$e" 192.0.2.1 || rc=$?
  done
elif [[ $mode == foreign ]]; then
  "$client" -e foreign-rkey 192.0.2.1 || rc=$?
elif [[ $mode == slow ]]; then
  "$client" -e slow-kernel 192.0.2.1 || rc=$?
elif [[ $mode == rnr ]]; then
  "$client" -k vector_add -s 8192 -n "$calls" -H "$hosts" 192.0.2.1 || rc=$?
else
  "$client" -k all -s 8192 -n "$calls" -H "$hosts" 192.0.2.1 || rc=$?
fi
wait "$pid" || rc=$?
pid=
sed 's/^/naa: /' "$work/naa.log"
[[ $rc == 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
"$(dirname "$0")/check_capture.sh" "$pcap" "$work/naa.pcap" 20 | tail -1
if [[ $mode == errors ]]; then
  ts=(tshark -r "$work/naa.pcap" --disable-heuristic rpcrdma_infiniband
      -o infiniband.identify_payload:FALSE)
  # MRSP error messages the NAA sent (RC SEND Only from 192.0.2.1): type 0x00 and the code.
  errs=$("${ts[@]}" -Y 'ip.src == 192.0.2.1 && infiniband.bth.opcode == 4' -T fields -e data.data \
         2>/dev/null | grep '^00' | cut -c1-8 | sort -u | tr '\n' ' ')
  echo "MRSP error messages on the wire: $errs"
  for want in 00010000 00020000 00030000; do
    [[ $errs == *$want* ]] || { echo "FAIL: no MRSP error message $want on the wire"; exit 1; }
  done
  # Return codes: the immediates of the NAA's RDMA WRITE Last / Only with Immediate (9, 11),
  # above their lowest byte (NAAICE upstream's host decodes ntohl(imm) >> 8).
  imms=$("${ts[@]}" -Y 'ip.src == 192.0.2.1 && (infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)' -T fields \
         -e infiniband.immdt 2>/dev/null | cut -d, -f1 | sed 's/^0x//' | cut -c5-6 | sort -u | tr '\n' ' ')
  echo "return codes on the wire: $imms"
  for want in 00 10 12 13; do
    [[ $imms == *$want* ]] || { echo "FAIL: no result with return code $want on the wire"; exit 1; }
  done
fi
if [[ $mode == rnr ]]; then
  rnr=$(grep -o "RNR NAKs sent [0-9]*" "$work/naa.log" | grep -o "[0-9]*$")
  [[ ${rnr:-0} -gt 0 ]] || { echo "FAIL: the NAA sent no RNR NAK"; exit 1; }
  # On the wire: the NAA's RNR NAKs (ACK opcode 17, AETH syndrome 001xxxxx).
  naks=$(tshark -r "$work/naa.pcap" -Y 'ip.src == 192.0.2.1 && infiniband.bth.opcode == 17 && infiniband.aeth.syndrome >= 0x20 && infiniband.aeth.syndrome < 0x40' \
         2>/dev/null | grep -c . || true)
  echo "RNR NAKs sent by the NAA: $rnr ($naks on the wire)"
  [[ $naks -gt 0 ]] || { echo "FAIL: no RNR NAK on the wire"; exit 1; }
fi
if [[ $mode == foreign ]]; then
  # The NAA's NAK: ACK opcode 17, AETH syndrome 0x62 (NAK, remote access error).
  naks=$(tshark -r "$work/naa.pcap" -Y 'ip.src == 192.0.2.1 && infiniband.bth.opcode == 17 && infiniband.aeth.syndrome == 0x62' \
         2>/dev/null | grep -c . || true)
  echo "remote access error NAKs sent by the NAA: $naks"
  [[ $naks -gt 0 ]] || { echo "FAIL: no remote access error NAK on the wire"; exit 1; }
fi
if [[ $mode == slow ]]; then
  grep -q "calls .*busy 1" "$work/naa.log" || { echo "FAIL: the NAA counted no busy call"; exit 1; }
fi
echo "PASS naa_pair $mode"
