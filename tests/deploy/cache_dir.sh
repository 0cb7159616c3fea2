# Sourced by the deployment scripts (tests/deploy/, containers/podman/debian-base.sh,
# scripts/install-deps.sh): the caches they keep outside the repository (ROCE_DEPLOY_CACHE,
# default /var/tmp/roce-deploy; ROCE_NPM_DIR) sit by default in a world-writable directory under
# a name anyone can guess, and root runs from them: node loads the npm modules, podman imports
# the debootstrapped base, the image build compiles through the ccache, logs are written there.
# Another user who made the directory first would own all of that (docs/security.md,
# "Deployments"). safe_dir refuses such a directory.
# shellcheck shell=bash

# safe_dir DIR [--existing]: DIR made (mode 0755) unless --existing, then refused (a message on
# stderr, status 1) unless DIR is owned by us (or root) and writable by nobody else, and every
# directory above it is owned by us or root and writable by nobody else, or is sticky (/tmp,
# /var/tmp: others may add names there but not replace ours). No symbolic link on the way.
safe_dir() {
  local dir=$1 me uid mode p
  me=$(id -u)
  [[ $dir == /* ]] || dir=$PWD/$dir
  dir=$(realpath -ms -- "$dir")
  if [[ ${2:-} != --existing ]]; then
    [[ -L $dir ]] || (umask 022 && mkdir -p -- "$dir") || return 1
  fi
  p=$dir
  while :; do
    if [[ -L $p ]]; then echo "safe_dir: $p is a symbolic link: refusing $dir" >&2; return 1; fi
    if ! read -r uid mode < <(stat -c '%u %a' -- "$p" 2>/dev/null); then
      echo "safe_dir: $p does not exist" >&2; return 1
    fi
    if [[ $uid != 0 && $uid != "$me" ]]; then
      echo "safe_dir: $p belongs to uid $uid, not to us ($me) or root: refusing $dir" >&2; return 1
    fi
    if (( 8#$mode & 8#022 )) && { [[ $p == "$dir" ]] || (( !(8#$mode & 8#1000) )); }; then
      echo "safe_dir: $p (mode $mode) is writable by other users: refusing $dir" >&2; return 1
    fi
    [[ $p == / ]] && break
    p=$(dirname -- "$p")
  done
}
