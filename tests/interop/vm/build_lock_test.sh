#!/usr/bin/env bash
# build.sh takes the cache's lock before it looks at the image: with another build holding it,
# a second one waits, then finds the image up to date (a fake one here, in a fresh cache).
#   build_lock_test.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache=$(mktemp -d)
holder=
cleanup() { if [[ -n $holder ]]; then kill "$holder" 2>/dev/null || true; fi; rm -rf "$cache"; }
trap cleanup EXIT
kver=9.9.9-locktest
for f in vmlinuz vmlinux initramfs.cpio; do echo fake > "$cache/$f"; done
echo "$kver" > "$cache/kver"
touch -d '+1 hour' "$cache"/*   # newer than the scripts
mkdir -p "$cache/dl"
flock "$cache/build.lock" sleep 2 &
holder=$!
sleep 0.3
start=$(date +%s%N)
out=$(RXE_VM_CACHE="$cache" RXE_VM_NO_APT=1 RXE_VM_KPKG="linux-image-$kver" \
      "$here/build.sh" 2>&1)
took=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out"
echo "build.sh returned after $took ms"
grep -q "another build of $cache is running: waiting for it" <<< "$out" || { echo "FAIL: it did not wait"; exit 1; }
grep -q "up to date" <<< "$out" || { echo "FAIL: it did not find the image up to date"; exit 1; }
(( took >= 1500 )) || { echo "FAIL: it returned before the other build let go of the lock"; exit 1; }
echo PASS
