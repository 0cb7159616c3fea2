#!/bin/sh
# The image's run stage (containers/Containerfile runs it):
# only the runtime libraries of the binaries in /usr/local/bin, the DPDK drivers the appliance
# uses without a NIC (net_memif, net_af_packet, net_tap, net_ring, the vdev bus and the ring
# mempool), and an unprivileged user. A physical NIC needs its PMD's package added here
# (librte-net-mlx5-23, librte-net-ice23, ...) and librte-bus-pci23.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  libisal2 libyaml-cpp0.7 libboost-program-options1.74.0 libnuma1 \
  librte-eal23 librte-ethdev23 librte-mbuf23 librte-mempool23 librte-ring23 librte-net23 \
  librte-telemetry23 librte-kvargs23 librte-meter23 \
  librte-bus-vdev23 librte-mempool-ring23 \
  librte-net-memif23 librte-net-af-packet23 librte-net-tap23 librte-net-ring23 \
  iproute2 >/dev/null
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/*
# The appliance runs as this user where the PMD allows it (containers/README.md: capabilities).
if ! getent passwd roce >/dev/null; then
  groupadd --system --gid 10001 roce
  useradd --system --uid 10001 --gid roce --home-dir /var/lib/roce --create-home \
    --shell /usr/sbin/nologin roce
fi
# No setuid or setgid program (su, mount, passwd, ...): the appliance needs none, and a container
# started without no-new-privileges would let its user run them (docs/security.md, "Deployments").
find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
# The attach sockets' directory and the memif link's (shared volumes in compose and Kubernetes;
# the link's is the appliances' alone) and the configuration.
# /run/roce is sticky: a client (another uid in the group roce) may connect to the sockets there
# but not unlink roced's and listen in its place.
install -d -o roce -g roce -m 1775 /run/roce
install -d -o roce -g roce -m 0770 /run/roce-link
install -d -m 0755 /etc/roce
echo "steps/runtime.sh: runtime libraries installed, user roce (10001)"
