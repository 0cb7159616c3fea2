/// @file
/// What a kernel RDMA device shows outside libibverbs, for the appliance's devices: the few
/// sysfs files, the `/dev/infiniband` node and the network interface that UCX and libfabric's
/// verbs provider look at before (or beside) the verbs calls (docs/verbs-compat.md, "libfabric,
/// UCX and MPI"). libroce-verbs.so defines the C library's entry points they use with glibc's
/// symbol versions (libroce-verbs.map), answers for paths of our devices and passes every other
/// path, unchanged, to glibc's definition (dlvsym RTLD_NEXT): open, open64, openat and their
/// _FORTIFY_SOURCE forms, fopen, fopen64, stat, stat64, access, getifaddrs.
///
/// The tree (N: the device's name, as ibv_get_device_name; i: a GID index < 16):
///   /dev/infiniband/N                           a character device, readable and writable
///     (UCX 1.13 uct_ib_device_is_accessible: stat() + access(R_OK | W_OK) of
///      "/dev/infiniband/" + ibv_device::dev_name, else the device is skipped)
///   /sys/class/infiniband/N/node_guid, node_type, sys_image_guid
///   /sys/class/infiniband/N/ports/1/{state,phys_state,link_layer,lid}
///   /sys/class/infiniband/N/ports/1/gids/i, pkeys/0
///   /sys/class/infiniband/N/ports/1/gid_attrs/types/i   "RoCE v2" (UCX's RoCE version of a GID)
///   /sys/class/infiniband/N/ports/1/gid_attrs/ndevs/i   N (the interface below)
/// and getifaddrs() lists an interface N, up and running, with the port's IPv4 address
/// (libfabric 1.17 vrb_getifaddrs: FI_EP_MSG needs an interface whose address rdma_bind_addr
/// binds to the device; the kernel lists rxe's netdev there).
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "verbs/provider/provider.h"

using namespace roce::verbs_compat;

