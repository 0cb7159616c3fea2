#!/usr/bin/env bash
# Optional resource estimate of the RTL with yosys (Debian's package). Default: yosys's generic
# synthesis without ABC (fast; gate-level cells: an upper bound on logic, exact flip-flops).
# ROCE_FPGA_XILINX=1 maps to Xilinx UltraScale+ LUTs (the family of Coyote's U55C/U250) instead:
# much slower (over 15 minutes for the 64-byte-per-clock CRC on one core). No timing: yosys has
# no Xilinx timing model.
#   fpga/rtl/estimate.sh [MODULE]      (default: icrc_unit; or header_parser)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module="${1:-icrc_unit}"
if ! command -v yosys >/dev/null; then
  echo "estimate: yosys is not installed (scripts/install-deps.sh installs it); skipped"
  exit 0
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if [[ -n "${ROCE_FPGA_XILINX:-}" ]]; then
  flow="synth_xilinx -family xcup -top $module -flatten"
  what="Xilinx UltraScale+ cells"
else
  flow="synth -top $module -flatten -noabc"
  what="generic cells, no ABC"
fi
yosys -q -l "$log" -p "read_verilog -sv -I $here $here/*.sv; $flow; stat" >/dev/null
echo "estimate: $module, $what (yosys $(yosys -V | awk '{print $2}'))"
awk '/Number of cells/ { f = 1 } f && /^$/ { exit } f' "$log"
