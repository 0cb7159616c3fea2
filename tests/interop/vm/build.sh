#!/usr/bin/env bash
# Build a tiny Linux VM image (kernel + initramfs) that runs Soft-RoCE (rdma_rxe)
# with the real rdma-core / perftest / rdmacm-utils tools of this Debian 12 host.
#
# Everything comes from Debian packages (apt-get install / apt-get download).
# Output goes to a cache dir OUTSIDE the repo (default /var/tmp/rxe-vm):
#   $CACHE/vmlinuz          kernel bzImage (Debian linux-image-6.1.*-amd64)
#   $CACHE/vmlinux          same kernel, uncompressed ELF (booted via PVH: faster under TCG)
#   $CACHE/initramfs.cpio   busybox + modules + rdma userspace + /init
#   $CACHE/kver             kernel version string
#
# Usage: tests/interop/vm/build.sh [--force]    (one build at a time per cache: $CACHE/build.lock)
#   RXE_VM_CACHE=/var/tmp/rxe-vm   cache/output dir
#   RXE_VM_KPKG=linux-image-6.1.0-56-amd64  pin the kernel package (default: what
#                                  linux-image-amd64 depends on)
#   RXE_VM_NO_APT=1                do not apt-get install missing host packages
#   RXE_VM_EXTRA_BINS="PATH ..."   also copy these binaries (built by the project on rdma-core,
#                                  e.g. the NAAICE host example) to /usr/bin, with the shared
#                                  libraries they need; the image keeps earlier extras
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${RXE_VM_CACHE:-/var/tmp/rxe-vm}"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

log() { echo "[rxe-vm build] $*" >&2; }

# ---------------------------------------------------------------- host packages
HOST_PKGS=(qemu-system-x86 busybox-static cpio kmod rdma-core ibverbs-utils
           ibverbs-providers perftest rdmacm-utils iproute2)
# Image fragments (image.d/*.sh, sourced in name order) add what one proof needs without
# touching this file. A fragment may append to HOST_PKGS (host packages to install), MODS
# (kernel modules loaded at boot, with their dependencies), EXTRA_IMAGE_BINS (host binaries
# copied to /usr/bin with their libraries) and IMAGE_HOOKS (functions called with the image
# root before packing, for config files, data and libraries loaded with dlopen).
MODS=(crc32_generic crc32-pclmul virtio_pci virtio_net virtio_rng
      rdma_rxe ib_umad rdma_ucm)
