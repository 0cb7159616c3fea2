#!/usr/bin/env bash
# Upstream NAAICE's example programs (naaice-greenhpc/naa-communication-library, checked against
# f7b72fc: examples/naaice_client.c and naaice_client_ap2.c, their source unchanged) compiled
# against this project's host library headers and linked with its appliance transport
# (naaice_roce), against roce-naa on a memif pair: what a user who moves a program from
# upstream's library to ours gets. CMake builds the two programs when it is configured with
# -DNAAICE_UPSTREAM=CHECKOUT -DMICROLOG_SRC=MICROLOG (microlog v7.0.3, the examples' logger);
# without them this test skips (77).
#   naa_upstream_source.sh ROCE_NAA [UPSTREAM_CLIENT UPSTREAM_CLIENT_AP2]
# Checked: the client (function 3 over two regions, the first single-send with 2 bytes sent)
# prints its last region unchanged; the AP2 client (function 1, 100 calls over four regions, three
# of them outputs) prints what it prints against upstream's software NAA; a client whose regions
# exceed the NAA memory per host (64 MiB) gets MRSP error 0x01 and exits -1.
set -euo pipefail
naa=$(realpath "$1")
if [[ -z ${2:-} || -z ${3:-} ]]; then
  echo "skipped: configure with -DNAAICE_UPSTREAM=<checkout of naaice-greenhpc/naa-communication-library>" \
       "-DMICROLOG_SRC=<microlog v7.0.3> to build upstream's examples against the host library"
  exit 77
fi
client=$(realpath "$2") ap2=$(realpath "$3")
work=$(mktemp -d /tmp/naa-upsrc-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; [[ -n ${NAA_KEEP:-} ]] || rm -rf "$work"; }
trap cleanup EXIT
sock=$work/memif.sock
"$naa" --memif-socket "$sock" --ip 192.0.2.1 --mac 02:00:00:00:00:01 --exit-after 3 \
  --timeout 60 > "$work/naa.log" 2>&1 &
pid=$!
for _ in $(seq 150); do grep -q "listening on rdma_cm port" "$work/naa.log" && break; sleep 0.1; done
export NAAICE_ROCE="pmd=memif,socket=$sock,role=client,ip=192.0.2.2,mac=02:00:00:00:00:02"
fails=()
out=$(timeout 60 "$client" 192.0.2.1 2 '1024 64' 2>&1) || fails+=("client: exit status $?")
[[ $out == *"Output of the last MR: 11 11 11 11 11 11 11 11 11 11 11 "* ]] ||
  fails+=("client: last region not unchanged")
out=$(NAA_SPEC=192.0.2.1:12345:1:4 timeout 60 "$ap2" 4 '64 128 256 512' 2>&1) ||
  fails+=("ap2: exit status $?")
for want in "Parameter 0: first element: 100. Success? no" \
            "Parameter 1: first element: 101. Success? no" \
            "Parameter 2: first element: 2. Success? yes" \
            "Parameter 3: first element: 103. Success? yes"; do
  [[ $out == *"$want"* ]] || fails+=("ap2: no \"$want\"")
done
rc=0
out=$(timeout 60 "$client" 192.0.2.1 2 '41943040 41943040' 2>&1) || rc=$?
[[ $rc == 255 && $out == *"MRSP error 0x01"* ]] ||
  fails+=("client beyond the NAA memory: exit status $rc, no MRSP error 0x01")
wait "$pid" || fails+=("roce-naa: exit status $?")
pid=
sed 's/^/naa: /' "$work/naa.log"
if ((${#fails[@]})); then
  printf 'FAIL %s\n' "${fails[@]}"
  exit 1
fi
echo "PASS naa_upstream_source"
