#!/usr/bin/env bash
# Upstream NetFR's own test programs (telescope-proj/netfr: test/host/host.c, test/client/client.c,
# from the checkout named by NETFR_UPSTREAM) compiled against OUR headers, unchanged and with
# upstream's own warning flags (-Wall -Werror -Wstrict-prototypes), and every nfr* symbol they
# need defined by our library: code written against upstream's API builds against ours as it is.
# Skipped (77) without NETFR_UPSTREAM.
# usage: upstream_source.sh INCLUDE_DIR LIBROCE_NETFR_A [CC]
set -euo pipefail
inc=$1 lib=$2 cc=${3:-cc}
if [[ -z ${NETFR_UPSTREAM:-} ]]; then
  echo "skipped: NETFR_UPSTREAM is not set (a checkout of telescope-proj/netfr, e.g. 45b215f)"
  exit 77
fi
src=$(realpath "$NETFR_UPSTREAM")
if [[ ! -f $src/netfr/test/host/host.c || ! -f $src/netfr/test/client/client.c ]]; then
  echo "skipped: NETFR_UPSTREAM=$NETFR_UPSTREAM is not a telescope-proj/netfr checkout"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
defined=$(nm -g --defined-only "$lib" 2>/dev/null | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort -u)
fail=0
for p in host client; do
  if ! "$cc" -std=gnu17 -Wall -Werror -Wstrict-prototypes -Wfatal-errors -I"$inc" \
      -c "$src/netfr/test/$p/$p.c" -o "$tmp/$p.o" 2>"$tmp/$p.err"; then
    echo "FAIL test/$p/$p.c does not compile against our headers:"
    cat "$tmp/$p.err"
    fail=1
    continue
  fi
  for s in $(nm -u "$tmp/$p.o" | awk '{print $2}' | grep '^nfr' || true); do
    if ! grep -qx "$s" <<<"$defined"; then
      echo "FAIL test/$p/$p.c needs $s, which our library does not define"
      fail=1
    fi
  done
  echo "test/$p/$p.c: compiled, uses $(nm -u "$tmp/$p.o" | grep -c ' nfr') nfr* symbols, all ours"
done
[[ $fail == 0 ]] || exit 1
echo "PASS netfr_upstream_source"
