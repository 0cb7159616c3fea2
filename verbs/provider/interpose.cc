/// @file
/// The few libibverbs entry points that go to the kernel or to sysfs for a device instead of
/// through its provider's ops (rdma-core v44: device.c, verbs.c, cmd_device.c), defined here
/// with libibverbs' own symbol versions (libroce-verbs.map) so that a program that
/// LD_PRELOADs libroce-verbs.so binds to these. Calls for devices of other providers go on to
/// libibverbs' own definitions (dlvsym RTLD_NEXT).
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "verbs/provider/provider.h"

using namespace roce::verbs_compat;

namespace {

template <class F>
F real(const char* name, const char* version) {
  void* p = dlvsym(RTLD_NEXT, name, version);
  if (p == nullptr) p = dlsym(RTLD_NEXT, name);
  return reinterpret_cast<F>(p);
}
#define REAL(fn, ver) static const auto real_##fn = real<decltype(&::fn)>(#fn, ver)

Device* device_of(ibv_device* d) {
  for (Device* x : devices())
    if (&x->vdev.device == d) return x;
  return nullptr;
}
Device* device_of(ibv_context* c) { return c != nullptr ? device_of(c->device) : nullptr; }

std::mutex g_channels_mu;
std::map<ibv_comp_channel*, std::unique_ptr<EventPipe>> g_channels;  // our completion channels

/// rdma-core's `struct ibv_gid_entry` filled for our GID `index`; ENODATA when empty.
int gid_entry(ibv_context* c, Device* d, std::uint32_t port, std::uint32_t index,
              ibv_gid_entry& e) {
  if (port != 1) return EINVAL;
  if (index >= kGidTableLen) return EINVAL;
  e = {};
  if (!gid_at(d, index, e.gid)) return ENODATA;
  e.gid_index = index;
  e.port_num = port;
  e.gid_type = IBV_GID_TYPE_ROCE_V2;
  e.ndev_ifindex = 0;  // no kernel netdev behind the port
  (void)c;
  return 0;
}

}  // namespace

EventPipe* roce::verbs_compat::channel_pipe(ibv_comp_channel* ch) {
  std::lock_guard<std::mutex> g(g_channels_mu);
  const auto it = g_channels.find(ch);
  return it != g_channels.end() ? it->second.get() : nullptr;
}

