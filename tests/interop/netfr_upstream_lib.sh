# shellcheck shell=bash
# Shared by netfr_upstream_host.sh and netfr_upstream_client.sh (sourced): upstream NetFR's test
# programs (telescope-proj/netfr, test/host and test/client), built from the checkout named by
# NETFR_UPSTREAM into a cache outside the repository, /var/tmp/roce-upstream/netfr-<commit>
# (NETFR_UPSTREAM_CACHE overrides), once per commit.
#
# Upstream's code is built as it is, with its own CMake files (which add -Werror, ASan and UBSan).
# What this host needs to build and run it, applied here and nowhere else:
#  - CFLAGS=-Wno-error=int-conversion: nfr_mem.c:167 returns an int from a function that returns
#    a pointer (a warning with GCC 12, an error under upstream's -Werror; that path only runs
#    with NETFR_ENABLE_DMABUF_REGISTRATION, which upstream does not set).
#  - CFLAGS=-D_GNU_SOURCE: nfr_mem.c calls memfd_create, which glibc declares only with it.
#  - test/host/host.c and test/client/client.c ask libfabric for API version 1.18
#    (opts.apiVersion = FI_VERSION(1, 18)); Debian 12's libfabric is 1.17 and fi_getinfo refuses a
#    newer version (-FI_ENOSYS). The build copy of these two files asks for 1.17 instead (sed);
#    the library sources are not touched.
# Sets up_host and up_client to the two programs, up_commit to the commit; exits 77 (skipped)
# without NETFR_UPSTREAM, 1 when the build fails.

netfr_upstream_build() {
  if [[ -z ${NETFR_UPSTREAM:-} ]]; then
    echo "skipped: NETFR_UPSTREAM is not set (a checkout of telescope-proj/netfr, e.g. 45b215f)"
    exit 77
  fi
  local src
  src=$(realpath "$NETFR_UPSTREAM")
  if [[ ! -f $src/netfr/src/common/nfr_protocol.h || ! -f $src/netfr/test/host/host.c ]]; then
    echo "skipped: NETFR_UPSTREAM=$NETFR_UPSTREAM is not a telescope-proj/netfr checkout"
    exit 77
  fi
  up_commit=$(git -C "$src" rev-parse --short=7 HEAD 2>/dev/null || echo unknown)
  local cache=${NETFR_UPSTREAM_CACHE:-/var/tmp/roce-upstream/netfr-$up_commit}
  up_host=$cache/build-host/netfr-host
  up_client=$cache/build-client/netfr-client
  if [[ $up_commit != unknown && -x $up_host && -x $up_client ]]; then
    return 0
  fi
  mkdir -p "$cache"
  (
    set -e
    exec 9> "$cache/build.lock"
    flock 9
    rm -rf "$cache/src"
    mkdir -p "$cache/src"
    cp -a "$src/." "$cache/src/"
    rm -rf "$cache/src/.git"
    sed -i 's/FI_VERSION(1, 18)/FI_VERSION(1, 17)/' \
      "$cache/src/netfr/test/host/host.c" "$cache/src/netfr/test/client/client.c"
    for p in host client; do
      CFLAGS="-D_GNU_SOURCE -Wno-error=int-conversion" \
        cmake -S "$cache/src/netfr/test/$p" -B "$cache/build-$p" > "$cache/build-$p.log" 2>&1
      cmake --build "$cache/build-$p" -j2 >> "$cache/build-$p.log" 2>&1
    done
  ) || { echo "FAIL cannot build upstream NetFR from $src (logs in $cache)"; exit 1; }
  [[ -x $up_host && -x $up_client ]] || { echo "FAIL no netfr-host / netfr-client in $cache"; exit 1; }
}
