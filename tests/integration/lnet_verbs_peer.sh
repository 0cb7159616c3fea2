#!/usr/bin/env bash
# A transfer machine owned by a client process attached to roced, as the server of the
# pingpong tools: roce-lnet-verbs-peer (client/lnet foreign connections) against roce-perf's
# rc_pingpong and srq_pingpong (which speak rdma-core's exchange) on a net_memif link. The
# peer's SENDs land several to a multi-message receive buffer; counts, bytes and contents are
# checked on both sides. Then the Tm's process is killed (-9) in the middle of a long
# srq_pingpong: roced's QP, MR and client counts return to their baseline, and a new Tm
# process is served as before. (tests/interop/lnet_verbs_peer.sh: against Linux rxe.)
#   lnet_verbs_peer.sh ROCED ROCE_CTL ROCE_LNET_VERBS_PEER ROCE_PERF WORKDIR
set -euo pipefail
roced=$(realpath "$1") ctl=$(realpath "$2") sink=$(realpath "$3") perf=$(realpath "$4") work=$5
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
# shellcheck source=tests/integration/lib_ports.sh
source "$(dirname "$(realpath "$0")")/lib_ports.sh"
tcp=$(port_base 8)
tag=lvp$$ prom=127.0.0.1:$((tcp + 7))
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
appliance a server 02:00:5e:00:0e:01 192.0.2.97 0 "$prom"
counter() {  # NAME -> value on port p0
  "$ctl" -p "$prom" --all counters | awk -v n="$1" '$1 == "p0" && $2 == n { print $3 }'
}
sleep 0.3
base_qps=$(counter qps) base_mrs=$(counter mrs)
for kind in rc srq kill rc; do
  port=$((tcp + ${#pids[@]}))
  if [[ $kind == kill ]]; then
    "$sink" --socket "$work/a.sock" --kind srq --size 1000 --iters 1000000 --tcp-port $port \
      > "$work/sink-kill.log" 2>&1 &
    s=$!
    "$perf" srq_pingpong --pmd memif --iface "$work/memif.sock" --ip 192.0.2.98 \
      --mac 02:00:5e:00:0e:02 --lcore 1 -s 1000 -n 1000000 -p $port --timeout 4 127.0.0.1 \
      > "$work/peer-kill.log" 2>&1 &
    p=$!
    for _ in $(seq 100); do [[ $(counter attach_qps) == 16 ]] && break; sleep 0.1; done
    sleep 0.5
    during=$(counter attach_qps) lost_before=$(counter attach_clients_lost)
    kill -9 $s
    wait $s 2>/dev/null || true
    wait $p 2>/dev/null || true  # the peer's transfer ends (its QPs go unanswered)
    sleep 0.4                    # the counters are published every 100 ms
    echo "kill -9 of the Tm's process: attached QPs $during before, $(counter attach_qps) after;" \
      "qps $(counter qps) (baseline $base_qps), mrs $(counter mrs) (baseline $base_mrs)," \
      "clients $(counter attach_clients), lost $lost_before -> $(counter attach_clients_lost)"
    [[ $during == 16 ]] || { echo "FAIL: the Tm's 16 QPs were not up"; exit 1; }
    [[ $(counter qps) == "$base_qps" && $(counter mrs) == "$base_mrs" ]] || { echo "FAIL: resources left"; exit 1; }
    [[ $(counter attach_clients) == 0 && $(counter attach_clients_lost) == $((lost_before + 1)) ]] || { echo "FAIL: attach counts"; exit 1; }
    continue
  fi
  "$sink" --socket "$work/a.sock" --kind $kind --size 1000 --iters 400 --per-buffer 8 \
    --tcp-port $port > "$work/sink-$kind.log" 2>&1 &
  s=$!
  pids+=($s)
  "$perf" ${kind}_pingpong --pmd memif --iface "$work/memif.sock" --ip 192.0.2.98 \
    --mac 02:00:5e:00:0e:02 --lcore 1 -s 1000 -n 400 -p $port --timeout 60 127.0.0.1 \
    > "$work/peer-$kind.log" 2>&1 || { cat "$work/sink-$kind.log" "$work/peer-$kind.log"; echo "FAIL: $kind peer"; exit 1; }
  wait $s || { cat "$work/sink-$kind.log"; echo "FAIL: $kind transfer machine"; exit 1; }
  cat "$work/sink-$kind.log"
  grep -q "OK: [0-9]* messages of 1000 bytes from the verbs peer, several to a buffer" "$work/sink-$kind.log"
  grep -q "^buffers holding 8 messages: " "$work/sink-$kind.log"
  grep -q "400 iters in" "$work/peer-$kind.log"
done
echo "lnet_verbs_peer: OK"
