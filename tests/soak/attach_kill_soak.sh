#!/usr/bin/env bash
# Attached clients killed with kill -9 in a loop while traffic flows (issue 27's soak).
# Two roced on a net_memif link. A survivor pair (a client of A, a client of B) loops verified
# WRITE + READ-back for the whole run. Meanwhile, round after round, a victim pair is started
# (alternately A's or B's side first), left to run for a random 0.2-1.5 s and one of its
# processes killed with kill -9 (sometimes both, sometimes mid-setup). At the end:
#  - the survivor pair finished with every byte verified (0 lost or corrupt bytes);
#  - both roced are alive, and their counts are back at the baseline taken before the loop:
#    attached clients (roce-ctl clients), QPs, MRs, CQs, attached memory, open fds, memfd
#    mappings; resident memory within 16 MiB of it.
#   attach_kill_soak.sh ROCED ROCE_CTL EXAMPLE WORKDIR      (ROCE_SOAK_SECONDS, default 600)
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") ex=$(realpath "$3") work=$4
seconds=${ROCE_SOAK_SECONDS:-600}
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=soak$$
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_ports.sh"
tcp=$(port_base 64)
prom_a=127.0.0.1:$((tcp + 62)) prom_b=127.0.0.1:$((tcp + 63))
pids=()
cleanup() {
  local rc=$?
  if [[ $rc != 0 && ${#pids[@]} != 0 ]]; then
    for e in "$prom_a" "$prom_b"; do echo "== counters $e"; "$ctl" -p "$e" counters || true; done
    tail -n 20 "$work"/a.log "$work"/b.log "$work"/surv-*.log
  fi
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  pkill -9 -f "$work/[ab].sock" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

# shellcheck source=../integration/lib_appliance.sh
source "$(dirname "$(realpath "$0")")/../integration/lib_appliance.sh"
appliance a server 02:00:5e:00:0b:01 192.0.2.71 0 "$prom_a"
appliance b client 02:00:5e:00:0b:02 192.0.2.72 1 "$prom_b"
counter() {  # ENDPOINT NAME -> value on port p0
  "$ctl" -p "$1" --all counters | awk -v n="$2" '$1 == "p0" && $2 == n { print $3 }'
}
# What roced holds: QPs, MRs, attached clients/CQs/memory, fds, memfd mappings, RSS (KiB).
snapshot() {  # ENDPOINT PID
  local c
  c="qps=$(counter "$1" qps) mrs=$(counter "$1" mrs) clients=$(counter "$1" attach_clients)"
  c+=" cqs=$(counter "$1" attach_cqs) memory=$(counter "$1" attach_memory_bytes)"
  c+=" fds=$(ls /proc/"$2"/fd | wc -l) memfd_maps=$(grep -c memfd: /proc/"$2"/maps || true)"
  echo "$c"
}
rss() { awk '/^VmRSS/ { print $2 }' /proc/"$1"/status; }

# Warm-up: one pair runs to the end, so that lazily allocated pools count in the baseline.
"$ex" --socket "$work/a.sock" --listen "$tcp" --seconds 1 > "$work/warm-a.log" 2>&1 &
w=$!
"$ex" --socket "$work/b.sock" --connect "127.0.0.1:$tcp" --seconds 1 > "$work/warm-b.log" 2>&1
wait $w
sleep 0.5
base_a=$(snapshot "$prom_a" "$pid_a") base_b=$(snapshot "$prom_b" "$pid_b")
rss_a=$(rss "$pid_a") rss_b=$(rss "$pid_b")
echo "baseline A: $base_a rss ${rss_a} KiB"
echo "baseline B: $base_b rss ${rss_b} KiB"

# The survivor pair, for the whole run.
"$ex" --socket "$work/a.sock" --listen $((tcp + 1)) --seconds "$seconds" --size 65536 \
  > "$work/surv-a.log" 2>&1 &
sa=$!
"$ex" --socket "$work/b.sock" --connect "127.0.0.1:$((tcp + 1))" --seconds "$seconds" --size 65536 \
  > "$work/surv-b.log" 2>&1 &
sb=$!

end=$((SECONDS + seconds - 5))
round=0 kills=0
while ((SECONDS < end)); do
  round=$((round + 1))
  port=$((tcp + 2 + round % 50))
  if ((round % 2)); then srv=a cli=b; else srv=b cli=a; fi
  "$ex" --socket "$work/$srv.sock" --listen "$port" --seconds 30 --size 262144 \
    > "$work/v-srv.log" 2>&1 &
  vs=$!
  "$ex" --socket "$work/$cli.sock" --connect "127.0.0.1:$port" --seconds 30 --size 262144 \
    > "$work/v-cli.log" 2>&1 &
  vc=$!
  sleep "$(printf '0.%03d' $((200 + RANDOM % 800)))"
  ((RANDOM % 3 == 0)) && sleep 0.5
  case $((round % 4)) in
    0) kill -9 "$vs" 2>/dev/null && kills=$((kills + 1)) ;;
    1) kill -9 "$vc" 2>/dev/null && kills=$((kills + 1)) ;;
    *) kill -9 "$vs" "$vc" 2>/dev/null && kills=$((kills + 2)) ;;
  esac
  # The other side notices (its next completion fails) within its own timeouts; don't wait
  # for it longer than 20 s.
  for _ in $(seq 200); do kill -0 "$vs" 2>/dev/null || kill -0 "$vc" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$vs" "$vc" 2>/dev/null || true
  wait "$vs" "$vc" 2>/dev/null || true
  kill -0 "$pid_a" && kill -0 "$pid_b" || { echo "FAIL: a roced died in round $round"; exit 1; }
  ((round % 20)) || echo "round $round: $kills processes killed; A: $(snapshot "$prom_a" "$pid_a")"
done
echo "$round rounds, $kills clients killed with kill -9"

wait "$sb" || { cat "$work/surv-b.log"; echo "FAIL: the survivor client"; exit 1; }
wait "$sa" || { cat "$work/surv-a.log"; echo "FAIL: the survivor server"; exit 1; }
grep -E "OK: [0-9]+ WRITE \+ READ-back rounds" "$work/surv-b.log"
sleep 1
now_a=$(snapshot "$prom_a" "$pid_a") now_b=$(snapshot "$prom_b" "$pid_b")
echo "after A: $now_a rss $(rss "$pid_a") KiB"
echo "after B: $now_b rss $(rss "$pid_b") KiB"
"$ctl" -p "$prom_a" clients
[[ $now_a == "$base_a" ]] || { echo "FAIL: A's counts are not back at the baseline"; exit 1; }
[[ $now_b == "$base_b" ]] || { echo "FAIL: B's counts are not back at the baseline"; exit 1; }
(($(rss "$pid_a") - rss_a < 16384 && $(rss "$pid_b") - rss_b < 16384)) \
  || { echo "FAIL: resident memory grew by more than 16 MiB"; exit 1; }
echo "attach_kill_soak: OK"
