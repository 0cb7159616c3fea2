#!/usr/bin/env bash
# The same example program as roced_attach.sh on libroce's in-process backend
# (Context::open_local): two processes, each with its own engine and poll loop on one end of a
# net_memif link, no roced. SEND, WRITE and READ checked, then a second of WRITE + READ-back.
#   attach_local.sh EXAMPLE WORKDIR
set -euo pipefail
ex=$(realpath "$1") work=$2
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
tcp=$(port_base 1)
"$ex" --local-memif "$work/memif.sock" --listen "$tcp" --seconds 1 > "$work/a.log" 2>&1 &
a=$!
trap 'kill -9 $a 2>/dev/null || true' EXIT
sleep 0.5  # the memif server first
"$ex" --local-memif "$work/memif.sock" --connect "127.0.0.1:$tcp" --seconds 1 > "$work/b.log" 2>&1 \
  || { cat "$work/a.log" "$work/b.log"; exit 1; }
wait "$a" || { cat "$work/a.log"; exit 1; }
cat "$work/a.log" "$work/b.log"
grep -q "OK: received SEND of 65536 bytes" "$work/a.log"
grep -q "OK: SEND of 65536 bytes, WRITE of 65536 bytes, READ of 65536 bytes" "$work/b.log"
grep -Eq "OK: [0-9]+ WRITE \+ READ-back rounds" "$work/b.log"
echo "attach_local: OK"
