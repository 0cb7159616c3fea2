#!/usr/bin/env bash
# Debian's unmodified libfabric, UCX and Open MPI binaries between two appliance processes
# (libroce-verbs.so, our librdmacm), in-process or attached to roced:
#   fi_pingpong    fi_pingpong -p verbs (FI_EP_DGRAM: UD QPs) with -c, every size checked
#                  (16 B: an inline send, fi_inject)
#   ucx_rc         ucx_perftest, UCT level: am_lat (inline sends) and put_bw over rc_verbs
#   ucx_ud         ucx_perftest, UCT level: am_lat over ud_verbs
#   ucx_tag        ucx_perftest, UCP level: tag_bw with UCX_TLS=rc_verbs,ud_verbs
#   mpi            mpirun -np 2, pml ucx over rc_verbs: tests/interop/mpi_verify.c (built here
#                  with Debian's mpicc) sends 1 B .. 4 MiB and checks every byte both ways
#   mpi_ud         the same over ud_verbs alone
# In-process: net_af_packet on the two ends of a veth pair in a network namespace made here
# (up without the peer, unlike a memif server's port: both tools open their device before they
# know their peer); out-of-band exchanges on its loopback. The veths get far-apart interface
# indexes: DPDK's af_packet PMD names its PACKET_FANOUT group after the pid and the ifindex,
# and two ranks' consecutive pids with consecutive ifindexes can collide.
# Attached: two roced on a net_memif link (lib_appliance.sh), each side attached to its own;
# fewer iterations: busy-polling programs and roceds share the host's cores (docs/client-api.md
# section 10: tens of ms per round trip on a loaded 2-core host).
# Exit 77 (skipped) without root, iproute2 or the package.
#   fabric_pair.sh LIBROCE_VERBS RDMACM_DIR ROCED WORKDIR MODE [attached]
set -euo pipefail
lib=$(realpath "$1") cmdir=$(realpath "$2") roced=$(realpath "$3") work=$4 mode=$5
attached=${6:-}
case $mode in
  fi_pingpong) need=(fi_pingpong) ;;
  ucx_*) need=(ucx_perftest) ;;
  mpi | mpi_ud) need=(mpirun mpicc ucx_info) ;;
  *) echo "usage: $0 LIB RDMACM_DIR ROCED WORKDIR fi_pingpong|ucx_rc|ucx_ud|ucx_tag|mpi|mpi_ud [attached]"; exit 2 ;;
esac
for t in "${need[@]}"; do
  command -v "$t" >/dev/null ||
    { echo "skipped: $t not installed (libfabric-bin, ucx-utils, openmpi-bin, libopenmpi-dev)"; exit 77; }
done
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then echo "skipped: needs root and iproute2"; exit 77; fi
here=$(dirname "$(realpath "$0")")
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
# shellcheck source=tests/integration/lib_ports.sh
. "$here/lib_ports.sh"
port=$(port_base 1)
ns=roce-fab-$$
spid=
pids=()
tag=fab$$
cleanup() {
  local rc=$?
  [[ -n $spid ]] && kill "$spid" 2>/dev/null
  if [[ -n $attached ]]; then stop_all "$rc"; else ip netns del "$ns" 2>/dev/null; fi
  return 0
}
trap cleanup EXIT
if [[ -n $attached ]]; then
  # shellcheck source=tests/integration/lib_appliance.sh
  . "$here/lib_appliance.sh"
  appliance a server 02:00:5e:00:1f:11 192.0.2.133 0
  appliance b client 02:00:5e:00:1f:12 192.0.2.134 1
  side_a="ROCE_ATTACH=$work/a.sock" side_b="ROCE_ATTACH=$work/b.sock"
  in_ns() { env LD_PRELOAD="$lib" LD_LIBRARY_PATH="$cmdir" "$@"; }
  run_ns() { "$@"; }
  n_fi=20 n_ucx=30 n_tag=100 n_mpi=1