extern "C" {

// ---- device list (device.c: ibv_get_device_list reads netlink/sysfs only) ----

/// Set while libibverbs' ibv_import_device walks the device list: it reads every device's
/// sysfs entry, which ours have none of.
thread_local bool t_kernel_devices_only = false;

__attribute__((visibility("default"))) ibv_device** ibv_get_device_list(int* num) {
  REAL(ibv_get_device_list, "IBVERBS_1.1");
  static const std::vector<Device*> none;
  const std::vector<Device*>& ours = t_kernel_devices_only ? none : devices();
  int n = 0;
  const int saved = errno;
  ibv_device** theirs =
      real_ibv_get_device_list != nullptr ? real_ibv_get_device_list(&n) : nullptr;
  if (theirs == nullptr) n = 0;
  if (theirs == nullptr && ours.empty()) {
    if (num != nullptr) *num = 0;
    return nullptr;  // errno from libibverbs
  }
  errno = saved;
  auto** l = static_cast<ibv_device**>(std::calloc(n + ours.size() + 1, sizeof(ibv_device*)));
  if (l == nullptr) {
    if (theirs != nullptr) {
      REAL(ibv_free_device_list, "IBVERBS_1.1");
      real_ibv_free_device_list(theirs);
    }
    errno = ENOMEM;
    return nullptr;
  }
  for (int i = 0; i < n; ++i) l[i] = theirs[i];  // their references move into our list
  std::free(theirs);
  for (std::size_t i = 0; i < ours.size(); ++i) l[n + i] = &ours[i]->vdev.device;
  if (num != nullptr) *num = n + static_cast<int>(ours.size());
  return l;
}

__attribute__((visibility("default"))) void ibv_free_device_list(ibv_device** list) {
  REAL(ibv_free_device_list, "IBVERBS_1.1");
  if (list == nullptr) return;
  // Theirs go back to libibverbs (it drops their references); ours hold no reference.
  std::size_t n = 0;
  while (list[n] != nullptr) ++n;
  auto** rest = static_cast<ibv_device**>(std::calloc(n + 1, sizeof(ibv_device*)));
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (!is_ours(list[i])) {
      if (rest != nullptr) rest[k++] = list[i];
    }
  if (rest != nullptr) real_ibv_free_device_list(rest);
  std::free(list);
}

// device.c: ibv_import_device finds the device by the command fd's cdev number (sysfs). Our
// contexts' command fd is /dev/null's (provider.cc, alloc_context): importing one is
// EOPNOTSUPP, as for a provider without import_context (rxe), which rdma-core's
// tests/test_shared_pd.py skips on. Other fds go to libibverbs, which sees its devices only.
__attribute__((visibility("default"))) ibv_context* ibv_import_device(int cmd_fd) {
  REAL(ibv_import_device, "IBVERBS_1.10");
  struct stat st {};
  if (::fstat(cmd_fd, &st) != 0 || !S_ISCHR(st.st_mode)) {
    errno = EINVAL;
    return nullptr;
  }
  struct stat null {};
  if (::stat("/dev/null", &null) == 0 && st.st_rdev == null.st_rdev) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (real_ibv_import_device == nullptr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  t_kernel_devices_only = true;
  ibv_context* c = real_ibv_import_device(cmd_fd);
  t_kernel_devices_only = false;
  return c;
}

// device.c: the GUID comes from sysfs (node_guid), which our devices have none of.
__attribute__((visibility("default"))) __be64 ibv_get_device_guid(ibv_device* device) {
  REAL(ibv_get_device_guid, "IBVERBS_1.1");
  if (Device* d = device_of(device)) return htobe64(node_guid(d));
  return real_ibv_get_device_guid(device);
}

// ---- GIDs and P_Keys (verbs.c, cmd_device.c: an ioctl on cmd_fd, else sysfs) ----

__attribute__((visibility("default"))) int ibv_query_gid(ibv_context* c, uint8_t port, int index,
                                                         ibv_gid* gid) {
  REAL(ibv_query_gid, "IBVERBS_1.1");
  Device* d = device_of(c);
  if (d == nullptr) return real_ibv_query_gid(c, port, index, gid);
  ibv_gid_entry e;
  const int rc = index < 0 ? EINVAL : gid_entry(c, d, port, static_cast<std::uint32_t>(index), e);
  if (rc == ENODATA) {  // as libibverbs: an empty entry is the zero GID
    std::memset(gid, 0, sizeof *gid);
    return 0;
  }
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  *gid = e.gid;
  return 0;
}

__attribute__((visibility("default"))) int ibv_query_gid_type(ibv_context* c, uint8_t port,
                                                              unsigned int index,
                                                              ibv_gid_type_sysfs* type) {
  REAL(ibv_query_gid_type, "IBVERBS_PRIVATE_34");
  Device* d = device_of(c);
  if (d == nullptr) return real_ibv_query_gid_type(c, port, index, type);
  ibv_gid_entry e;
  const int rc = gid_entry(c, d, port, index, e);
  if (rc == ENODATA) {
    *type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;  // libibverbs' answer for an empty entry
    return 0;
  }
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  *type = IBV_GID_TYPE_SYSFS_ROCE_V2;
  return 0;
}

__attribute__((visibility("default"))) int _ibv_query_gid_ex(ibv_context* c, uint32_t port,
                                                             uint32_t index, ibv_gid_entry* entry,
                                                             uint32_t flags, size_t entry_size) {
  REAL(_ibv_query_gid_ex, "IBVERBS_1.11");
  Device* d = device_of(c);
  if (d == nullptr) return real__ibv_query_gid_ex(c, port, index, entry, flags, entry_size);
  if (flags != 0) return EINVAL;
  if (entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  ibv_gid_entry e;
  if (const int rc = gid_entry(c, d, port, index, e)) return rc;
  std::memset(entry, 0, entry_size);
  *entry = e;
  return 0;
}

__attribute__((visibility("default"))) ssize_t _ibv_query_gid_table(
    ibv_context* c, ibv_gid_entry* entries, size_t max_entries, uint32_t flags, size_t entry_size) {
  REAL(_ibv_query_gid_table, "IBVERBS_1.11");
  Device* d = device_of(c);
  if (d == nullptr) return real__ibv_query_gid_table(c, entries, max_entries, flags, entry_size);
  if (flags != 0) return -EINVAL;
  if (entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  ssize_t n = 0;
  for (std::uint32_t i = 0; i < kGidTableLen; ++i) {
    ibv_gid_entry e;
    if (gid_entry(c, d, 1, i, e) != 0) continue;
    if (static_cast<size_t>(n) == max_entries) return -EINVAL;
    auto* dst = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + n * entry_size);
    std::memset(dst, 0, entry_size);
    *dst = e;
    ++n;
  }
  return n;
}

// verbs.c: P_Keys from sysfs (ports/N/pkeys/I). RoCE has one: the default 0xffff.
__attribute__((visibility("default"))) int ibv_query_pkey(ibv_context* c, uint8_t port, int index,
                                                          __be16* pkey) {
  REAL(ibv_query_pkey, "IBVERBS_1.1");
  if (device_of(c) == nullptr) return real_ibv_query_pkey(c, port, index, pkey);
  if (port != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xffff);
  return 0;
}

__attribute__((visibility("default"))) int ibv_get_pkey_index(ibv_context* c, uint8_t port,
                                                              __be16 pkey) {
  REAL(ibv_get_pkey_index, "IBVERBS_1.5");
  if (device_of(c) == nullptr) return real_ibv_get_pkey_index(c, port, pkey);
  if (port != 1) return -1;
  // The full-member and limited-member forms of the default P_Key both match entry 0, as the
  // kernel's table of one 0xffff would match 0xffff only; accept that one alone.
  return be16toh(pkey) == 0xffff ? 0 : -1;
}

// ---- completion channels (verbs.c: a kernel command on cmd_fd gives the fd) ----

__attribute__((visibility("default"))) ibv_comp_channel* ibv_create_comp_channel(ibv_context* c) {
  REAL(ibv_create_comp_channel, "IBVERBS_1.0");
  if (device_of(c) == nullptr) return real_ibv_create_comp_channel(c);
  auto* ch = static_cast<ibv_comp_channel*>(std::malloc(sizeof(ibv_comp_channel)));
  if (ch == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  auto events = std::make_unique<EventPipe>(sizeof(rdma::comp_event_desc));
  if (const int e = events->open()) {
    std::free(ch);
    errno = e;
    return nullptr;
  }
  ch->context = c;
  ch->fd = events->read_fd();  // what ibv_get_cq_event reads and programs poll
  ch->refcnt = 0;
  std::lock_guard<std::mutex> g(g_channels_mu);
  g_channels[ch] = std::move(events);
  return ch;
}

__attribute__((visibility("default"))) int ibv_destroy_comp_channel(ibv_comp_channel* ch) {
  REAL(ibv_destroy_comp_channel, "IBVERBS_1.0");
  std::unique_ptr<EventPipe> events;
  {
    std::lock_guard<std::mutex> g(g_channels_mu);
    const auto it = g_channels.find(ch);
    if (it == g_channels.end()) return real_ibv_destroy_comp_channel(ch);
    pthread_mutex_lock(&ch->context->mutex);
    const bool busy = ch->refcnt != 0;
    pthread_mutex_unlock(&ch->context->mutex);
    if (busy) return EBUSY;
    events = std::move(it->second);
    g_channels.erase(it);
  }
  events.reset();
  ::close(ch->fd);
  std::free(ch);
  return 0;
}

}  // extern "C"
