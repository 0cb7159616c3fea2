#!/usr/bin/env bash
# Upstream NAAICE's own host programs (naaice-greenhpc/naa-communication-library, built
# unchanged from $NAAICE_UPSTREAM: examples/naaice_client and naaice_client_ap2, on libibverbs +
# librdmacm on Linux rxe in the VM) against roce-naa on a DPDK port (net_af_packet on dp0, RoCE IP
# 192.0.2.100). Proven against f7b72fc.
#
# The unchanged client always calls function 3 on port 12345 and prints the first bytes of its
# last region; the AP2 client calls function 1 a hundred times over four regions. Each phase
# below is one roce-naa with its own options (the function table maps 3 to each kernel in turn;
# small NAA memory and region limits provoke the MRSP errors), serving that phase's clients and
# exiting; the VM runs every client in order, retrying while the next NAA comes up. Checked:
# each client's output against what upstream's software NAA would give (its kernels 1, 2, 3) or
# the kernel's reference, every MRSP error (0x01, 0x02, 0x03) and call status upstream's client
# can be made to see (0x01 busy, 0x10, 0x12, 0x13) as it reports them, and on the wire: the
# Solicited Event bit on every SEND and WRITE_WITH_IMM of the NAA, the error messages and status
# immediates (status << 8), and the upstream client's request and call immediate bytes (the
# facts of tests/unit/naa/mrsp_test.cc). Captures decode (our parser and tshark).
#   naa_upstream_client.sh ROCE_NAA ROCE_PCAP   (root; exits 77 when VMs cannot run here or
#                                                NAAICE_UPSTREAM is not set)
# Env: NAAICE_UPSTREAM (the checkout), MICROLOG_SRC (microlog v7.0.3, upstream's one dependency,
# which its CMake would fetch from GitHub), ROCE_UPSTREAM_CACHE (default /var/tmp/roce-upstream:
# one build per upstream commit, naaice-<commit>), RXE_VM_NETNS (default rxevm-naau).
# shellcheck disable=SC2154  # here, vmpid: from lib.sh
set -euo pipefail
naa=$(realpath "$1") pcap=$(realpath "$2")
if [[ -z ${NAAICE_UPSTREAM:-} ]]; then
  echo "skipped: set NAAICE_UPSTREAM to a checkout of naaice-greenhpc/naa-communication-library" \
       "(and MICROLOG_SRC to microlog v7.0.3) to run upstream's NAAICE client against roce-naa"
  exit 77
fi
export RXE_VM_NETNS=${RXE_VM_NETNS:-rxevm-naau}
# shellcheck source=tests/interop/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
interop_preflight

# ---- upstream, built unchanged (its own CMake, Release, its default log level) into a cache
src=$(realpath "$NAAICE_UPSTREAM")
[[ -f $src/lib/naaice.c && -f $src/examples/naaice_client.c ]] ||
  { echo "FAIL: $src is not a NAAICE checkout (no lib/naaice.c)"; exit 1; }
cache=${ROCE_UPSTREAM_CACHE:-/var/tmp/roce-upstream}
commit=$(git -C "$src" rev-parse --short=7 HEAD 2>/dev/null || true)
if [[ -n $commit ]]; then  # a checkout whose files differ from its commit's is not that commit
  while read -r _ _ blob path; do
    if [[ ! -f $src/$path || $(git -C "$src" hash-object "$path") != "$blob" ]]; then
      commit=""; break
    fi
  done < <(git -C "$src" ls-tree -r HEAD -- lib examples kernels tests CMakeLists.txt)
