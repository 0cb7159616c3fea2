# shellcheck shell=bash disable=SC2034
# NetFR interop (tests/interop/netfr_upstream_host.sh, netfr_upstream_client.sh): libfabric with
# its verbs provider (built into libfabric1, over libibverbs and librdmacm), which upstream
# NetFR's test programs (telescope-proj/netfr test/host, test/client) link; the tests pass the
# programs in as extra binaries (their ASan and UBSan runtimes come with them).
HOST_PKGS+=(libfabric1)
