#!/usr/bin/env bash
# A 16-byte IBV_SEND_INLINE on a QP made with max_inline_data 0 (one SGE): Debian's unmodified
# rdma_xserver / rdma_xclient -c r (rdmacm-utils; rdma_create_ep with cap.max_inline_data 0,
# then rdma_post_send(..., IBV_SEND_INLINE) of 16 bytes) between two in-process appliance
# processes on net_memif. rxe reports the room of a send queue entry as the inline capacity
# (max(max_send_sge x 16, max_inline_data)) and the send goes; before the provider did the
# same, rdma_xclient ended with EINVAL ("end 22"). Both must say "end 0".
#   verbs_inline.sh LIBROCE_VERBS RDMACM_DIR WORKDIR
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") work=$3
command -v rdma_xclient >/dev/null || { echo "skipped: rdma_xclient not installed (rdmacm-utils)"; exit 77; }
# shellcheck source=tests/integration/lib_ports.sh
. "$(dirname "$0")/lib_ports.sh"
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
port=$(port_base 1)
link="--pmd memif --iface $work/memif.sock --netdev-mtu 1500"
export LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir
ROCE_LINK="${link/memif /memif-server } --ip 192.0.2.87 --mac 02:00:00:00:00:87" \
  timeout 60 rdma_xserver -p "$port" -c r > "$work/server.txt" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -S $work/memif.sock ]] && break; sleep 0.1; done
sleep 0.5  # it listens right after opening its device
rc=0
ROCE_LINK="$link --ip 192.0.2.88 --mac 02:00:00:00:00:88" \
  timeout 60 rdma_xclient -s 192.0.2.87 -p "$port" -c r > "$work/client.txt" 2>&1 || rc=$?
src=0
wait "$spid" || src=$?
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
grep -q "^rdma_xclient: end 0$" "$work/client.txt" || { echo "FAIL: rdma_xclient ($rc)"; exit 1; }
grep -q "^rdma_xserver: end 0$" "$work/server.txt" || { echo "FAIL: rdma_xserver ($src)"; exit 1; }
echo "PASS verbs_inline"
