#!/bin/sh
# The image's build stage, first half (containers/Containerfile): the build dependencies from
# Debian 12's archive. A layer of its own, before the sources are copied in, so that a rebuild
# after source changes reuses it (podman build --layers).
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config ccache ca-certificates \
  libdpdk-dev libisal-dev libyaml-cpp-dev libboost-program-options-dev \
  libibverbs-dev librdmacm-dev >/dev/null
echo "steps/build-deps.sh: toolchain and libraries installed"
