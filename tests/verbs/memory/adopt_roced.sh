#!/usr/bin/env bash
# Attached memory (verbs/memory/adopt.h) against real roced instances: two roced on a net_memif
# link (no hugepages, no root); verbs-memory-attached, attached to A and to B in one process,
# adopts a program's own memory on A (malloc, stack, overlapping ranges, a read-only mapping)
# and B's context WRITEs into it and READs it over the link, every byte checked at the
# program's own addresses. Then roced A's MRs, memory and clients return to their baseline after
# the program deregisters, and after a program holding registrations is killed with kill -9.
# Last, the cost of adoption (bench), printed for docs/verbs-compat.md.
#   adopt_roced.sh ROCED ROCE_CTL VERBS_MEMORY_ATTACHED WORKDIR
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") prog=$(realpath "$3") work=$4
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=adopt$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/../../integration/lib_ports.sh"
tcp=$(port_base 2)
prom_a=127.0.0.1:$tcp prom_b=127.0.0.1:$((tcp + 1))
pids=()
cleanup() {
  local rc=$?
  if [[ $rc != 0 && ${#pids[@]} != 0 ]]; then
    "$ctl" -p "$prom_a" counters || true
    tail -n 20 "$work"/*.log
  fi
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$(realpath "$0")")/../../integration/lib_appliance.sh"
quotas="  quotas:
    max_qps: 8
    max_memory: 268435456
    max_regions: 32"
appliance a server 02:00:5e:00:0c:01 192.0.2.71 0 "$prom_a" "$quotas"
appliance b client 02:00:5e:00:0c:02 192.0.2.72 1 "$prom_b" "$quotas"
counter() {  # NAME -> A's value on port p0
  "$ctl" -p "$prom_a" --all counters | awk -v n="$1" '$1 == "p0" && $2 == n { print $3 }'
}
state() { echo "mrs $(counter mrs) memory $(counter attach_memory_bytes) clients $(counter attach_clients)"; }
sleep 0.3
baseline=$(state)
echo "A at the start: $baseline"
back_to_baseline() {  # WHEN
  local now
  for _ in $(seq 30); do
    now=$(state)
    [[ $now == "$baseline" ]] && { echo "A $1: $now (the baseline)"; return 0; }
    sleep 0.1
  done
  echo "FAIL: A $1: $now, not the baseline $baseline"
  exit 1
}
wait_line() {  # FILE PATTERN PID
  for _ in $(seq 100); do grep -q "$2" "$1" && return 0; kill -0 "$3" 2>/dev/null || break; sleep 0.1; done
  cat "$1"
  echo "FAIL: no '$2' in $1"
  exit 1
}

# ---- 1. adopted memory, WRITE and READ by a peer ----------------------------------------------
"$prog" check "$work/a.sock" "$work/b.sock" | tee "$work/check.log"
for what in "malloc'd buffer adopted" "stack buffer adopted" "overlapping registrations share" \
            "read-only mapping: EFAULT" "a range with an unmapped page: EFAULT" \
            "regions at file offsets" "every region released"; do
  grep -q "OK: $what" "$work/check.log" || { echo "FAIL: no 'OK: $what'"; exit 1; }
done
back_to_baseline "after the program deregistered and exited"

# ---- 2. dereg gives roced's memory back; kill -9 gives back the rest ---------------------------
"$prog" hold "$work/a.sock" released > "$work/released.log" 2>&1 &
h=$!
wait_line "$work/released.log" HOLDING "$h"
sleep 0.3
mrs=$(counter mrs) mem=$(counter attach_memory_bytes)
read -r _ bmrs _ bmem _ <<< "$baseline"
echo "A with a client that registered 8 MiB twice and released it: mrs $mrs memory $mem"
[[ $mrs == "$bmrs" ]] || { echo "FAIL: MRs left after dereg"; exit 1; }
(( mem - bmem < 8 << 20 )) || { echo "FAIL: roced still holds the released regions ($mem bytes)"; exit 1; }
kill -9 "$h"
wait "$h" 2>/dev/null || true
back_to_baseline "after kill -9 of a client that had released"

"$prog" hold "$work/a.sock" registered > "$work/registered.log" 2>&1 &
h=$!
wait_line "$work/registered.log" HOLDING "$h"
sleep 0.3
during=$(state)
echo "A with a client holding two adopted MRs: $during"
[[ $(counter mrs) == $((bmrs + 2)) ]] || { echo "FAIL: the two MRs are not there"; exit 1; }
kill -9 "$h"
wait "$h" 2>/dev/null || true
back_to_baseline "after kill -9 of a client holding adopted MRs"
kill -0 "${pids[0]}" || { echo "FAIL: roced A died"; exit 1; }

# ---- 3. the cost --------------------------------------------------------------------------------
"$prog" bench "$work/a.sock" | tee "$work/bench.log"
back_to_baseline "after the benchmark"
echo "OK: attached memory against roced"
