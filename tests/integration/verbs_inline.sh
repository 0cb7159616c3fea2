#!/usr/bin/env bash
# A 16-byte IBV_SEND_INLINE on a QP made with max_inline_data 0 (one SGE): Debian's unmodified
# rdma_xserver / rdma_xclient -c r (rdmacm-utils; rdma_create_ep with cap.max_inline_data 0,
# then rdma_post_send(..., IBV_SEND_INLINE) of 16 bytes) between two in-process appliance
# processes on net_memif. rxe reports the room of a send queue entry as the inline capacity
# (max(max_send_sge x 16, max_inline_data)) and the send goes; before the provider did the
# same, rdma_xclient ended with EINVAL ("end 22"). Both must say "end 0". With ROCED, the
# same again attached to two roced on net_memif (the inline bytes go through the QP's bounce
# buffer).
#   verbs_inline.sh LIBROCE_VERBS RDMACM_DIR WORKDIR [ROCED]
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") work=$3 roced=${4:+$(realpath "$4")}
command -v rdma_xclient >/dev/null || { echo "skipped: rdma_xclient not installed (rdmacm-utils)"; exit 77; }
# shellcheck source=tests/integration/lib_ports.sh
. "$(dirname "$0")/lib_ports.sh"
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
port=$(port_base 1)
spid=
pids=()
tag=vinline$$
cleanup() {
  local rc=$?
  [[ -n $spid ]] && kill "$spid" 2>/dev/null
  [[ -n $roced ]] && stop_all "$rc"
  return 0
}
trap cleanup EXIT
export LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir
pair() {  # NAME SERVER_ENV CLIENT_ENV SERVER_ADDRESS
  local name=$1 senv=$2 cenv=$3 addr=$4 rc=0 src=0
  env "$senv" timeout 60 rdma_xserver -p "$port" -c r > "$work/$name-server.txt" 2>&1 &
  spid=$!
  for _ in $(seq 100); do  # it listens right after opening its device
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    [[ $name == in-process && -S $work/memif.sock ]] && { sleep 0.5; break; }
    sleep 0.1
  done
  env "$cenv" timeout 60 rdma_xclient -s "$addr" -p "$port" -c r > "$work/$name-client.txt" 2>&1 || rc=$?
  wait "$spid" || src=$?
  spid=
  sed "s/^/$name server: /" "$work/$name-server.txt"
  sed "s/^/$name client: /" "$work/$name-client.txt"
  grep -q "^rdma_xclient: end 0$" "$work/$name-client.txt" || { echo "FAIL: $name rdma_xclient ($rc)"; exit 1; }
  grep -q "^rdma_xserver: end 0$" "$work/$name-server.txt" || { echo "FAIL: $name rdma_xserver ($src)"; exit 1; }
}
link="--pmd memif --iface $work/memif.sock --netdev-mtu 1500"
pair in-process "ROCE_LINK=${link/memif /memif-server } --ip 192.0.2.87 --mac 02:00:00:00:00:87" \
  "ROCE_LINK=$link --ip 192.0.2.88 --mac 02:00:00:00:00:88" 192.0.2.87
if [[ -n $roced ]]; then
  # shellcheck source=tests/integration/lib_appliance.sh
  . "$(dirname "$0")/lib_appliance.sh"
  memif_sock="roced-memif.sock"
  appliance a server 02:00:5e:00:1f:21 192.0.2.135 0
  appliance b client 02:00:5e:00:1f:22 192.0.2.136 1
  pair attached "ROCE_ATTACH=$work/b.sock" "ROCE_ATTACH=$work/a.sock" 192.0.2.136
fi
echo "PASS verbs_inline"
