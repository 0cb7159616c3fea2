#!/usr/bin/env bash
# Builds the appliance image (containers/Containerfile) and unpacks its root filesystem, for
# the deployment test and for machines where no container engine runs (docs/deploy.md).
#
#   containers/build-rootfs.sh [--engine auto|buildah|chroot] [--out DIR]
#
# Engines:
#   buildah  `buildah bud --isolation chroot` of the Containerfile itself, FROM a local copy of
#            Debian 12 (debootstrap from Debian's archive: no registry needed); the image is
#            tagged localhost/roce-appliance:latest, then unpacked into DIR/rootfs.
#   chroot   no engine at all: the same two stages, run as the scripts the Containerfile runs
#            (containers/steps/build.sh, runtime.sh) in chroots of debootstrapped Debian 12.
#   auto     buildah when it can run a container here, else chroot (the default).
# Either way DIR/image.json holds the image's Entrypoint, Cmd, User, ExposedPorts and
# Healthcheck (the engine's own configuration, or the Containerfile's lines for chroot), which
# containers/netns-compose.py uses to start the image's entrypoint.
#
# Cache (outside the repository): ROCE_DEPLOY_CACHE, default /var/tmp/roce-deploy (the
# debootstrapped base, a ccache of the image's compiles, the build context). DIR defaults to
# $ROCE_DEPLOY_CACHE/image. Needs root, debootstrap, and network access to deb.debian.org.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${ROCE_DEPLOY_CACHE:-/var/tmp/roce-deploy}
engine=auto out=
while (($#)); do
  case $1 in
    --engine) engine=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build-rootfs: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
out=${out:-$cache/image}
case $engine in auto|buildah|chroot) ;; *) echo "build-rootfs: --engine auto, buildah or chroot" >&2; exit 2 ;; esac
[[ $(id -u) == 0 ]] || { echo "build-rootfs: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "build-rootfs: debootstrap missing (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$cache" "$cache/ccache"
exec 9>"$cache/lock"
flock 9  # one build per cache at a time
say() { echo "build-rootfs: $*"; }

# ---- Debian 12 base (minbase), once per cache ------------------------------------------------
base=$cache/base
if [[ ! -e $base/.complete ]]; then
  say "debootstrap Debian 12 into $base (once)"
  rm -rf "$base"
  debootstrap --variant=minbase bookworm "$base" http://deb.debian.org/debian > "$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log"; exit 1; }
  # the same sources as the debian:bookworm image (security updates included)
  cat > "$base/etc/apt/sources.list" <<'EOF'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  touch "$base/.complete"
fi

# ---- the build context: the repository's tracked files (as they are in the work tree) ---------
ctx=$cache/context
rm -rf "$ctx" && mkdir -p "$ctx"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$ctx" 2>/dev/null || true)
[[ -f $ctx/containers/Containerfile ]] || { echo "build-rootfs: no build context" >&2; exit 1; }

buildah_works() {
  command -v buildah >/dev/null || return 1
  local c
  c=$(buildah from scratch 2>/dev/null) || return 1
  buildah rm "$c" >/dev/null 2>&1
  return 0
}
if [[ $engine == auto ]]; then
  if buildah_works; then engine=buildah; else engine=chroot; fi
fi
say "engine: $engine"
rm -rf "$out" && mkdir -p "$out"

if [[ $engine == buildah ]]; then
  # ---- the Containerfile itself, FROM the debootstrapped base ---------------------------------
  if ! buildah inspect --type image localhost/roce-debian:bookworm >/dev/null 2>&1 \
     || [[ $base/.complete -nt $cache/base.imported ]]; then
    say "importing the base as localhost/roce-debian:bookworm"
    c=$(buildah from scratch)
    m=$(buildah mount "$c")
    tar -C "$base" --exclude=./.complete -cf - . | tar -C "$m" -xf -
    buildah umount "$c" >/dev/null
    buildah config --cmd /bin/bash "$c"
    buildah commit -q --rm "$c" localhost/roce-debian:bookworm >/dev/null
    touch "$cache/base.imported"
  fi
  say "buildah bud --isolation chroot -f containers/Containerfile (log: $cache/buildah.log)"
  buildah bud --isolation chroot --format docker --layers --force-rm \
    --build-arg BASE=localhost/roce-debian:bookworm \
    --build-arg CCACHE_DIR=/ccache --build-arg ROCE_JOBS="${ROCE_JOBS:-2}" \
    -v "$cache/ccache:/ccache" \
    -f "$ctx/containers/Containerfile" -t localhost/roce-appliance:latest "$ctx" \
    > "$cache/buildah.log" 2>&1 || { tail -40 "$cache/buildah.log"; exit 1; }
  c=$(buildah from localhost/roce-appliance:latest)
  m=$(buildah mount "$c")
  mkdir -p "$out/rootfs"
  tar -C "$m" -cf - . | tar -C "$out/rootfs" -xf -
  buildah umount "$c" >/dev/null
  buildah rm "$c" >/dev/null
  buildah inspect --type image localhost/roce-appliance:latest \
    | /usr/bin/python3 -c 'import json, sys
i = json.load(sys.stdin)
cfg = i["Docker"]["config"]
hc = cfg.get("Healthcheck") or {}
json.dump({"engine": "buildah", "image": "localhost/roce-appliance:latest", "id": i["FromImageID"],
           "Entrypoint": cfg.get("Entrypoint"), "Cmd": cfg.get("Cmd"), "User": cfg.get("User"),
           "WorkingDir": cfg.get("WorkingDir"), "ExposedPorts": sorted(cfg.get("ExposedPorts") or {}),
           "Healthcheck": hc.get("Test")}, sys.stdout, indent=1)' > "$out/image.json"
else
  # ---- no engine: the Containerfile's stages as chroots ---------------------------------------
  in_chroot() {  # ROOT CMD...: run CMD in ROOT with /proc, /dev, DNS and /ccache, /src mounted
    local root=$1; shift
    mkdir -p "$root/proc" "$root/dev" "$root/ccache" "$root/src"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    unshare --mount --fork bash -c '
      set -e; r=$1; shift
      mount -t proc proc "$r/proc"; mount --rbind /dev "$r/dev"
      mount --bind "$CACHE/ccache" "$r/ccache"; mount --bind "$CTX" "$r/src"
      exec chroot "$r" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root CCACHE_DIR=/ccache ROCE_JOBS="$JOBS" sh -c "cd /src && $*"' _ "$root" "$@"
  }
  export CACHE=$cache CTX=$ctx JOBS=${ROCE_JOBS:-2}
  stage=$cache/stage-build
  rm -rf "$stage" && cp -a "$base" "$stage"
  say "build stage: containers/steps/build.sh in a chroot (log: $cache/chroot-build.log)"
  in_chroot "$stage" containers/steps/build.sh > "$cache/chroot-build.log" 2>&1 \
    || { tail -40 "$cache/chroot-build.log"; exit 1; }
  say "run stage: containers/steps/runtime.sh in a chroot"
  cp -a "$base" "$out/rootfs" && rm -f "$out/rootfs/.complete"
  install -D -m 0755 "$ctx/containers/steps/runtime.sh" "$out/rootfs/usr/local/share/roce/runtime.sh"
  in_chroot "$out/rootfs" /usr/local/share/roce/runtime.sh > "$cache/chroot-run.log" 2>&1 \
    || { tail -40 "$cache/chroot-run.log"; exit 1; }
  rmdir "$out/rootfs/ccache" "$out/rootfs/src" 2>/dev/null || true
  cp -a "$stage/out/bin/." "$out/rootfs/usr/local/bin/"
  install -m 0644 "$ctx/containers/config/appliance.yaml" "$out/rootfs/etc/roce/appliance.yaml"
  # The image configuration, read from the Containerfile's own instructions.
  /usr/bin/python3 - "$ctx/containers/Containerfile" > "$out/image.json" <<'PY'
import json, re, sys
text = re.sub(r"\\\n\s*", " ", open(sys.argv[1]).read())
final = text.split("\nFROM ")[-1]          # the last stage is the image
cfg = {"engine": "chroot", "image": "rootfs", "ExposedPorts": []}
for line in final.splitlines():
    word, _, rest = line.strip().partition(" ")
    if word == "ENTRYPOINT": cfg["Entrypoint"] = json.loads(rest)
    elif word == "CMD": cfg["Cmd"] = json.loads(rest)
    elif word == "USER": cfg["User"] = rest.strip()
    elif word == "WORKDIR": cfg["WorkingDir"] = rest.strip()
    elif word == "EXPOSE": cfg["ExposedPorts"].append(rest.strip())
    elif word == "HEALTHCHECK": cfg["Healthcheck"] = ["CMD"] + json.loads(rest[rest.index("CMD") + 3:])
json.dump(cfg, sys.stdout, indent=1)
PY
fi
say "root filesystem in $out/rootfs ($(du -sh "$out/rootfs" | cut -f1)), image configuration in $out/image.json"
for b in roced roce-ctl roce-perf roce-naa; do
  [[ -x $out/rootfs/usr/local/bin/$b ]] || { echo "build-rootfs: $b missing from the image" >&2; exit 1; }
done
touch "$out/.complete"
