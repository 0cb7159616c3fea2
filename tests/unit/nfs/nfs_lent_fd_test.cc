// NfsServer::handle_in() lends the caller's O_PATH descriptor to an object that owns
// descriptors; an exception inside (bad_alloc) must give it back, not close it (the caller
// closes it, and a second close could hit another thread's descriptor, a lease or a lock).
// Its own binary: it replaces the global operator new to make one allocation fail, which
// valgrind would count as mismatched in the other tests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>

#include "apps/nfs/nfs_server.h"

namespace {
thread_local bool g_fail_alloc = false;
void (*volatile g_free)(void*) = std::free;  // (through a pointer: -Wmismatched-new-delete)
}  // namespace

void* operator new(std::size_t n) {
  if (g_fail_alloc) {
    g_fail_alloc = false;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { g_free(p); }
void operator delete(void* p, std::size_t) noexcept { g_free(p); }

namespace roce::nfs {
namespace {

namespace fs = std::filesystem;

TEST(NfsLentFd, HandleInGivesTheDescriptorBackOnAnException) {
  const fs::path dir = fs::temp_directory_path() / ("nfs_lent." + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "hello") << "hello";
  {
    NfsServer files(dir.string(), "/");
    NfsServer::Resolved root;
    ASSERT_EQ(files.resolve(files.root_fh(), root), v3::kOk);
    struct stat st {};
    ASSERT_EQ(::fstatat(root.fd, "hello", &st, AT_SYMLINK_NOFOLLOW), 0);
    bool threw = false;
    try {
      g_fail_alloc = true;
      (void)files.handle_in(root, "hello", st);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    g_fail_alloc = false;
    EXPECT_TRUE(threw);
    EXPECT_EQ(::fcntl(root.fd, F_GETFD), FD_CLOEXEC) << "handle_in closed the caller's descriptor";
    // Still the root: a handle of the file through it resolves.
    const auto fh = files.handle_in(root, "hello", st);
    ASSERT_TRUE(fh);
    NfsServer::Resolved file;
    EXPECT_EQ(files.resolve(*fh, file), v3::kOk);
    ::close(file.fd);
    ::close(root.fd);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace roce::nfs