fi
dir=$cache/naaice-${commit:-worktree}
mkdir -p "$cache"
progs=(naaice_server naaice_client naaice_client_ap2)
(
  flock 9
  ok=1
  for p in "${progs[@]}"; do [[ -x $dir/build/examples/$p ]] || ok=0; done
  if [[ $ok == 0 || -z $commit ]]; then
    args=(-S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release)
    [[ -z ${MICROLOG_SRC:-} ]] || args+=(-DFETCHCONTENT_SOURCE_DIR_ULOG="$(realpath "$MICROLOG_SRC")"
                                         -DFETCHCONTENT_FULLY_DISCONNECTED=ON)
    command -v ninja > /dev/null && args+=(-G Ninja)
    { cmake "${args[@]}" && cmake --build "$dir/build" -j2 --target "${progs[@]}"; } \
      > "$dir.log" 2>&1 || { echo "FAIL: building upstream NAAICE failed:"; tail -20 "$dir.log"; exit 1; }
    git -C "$src" rev-parse HEAD > "$dir/commit" 2>/dev/null || echo worktree > "$dir/commit"
  fi
) 9> "$cache/naaice.lock"
bins=$dir/build/examples
RXE_VM_EXTRA_BINS="$bins/naaice_client $bins/naaice_client_ap2" "$here/vm/build.sh" >/dev/null 2>&1 ||
  { echo "skipped: cannot put upstream's clients into the VM image"; exit 77; }
echo "upstream NAAICE $(cat "$dir/commit" 2>/dev/null || echo "${commit:-worktree}") from $src"

# ---- the phases: NAME, roce-naa options, clients (TAG ARGS; "ap2" runs naaice_client_ap2)
ip=192.0.2.100
names=() opts=() clients=()
phase() { names+=("$1"); opts+=("$2"); clients+=("$3"); }
phase default "" "fn3-1 1 1024;fn3-2 2 1024 64;ap2"
phase add2 "--functions 3=add2" "add2 2 1024 64"
phase increment "--functions 3=increment" "increment 2 1024 64"
phase echo "--functions 3=echo" "echo 1 1024"
phase crc32 "--functions 3=crc32" "crc32 2 64 4"
phase vector_add "--functions 3=vector_add" "vector_add 3 64 64 64;count 1 64"
phase reduce_sum "--functions 3=reduce_sum" "reduce_sum 2 64 8;size 2 64 64"
phase errors "--memory-per-host 1 --max-regions 2 --functions 3=none" \
  "too-many 3 64 64 64;beyond 2 1048576 16;too-big 1 2097152;unknown 1 1024"
phase busy "--kernel-queue 1 --kernel-delay-ms 6000" "busy-a 1 1024;busy-b 1 1024"

# The VM: every client in order (busy-b 2 s after busy-a, both at once), each retried while it
# cannot connect (the phase's NAA is still starting), its exit status and output printed.
# shellcheck disable=SC2016  # expanded in the VM
vmcmd='try() {  # try TAG MARK CMD...: run until it gets past connecting (MARK in its output)
  tag=$1 mark=$2; shift 2; n=0
  while :; do
    timeout 150 "$@" > /tmp/$tag.out 2>&1; rc=$?
    if ! grep -q "$mark" /tmp/$tag.out && [ $n -lt 90 ]; then n=$((n+1)); sleep 1; continue; fi
    echo "== $tag rc=$rc tries=$n"; cat /tmp/$tag.out; echo "== end $tag"; return 0
  done
}
'
total=0
for i in "${!names[@]}"; do
  IFS=';' read -r -a cs <<< "${clients[$i]}"
  for c in "${cs[@]}"; do
    read -r tag n sizes <<< "$c"
    total=$((total + 1))
    if [[ $tag == ap2 ]]; then
      vmcmd+="export NAA_SPEC=$ip:12345:1:4; try ap2 'RPC Invocation #1' naaice_client_ap2 4 '64 128 256 512'"$'\n'
    elif [[ $tag == busy-a ]]; then
      vmcmd+="try $tag 'Specifying Input' naaice_client $ip $n '$sizes' & sleep 2"$'\n'
    elif [[ $tag == busy-b ]]; then
      vmcmd+="try $tag 'Specifying Input' naaice_client $ip $n '$sizes'; wait"$'\n'
    else
      vmcmd+="try $tag 'Specifying Input' naaice_client $ip $n '$sizes'"$'\n'
    fi
  done