else
  ip netns add "$ns" || { echo "skipped: cannot create network namespaces"; exit 77; }
  ip -n "$ns" link add va index 100 type veth peer name vb index 428
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=0 || true
  for l in va vb lo; do ip -n "$ns" link set "$l" up; done
  side_a="ROCE_LINK=--pmd af_packet --iface va --ip 192.0.2.131 --mac 02:00:5e:00:1f:01 --lcore 1"
  side_b="ROCE_LINK=--pmd af_packet --iface vb --ip 192.0.2.132 --mac 02:00:5e:00:1f:02 --lcore 0"
  in_ns() { ip netns exec "$ns" env LD_PRELOAD="$lib" LD_LIBRARY_PATH="$cmdir" "$@"; }
  run_ns() { ip netns exec "$ns" "$@"; }
  n_fi=500 n_ucx=2000 n_tag=1000 n_mpi=3
fi
fail() { echo "FAIL $mode: $*"; exit 1; }
# A server and its client: server ARGS... -- client ARGS... ; waits for the server's TCP port.
# ucx_perftest opens its device only once its peer has connected over TCP, so both ports
# start together; on a loaded host the server's can come up after the 3 s the client's
# ibv_create_ah waits for ARP (rdma-core's wait). That one case is run again, once.
pair() {
  local -a args=("$@")
  if pair_once "${args[@]}"; then return 0; fi
  grep -q "ibv_create_ah.*No route to host" "$work/client.txt" "$work/server.txt" ||
    fail "exited with an error"
  echo "note: the peer's port was not up within the ARP wait; once more"
  pair_once "${args[@]}" || fail "exited with an error"
}
pair_once() {
  local -a s=() c=()
  while [[ $1 != -- ]]; do s+=("$1"); shift; done
  shift
  c=("$@")
  in_ns "$side_a" timeout 150 "${s[@]}" > "$work/server.txt" 2>&1 &
  spid=$!
  for _ in $(seq 300); do
    run_ns ss -Htln "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  local rc=0
  in_ns "$side_b" timeout 150 "${c[@]}" > "$work/client.txt" 2>&1 || rc=$?
  wait "$spid" || rc=$?
  spid=
  sed 's/^/server: /' "$work/server.txt"
  sed 's/^/client: /' "$work/client.txt"
  [[ $rc == 0 ]]
}

case $mode in
  fi_pingpong)
    # -c: each side checks the bytes it receives ("Data check error" otherwise); sizes 64 B to
    # the UD MTU (1 KiB on a 1500-byte link), then 16 B (an inline send: fi_inject).
    for sz in all 16; do
      pair fi_pingpong -p verbs -e dgram -B "$port" -I $n_fi -S $sz -c -- \
        fi_pingpong -p verbs -e dgram -P "$port" -I $n_fi -S $sz -c 127.0.0.1
      [[ $sz == all ]] && sizes="64 256 1k" || sizes=$sz
      for side in server client; do
        ! grep -qi "error" "$work/$side.txt" || fail "$side reports an error"
        for size in $sizes; do
          grep -Eq "^$size +$n_fi +=$n_fi " "$work/$side.txt" || fail "$side: no result row for $size"
        done
      done
    done
    ;;
  ucx_rc | ucx_ud)
    tl=${mode#ucx_}_verbs
    for t in am_lat put_bw; do
      [[ $tl == ud_verbs && $t == put_bw ]] && continue  # UD has no RDMA
      # UD over RoCE: UCX 1.13 reads the IPv4/IPv6 kind of a datagram from ibv_wc.sl (what mlx5
      # puts there) and drops the others' datagrams unless this check is off (as on rxe).
      pair env UCX_UD_VERBS_ETH_DGID_CHECK=n ucx_perftest -p "$port" -- \
        env UCX_UD_VERBS_ETH_DGID_CHECK=n \
        ucx_perftest -p "$port" -t "$t" -x "$tl" -d roce0:1 -n "$n_ucx" -s 8 127.0.0.1
      grep -Eq "^Final: +$n_ucx " "$work/client.txt" || fail "$t over $tl: no Final row"
    done
    ;;
  ucx_tag)
    # UCP: rc_verbs for the data, ud_verbs to exchange its addresses (UCP's wireup needs a
    # transport that reaches an interface); -D bcopy..zcopy sizes, eager and rendezvous.
    for s in 64 65536; do
      pair env UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=roce0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n \
        UCX_LOG_LEVEL=debug ucx_perftest -p "$port" -- \
        env UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=roce0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n \
        UCX_LOG_LEVEL=debug ucx_perftest -p "$port" -t tag_bw -n $n_tag -s $s 127.0.0.1
      grep -Eq "^Final: +$n_tag " "$work/client.txt" || fail "tag_bw -s $s: no Final row"
      # the endpoint to the peer: its active message lane is rc_verbs on roce0:1
      grep -Eq "lane\[0\]: +[0-9]+:rc_verbs/roce0:1.* am " "$work/client.txt" ||
        fail "tag_bw -s $s: the client's AM lane is not rc_verbs/roce0:1"
    done
    ;;
  mpi | mpi_ud)
    tls=rc_verbs,ud_verbs tl=rc_verbs
    [[ $mode == mpi_ud ]] && tls=ud_verbs tl=ud_verbs
    mpicc -O2 -Wall -Wextra -o "$work/mpi_verify" "$here/../interop/mpi_verify.c" ||
      fail "mpicc failed"
    cat > "$work/rank.sh" <<RANK
