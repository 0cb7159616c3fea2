/// @file
/// The process's own mappings, as /proc/self/maps lists them: what adopt.cc reads to learn
/// what backs a range before it replaces the range's pages (verbs/memory/adopt.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace roce::verbs_compat {

/// One line of /proc/self/maps: [start, end) with its protection and what backs it.
struct Vma {
  std::uintptr_t start = 0, end = 0;
  bool read = false, write = false, exec = false;
  bool shared = false;       ///< 's': MAP_SHARED (a file, shared anonymous memory, SysV shm)
  std::uint64_t offset = 0;  ///< into the file (for anonymous memory: start >> page shift)
  unsigned dev_major = 0, dev_minor = 0;
  std::uint64_t inode = 0;  ///< 0: anonymous
  std::string path;         ///< "", "[heap]", "[stack]", "/memfd:name (deleted)", a file
  bool dontcopy = false;    ///< MADV_DONTFORK ("dc" in VmFlags; read_maps with smaps only)

  /// Private anonymous memory (malloc's heap and arenas, stacks, mmap(MAP_ANONYMOUS)): pages
  /// never touched read as zero.
  bool anonymous() const { return inode == 0 && !shared && (path.empty() || path[0] == '['); }
  /// Kernel-provided pages no registration may pin ([vvar], [vdso], [vsyscall]).
  bool special() const {
    return path == "[vvar]" || path == "[vdso]" || path == "[vsyscall]" || path == "[vvar_vclock]";
  }
  int prot() const;  ///< PROT_* bits
};

/// Parses one line (without its newline); false when it is not a mapping line.
bool parse_maps_line(const char* line, std::size_t n, Vma& out);

/// The mappings that intersect [from, to), in address order (to = 0: every mapping). Reads
/// /proc/self/maps only as far as `to` (`smaps`: /proc/self/smaps, slower, for
/// Vma::dontcopy). False with errno set when the file cannot be read.
bool read_maps(std::uintptr_t from, std::uintptr_t to, std::vector<Vma>& out, bool smaps = false);

}  // namespace roce::verbs_compat
