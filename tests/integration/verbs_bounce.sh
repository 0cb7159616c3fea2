#!/usr/bin/env bash
# The attached provider's bounce buffer (inline data is copied into it) when the send queue is
# full: two roced on net_memif, a sender attached to A posts 24 inline SENDs on a 4-deep queue
# and retries each post refused with ENOMEM while the receiver, attached to B, has posted no
# receive (RNR). A refused post must not take a slot of the buffer: every message must arrive
# with its own bytes (verbs_bounce.c).
#   verbs_bounce.sh ROCED LIBROCE_VERBS WORKDIR VERBS_BOUNCE
set -euo pipefail
roced=$(realpath "$1") lib=$(realpath "$2") work=$3 prog=$(realpath "$4")
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=vbounce$$
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0e:01 192.0.2.95 0
appliance b client 02:00:5e:00:0e:02 192.0.2.96 1
fail() { echo "FAIL: $*"; exit 1; }
export LD_PRELOAD=$lib
ROCE_ATTACH=$work/b.sock timeout 40 "$prog" recv "$work" 192.0.2.95 > "$work/recv.txt" 2>&1 &
rpid=$!
rc=0
ROCE_ATTACH=$work/a.sock timeout 40 "$prog" send "$work" 192.0.2.96 > "$work/send.txt" 2>&1 || rc=$?
wait "$rpid" || rc=$?
sed 's/^/sender: /' "$work/send.txt"
sed 's/^/receiver: /' "$work/recv.txt"
[[ $rc == 0 ]] || fail "verbs_bounce exited with $rc"
grep -Eq "posts refused with ENOMEM" "$work/send.txt" || fail "the sender was never refused"
grep -qx "receiver: 24 of 24 received, 0 wrong" "$work/recv.txt" || fail "messages lost or wrong"
echo "PASS verbs_bounce"
