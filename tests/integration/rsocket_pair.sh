#!/usr/bin/env bash
# Debian's unmodified rstream or riostream (rdmacm-utils: rsockets) between two processes, each
# with the appliance in-process under libroce-verbs.so (LD_PRELOAD, ROCE_LINK) on one end of a
# net_memif link and our librdmacm.so.1 (LD_LIBRARY_PATH). The same ARGS go to both sides (use
# -T v: the receiver checks every byte and exits non-zero on a mismatch). Both sides must exit 0
# and print one result line per test (the header and the `custom` line, or the eight lines of a
# full run without -S/-C). TOOL `refused`: rstream (ARGS) connects to a port nobody listens on
# and must fail with "Connection refused".
#   rsocket_pair.sh LIBROCE_VERBS RDMACM_DIR WORKDIR TOOL [ARGS...]
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") work=$3 tool=$4
shift 4
args=("$@")
srv_ip=192.0.2.83 cli_ip=192.0.2.84
prog=$tool
[[ $tool == refused ]] && prog=rstream
command -v "$prog" >/dev/null || { echo "skipped: $prog not installed (rdmacm-utils)"; exit 77; }
[[ -e $cmdir/librdmacm.so.1 ]] || { echo "FAIL: no librdmacm.so.1 in $cmdir"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
link="--pmd memif --iface $work/memif.sock --netdev-mtu 1500"
LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir \
  ROCE_LINK="${link/memif /memif-server } --ip $srv_ip --mac 02:00:00:00:00:83" \
  timeout 120 "$prog" -b "$srv_ip" -p 7471 "${args[@]}" > "$work/server.txt" 2>&1 &
spid=$!
for _ in $(seq 100); do
  [[ -S $work/memif.sock ]] && break
  sleep 0.1
done
sleep 0.5
rc=0
port=7471
[[ $tool == refused ]] && port=7479
LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir \
  ROCE_LINK="$link --ip $cli_ip --mac 02:00:00:00:00:84" \
  timeout 120 "$prog" -s "$srv_ip" -p "$port" "${args[@]}" > "$work/client.txt" 2>&1 || rc=$?
src=0
if [[ $tool == refused ]]; then
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
else
  wait "$spid" || src=$?
fi
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
if [[ $tool == refused ]]; then
  [[ $rc != 0 ]] || { echo "FAIL: rstream connected to a port nobody listens on"; exit 1; }
  # Blocking (-T b): rconnect fails; else rconnect says EINPROGRESS and rpoll reports POLLERR.
  grep -Eq '^(rconnect|rpoll): Connection refused' "$work/client.txt" ||
    { echo "FAIL: no 'rconnect: Connection refused' or 'rpoll: Connection refused'"; exit 1; }
  echo "OK: refused"
  exit 0
fi
[[ $rc == 0 ]] || { echo "FAIL: client $tool exited with $rc"; exit 1; }
[[ $src == 0 ]] || { echo "FAIL: server $tool exited with $src"; exit 1; }
want=1
[[ " ${args[*]} " == *" -S "* || " ${args[*]} " == *" -C "* ]] || want=8
for side in server client; do
  n=$(grep -Ec '^(custom|[0-9]+[kmg]?_(lat|bw)) +[0-9]+[kmg]? ' "$work/$side.txt" || true)
  ((n == want)) || { echo "FAIL: $side: $n result lines, wanted $want"; exit 1; }
  if grep -q 'verification failed' "$work/$side.txt"; then
    echo "FAIL: $side: data verification failed"
    exit 1
  fi
done
echo "OK: $tool ${args[*]}"