EXTRA_IMAGE_BINS=()
IMAGE_HOOKS=()
FRAGMENTS=()
for f in "$HERE"/image.d/*.sh; do
  [[ -f "$f" ]] || continue
  FRAGMENTS+=("$f")
  # shellcheck disable=SC1090
  source "$f"
done
if [[ -z "${RXE_VM_NO_APT:-}" ]]; then
  missing=()
  for p in "${HOST_PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
fi

mkdir -p "$CACHE/dl"
# One build at a time per cache: another checkout building the same image waits here, then
# finds it up to date (the check below runs under the lock). The lock file stays next to the
# image; the kernel drops the lock when this script exits, however it exits.
exec 9> "$CACHE/build.lock"
if ! flock -n 9; then
  log "another build of $CACHE is running: waiting for it"
  flock 9
fi

# ---------------------------------------------------------------- kernel package
KPKG="${RXE_VM_KPKG:-}"
if [[ -z "$KPKG" ]]; then
  KPKG="$(apt-cache depends linux-image-amd64 2>/dev/null \
          | awk '/Depends: linux-image-[0-9]/{print $2; exit}')"
fi
[[ -n "$KPKG" ]] || { log "cannot resolve kernel package (apt-get update?)"; exit 1; }
KVER="${KPKG#linux-image-}"
log "kernel package $KPKG (kver $KVER)"

# Extra binaries: those requested now plus those an earlier build put in (if they still exist).
read -r -a EXTRA <<< "${RXE_VM_EXTRA_BINS:-}"
extra_ok=1
for b in "${EXTRA[@]}"; do
  [[ -x "$b" ]] || { log "RXE_VM_EXTRA_BINS: $b is not an executable"; exit 1; }
  if ! grep -qxF "$(readlink -f "$b")" "$CACHE/extra-bins" 2>/dev/null \
     || [[ ! "$CACHE/initramfs.cpio" -nt "$b" ]]; then
    extra_ok=0
  fi
done
while read -r b; do
  [[ -n "$b" && -x "$b" ]] && EXTRA+=("$b")
done < <(cat "$CACHE/extra-bins" 2>/dev/null || true)

if [[ $FORCE == 0 && $extra_ok == 1 && -f "$CACHE/initramfs.cpio" && -f "$CACHE/vmlinuz" && -f "$CACHE/vmlinux" \
      && "$(cat "$CACHE/kver" 2>/dev/null)" == "$KVER" \
      && "$CACHE/initramfs.cpio" -nt "$HERE/build.sh" \
      && "$CACHE/initramfs.cpio" -nt "$HERE/init" \
      && "$CACHE/initramfs.cpio" -nt "$HERE/guest-lib.sh" ]] \
      && { fresh=1; for f in "${FRAGMENTS[@]}"; do [[ "$CACHE/initramfs.cpio" -nt "$f" ]] || fresh=0; done; ((fresh)); }; then
  log "up to date: $CACHE/vmlinuz $CACHE/initramfs.cpio (use --force to rebuild)"
  exit 0
fi

DEB="$(ls "$CACHE"/dl/"${KPKG}"_*.deb 2>/dev/null | head -1 || true)"
if [[ -z "$DEB" ]]; then
  log "apt-get download $KPKG"
  (cd "$CACHE/dl" && apt-get download "$KPKG" >&2)
  DEB="$(ls "$CACHE"/dl/"${KPKG}"_*.deb | head -1)"
fi

KROOT="$CACHE/kpkg"
if [[ ! -f "$KROOT/lib/modules/$KVER/modules.dep" || $FORCE == 1 ]]; then
  rm -rf "$KROOT"; mkdir -p "$KROOT"
  dpkg -x "$DEB" "$KROOT"
  depmod -b "$KROOT" "$KVER"
fi
cp -f "$KROOT/boot/vmlinuz-$KVER" "$CACHE/vmlinuz.tmp"   # renamed: a VM booting now sees
mv "$CACHE/vmlinuz.tmp" "$CACHE/vmlinuz"                 # the old file or the new, whole
# Uncompressed ELF vmlinux (Debian builds with CONFIG_PVH=y, so qemu boots it through the PVH
# entry point). Under TCG this skips ~3 s of in-guest XZ decompression per boot.
/usr/bin/python3 - "$CACHE/vmlinuz" "$CACHE/vmlinux.tmp" <<'PYEOF' && mv "$CACHE/vmlinux.tmp" "$CACHE/vmlinux" || { log "vmlinux extraction failed; VMs will boot the bzImage"; rm -f "$CACHE/vmlinux" "$CACHE/vmlinux.tmp"; }
import lzma, sys
d = open(sys.argv[1], 'rb').read()
off = d.find(b'\xfd7zXZ\x00')
if off < 0:
    sys.exit("no XZ payload in bzImage")
out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(d[off:])
if out[:4] != b'\x7fELF':
    sys.exit("payload is not ELF")
open(sys.argv[2], 'wb').write(out)
PYEOF

# ---------------------------------------------------------------- initramfs tree
ROOT="$CACHE/root"
rm -rf "$ROOT"
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc/rxe-vm,proc,sys,dev,tmp,run,root,mnt/host,var/tmp}
# /usr/lib -> /lib (merged-usr style), relative: an absolute link would send what is copied to
# $ROOT/usr/lib/... (a library ldd names there) to the host's own /lib.
ln -s ../lib "$ROOT/usr/lib" 2>/dev/null || true

# busybox (static) + applet symlinks
cp /bin/busybox "$ROOT/bin/busybox"
for a in $(/bin/busybox --list); do
  [[ "$a" == busybox ]] && continue
  ln -sf busybox "$ROOT/bin/$a"
done

# kernel modules, in load order. crc32_generic must be present before rdma_rxe
# (rxe allocates the "crc32" shash; there is no modprobe helper in the VM).
MODS_9P=(9pnet_virtio 9p)   # only loaded with rxe.9p=1
declare -A seen=()
for m in "${MODS[@]}" - "${MODS_9P[@]}"; do
  if [[ "$m" == - ]]; then MODLIST="$ROOT/etc/rxe-vm/modules-9p.load"; : > "$MODLIST"; continue; fi
  if [[ -z "${MODLIST:-}" ]]; then MODLIST="$ROOT/etc/rxe-vm/modules.load"; : > "$MODLIST"; fi
  while read -r verb path _; do
    [[ "$verb" == insmod ]] || continue
    rel="${path#"$KROOT"/lib/modules/"$KVER"/}"
    [[ -n "${seen[$rel]:-}" ]] && continue
    seen[$rel]=1
    mkdir -p "$ROOT/lib/modules/$KVER/$(dirname "$rel")"
    cp "$path" "$ROOT/lib/modules/$KVER/$rel"
    echo "/lib/modules/$KVER/$rel" >> "$MODLIST"
  done < <(modprobe -d "$KROOT" -S "$KVER" --show-depends "$m")
done
log "modules: $(cat "$ROOT"/etc/rxe-vm/modules*.load | wc -l) ($(cat "$ROOT"/etc/rxe-vm/modules*.load | tr '\n' ' ' | sed "s#/lib/modules/$KVER/kernel/##g"))"

# rdma userspace from the host
BINS=()
for pkg in ibverbs-utils perftest rdmacm-utils; do
  while read -r f; do
    [[ -f "$f" && -x "$f" && "$f" == /usr/bin/* ]] || continue
    head -c 4 "$f" | grep -q ELF || continue   # skip perl/shell wrappers
    BINS+=("$f")
  done < <(dpkg -L "$pkg")
done
BINS+=(/usr/bin/rdma /bin/ip /usr/bin/taskset "${EXTRA_IMAGE_BINS[@]}")
# The image holds binaries by base name (/usr/bin/NAME): the first of a name wins, so one asked
# for now replaces an earlier build's binary of the same name (another build tree's), which is
# then dropped from the list too.
declare -A extra_seen=() extra_name=()
EXTRA_REAL=()
for b in "${EXTRA[@]}"; do
  r="$(readlink -f "$b")"
  [[ -n "${extra_seen[$r]:-}" ]] && continue
  extra_seen[$r]=1
  n="$(basename "$r")"
  if [[ -n "${extra_name[$n]:-}" ]]; then
    log "extra binary $r: ${extra_name[$n]} has its name in the image"
    continue
  fi
  extra_name[$n]=$r
  EXTRA_REAL+=("$r")
  BINS+=("$r")
done
PROVIDER=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
[[ -f "$PROVIDER" ]] || PROVIDER="$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so | head -1)"

declare -A libs=()
for b in "${BINS[@]}" "$PROVIDER"; do
  while read -r l; do
    [[ -n "$l" ]] && libs[$l]=1
  done < <(ldd "$b" 2>/dev/null | awk '/=> \//{print $3} $1 ~ /^\/lib64\//{print $1}')
done
for b in "${BINS[@]}"; do
  case "$b" in
    /bin/ip) cp "$b" "$ROOT/usr/bin/ip.full" ;;     # keep busybox ip as /bin/ip
    /usr/bin/taskset) ;;                             # busybox has taskset
    *) cp "$b" "$ROOT/usr/bin/" ;;
  esac
done
# dlopen()ed by glibc (pthread_exit/pthread_cancel unwinding, used by rping at exit)
for l in /lib/x86_64-linux-gnu/libgcc_s.so.1; do libs[$l]=1; done
for l in "${!libs[@]}"; do
  real="$(readlink -f "$l")"
  mkdir -p "$ROOT$(dirname "$l")"
  cp "$real" "$ROOT$l"
done
mkdir -p "$ROOT/lib/x86_64-linux-gnu/libibverbs" "$ROOT/etc/libibverbs.d"
cp "$PROVIDER" "$ROOT/lib/x86_64-linux-gnu/libibverbs/"
cp /etc/libibverbs.d/rxe.driver "$ROOT/etc/libibverbs.d/"
log "binaries: ${#BINS[@]}, shared libs: ${#libs[@]}"

# minimal /etc
cat > "$ROOT/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
EOF
echo "root:x:0:" > "$ROOT/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$ROOT/etc/hosts"
echo "hosts: files" > "$ROOT/etc/nsswitch.conf"
echo "$KVER" > "$ROOT/etc/rxe-vm/kver"
cp "$HERE/init" "$ROOT/init"
cp "$HERE/guest-lib.sh" "$ROOT/etc/rxe-vm/lib.sh"
chmod 755 "$ROOT/init"

for hook in "${IMAGE_HOOKS[@]}"; do "$hook" "$ROOT"; done

# pack. Left uncompressed on purpose: under TCG gunzip of the initramfs costs ~1 s per boot.
log "packing initramfs"
(cd "$ROOT" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) \
  > "$CACHE/initramfs.cpio.tmp"
mv "$CACHE/initramfs.cpio.tmp" "$CACHE/initramfs.cpio"
rm -f "$CACHE/initramfs.cpio.gz"   # older builds
echo "$KVER" > "$CACHE/kver"
printf '%s\n' "${EXTRA_REAL[@]}" > "$CACHE/extra-bins"
log "done: $CACHE/vmlinux ($(du -h "$CACHE/vmlinux" 2>/dev/null | cut -f1)) [bzImage $CACHE/vmlinuz], $CACHE/initramfs.cpio ($(du -h "$CACHE/initramfs.cpio" | cut -f1))"
