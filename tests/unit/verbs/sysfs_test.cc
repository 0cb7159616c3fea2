// verbs/provider/sysfs.cc through the C library's own entry points, libroce-verbs.so preloaded
// by CTest with ROCE_LINK naming a device roce_sys at 192.0.2.97 (listing it starts no port):
// /dev/infiniband/roce_sys is a character device UCX may use, the port's sysfs files read as
// the device answers, getifaddrs lists the device's interface after the host's, and every
// other path is glibc's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

// _FORTIFY_SOURCE's open with flags the compiler cannot see (glibc 2.7).
extern "C" int __open_2(const char* path, int flags);

namespace {

const std::string kSys = "/sys/class/infiniband/roce_sys";

/// The whole file through open/read, or "ERR <errno>".
std::string slurp(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return "ERR " + std::to_string(errno);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(Sysfs, DevNodeIsACharacterDeviceUcxMayUse) {
  struct stat st {};
  ASSERT_EQ(::stat("/dev/infiniband/roce_sys", &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(::access("/dev/infiniband/roce_sys", R_OK | W_OK), 0);
  // no kernel interface behind it
  errno = 0;
  EXPECT_EQ(::open("/dev/infiniband/roce_sys", O_RDWR), -1);
  EXPECT_EQ(errno, EACCES);
  // other devices' nodes are the kernel's (none here)
  errno = 0;
  EXPECT_EQ(::stat("/dev/infiniband/uverbs0", &st), -1);
  EXPECT_EQ(errno, ENOENT);
}

TEST(Sysfs, PortFilesAnswerAsTheDevice) {
  const std::string port = kSys + "/ports/1";
  EXPECT_EQ(slurp(port + "/gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(slurp(port + "/gid_attrs/types/1"), "");  // an empty entry
  EXPECT_EQ(slurp(port + "/gid_attrs/ndevs/0"), "roce_sys\n");
  EXPECT_EQ(slurp(port + "/gids/0"), "0000:0000:0000:0000:0000:ffff:c000:0261\n");
  EXPECT_EQ(slurp(port + "/gids/15"), "0000:0000:0000:0000:0000:0000:0000:0000\n");
  EXPECT_EQ(slurp(port + "/gids/16"), "ERR " + std::to_string(ENOENT));
  EXPECT_EQ(slurp(port + "/pkeys/0"), "0xffff\n");
  EXPECT_EQ(slurp(port + "/link_layer"), "Ethernet\n");
  EXPECT_EQ(slurp(port + "/nothing"), "ERR " + std::to_string(ENOENT));
  EXPECT_EQ(slurp(kSys + "/node_guid"), "0000:00ff:fe00:0097\n");
  EXPECT_EQ(slurp(kSys + "/node_type"), "1: CA\n");
  // another device's name that starts like ours is not ours
  EXPECT_EQ(slurp(kSys + "x/node_type"), "ERR " + std::to_string(ENOENT));
}

TEST(Sysfs, EveryWayOfOpening) {
  const std::string f = kSys + "/ports/1/gid_attrs/types/0";
  FILE* s = std::fopen(f.c_str(), "r");
  ASSERT_NE(s, nullptr) << std::strerror(errno);
  char line[32] = {};
  ASSERT_NE(std::fgets(line, sizeof line, s), nullptr);
  EXPECT_STREQ(line, "RoCE v2\n");
  std::fclose(s);
  const int fd = ::openat(AT_FDCWD, f.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ::close(fd);
  const int fd2 = __open_2(f.c_str(), O_RDONLY);
  ASSERT_GE(fd2, 0);
  char b[8] = {};
  EXPECT_EQ(::read(fd2, b, 7), 7);
  EXPECT_STREQ(b, "RoCE v2");
  ::close(fd2);
  // read-only, as sysfs attributes are to a program
  errno = 0;
  EXPECT_EQ(::open(f.c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EACCES);
  EXPECT_EQ(std::fopen(f.c_str(), "w"), nullptr);
  EXPECT_NE(::access(f.c_str(), W_OK), 0);
  EXPECT_EQ(::access(f.c_str(), R_OK), 0);
  struct stat st {};
  ASSERT_EQ(::stat(kSys.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  // everything else is glibc's
  EXPECT_NE(slurp("/proc/self/status").rfind("Name:", 0), std::string::npos);
}

TEST(Sysfs, GetifaddrsListsTheDeviceAfterTheHost) {
  ifaddrs* list = nullptr;
  ASSERT_EQ(::getifaddrs(&list), 0) << std::strerror(errno);
  bool lo = false, ours = false;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (std::string(i->ifa_name) == "lo") lo = true;
    if (std::string(i->ifa_name) != "roce_sys") continue;
    ASSERT_FALSE(ours) << "listed twice";
    ours = true;
    EXPECT_EQ(i->ifa_next, nullptr) << "not last";
    EXPECT_EQ(i->ifa_flags & (IFF_UP | IFF_RUNNING | IFF_LOOPBACK), unsigned{IFF_UP | IFF_RUNNING});
    ASSERT_NE(i->ifa_addr, nullptr);
    ASSERT_EQ(i->ifa_addr->sa_family, AF_INET);
    EXPECT_EQ(ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr), 0xC0000261u);
    ASSERT_NE(i->ifa_netmask, nullptr);
    EXPECT_EQ(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr, 0xFFFFFFFFu);
  }
  EXPECT_TRUE(lo);
  EXPECT_TRUE(ours);
  ::freeifaddrs(list);  // glibc's: one allocation
}

}  // namespace