namespace {

template <class F>
F real(const char* name, const char* version) {
  void* p = dlvsym(RTLD_NEXT, name, version);
  if (p == nullptr) p = dlsym(RTLD_NEXT, name);
  return reinterpret_cast<F>(p);
}

constexpr std::string_view kDevDir = "/dev/infiniband/";
constexpr std::string_view kSysDir = "/sys/class/infiniband/";

bool starts(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

/// What a path of our tree is.
struct Node {
  bool dir = false;
  bool cdev = false;
  std::string text;  ///< a file's contents
};
Node file(std::string text) { return Node{false, false, std::move(text)}; }
Node dir() { return Node{true, false, {}}; }
Node cdev() { return Node{false, true, {}}; }

std::string hex_guid(std::uint64_t g) {
  char b[24];
  std::snprintf(b, sizeof b, "%04x:%04x:%04x:%04x", unsigned(g >> 48) & 0xffff,
                unsigned(g >> 32) & 0xffff, unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
  return b;
}

std::string gid_text(const ibv_gid& g) {
  std::string s;
  char b[8];
  for (int i = 0; i < 16; i += 2) {
    std::snprintf(b, sizeof b, "%s%02x%02x", i == 0 ? "" : ":", g.raw[i], g.raw[i + 1]);
    s += b;
  }
  return s;
}

/// A file or directory of the port's sysfs (`rest`: the path below ports/1/).
std::optional<Node> port_node(const Device* d, std::string_view rest) {
  if (rest.empty() || rest == "gids" || rest == "pkeys" || rest == "gid_attrs" ||
      rest == "gid_attrs/types" || rest == "gid_attrs/ndevs")
    return dir();
  // The port is what ibv_query_port says of a port that is up: sysfs cannot tell a program
  // more than the open device does, and UCX and libfabric ask the device.
  if (rest == "state") return file("4: ACTIVE\n");
  if (rest == "phys_state") return file("5: LinkUp\n");
  if (rest == "link_layer") return file("Ethernet\n");
  if (rest == "lid") return file("0x0\n");
  if (rest == "pkeys/0") return file("0xffff\n");
  for (std::string_view dir : {"gids/", "gid_attrs/types/", "gid_attrs/ndevs/"}) {
    if (!starts(rest, dir)) continue;
    const std::string idx(rest.substr(dir.size()));
    char* end = nullptr;
    const unsigned long i = std::strtoul(idx.c_str(), &end, 10);
    if (idx.empty() || *end != '\0' || i >= kGidTableLen) return std::nullopt;
    ibv_gid g;
    const bool used = gid_at(d, static_cast<unsigned>(i), g);
    // The kernel's files of an empty entry: the zero GID; types and ndevs fail to read
    // (EINVAL). Here they read empty, which UCX and libibverbs take the same way.
    if (dir == "gids/") return file(gid_text(g) + "\n");
    if (!used) return file({});
    return file(dir == "gid_attrs/types/" ? "RoCE v2\n" : d->name + "\n");
  }
  return std::nullopt;
}

/// Set once this library's static objects are made. Other libraries' constructors may run
/// before ours and look at /dev (libinfinipath stats its devices): until then nothing is ours.
bool g_ready = false;
__attribute__((constructor)) void ready() { g_ready = true; }

/// Our node for `path`, or nothing (the path is not ours: glibc answers).
std::optional<Node> lookup(const char* path) {
  if (path == nullptr) return std::nullopt;
  const std::string_view p(path);
  const bool dev = starts(p, kDevDir), sys = starts(p, kSysDir);
  if (!dev && !sys) return std::nullopt;  // the fast path of every other open()
  if (!g_ready) return std::nullopt;
  std::string_view rest = p.substr(dev ? kDevDir.size() : kSysDir.size());
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  for (const Device* d : devices()) {
    if (dev) {
      if (rest == d->vdev.device.dev_name) return cdev();
      continue;
    }
    if (!starts(rest, d->name) || (rest.size() > d->name.size() && rest[d->name.size()] != '/'))
      continue;
    std::string_view sub = rest.substr(d->name.size());
    if (!sub.empty()) sub.remove_prefix(1);
    if (sub.empty() || sub == "ports") return dir();
    if (sub == "node_guid" || sub == "sys_image_guid") return file(hex_guid(node_guid(d)) + "\n");
    if (sub == "node_type") return file("1: CA\n");
    if (sub == "ports/1") return dir();
    if (starts(sub, "ports/1/")) return port_node(d, sub.substr(8));
    return std::nullopt;
  }
  return std::nullopt;
}

/// A readable fd with the node's contents (a sealed memfd), as the kernel's open of a sysfs
/// file; -1 and errno for what cannot be opened.
int open_node(const Node& n, int flags) {
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_CREAT)) {
    errno = n.dir ? EISDIR : EACCES;
    return -1;
  }
  if (n.cdev) {
    // The device has no kernel file: a program that opens it (to use the kernel's
    // ioctl interface) gets what it would get without the permission to.
    errno = EACCES;
    return -1;
  }
  if (n.dir) {
    errno = ENOTSUP;  // no directory listings of our tree (nothing we know of needs one)
    return -1;
  }
  const int fd = memfd_create("roce-sysfs", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (write(fd, n.text.data(), n.text.size()) != static_cast<ssize_t>(n.text.size()) ||
      lseek(fd, 0, SEEK_SET) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  if (!(flags & O_CLOEXEC)) fcntl(fd, F_SETFD, 0);
  return fd;
}

void fill_stat(const Node& n, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  st->st_nlink = 1;
  st->st_blksize = 4096;
  if (n.cdev) {
    st->st_mode = S_IFCHR | 0666;
    st->st_rdev = makedev(231, 192);  // the kernel's uverbs major and first minor
  } else if (n.dir) {
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
  } else {
    st->st_mode = S_IFREG | 0444;
    st->st_size = 4096;  // as sysfs reports every attribute
  }
}

bool access_ok(const Node& n, int mode) {
  if (n.cdev) return true;
  return !(mode & W_OK) && (!(mode & X_OK) || n.dir);
}

/// The size of what glibc's getifaddrs puts behind ifa_data (AF_PACKET entries).
constexpr std::size_t kLinkStats = sizeof(rtnl_link_stats);

/// open's and openat's third argument: there only with O_CREAT or O_TMPFILE.
mode_t mode_arg(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) != 0 ? va_arg(ap, mode_t) : 0;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int open(const char* path, int flags, ...) {
  static const auto next = real<int (*)(const char*, int, ...)>("open", "GLIBC_2.2.5");
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  if (const auto n = lookup(path)) return open_node(*n, flags);
  return next(path, flags, mode);
}

__attribute__((visibility("default"))) int open64(const char* path, int flags, ...) {
  static const auto next = real<int (*)(const char*, int, ...)>("open64", "GLIBC_2.2.5");
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  if (const auto n = lookup(path)) return open_node(*n, flags);
  return next(path, flags, mode);
}

__attribute__((visibility("default"))) int openat(int dirfd, const char* path, int flags, ...) {
  static const auto next = real<int (*)(int, const char*, int, ...)>("openat", "GLIBC_2.4");
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  if (const auto n = lookup(path)) return open_node(*n, flags);  // absolute paths only
  return next(dirfd, path, flags, mode);
}

// _FORTIFY_SOURCE's forms of open (flags the compiler cannot see: never O_CREAT); glibc's
// headers declare them only inside their inline wrappers.
int __open_2(const char* path, int flags);
int __open64_2(const char* path, int flags);
int __openat_2(int dirfd, const char* path, int flags);
__attribute__((visibility("default"))) int __open_2(const char* path, int flags) {
  static const auto next = real<int (*)(const char*, int)>("__open_2", "GLIBC_2.7");
  if (const auto n = lookup(path)) return open_node(*n, flags);
  return next(path, flags);
}

__attribute__((visibility("default"))) int __open64_2(const char* path, int flags) {
  static const auto next = real<int (*)(const char*, int)>("__open64_2", "GLIBC_2.7");
  if (const auto n = lookup(path)) return open_node(*n, flags);
  return next(path, flags);
}

__attribute__((visibility("default"))) int __openat_2(int dirfd, const char* path, int flags) {
  static const auto next = real<int (*)(int, const char*, int)>("__openat_2", "GLIBC_2.7");
  if (const auto n = lookup(path)) return open_node(*n, flags);
  return next(dirfd, path, flags);
}

__attribute__((visibility("default"))) FILE* fopen(const char* path, const char* how) {
  static const auto next = real<FILE* (*)(const char*, const char*)>("fopen", "GLIBC_2.2.5");
  if (const auto n = lookup(path)) {
    const bool ro = how != nullptr && how[0] == 'r' && std::strchr(how, '+') == nullptr;
    const int fd = open_node(*n, ro ? O_RDONLY : O_RDWR);
    if (fd < 0) return nullptr;
    FILE* f = fdopen(fd, "r");
    if (f == nullptr) close(fd);
    return f;
  }
  return next(path, how);
}

__attribute__((visibility("default"))) FILE* fopen64(const char* path, const char* how) {
  static const auto next = real<FILE* (*)(const char*, const char*)>("fopen64", "GLIBC_2.2.5");
  if (lookup(path)) return fopen(path, how);
  return next(path, how);
}

__attribute__((visibility("default"))) int stat(const char* path, struct stat* st) {
  static const auto next = real<int (*)(const char*, struct stat*)>("stat", "GLIBC_2.33");
  if (const auto n = lookup(path)) {
    fill_stat(*n, st);
    return 0;
  }
  return next(path, st);
}

__attribute__((visibility("default"))) int stat64(const char* path, struct stat64* st) {
  static const auto next = real<int (*)(const char*, struct stat64*)>("stat64", "GLIBC_2.33");
  if (const auto n = lookup(path)) {
    struct stat s;
    fill_stat(*n, &s);
    static_assert(sizeof(struct stat) == sizeof(struct stat64));
    std::memcpy(st, &s, sizeof s);
    return 0;
  }
  return next(path, st);
}

__attribute__((visibility("default"))) int access(const char* path, int mode) {
  static const auto next = real<int (*)(const char*, int)>("access", "GLIBC_2.2.5");
  if (const auto n = lookup(path)) {
    if (access_ok(*n, mode)) return 0;
    errno = EACCES;
    return -1;
  }
  return next(path, mode);
}

/// glibc's list, then one AF_INET entry per device of ours, in one allocation as glibc makes
/// it: glibc's freeifaddrs (a single free()) releases ours too.
__attribute__((visibility("default"))) int getifaddrs(ifaddrs** out) {
  static const auto next = real<int (*)(ifaddrs**)>("getifaddrs", "GLIBC_2.3");
  static const auto release = real<void (*)(ifaddrs*)>("freeifaddrs", "GLIBC_2.3");
  ifaddrs* theirs = nullptr;
  if (next(&theirs) != 0) return -1;
  const std::vector<Device*>& ours = devices();
  if (ours.empty()) {
    *out = theirs;
    return 0;
  }
  auto addr_len = [](const sockaddr* a) -> std::size_t {
    if (a == nullptr) return 0;
    switch (a->sa_family) {
      case AF_INET:
        return sizeof(sockaddr_in);
      case AF_INET6:
        return sizeof(sockaddr_in6);
      default:
        return sizeof(sockaddr_storage);  // AF_PACKET's sockaddr_ll and the rest fit
    }
  };
  std::size_t n = 0, bytes = 0;
  for (ifaddrs* i = theirs; i != nullptr; i = i->ifa_next, ++n)
    bytes += std::strlen(i->ifa_name) + 1 + addr_len(i->ifa_addr) + addr_len(i->ifa_netmask) +
             addr_len(i->ifa_broadaddr) + (i->ifa_data != nullptr ? kLinkStats : 0) + 16;
  for (const Device* d : ours) bytes += d->name.size() + 1 + 2 * sizeof(sockaddr_in) + 24;
  n += ours.size();
  auto* block = static_cast<char*>(std::calloc(1, n * sizeof(ifaddrs) + bytes));
  if (block == nullptr) {
    release(theirs);
    errno = ENOMEM;
    return -1;
  }
  auto* entries = reinterpret_cast<ifaddrs*>(block);
  char* heap = block + n * sizeof(ifaddrs);
  auto put = [&heap](const void* src, std::size_t len) -> void* {
    heap =
        reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(heap) + 7) & ~std::uintptr_t{7});
    void* at = heap;
    std::memcpy(at, src, len);
    heap += len;
    return at;
  };
  std::size_t k = 0;
  for (ifaddrs* i = theirs; i != nullptr; i = i->ifa_next, ++k) {
    ifaddrs& e = entries[k];
    e.ifa_flags = i->ifa_flags;
    e.ifa_name = static_cast<char*>(put(i->ifa_name, std::strlen(i->ifa_name) + 1));
    if (i->ifa_addr) e.ifa_addr = static_cast<sockaddr*>(put(i->ifa_addr, addr_len(i->ifa_addr)));
    if (i->ifa_netmask)
      e.ifa_netmask = static_cast<sockaddr*>(put(i->ifa_netmask, addr_len(i->ifa_netmask)));
    if (i->ifa_broadaddr)
      e.ifa_broadaddr = static_cast<sockaddr*>(put(i->ifa_broadaddr, addr_len(i->ifa_broadaddr)));
    if (i->ifa_data) e.ifa_data = put(i->ifa_data, kLinkStats);
  }
  for (const Device* d : ours) {
    ifaddrs& e = entries[k++];
    // An address of its own, nothing routed through it: the port answers ARP for this one
    // address only (a host route's mask).
    e.ifa_flags = IFF_UP | IFF_RUNNING | IFF_MULTICAST;
    e.ifa_name = static_cast<char*>(put(d->name.c_str(), d->name.size() + 1));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(d->info.ipv4.v);
    e.ifa_addr = static_cast<sockaddr*>(put(&a, sizeof a));
    a.sin_addr.s_addr = htonl(0xffffffffu);
    e.ifa_netmask = static_cast<sockaddr*>(put(&a, sizeof a));
  }
  for (std::size_t j = 0; j + 1 < n; ++j) entries[j].ifa_next = &entries[j + 1];
  release(theirs);
  *out = n > 0 ? entries : nullptr;
  if (n == 0) std::free(block);
  return 0;
}

}  // extern "C"
