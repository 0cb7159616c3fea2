#!/bin/sh
# The image's build stage, second half (containers/Containerfile; steps/build-deps.sh installed
# the build dependencies): builds the appliance as the default preset does (RelWithDebInfo,
# stripped at install; GCC 12 at -O3 trips -Werror=restrict) without tests, and installs the
# binaries into /out/bin. Run from the source tree's root (/src).
#   ROCE_JOBS   parallel compile jobs (default: all processors)
#   CCACHE_DIR  when set (a mounted cache), compile through ccache
set -eu
launcher=""
if [ -n "${CCACHE_DIR:-}" ]; then launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"; fi
# shellcheck disable=SC2086
cmake -S . -B /tmp/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DROCE_BUILD_TESTS=OFF -DROCE_BUILD_BENCH=OFF -DROCE_BUILD_FUZZ=OFF $launcher >/dev/null
# The appliance, its tools and the applications shipped in the image (containers/README.md).
cmake --build /tmp/build -j "${ROCE_JOBS:-$(nproc)}" -t \
  roced roce-ctl roce-perf roce-pcap roce-naa naaice_client_roce naaice_bench_roce \
  roce-attach-example roce-lnet-ping roce-link-demo
mkdir -p /out/bin
for b in roced roce-ctl roce-perf roce-pcap roce-naa naaice_client_roce naaice_bench_roce \
         roce-attach-example roce-lnet-ping roce-link-demo; do
  install -m 0755 -s "/tmp/build/bin/$b" /out/bin/
done
echo "steps/build.sh: $(ls /out/bin | wc -l) binaries in /out/bin"
