#!/usr/bin/env bash
# Builds the upstream NAAICE library's programs (naaice-greenhpc/naa-communication-library:
# examples/naaice_server, naaice_client, naaice_client_ap2) unchanged from a checkout, into a
# cache, and prints the directory that holds them. Self-contained: the interop scripts that
# run upstream's programs call it.
#   upstream_naaice_build.sh        (NAAICE_UPSTREAM: the checkout; MICROLOG_SRC: a checkout of
#                                    microlog v7.0.3, upstream's one dependency, which its CMake
#                                    would otherwise fetch from GitHub)
# Exit 77 with a message when NAAICE_UPSTREAM is not set; 1 when the build fails.
# Env: ROCE_UPSTREAM_CACHE (default /var/tmp/roce-upstream): where the builds are kept, one
# directory per upstream commit (naaice-<commit>; a checkout that is not a git repository, or
# has local changes, is built every time into naaice-worktree).
# Nothing of upstream's code is changed: the build is upstream's own CMake, Release, logging
# at upstream's default level (info).
set -euo pipefail
if [[ -z ${NAAICE_UPSTREAM:-} ]]; then
  echo "skipped: set NAAICE_UPSTREAM to a checkout of naaice-greenhpc/naa-communication-library" \
       "(and MICROLOG_SRC to microlog v7.0.3) to build upstream's NAAICE programs" >&2
  exit 77
fi
src=$(realpath "$NAAICE_UPSTREAM")
[[ -f $src/lib/naaice.c && -f $src/examples/naaice_server.c ]] ||
  { echo "upstream_naaice_build: $src is not a NAAICE checkout (no lib/naaice.c)" >&2; exit 1; }
cache=${ROCE_UPSTREAM_CACHE:-/var/tmp/roce-upstream}
commit=$(git -C "$src" rev-parse --short=7 HEAD 2>/dev/null || true)
# A checkout whose built files differ from the commit's is not that commit (compared file by
# file with the commit's blobs: the index may be anything).
if [[ -n $commit ]]; then
  while read -r _ _ blob path; do
    if [[ ! -f $src/$path || $(git -C "$src" hash-object "$path") != "$blob" ]]; then
      commit=""; break
    fi
  done < <(git -C "$src" ls-tree -r HEAD -- lib examples kernels tests CMakeLists.txt)
fi
dir=$cache/naaice-${commit:-worktree}
mkdir -p "$cache"
exec 9> "$cache/naaice.lock"
flock 9
progs=(naaice_server naaice_client naaice_client_ap2)
if [[ -n $commit ]]; then
  ok=1
  for p in "${progs[@]}"; do [[ -x $dir/build/examples/$p ]] || ok=0; done
  if ((ok)); then echo "$dir/build/examples"; exit 0; fi
fi
args=(-S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release)
if [[ -n ${MICROLOG_SRC:-} ]]; then
  args+=(-DFETCHCONTENT_SOURCE_DIR_ULOG="$(realpath "$MICROLOG_SRC")" -DFETCHCONTENT_FULLY_DISCONNECTED=ON)
fi
command -v ninja > /dev/null && args+=(-G Ninja)
{
  cmake "${args[@]}" && cmake --build "$dir/build" -j2 --target "${progs[@]}"
} > "$dir.log" 2>&1 || {
  echo "upstream_naaice_build: building $src failed (log: $dir.log):" >&2
  tail -20 "$dir.log" >&2
  exit 1
}
git -C "$src" rev-parse HEAD > "$dir/commit" 2>/dev/null || echo worktree > "$dir/commit"
echo "$dir/build/examples"