#!/usr/bin/env bash
# each rank on its own end of the link
case \$OMPI_COMM_WORLD_RANK in
  0) export "$side_a" ;;
  *) export "$side_b" ;;
esac
export LD_PRELOAD="$lib" LD_LIBRARY_PATH="$cmdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "\$@"
RANK
    chmod +x "$work/rank.sh"
    # UCX between the ranks: rc_verbs (UCX_RNDV_THRESH=inf: every message an active message on
    # it, eager or bcopy/zcopy), ud_verbs for its wireup; or ud_verbs alone (mpi_ud). Each rank's endpoint to itself takes
    # self, and cma for its RMA lane: the appliance does not loop a QP's packets back to its
    # own port, so a QP cannot reach its own address (UCX_MAX_RNDV_RAILS=1: no second RMA
    # lane on rc_verbs to itself).
    rc=0
    run_ns env UCX_TLS=$tls,self,cma UCX_NET_DEVICES=roce0:1 \
      UCX_UD_VERBS_ETH_DGID_CHECK=n UCX_RNDV_THRESH=inf UCX_MAX_RNDV_RAILS=1 UCX_LOG_LEVEL=debug \
      timeout 180 mpirun -np 2 --oversubscribe --allow-run-as-root --mca pml ucx --mca btl self \
      --mca osc ucx -x UCX_TLS -x UCX_NET_DEVICES -x UCX_UD_VERBS_ETH_DGID_CHECK \
      -x UCX_RNDV_THRESH -x UCX_MAX_RNDV_RAILS -x UCX_LOG_LEVEL \
      "$work/rank.sh" "$work/mpi_verify" $n_mpi > "$work/mpi.txt" 2>&1 || rc=$?
    grep -E "PASS|FAIL|ERROR|lane\[" "$work/mpi.txt" | cut -c1-200
    [[ $rc == 0 ]] || { tail -40 "$work/mpi.txt"; fail "mpirun exited with $rc"; }
    grep -q "^PASS mpi_verify: $((20 * n_mpi)) messages" "$work/mpi.txt" || fail "no PASS line from rank 0"
    n=$(grep -Ec "lane\[0\]: +[0-9]+:$tl/roce0:1.* am " "$work/mpi.txt" || true)
    [[ $n -ge 2 ]] || fail "the ranks' endpoints to each other do not carry their messages on $tl/roce0:1"
    ;;
esac
echo "PASS fabric_pair $mode${attached:+ attached}"
