#!/usr/bin/env bash
# Debian's perftest binaries (never rebuilt) on the appliance through the libibverbs provider,
# on their ibv_wr_* post path (the extended API, verbs/provider/ex_api.cc): server and client
# are two in-process appliance processes (LD_PRELOAD=libroce-verbs.so, ROCE_LINK).
# perftest 4.5 takes that path only on device part numbers it knows for it, so
# perftest_wr_api_shim.so presents a ConnectX-5 part number (see its comment). Both sides must
# say "ibv_wr* API : ON", exit 0 and print their result row.
# The link: net_af_packet on a veth pair between two network namespaces (ns_pair.sh), up
# without the peer as a NIC's; perftest's exchange on the management veths. Not net_memif:
# perftest gives up on a port that is down right after opening it, a memif server's port is
# down until its client joins, and with ROCE_LINK_WAIT the server listens for perftest's TCP
# exchange only once the client's port is up, while the client connects at once and does not
# retry (a race). Exit 77 (skipped) without perftest, root, iproute2 or namespaces.
#   verbs_perftest_wr.sh LIBROCE_VERBS SHIM WORKDIR TEST [ARGS...]   (ARGS go to both sides)
set -euo pipefail
lib=$(realpath "$1") shim=$(realpath "$2") work=$3 test=$4
shift 4
command -v "$test" >/dev/null || { echo "skipped: $test not installed (Debian package perftest)"; exit 77; }
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"; exit 77
fi
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
port=$(port_base 1)
a=roce-vw-a-$$ b=roce-vw-b-$$
# shellcheck source=tests/integration/ns_pair.sh
. "$(dirname "$(realpath "$0")")/ns_pair.sh"
cleanup() {
  [[ -n $spid ]] && kill "$spid" 2>/dev/null
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  return 0
}
spid=
trap cleanup EXIT
ns_pair_up "$a" "$b"
server_addr=192.0.2.11
srv=(ip netns exec "$a") cli=(ip netns exec "$b")
srv_link="--pmd af_packet --iface veth-a --ip 192.0.2.121 --mac 02:00:5e:00:1e:01 --lcore 1"
cli_link="--pmd af_packet --iface veth-b --ip 192.0.2.122 --mac 02:00:5e:00:1e:02 --lcore 0"
run() {  # NAME LINK [SERVER]  (in the namespace before it, if any)
  local name=$1 link=$2
  shift 2
  env LD_PRELOAD="$lib $shim" ROCE_LINK="$link" \
    timeout 60 "$test" -d roce0 -F -p "$port" "${args[@]}" "$@" > "$work/$name.txt" 2>&1
}
args=("$@")
"${srv[@]}" bash -c "$(declare -f run); $(declare -p lib shim test port args work); run server '$srv_link'" &
spid=$!
for _ in $(seq 300); do  # the server listens once its device is open
  "${srv[@]}" ss -Htln "sport = :$port" 2>/dev/null | grep -q . && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
rc=0
"${cli[@]}" bash -c "$(declare -f run); $(declare -p lib shim test port args work); run client '$cli_link' $server_addr" || rc=$?
wait "$spid" || rc=$?
spid=
sed 's/^/server: /' "$work/server.txt"
sed 's/^/client: /' "$work/client.txt"
[[ $rc == 0 ]] || { echo "FAIL: $test exited with $rc"; exit 1; }
for side in server client; do
  grep -Eq "ibv_wr\* API +: ON" "$work/$side.txt" ||
    { echo "FAIL: $side did not take perftest's ibv_wr_* path"; exit 1; }
done
# The result row: a number of bytes and iterations, then the measurements.
row=$(grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+" "$work/client.txt" | tail -1)
[[ -n $row ]] || { echo "FAIL: no result row"; exit 1; }
echo "PASS $test ${args[*]}: $row"
