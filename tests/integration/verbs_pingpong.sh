#!/usr/bin/env bash
# One of Debian's unmodified ibverbs-utils pingpongs between two processes, each with the
# appliance in-process under libroce-verbs.so (LD_PRELOAD, ROCE_LINK) on one end of a net_memif
# link; the out-of-band exchange on the kernel's TCP (loopback). -g 0: the RoCE v2 GID of the
# port's address. Both sides must print their success lines.
#   verbs_pingpong.sh LIBROCE_VERBS WORKDIR PROG [ARGS...]     (ARGS go to both sides)
set -euo pipefail
lib=$(realpath "$1") work=$2 prog=$3; shift 3
command -v "$prog" >/dev/null || { echo "skipped: $prog not installed (ibverbs-utils)"; exit 77; }
# shellcheck source=tests/integration/lib_ports.sh
. "$(dirname "$0")/lib_ports.sh"
rm -rf "$work" && mkdir -p "$work"
port=$(port_base 1)
link="--pmd memif --iface $work/memif.sock --netdev-mtu 1500"
LD_PRELOAD=$lib ROCE_LINK="${link/memif /memif-server } --ip 192.0.2.71 --mac 02:00:00:00:00:71" \
  timeout 60 "$prog" -d roce0 -g 0 -p "$port" "$@" > "$work/server.txt" 2>&1 &
spid=$!
# the server's memif socket and TCP listener come up when it has opened the device
for _ in $(seq 100); do
  ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
  sleep 0.1
done
rc=0
LD_PRELOAD=$lib ROCE_LINK="$link --ip 192.0.2.72 --mac 02:00:00:00:00:72" \
  timeout 60 "$prog" -d roce0 -g 0 -p "$port" "$@" 127.0.0.1 > "$work/client.txt" 2>&1 || rc=$?
wait "$spid" || rc=$?
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ $rc == 0 ]] || { echo "FAIL: $prog exited with $rc"; exit 1; }
for side in server client; do
  grep -q "GID ::ffff:192.0.2.7" "$work/$side.txt" || { echo "FAIL: $side: no RoCE v2 GID"; exit 1; }
  grep -Eq "^[0-9]+ bytes in [0-9.]+ seconds" "$work/$side.txt" &&
    grep -Eq "^[0-9]+ iters in [0-9.]+ seconds = [0-9.]+ usec/iter" "$work/$side.txt" ||
    { echo "FAIL: $side did not finish"; exit 1; }
done
echo "OK: $prog $*"
