#!/usr/bin/env bash
# Our librdmacm.so.1 exports exactly the names and versions of Debian's librdmacm1 (the binaries
# we run are linked against those, and bind every symbol at start), under the same SONAME.
#   symbols.sh OUR_LIBRDMACM
set -euo pipefail
ours=$1
deb=$(ldconfig -p | awk '/librdmacm\.so\.1 .*x86-64/ && !found { print $NF; found = 1 }')
[[ -n $deb && -e $deb ]] || { echo "skipped: Debian's librdmacm1 is not installed"; exit 77; }
command -v objdump >/dev/null || { echo "skipped: no objdump (binutils)"; exit 77; }
syms() { objdump -T "$1" | awk '$2 == "g" && $(NF-1) != $NF { print $(NF-1), $NF }' | sort -u; }
if ! diff <(syms "$deb") <(syms "$ours"); then
  echo "FAIL: exported symbols differ from $deb (< Debian's, > ours)"; exit 1
fi
soname() { objdump -p "$1" | awk '$1 == "SONAME" { print $2 }'; }
[[ $(soname "$ours") == "$(soname "$deb")" ]] || { echo "FAIL: SONAME $(soname "$ours")"; exit 1; }
echo "OK: $(syms "$ours" | wc -l) symbols, SONAME $(soname "$ours"), as $deb"
