#!/usr/bin/env bash
# Makes the image localhost/roce-debian:bookworm, a local copy of debian:bookworm, for machines
# that reach Debian's archive but no container registry (the development machines): Debian 12
# (minbase) debootstrapped from deb.debian.org and imported into podman's storage. Build the
# appliance FROM it with --build-arg BASE=localhost/roce-debian:bookworm (docs/deploy.md).
#
#   containers/podman/debian-base.sh       # once; again only after `podman rmi` of the image
#
# Needs root, debootstrap and debian-archive-keyring (the Release signature is checked). The debootstrapped tree is kept in ROCE_DEPLOY_CACHE (default
# /var/tmp/roce-deploy)/base, so a re-import needs no download.
set -euo pipefail
image=localhost/roce-debian:bookworm
cache=${ROCE_DEPLOY_CACHE:-/var/tmp/roce-deploy}
say() { echo "debian-base: $*"; }
if podman image exists "$image"; then say "$image is there"; exit 0; fi
[[ $(id -u) == 0 ]] || { echo "debian-base: needs root (debootstrap)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "debian-base: debootstrap missing (scripts/install-deps.sh)" >&2; exit 1; }
# root imports what is in the cache as the base image: refuse one another user could change
# shellcheck source=tests/deploy/cache_dir.sh
source "$(dirname "$0")/../../tests/deploy/cache_dir.sh"
safe_dir "$cache" || exit 1
base=$cache/base
if [[ ! -e $base/.complete ]]; then
  say "debootstrap Debian 12 into $base"
  rm -rf "$base"
  # over plain HTTP: only the archive's signature, checked against Debian's keyring, vouches for
  # what is downloaded; without the keyring debootstrap would warn and go on unchecked
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [[ -r $keyring ]] || { echo "debian-base: $keyring missing (debian-archive-keyring)" >&2; exit 1; }
  debootstrap --keyring="$keyring" --variant=minbase bookworm "$base" http://deb.debian.org/debian \
    > "$cache/debootstrap.log" 2>&1 || { tail -20 "$cache/debootstrap.log"; exit 1; }
  grep -q '^I: Valid Release signature' "$cache/debootstrap.log" \
    || { echo "debian-base: debootstrap did not check the Release signature" >&2; exit 1; }
  # the same sources as the debian:bookworm image (security updates included)
  cat > "$base/etc/apt/sources.list" <<'LIST'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
LIST
  touch "$base/.complete"
fi
say "importing $base as $image"
tar -C "$base" --exclude=./.complete -cf - . | podman import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
say "$image imported"
