#!/usr/bin/env bash
# rsocket_api_client (the rsockets calls Debian's tools do not make) against Debian's
# unmodified rstream serving, both over our rsockets with the appliance in-process on net_memif.
# The client must report no failure, rstream's server must verify the data and exit 0.
#   rsocket_api.sh LIBROCE_VERBS RDMACM_DIR WORKDIR CLIENT
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") work=$3 client=$(realpath "$4")
srv_ip=192.0.2.87 cli_ip=192.0.2.88
command -v rstream >/dev/null || { echo "skipped: rstream not installed (rdmacm-utils)"; exit 77; }
[[ -e $cmdir/librdmacm.so.1 ]] || { echo "FAIL: no librdmacm.so.1 in $cmdir"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
link="--pmd memif --iface $work/memif.sock --netdev-mtu 1500"
LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir \
  ROCE_LINK="${link/memif /memif-server } --ip $srv_ip --mac 02:00:00:00:00:87" \
  timeout 60 rstream -b "$srv_ip" -p 7474 -T v -T b -S 16 -C 1 > "$work/server.txt" 2>&1 &
spid=$!
for _ in $(seq 100); do
  [[ -S $work/memif.sock ]] && break
  sleep 0.1
done
sleep 0.5
rc=0
LD_PRELOAD=$lib LD_LIBRARY_PATH=$cmdir ROCE_LINK="$link --ip $cli_ip --mac 02:00:00:00:00:88" \
  timeout 60 "$client" "$srv_ip" 7474 "$cli_ip" > "$work/client.txt" 2>&1 || rc=$?
src=0
wait "$spid" || src=$?
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ $rc == 0 ]] || { echo "FAIL: rsocket_api_client exited with $rc"; exit 1; }
[[ $src == 0 ]] || { echo "FAIL: rstream's server exited with $src"; exit 1; }
grep -Eq '^custom +16 ' "$work/server.txt" || { echo "FAIL: no result line from the server"; exit 1; }
echo "OK"
