#!/usr/bin/env bash
# Installs the build and test dependencies on Debian 12 (run as root).
# Idempotent: when every package is already installed it only checks and returns.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  dpdk dpdk-dev libdpdk-dev
  libisal-dev libyaml-cpp-dev libboost-program-options-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  tshark python3-scapy
  clang libclang-rt-14-dev llvm
  iproute2 iputils-ping tcpdump
  libibverbs-dev librdmacm-dev
  # Debian's own RDMA programs, unmodified, on the libibverbs provider and our librdmacm
  # (tests/integration/verbs_*, rdmacm_*; docs/verbs-compat.md)
  perftest ibverbs-utils rdmacm-utils
  # rdma-core's own test suite against the appliance's device (interop_rdma_core_suite_*,
  # with a checkout of rdma-core 44's tests/ named by RDMA_CORE_TESTS_DIR)
  python3-pyverbs
  # libfabric, UCX and Open MPI over the provider (tests/integration/fabric_*; mpicc builds
  # the MPI job's program)
  libfabric-bin ucx-utils openmpi-bin libopenmpi-dev
  debootstrap debian-archive-keyring yamllint nodejs
  # the deployment tests (tests/deploy/, docs/deploy.md): podman with runc (crun refuses hybrid
  # cgroups), CNI networks, the pause image's init for kube play's pods, podman-compose
  podman runc containernetworking-plugins catatonit podman-compose
  libfabric-dev
  verilator yosys
  # instructions per packet of the engine (tests/perf/engine_instructions.sh: callgrind)
  valgrind
  # the host's port mapper the NFS service registers with, and rpcinfo/showmount to ask it
  # (tests/integration/nfs_rpcbind.sh)
  rpcbind nfs-common
)
# Debian's npm; a nodejs from elsewhere (NodeSource) brings its own and conflicts with it.
command -v npm >/dev/null || PACKAGES+=(npm)
# The Kubernetes schema validator of tests/deploy (npm, outside the repository).
NPM_DIR=${ROCE_NPM_DIR:-/var/tmp/roce-deploy/npm}
NPM_PACKAGES=(kubernetes-models@4.5.1 js-yaml@4.1.0)
npm_deps() {
  # the tests run node, as root too, with modules from there: refuse a directory others can change
  # shellcheck source=tests/deploy/cache_dir.sh
  source "$(dirname "$0")/../tests/deploy/cache_dir.sh"
  safe_dir "$NPM_DIR" || exit 1
  [[ -d $NPM_DIR/node_modules/kubernetes-models && -d $NPM_DIR/node_modules/js-yaml ]] && return 0
  echo "install-deps: npm install ${NPM_PACKAGES[*]} into $NPM_DIR"
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --silent "${NPM_PACKAGES[@]}" >/dev/null
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  npm_deps
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}); run as root" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# tshark asks whether unprivileged users may capture; answer once, no prompt.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
echo "install-deps: installing ${missing[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
npm_deps
echo "install-deps: done"
