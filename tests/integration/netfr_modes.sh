#!/usr/bin/env bash
# NetFR's host (the frame source, apps/netfr/host_service.h) in each mode, streaming to a
# Looking Glass-like consumer attached to a roced (roce-netfr-lg: libroce and NetFR's client
# only; its link line is checked for DPDK and the engine). Every frame is checked byte by byte,
# in sequence, each cursor after its frame, the connection serials strictly increasing.
#   netfr_modes.sh ROCED ROCE_NETFR_SOURCE ROCE_NETFR_LG MODE WORKDIR
# MODE attached: the source a client of roced A, the consumer of roced B (two roced on a
#                 memif link);
#      inproc:   the source in-process on a memif link of its own to roced B; the consumer's
#                 buffers memfds of its own (Looking Glass's shared memory), registered in place;
#      hosted:   roced A hosts the source (`services: - kind: netfr`, its keys width, height,
#                 frames), the consumer attached to roced B; exits 77 (skipped) while roced
#                 does not know the kind.
set -euo pipefail
roced=$(realpath "$1") source=$(realpath "$2") lg=$(realpath "$3") mode=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
tag=nfm$$
pids=()
# shellcheck source=tests/integration/lib_appliance.sh
source "$(dirname "$0")/lib_appliance.sh"
trap 'stop_all $?' EXIT
frames=40 width=320 height=180

# The consumer links no DPDK and no engine.
if ldd "$lg" | grep -q 'librte_'; then echo "FAIL: roce-netfr-lg links DPDK"; exit 1; fi
if nm -C "$lg" | grep -q 'roce::engine::Engine::'; then echo "FAIL: roce-netfr-lg holds the engine"; exit 1; fi

src_args=(--frames "$frames" --width "$width" --height "$height" --sessions 1)
lg_args=()
case $mode in
  attached)
    appliance a server 02:00:5e:00:1a:01 192.0.2.131 0
    appliance b client 02:00:5e:00:1a:02 192.0.2.132 1
    "$source" --attach "$work/a.sock" "${src_args[@]}" > "$work/source.log" 2>&1 &
    spid=$! host_ip=192.0.2.131 ;;
  inproc)
    memif_sock=link2.sock appliance b server 02:00:5e:00:1a:02 192.0.2.132 1
    "$source" --link "pmd=memif,socket=$work/link2.sock,role=client,ip=192.0.2.133,mac=02:00:5e:00:1a:03,lcore=0" \
      "${src_args[@]}" > "$work/source.log" 2>&1 &
    spid=$! host_ip=192.0.2.133 lg_args=(--memfd) ;;
  hosted)
    services="services:
  - kind: netfr
    port: p0
    listen_port: 5010
    width: $width
    height: $height
    frames: $frames"
    # roced A's configuration, checked first: a roced without the NetFR service skips.
    cat > "$work/check.yaml" <<YAML
name: check
ports:
  - name: p0
    device: net_memif0
    mac: 02:00:5e:00:1a:01
    ipv4: 192.0.2.131/24
$services
YAML
    if ! "$roced" --config "$work/check.yaml" --check > "$work/check.log" 2>&1; then
      cat "$work/check.log"; echo "skipped: this roced does not host NetFR"; exit 77
    fi
    appliance a server 02:00:5e:00:1a:01 192.0.2.131 0 "" "$services"
    appliance b client 02:00:5e:00:1a:02 192.0.2.132 1
    spid= host_ip=192.0.2.131 ;;
  *) echo "FAIL: unknown mode $mode"; exit 1 ;;
esac
[[ -n $spid ]] && pids+=("$spid")
if [[ -n $spid ]]; then
  for _ in $(seq 100); do grep -qs "listening" "$work/source.log" && break; sleep 0.1; done
  grep -q "listening" "$work/source.log" || { cat "$work/source.log"; echo "FAIL: the source did not start"; exit 1; }
fi
rc=0
timeout 120 "$lg" --attach "$work/b.sock" "$host_ip" --width "$width" --height "$height" "${lg_args[@]}" \
  > "$work/lg.log" 2>&1 || rc=$?
sed 's/^/lg: /' "$work/lg.log"
if [[ -n $spid ]]; then
  wait "$spid" || rc=$?
  sed 's/^/source: /' "$work/source.log"
  grep -q "PASS netfr-source" "$work/source.log" || rc=1
fi
[[ $rc == 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
grep -q "PASS netfr-lg" "$work/lg.log" || { echo "FAIL: the consumer did not pass"; exit 1; }
grep -q "^netfr-lg: $frames frames" "$work/lg.log" || { echo "FAIL: not $frames frames"; exit 1; }
echo "PASS netfr_modes $mode"
