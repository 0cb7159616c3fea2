#!/usr/bin/env bash
# One of Debian's perftest tools in its rdma_cm mode (-R: the exchange and the test QPs both
# connected by librdmacm) between two appliance processes, over our librdmacm.so.1 and the
# provider, launched by roce-run:
#   local     each side in-process on one end of a net_memif link (roce-run --link; the
#             server's end is the memif server and waits for the client's, ROCE_LINK_WAIT);
#   attached  two roced on a memif link, the server a client of roced B, the client of A.
# Both sides must exit 0, say "Data ex. method : rdma_cm", and the client print its result row.
#
# perftest 4.5's own race (docs/verbs-compat.md, "perftest -R"): after the exchange on the
# control connection the server only then listens for the test QPs (create_rdma_cm_connection:
# ctx_hand_shake, then rdma_cm_server_connection's rdma_listen, src/perftest_communication.c), while
# the client connects as soon as its side of the exchange is done; a REQ that arrives first is
# refused (REJ 8, no listener: what the kernel's CM answers too), and the client's retry then
# uses the ids it has just destroyed (rdma_cm_client_connection: rdma_cm_destroy_cma frees
# nodes[] and the channel, the next _rdma_cm_client_connection resolves on them) and crashes.
# perftest issue #93. The window is the server's way from its send completion to rdma_listen
# against the client's from its receive to rdma_connect: the server loses it when the scheduler
# leaves it waiting (a loaded 2-CPU host: 1 run in 4). So the client runs at nice 10, and this
# script starts the pair again (a new port, fresh processes) when, and only when, the client
# shows exactly that: the REJECTED event with status 8 (a message only the test QPs' connection
# prints), and no result row. Every attempt is printed; any other failure fails at once.
#   rdmacm_perftest.sh ROCE_RUN ROCED WORKDIR MODE TOOL [ARGS...]   (ARGS go to both sides)
# Environment: ATTEMPTS (default 8).
set -euo pipefail
run=$(realpath "$1") roced=$(realpath "$2") work=$3 mode=$4 tool=$5
shift 5
command -v "$tool" >/dev/null || { echo "skipped: $tool not installed (Debian package perftest)"; exit 77; }
[[ -e $(dirname "$run")/../lib/rdmacm/librdmacm.so.1 ]] ||
  { echo "FAIL: no librdmacm.so.1 next to $run (build target roce_rdmacm)"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=rpt$$
srv_ip=192.0.2.83 cli_ip=192.0.2.84
pids=()
fail() { echo "FAIL: $*"; exit 1; }
if [[ $mode == attached ]]; then
  # shellcheck source=tests/integration/lib_appliance.sh
  source "$(dirname "$0")/lib_appliance.sh"
  trap 'stop_all $?' EXIT
  # A serves the client, B the server (as verbs_attached_perftest.sh)
  appliance a server 02:00:5e:00:0d:31 "$cli_ip" 0
  appliance b client 02:00:5e:00:0d:32 "$srv_ip" 1
elif [[ $mode != local ]]; then
  echo "rdmacm_perftest.sh: MODE is local or attached"; exit 2
fi

# side SERVER|CLIENT ATTEMPT_DIR PORT: the tool's command line under roce-run
side() {
  local who=$1 dir=$2 port=$3
  local flags=(-R -d roce0 -F -p "$port" "${args[@]}")
  local peer=() nice=()
  [[ $who == client ]] && peer=("$srv_ip") nice=(nice -n 10)
  if [[ $mode == attached ]]; then
    local sock=$work/b.sock
    [[ $who == client ]] && sock=$work/a.sock
    echo timeout 120 "${nice[@]}" stdbuf -oL "$run" --attach "$sock" -- "$tool" "${flags[@]}" "${peer[@]}"
  else
    local ip=$srv_ip mac=02:00:00:00:00:83 pmd=memif-server
    [[ $who == client ]] && ip=$cli_ip mac=02:00:00:00:00:84 pmd=memif
    echo timeout 120 "${nice[@]}" env ROCE_LINK_WAIT=30 stdbuf -oL "$run" --link \
      "'--pmd $pmd --iface $dir/memif.sock --netdev-mtu 1500 --ip $ip --mac $mac'" \
      -- "$tool" "${flags[@]}" "${peer[@]}"
  fi
}

args=("$@")
attempts=${ATTEMPTS:-8}
port=$((18515 + RANDOM % 1000))
for attempt in $(seq "$attempts"); do
  dir=$work/attempt$attempt
  mkdir -p "$dir"
  eval "$(side server "$dir" "$port")" > "$dir/server.txt" 2>&1 &
  spid=$!
  if [[ $mode == local ]]; then
    # the server's memif socket appears when it opens its device; it waits there for the client
    for _ in $(seq 100); do [[ -S $dir/memif.sock ]] && break; sleep 0.1; done
  else
    # it says so right before it binds and listens (roced's link is up already)
    for _ in $(seq 100); do
      grep -q "Waiting for client to connect" "$dir/server.txt" 2>/dev/null && break
      kill -0 "$spid" 2>/dev/null || break
      sleep 0.1
    done
    sleep 0.2
  fi
  rc=0
  eval "$(side client "$dir" "$port")" > "$dir/client.txt" 2>&1 || rc=$?
  src=0
  # The message is rdma_cm_event_error_handler's, which only the test QPs' connection reaches
  # (rdma_cm_connect_events, after the control connection and the exchange; a refused control
  # connection says "Unexpected CM event" instead).
  if [[ $rc != 0 ]] && grep -q "Event: RDMA_CM_EVENT_REJECTED; error: 8\." "$dir/client.txt" &&
     ! grep -Eq "^ +[0-9]+ +[0-9]+ +[0-9.]+" "$dir/client.txt"; then
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    echo "attempt $attempt: perftest's listen race (client REJECTED 8 before the server's" \
      "second rdma_listen, then its retry crashed, exit $rc): starting the pair again"
    port=$((port + 1))
    continue
  fi
  wait "$spid" || src=$?
  sed 's/^/server: /' "$dir/server.txt"
  sed 's/^/client: /' "$dir/client.txt"
  [[ $rc == 0 ]] || fail "client $tool exited with $rc"
  [[ $src == 0 ]] || fail "server $tool exited with $src"
  for s in server client; do
    grep -q "Data ex. method : rdma_cm" "$dir/$s.txt" || fail "$s: not rdma_cm"
  done
  # (The server of a READ or atomic latency test measures nothing: the client's row it is.)
  row=$(grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+" "$dir/client.txt" | tail -1 | xargs || true)
  [[ -n $row ]] || fail "the client printed no result"
  echo "PASS $tool -R $* ($mode, attempt $attempt of $attempts): $row"
  exit 0
done
fail "$tool -R: perftest's listen race in all $attempts attempts"
