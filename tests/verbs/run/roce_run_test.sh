#!/usr/bin/env bash
# roce-run (verbs/run/roce-run): the variables it sets for the program, the libraries it finds
# relative to itself (build tree and installed layouts), its errors for bad flags (exit 2 with
# the usage), a missing socket, a missing library, a bad config file (exit 1).
#   roce_run_test.sh ROCE_RUN WORKDIR
set -euo pipefail
src=$(realpath "$1") work=$2
rm -rf "$work" && mkdir -p "$work" && work=$(realpath "$work")
fail() { echo "FAIL: $*"; exit 1; }
# A library that is harmless to preload stands in for the provider (any ELF .so works).
libc=$(ldd /bin/true | awk '/libc\.so/ { print $3 }')
[[ -f $libc ]] || fail "no libc to stand in for the provider"

# An installed layout: PREFIX/bin/roce-run, PREFIX/lib/roce/{libroce-verbs.so,rdmacm/librdmacm.so.1}
mkdir -p "$work/prefix/bin" "$work/prefix/lib/roce/rdmacm"
cp "$src" "$work/prefix/bin/roce-run"
cp "$libc" "$work/prefix/lib/roce/libroce-verbs.so"
cp "$libc" "$work/prefix/lib/roce/rdmacm/librdmacm.so.1"
run="$work/prefix/bin/roce-run"
# A listening Unix socket in place of roced's.
sock="$work/roced.sock"
python3 -c 'import socket,sys,time; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(sys.argv[1]); s.listen(1); time.sleep(60)' "$sock" &
py=$!
trap 'kill $py 2>/dev/null || true' EXIT
for _ in $(seq 50); do [[ -S $sock ]] && break; sleep 0.1; done
[[ -S $sock ]] || fail "no test socket"

expect() {  # WANT_RC PATTERN -- COMMAND...: the exit code and a line of the output (both streams)
  local want=$1 pattern=$2
  shift 3
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  [[ $rc == "$want" ]] || fail "$* exited $rc, not $want: $out"
  grep -qE -- "$pattern" <<< "$out" || fail "$*: no line matching '$pattern' in: $out"
  echo "ok: $* -> $rc ($(grep -E -- "$pattern" <<< "$out" | head -1))"
}

# ---- the variables ----
ROCE_LINK=stale expect 0 "^ROCE_ATTACH=$sock\$" -- "$run" --attach "$sock" -- env
expect 0 "^LD_PRELOAD=$work/prefix/lib/roce/libroce-verbs.so\$" -- "$run" --attach "$sock" -- env
expect 0 "^LD_LIBRARY_PATH=$work/prefix/lib/roce/rdmacm(:|\$)" -- "$run" --attach "$sock" -- env
expect 0 "^ROCE_PORT=p1\$" -- "$run" --attach "$sock" --port p1 -- env
out=$(ROCE_LINK=stale "$run" --attach "$sock" -- env)
! grep -q '^ROCE_LINK=' <<< "$out" || fail "a ROCE_LINK from the environment survived --attach"
expect 0 '^ROCE_LINK=--pmd memif --iface /tmp/x.sock --ip 192.0.2.9$' -- \
  "$run" --link "--pmd memif --iface /tmp/x.sock --ip 192.0.2.9" -- env
out=$(ROCE_ATTACH=stale "$run" --link "--pmd memif" -- env)
! grep -q '^ROCE_ATTACH=' <<< "$out" || fail "a ROCE_ATTACH from the environment survived --link"
# The arguments reach the program untouched.
# shellcheck disable=SC2016 # $1 is the inner shell's
expect 0 '^a b$' -- "$run" --attach "$sock" -- sh -c 'echo "$1"' sh "a b"
expect 0 "^ROCE_ATTACH=$sock\$" -- "$run" --print-env --attach "$sock" -- true