done
out=$(mktemp -d)
npid=
trap '[[ -n $npid ]] && kill "$npid" 2>/dev/null; rm -rf "$out"' EXIT
boot "$vmcmd" 600

naa_ok=1
for i in "${!names[@]}"; do
  IFS=';' read -r -a cs <<< "${clients[$i]}"
  # shellcheck disable=SC2086
  ip netns exec "$RXE_VM_NETNS" "$naa" --pmd af_packet --iface dp0 --ip $ip \
    --mac 02:00:00:00:01:00 --exit-after "${#cs[@]}" --timeout 200 \
    --pcap "$out/${names[$i]}.pcap" ${opts[$i]} > "$out/naa-${names[$i]}.txt" 2>&1 &
  npid=$!
  wait "$npid" && rc=0 || rc=$?
  npid=
  echo "  naa phase ${names[$i]} (${opts[$i]:-defaults}): exit $rc"
  sed 's/^/    naa: /' "$out/naa-${names[$i]}.txt"
  [[ $rc == 0 ]] || naa_ok=0
done
finish && vm_ok=1 || vm_ok=0
grep -v "^\[rxe-vm\]" "$out/vm.txt" | grep -v -E "\[(TRACE|DEBUG)\]" | sed 's/^/  vm: /'

# ---- the clients' results
fails=()
section() { awk -v t="== $1 rc=" -v e="== end $1" 'index($0, t) == 1 {p = 1} p {print} $0 == e {p = 0}' "$out/vm.txt"; }
expect() {  # expect TAG RC WANT...: the client's exit status and lines it must print
  local tag=$1 rc=$2 s w; shift 2
  s=$(section "$tag")
  [[ -n $s ]] || { fails+=("$tag: no output"); return; }
  [[ $s == *"== $tag rc=$rc "* ]] || fails+=("$tag: exit status not $rc")
  for w in "$@"; do [[ $s == *"$w"* ]] || fails+=("$tag: no \"$w\""); done
}
ones() { local v=$1 n=$2 r="" k; for ((k = 0; k < n; k++)); do r+="$v "; done; echo "$r"; }
last="Output of the last MR: "
expect fn3-1 0 "$last""10 10 0 0 0 0 0 0 0 0 0 "  # 2 bytes sent (naaice_set_bytes_to_send)
expect fn3-2 0 "$last$(ones 11 11)"
expect ap2 0 "Parameter 0: first element: 100. Success? no" \
  "Parameter 1: first element: 101. Success? no" "Parameter 2: first element: 2. Success? yes" \
  "Parameter 3: first element: 103. Success? yes"  # as against upstream's software NAA
expect add2 0 "$last$(ones 13 11)"
expect increment 0 "$last$(ones 12 11)"
expect echo 0 "$last""10 10 0 0 0 0 0 0 0 0 0 "
crc=$(python3 -c 'import zlib; print(" ".join(str(b) for b in zlib.crc32(bytes([10, 10]) + bytes(62)).to_bytes(4, "little")))')
expect crc32 0 "$last$crc "
expect vector_add 0 "$last""21 21 $(ones 11 9)"  # (0x0a0a + 0x0b0b0b0b) little-endian, then 11s
expect count 0 "Immediate return code non-zero: 18"
expect reduce_sum 0 "$last""10 10 0 0 0 0 0 0 "
expect size 0 "Immediate return code non-zero: 19"
expect too-many 255 "error in memory region exchange: 3."
expect beyond 255 "error in memory region exchange: 2."
expect too-big 255 "error in memory region exchange: 1."
expect unknown 0 "Immediate return code non-zero: 16"
busy=$( (section busy-a; section busy-b) | grep -c "Immediate return code non-zero: 1\." || true)
[[ $busy == 1 ]] || fails+=("busy: $busy of the two concurrent calls answered 0x01 (want 1)")

