#!/usr/bin/env bash
# Debian's unmodified rstream serving over our rsockets (appliance in-process on net_memif)
# against a hostile peer (rsocket_hostile) that breaks the protocol once per MODE. The server
# must refuse a connection with bad private data and keep serving, and end a connection whose
# peer lies about lengths, credits, operations or iomap indexes with an error
# ("rrecv: Connection reset by peer"), never with a crash or a hang.
#   rsocket_hostile.sh LIBROCE_VERBS RDMACM_DIR WORKDIR HOSTILE MODE...
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") work=$3 hostile=$(realpath "$4")
shift 4
srv_ip=192.0.2.85 cli_ip=192.0.2.86
command -v rstream >/dev/null || { echo "skipped: rstream not installed (rdmacm-utils)"; exit 77; }
[[ -e $cmdir/librdmacm.so.1 ]] || { echo "FAIL: no librdmacm.so.1 in $cmdir"; exit 1; }
fail=0
for mode in "$@"; do
  d=$work/$mode
  rm -rf "$d" && mkdir -p "$d"
  link="--pmd memif --iface $d/memif.sock --netdev-mtu 1500"
  LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir \
    ROCE_LINK="${link/memif /memif-server } --ip $srv_ip --mac 02:00:00:00:00:85" \
    timeout 30 rstream -b "$srv_ip" -p 7473 -T b -S 16 -C 1 > "$d/server.txt" 2>&1 &
  spid=$!
  for _ in $(seq 100); do
    [[ -S $d/memif.sock ]] && break
    sleep 0.1
  done
  sleep 0.5
  client() {
    LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir ROCE_LINK="$link --ip $cli_ip --mac 02:00:00:00:00:86" \
      timeout 30 "$hostile" "$srv_ip" 7473 "$1" >> "$d/client.txt" 2>&1
  }
  crc=0
  # First a connection the server must refuse (it keeps listening), then the bad message.
  client version || crc=$?
  [[ $crc == 0 ]] && { client "$mode" || crc=$?; }
  src=0
  wait "$spid" || src=$?
  sed 's/^/  server: /' "$d/server.txt"
  sed 's/^/  client: /' "$d/client.txt"
  if [[ $crc != 0 ]]; then
    echo "FAIL $mode: the hostile client exited with $crc"; fail=1
  elif [[ $src == 0 || $src == 124 || $src -ge 128 && $src != 255 ]]; then
    echo "FAIL $mode: rstream's server exited with $src (wanted an error exit, no crash, no hang)"
    fail=1
  elif ! grep -q 'rrecv: Connection reset by peer' "$d/server.txt"; then
    echo "FAIL $mode: no 'rrecv: Connection reset by peer' from the server"; fail=1
  else
    echo "OK $mode: refused version 2, then the connection ended with ECONNRESET (exit $src)"
  fi
done
exit $fail
