/// @file
/// The kernel interface's own addresses and flags (netdev.h).
#include "verbs/provider/netdev.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace roce::verbs_compat {
namespace {

std::string g_promisc_iface;  // the interface whose flag and MAC restore_promiscuous puts back
bool g_was_promisc = false;
sockaddr g_hwaddr{};  // its MAC before the port started (the port may set another: --mac)
bool g_have_hwaddr = false;

/// An ioctl on `iface` through a throwaway socket; false (errno set) when it fails. `r` is
/// cleared first unless `keep` (a set: its fields are the input).
bool ifreq_ioctl(const std::string& iface, unsigned long op, ifreq& r, bool keep = false) {
  if (iface.empty() || iface.size() >= IFNAMSIZ) {
    errno = ENODEV;
    return false;
  }
  if (!keep) std::memset(&r, 0, sizeof r);
  std::memset(r.ifr_name, 0, sizeof r.ifr_name);
  std::memcpy(r.ifr_name, iface.data(), iface.size());
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  const int rc = ::ioctl(s, op, &r);
  const int e = errno;
  ::close(s);
  errno = e;
  return rc == 0;
}

}  // namespace

bool netdev_defaults(runtime::LinkOptions& link, bool mac_given, bool ip_given, std::string& err) {
  if (link.pmd != "af_packet" || (mac_given && ip_given)) return true;
  ifreq r;
  if (!mac_given) {
    if (!ifreq_ioctl(link.iface, SIOCGIFHWADDR, r)) {
      err = "--iface '" + link.iface + "': " + std::strerror(errno) + " (give --mac to choose one)";
      return false;
    }
    const auto* b = reinterpret_cast<const unsigned char*>(r.ifr_hwaddr.sa_data);
    char mac[18];
    std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4],
                  b[5]);
    link.mac = mac;
  }
  if (!ip_given) {
    if (!ifreq_ioctl(link.iface, SIOCGIFADDR, r)) {
      err = "--iface '" + link.iface + "' has no IPv4 address (" + std::strerror(errno) +
            "): give --ip";
      return false;
    }
    char ip[INET_ADDRSTRLEN];
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&r.ifr_addr);
    ::inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
    link.ip = ip;
  }
  return true;
}

void remember_promiscuous(const std::string& iface) {
  ifreq r;
  if (!ifreq_ioctl(iface, SIOCGIFFLAGS, r)) return;
  g_promisc_iface = iface;
  g_was_promisc = (r.ifr_flags & IFF_PROMISC) != 0;
  if (ifreq_ioctl(iface, SIOCGIFHWADDR, r)) {
    g_hwaddr = r.ifr_hwaddr;
    g_have_hwaddr = true;
  }
}

void restore_promiscuous() {
  if (g_promisc_iface.empty()) return;
  ifreq r;
  if (g_have_hwaddr && ifreq_ioctl(g_promisc_iface, SIOCGIFHWADDR, r) &&
      std::memcmp(r.ifr_hwaddr.sa_data, g_hwaddr.sa_data, 6) != 0) {
    r.ifr_hwaddr = g_hwaddr;
    ifreq_ioctl(g_promisc_iface, SIOCSIFHWADDR, r, true);
  }
  if (g_was_promisc) return;
  if (!ifreq_ioctl(g_promisc_iface, SIOCGIFFLAGS, r) || (r.ifr_flags & IFF_PROMISC) == 0) return;
  r.ifr_flags = static_cast<short>(r.ifr_flags & ~IFF_PROMISC);
  ifreq_ioctl(g_promisc_iface, SIOCSIFFLAGS, r, true);
}

}  // namespace roce::verbs_compat
