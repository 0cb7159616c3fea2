#!/usr/bin/env bash
# Runs roce-link-demo, then checks A's capture with the stack's own parser and with tshark.
#   run_pair.sh PAIR_BIN ROCE_PCAP_BIN WORKDIR memif|af_packet [LOSS]
set -euo pipefail
pair=$1 pcap=$2 work=$3 pmd=$4 loss=${5:-0}
rm -rf "$work" && mkdir -p "$work"
"$pair" --workdir "$work" --pmd "$pmd" --loss "$loss"
"$pcap" --check "$work/a.pcap"
# Every RoCE frame must dissect as InfiniBand with no malformed or expert items.
out=$(tshark -r "$work/a.pcap" --disable-heuristic rpcrdma_infiniband -Y infiniband \
        -T fields -e frame.number -e _ws.malformed -e _ws.expert.message 2>/dev/null)
frames=$(printf '%s\n' "$out" | grep -c . || true)
bad=$(printf '%s\n' "$out" | awk -F'\t' '$2 != "" || $3 != ""' | grep -c . || true)
echo "tshark: $frames RoCEv2 frames, $bad with errors"
[[ $frames -gt 100 && $bad -eq 0 ]]
