#!/usr/bin/env bash
# Checks a capture: the stack's own parser accepts every RoCEv2 frame, and tshark dissects at
# least MIN of them as InfiniBand with no malformed-packet or expert items.
#   check_capture.sh ROCE_PCAP_BIN FILE.pcap [MIN]
set -euo pipefail
pcap=$1 file=$2 min=${3:-100}
"$pcap" --check "$file"
# Payload heuristics would dissect our test data as other protocols (RPC-over-RDMA, an
# EtherType, CRTP...): the headers are what is checked.
out=$(tshark -r "$file" --disable-heuristic rpcrdma_infiniband -o infiniband.identify_payload:FALSE -Y infiniband \
        -T fields -e frame.number -e _ws.malformed -e _ws.expert.message 2>/dev/null)
frames=$(printf '%s\n' "$out" | grep -c . || true)
bad=$(printf '%s\n' "$out" | awk -F'\t' '$2 != "" || $3 != ""' | grep -c . || true)
echo "tshark: $frames RoCEv2 frames, $bad with errors"
[[ $frames -ge $min && $bad -eq 0 ]]
