# shellcheck shell=bash disable=SC2034
# A workload's tools (tests/interop/nfs_workload.sh, tests/perf/nfs_fio_bench.sh): fio (its
# verify=crc32c and psync/libaio engines) and git, whose init, add, commit, fsck and log are
# built into the one binary; git looks for itself and its templates under /usr/lib/git-core
# and /usr/share/git-core.
HOST_PKGS+=(fio git)
EXTRA_IMAGE_BINS+=(/usr/bin/fio /usr/bin/git)
IMAGE_HOOKS+=(tools_image_hook)

tools_image_hook() {
  local root=$1
  mkdir -p "$root/lib/git-core" "$root/usr/share/git-core"   # the image's /usr/lib is /lib
  ln -sf /usr/bin/git "$root/lib/git-core/git"
  [[ -d /usr/share/git-core/templates ]] && cp -r /usr/share/git-core/templates "$root/usr/share/git-core/"
  return 0
}
