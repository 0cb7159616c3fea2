#!/usr/bin/env bash
# roce-nfsd's flags (review19-user 6): out-of-range numbers are errors (exit 2, the valid range
# named, the same rules as roced's `kind: nfs` args), never wrapped (--port 70000 was rdma_cm
# port 4464) or clamped (--credits 0, --threads 0); SIGUSR1 prints the counters; a start that
# fails (--root missing) leaves no default state directory behind.
#   nfs_flags.sh ROCE_NFSD
set -uo pipefail
nfsd=$(realpath "$1")
work=$(mktemp -d /tmp/nfs-flags-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/export"
fail=0
bad() {  # WANT-MESSAGE ARGS...
  local want=$1; shift
  local out status=0
  out=$("$nfsd" --memif "$work/m.sock" --root "$work/export" --state-dir "$work/state" \
    --timeout 1 "$@" 2>&1) || status=$?
  if [[ $status != 2 || $out != *"$want"* ]]; then
    echo "FAIL: $* gave exit $status: $out"; fail=1
  else
    echo "ok: $* -> $(grep -F -- "$want" <<< "$out")"
  fi
}
bad "--port must be a number in 1..65535" --port 70000
bad "--port must be a number in 1..65535" --port 0
bad "--mount-port must be a number in 1..65535" --mount-port 65536
bad "--tcp-port must be a number in 1..65535" --tcp-port 99999
bad "--portmap-port must be a number in 0..65535" --portmap-port 70000
bad "--credits must be a number in 1..128" --credits 0
bad "--credits must be a number in 1..128" --credits 129
bad "--threads must be a number in 1..256" --threads 0
bad "--threads must be a number in 1..256" --threads -1
bad "--lease-time must be a number in 10..3600" --lease-time 5
# A root that is not there: exit 1, and no default state directory made for it.
name=nfs-flags-missing-$$
out=$("$nfsd" --memif "$work/m.sock" --root "$work/$name" --portmap off --timeout 1 2>&1)
status=$?
if [[ $status == 0 ]]; then echo "FAIL: --root $work/$name started: $out"; fail=1; fi
if compgen -G "/var/lib/roce-nfsd/$name-*" > /dev/null; then
  echo "FAIL: a failed start made $(compgen -G "/var/lib/roce-nfsd/$name-*")"; fail=1
  rm -rf /var/lib/roce-nfsd/"$name"-*
else
  echo "ok: --root missing: exit $status, no state directory ($(tail -1 <<< "$out"))"
fi
# SIGUSR1: the clients and the counters, by the names roced's metrics have.
"$nfsd" --memif "$work/m.sock" --root "$work/export" --state-dir "$work/state" --portmap off \
  --export-options "rw,all_squash,anonuid=$(id -u),anongid=$(id -g)" \
  --mount-port $((24000 + $$ % 4000)) --timeout 20 > "$work/usr1.txt" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "^roce-nfsd: serving" "$work/usr1.txt" 2>/dev/null && break; sleep 0.1; done
kill -USR1 "$pid"
for _ in $(seq 50); do grep -q "counters:" "$work/usr1.txt" && break; sleep 0.1; done
kill -INT "$pid"; wait "$pid"
if grep -Eq "^roce-nfsd: counters:.* nfs_calls=0 .* rpcrdma_connections=0" "$work/usr1.txt"; then
  echo "ok: SIGUSR1 prints the counters"
else
  sed 's/^/log: /' "$work/usr1.txt"; echo "FAIL: SIGUSR1 printed no counters"; fail=1
fi
[[ $("$nfsd" --help) == *SIGUSR1* ]] || { echo "FAIL: --help does not name SIGUSR1"; fail=1; }
[[ $fail == 0 ]] && echo "PASS nfs_flags" || echo "FAIL nfs_flags"
exit $fail
