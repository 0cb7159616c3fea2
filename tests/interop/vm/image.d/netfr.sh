# shellcheck shell=bash disable=SC2034
# NetFR interop (tests/interop/netfr.sh, netfr_reverse.sh): libfabric with its verbs provider
# (built into libfabric1, over libibverbs and librdmacm), for netfr-libfabric, which the tests
# pass in as an extra binary.
HOST_PKGS+=(libfabric1)
