#!/usr/bin/env bash
# Upstream NetFR's own test programs (telescope-proj/netfr test/host and test/client), compiled
# unchanged against OUR library (tests/unit/netfr/CMakeLists.txt builds them when NETFR_UPSTREAM
# is set at configure time), talk to each other through the appliance: each attached to its own
# roced (NETFR_LINK=attach=SOCKET, the only thing they are given beside their arguments), the two
# roced on a net_memif link. test/host writes its 128 MiB buffer whenever the client gives it
# back and reads datagrams; test/client advertises a 128 MiB buffer of the library's (a NULL
# pointer), acknowledges each write and sends "Hello server". Both run until killed: the test
# stops the client after SECONDS and counts writes on both sides.
#   netfr_upstream_programs.sh ROCED UPSTREAM_HOST UPSTREAM_CLIENT [SECONDS]
# Skipped (77) without the two programs (configured without NETFR_UPSTREAM).
set -uo pipefail
if [[ $# -lt 3 || ! -x $2 || ! -x $3 ]]; then
  echo "skipped: upstream's test programs were not built (configure with NETFR_UPSTREAM set)"
  exit 77
fi
# shellcheck disable=SC2034  # roced, tag: read by lib_appliance.sh
roced=$(realpath "$1") uphost=$(realpath "$2") upclient=$(realpath "$3") secs=${4:-20}
# shellcheck disable=SC2034
work=$(mktemp -d /tmp/netfr-upprog-XXXXXX) tag=nup$$ pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?; rm -rf "$work"' EXIT
appliance a server 02:00:00:00:00:01 192.0.2.1 0
appliance b client 02:00:00:00:00:02 192.0.2.2 1
# Line-buffered output (stdbuf): the programs print with printf and are stopped by signals.
NETFR_LINK=attach=$work/a.sock stdbuf -oL "$uphost" rdma 192.0.2.1 5010 > "$work/host.log" 2>&1 &
pids+=($!)
sleep 1
NETFR_LINK=attach=$work/b.sock timeout "$secs" stdbuf -oL "$upclient" rdma 192.0.2.2 6010 192.0.2.1 5010 \
  > "$work/client.log" 2>&1
rc=$?
sleep 1
writes=$(grep -c "^Received memory write event" "$work/client.log")
rates=$(grep -c "^Data rate" "$work/host.log")
echo "test/client: exit $rc after ${secs} s (124: stopped by the test), $writes writes received"
echo "test/host: $rates writes completed; $(grep "^Data rate" "$work/host.log" | tail -1)"
if [[ $rc != 124 ]]; then
  sed 's/^/client: /' "$work/client.log" | tail -20
  sed 's/^/host: /' "$work/host.log" | tail -20
  echo "FAIL: test/client ended by itself"
  exit 1
fi
[[ $writes -ge 2 && $rates -ge 2 ]] || { echo "FAIL: fewer than 2 writes"; exit 1; }
echo "PASS netfr_upstream_programs"