# ---- the configuration file ----
cat > "$work/verbs.conf" <<CONF
# attached to the test's socket
attach = $sock
port=p0   # a comment
CONF
expect 0 "^ROCE_VERBS_CONFIG=$work/verbs.conf\$" -- "$run" --config "$work/verbs.conf" -- env
expect 0 '^ROCE_PORT=p0$' -- "$run" --config "$work/verbs.conf" -- env
expect 0 '^ROCE_PORT=p7$' -- "$run" --config "$work/verbs.conf" --port p7 -- env
printf 'attach=%s\nbogus=1\n' "$sock" > "$work/bad.conf"
expect 1 "bad.conf:2: unknown key 'bogus'" -- "$run" --config "$work/bad.conf" -- env
expect 1 'config file .*: not a readable file' -- "$run" --config "$work/none.conf" -- env

# ---- bad flags: exit 2 with the usage ----
expect 2 '^usage: roce-run' -- "$run"
expect 2 "unknown option '--bogus'" -- "$run" --bogus -- env
expect 2 'no program given' -- "$run" --attach "$sock"
expect 2 'no program given' -- "$run" --attach "$sock" --
expect 2 '--attach needs a value' -- "$run" --attach
expect 2 'one of attach and link' -- "$run" --attach "$sock" --link "--pmd memif" -- env
expect 2 'give --attach SOCK or --link' -- "$run" -- env
expect 2 '--port goes with --attach' -- "$run" --link "--pmd memif" --port p0 -- env
# --help is asked for: the usage on stdout, exit 0 (as rdma-core's tools and coreutils)
expect 0 '^usage: roce-run' -- bash -c "\"$run\" --help 2>/dev/null"
expect 2 '--device needs a value' -- "$run" --device -- ls
expect 0 '^ROCE_LINK_WAIT=5$' -- "$run" --link "--pmd memif" --link-wait 5 -- env
expect 2 "--link-wait wants whole seconds, not 'x'" -- "$run" --link "--pmd memif" --link-wait x -- env
# a mode on the command line replaces the file's other mode (and its port)
expect 0 '^ROCE_LINK=--pmd memif$' -- "$run" --config "$work/verbs.conf" --link "--pmd memif" -- env
out=$("$run" --config "$work/verbs.conf" --link "--pmd memif" -- env)
! grep -qE '^ROCE_(ATTACH|PORT)=' <<< "$out" || fail "the file's attach survived --link: $out"

# ---- missing things: exit 1 with what is missing ----
expect 1 "no roced socket at $work/nothing.sock" -- "$run" --attach "$work/nothing.sock" -- env
expect 1 'is not a socket' -- "$run" --attach "$work/verbs.conf" -- env
expect 1 'no-such-program: command not found' -- "$run" --attach "$sock" -- no-such-program
rm "$work/prefix/lib/roce/rdmacm/librdmacm.so.1"
# without our librdmacm: libibverbs programs still run, with a word about rdma_cm
expect 0 'librdmacm.so.1 not found.*rdma_cm calls go to the system' -- "$run" --attach "$sock" -- env
out=$("$run" --attach "$sock" -- env 2>/dev/null)
grep -q "^LD_LIBRARY_PATH=.*rdmacm" <<< "$out" && fail "LD_LIBRARY_PATH names a missing rdmacm directory"
rm "$work/prefix/lib/roce/libroce-verbs.so"
expect 1 'libroce-verbs.so not found' -- "$run" --attach "$sock" -- env

# ---- the build tree's layout: build/bin/roce-run, build/lib/libroce-verbs.so, build/lib/rdmacm ----
mkdir -p "$work/build/bin" "$work/build/lib/rdmacm"
cp "$src" "$work/build/bin/roce-run"
cp "$libc" "$work/build/lib/libroce-verbs.so"
cp "$libc" "$work/build/lib/rdmacm/librdmacm.so.1"
expect 0 "^LD_PRELOAD=$work/build/lib/libroce-verbs.so\$" -- "$work/build/bin/roce-run" --attach "$sock" -- env
expect 0 "^LD_LIBRARY_PATH=$work/build/lib/rdmacm(:|\$)" -- "$work/build/bin/roce-run" --attach "$sock" -- env
# Through a symlink (e.g. /usr/local/bin/roce-run -> PREFIX/bin/roce-run): still relative to the script.
ln -s "$work/build/bin/roce-run" "$work/roce-run-link"
expect 0 "^LD_PRELOAD=$work/build/lib/libroce-verbs.so\$" -- "$work/roce-run-link" --attach "$sock" -- env
echo "OK: roce-run"