# ---- the wire
cap=1
ts=(tshark --disable-heuristic rpcrdma_infiniband -o infiniband.identify_payload:FALSE)
se0=0 se1=0 errs="" imms="" req="" callimm=""
for f in "$out"/*.pcap; do
  "$here/../integration/check_capture.sh" "$pcap" "$f" 5 > "$out/capture.txt" 2>&1 ||
    { cap=0; sed "s|^|  capture $(basename "$f"): |" "$out/capture.txt"; }
  answers="ip.src == $ip && (infiniband.bth.opcode == 4 || infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)"
  se0=$((se0 + $("${ts[@]}" -r "$f" -Y "$answers && infiniband.bth.se == 0" 2>/dev/null | grep -c . || true)))
  se1=$((se1 + $("${ts[@]}" -r "$f" -Y "$answers && infiniband.bth.se == 1" 2>/dev/null | grep -c . || true)))
  errs+=$("${ts[@]}" -r "$f" -Y "ip.src == $ip && infiniband.bth.opcode == 4" -T fields \
          -e data.data 2>/dev/null | grep '^00' | cut -c1-8 | tr '\n' ' ' || true)
  imms+=$("${ts[@]}" -r "$f" -Y "ip.src == $ip && (infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)" \
          -T fields -e infiniband.immdt 2>/dev/null | tr '\n' ' ' || true)
  req+=$("${ts[@]}" -r "$f" -Y "ip.dst == $ip && infiniband.bth.opcode == 4" -T fields \
         -e data.data 2>/dev/null | tr '\n' ' ' || true)
  callimm+=$("${ts[@]}" -r "$f" -Y "ip.dst == $ip && (infiniband.bth.opcode == 9 || infiniband.bth.opcode == 11)" \
             -T fields -e infiniband.immdt 2>/dev/null | tr '\n' ' ' || true)
done
uniq_words() { tr ' ' '\n' <<< "$1" | grep . | sort -u | tr '\n' ' '; }
echo "  wire: NAA SENDs and WRITE_WITH_IMMs with SE $se1, without $se0; MRSP errors $(uniq_words "$errs");" \
     "status immediates $(uniq_words "$imms"); client call immediates $(uniq_words "$callimm")"
wire=1
[[ $se0 == 0 && $se1 -gt 0 ]] || { wire=0; fails+=("wire: $se0 answers without the Solicited Event bit"); }
for want in 00030000 00020000 00010000; do
  [[ $errs == *$want* ]] || { wire=0; fails+=("wire: no MRSP error $want"); }
done
for want in 00000000 00000100 00001000 00001200 00001300; do
  [[ $imms == *$want* ]] || { wire=0; fails+=("wire: no status immediate $want"); }
done
[[ $callimm == *00000083* && $callimm == *00000081* ]] ||
  { wire=0; fails+=("wire: no call immediate 0x83 (function 3) and 0x81 (function 1, AP2)"); }
# fn3-2's request: SINGLESEND|INPUT at NAA address 0, size 1024; INPUT|OUTPUT at 0x1000, size 64.
re='01020000 0600000000000000 [0-9a-f]{24} 00000400 0c00000000001000 [0-9a-f]{24} 00000040'
grep -q -E "${re// /}" <<< "$req" || { wire=0; fails+=("wire: the client's request is not as mrsp_test.cc has it"); }

if [[ $naa_ok == 1 && $vm_ok == 1 && $cap == 1 && $wire == 1 && ${#fails[@]} == 0 ]]; then
  echo "PASS naa upstream interop: upstream naaice_client and naaice_client_ap2 on rxe -> roce-naa" \
       "($total client runs in ${#names[@]} NAA configurations: functions 1 2 3 and ours, MRSP errors" \
       "0x01 0x02 0x03, statuses 0x01 0x10 0x12 0x13; SE on all $se1 answers)"
else
  echo "FAIL naa upstream interop: naa=$naa_ok vm=$vm_ok capture=$cap wire=$wire"
  printf '  %s\n' "${fails[@]}"
  exit 1
fi
