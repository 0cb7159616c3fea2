# shellcheck shell=bash disable=SC2034
# NFS over RDMA (apps/nfs, docs/nfs.md): the kernel's NFS server and client with the RPC-over-RDMA
# transport (rpcrdma: svcrdma and xprtrdma), and the nfs-utils programs that start and mount
# them (the client for NFSv3 and NFSv4.1) and showmount (what a MOUNT server exports). In the VM,
# `nfs_vm_server DIR` exports DIR over TCP and RDMA (port 20049), NFSv3 only,
# `nfs_vm_server DIR v4` NFSv4.1 too (a 10 s grace period), and `mount.nfs` mounts an RDMA export
# (see tests/interop/nfs*.sh).
HOST_PKGS+=(nfs-kernel-server nfs-common rpcbind)
MODS+=(sunrpc rpcrdma nfsd nfs nfsv3 nfsv4 lockd)
EXTRA_IMAGE_BINS+=(/usr/sbin/rpc.nfsd /usr/sbin/rpc.mountd /usr/sbin/exportfs /sbin/mount.nfs
                   /sbin/rpcbind /usr/sbin/rpcinfo /usr/bin/flock /usr/sbin/showmount)
IMAGE_HOOKS+=(nfs_image_hook)

nfs_image_hook() {
  local root=$1
  mkdir -p "$root"/var/lib/nfs/{sm,sm.bak,v4recovery} "$root"/run/rpcbind "$root"/srv/nfs \
           "$root"/proc "$root"/sbin
  : > "$root/var/lib/nfs/etab"
  : > "$root/var/lib/nfs/rmtab"
  # libtirpc reads its transports from /etc/netconfig; mountd and rpcbind name protocols and
  # services through these files.
  for f in /etc/netconfig /etc/protocols /etc/services /etc/rpc; do
    [[ -f $f ]] && cp "$f" "$root/etc/"
  done
  echo "_rpc:x:100:65534::/run/rpcbind:/bin/false" >> "$root/etc/passwd"
  echo "nogroup:x:65534:" >> "$root/etc/group"
  # mount(8) looks for mount.nfs in /sbin.
  ln -sf /usr/bin/mount.nfs "$root/sbin/mount.nfs"
  cat > "$root/usr/bin/nfs_vm_server" <<'SH'
#!/bin/sh
# nfs_vm_server DIR [v4]: export DIR read-write to everyone over TCP and RDMA port 20049: NFSv3,
# and with v4 NFSv4.x too (DIR the pseudo-root: mount ADDR:/).
dir=${1:-/srv/nfs}
mkdir -p "$dir" /proc/fs/nfsd /var/lib/nfs /run/rpcbind
grep -q " $dir " /proc/mounts || mount -t tmpfs -o size=400m tmpfs "$dir"
grep -q " /proc/fs/nfsd " /proc/mounts || mount -t nfsd nfsd /proc/fs/nfsd
rpcbind -w 2>/dev/null || rpcbind
echo "$dir *(rw,sync,no_subtree_check,no_root_squash,insecure,fsid=0)" > /etc/exports
exportfs -ra || exit 1
rpc.mountd --no-nfs-version 4 --port 20048 || exit 1
# The v4 grace period (90 s by default) holds every OPEN of a fresh server: 10 s, the least.
if [ "$2" = v4 ]; then
  echo 10 > /proc/fs/nfsd/nfsv4gracetime
  rpc.nfsd 8 || exit 1
else
  rpc.nfsd --no-nfs-version 4 8 || exit 1
fi
echo "rdma 20049" > /proc/fs/nfsd/portlist || exit 1
cat /proc/fs/nfsd/portlist
SH
  chmod 755 "$root/usr/bin/nfs_vm_server"
}
