#!/usr/bin/env bash
# Runs roce-link-demo, then checks A's capture with the stack's own parser and with tshark.
#   run_pair.sh PAIR_BIN ROCE_PCAP_BIN WORKDIR memif|af_packet [LOSS]
set -euo pipefail
pair=$1 pcap=$2 work=$3 pmd=$4 loss=${5:-0}
rm -rf "$work" && mkdir -p "$work"
"$pair" --workdir "$work" --pmd "$pmd" --loss "$loss"
"$(dirname "$0")/check_capture.sh" "$pcap" "$work/a.pcap" 100
