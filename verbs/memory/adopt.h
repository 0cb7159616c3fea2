/// @file
/// Attached mode: a program's own memory (malloc, the stack, mmap, globals) made visible to
/// roced without the program's cooperation, for ibv_reg_mr (docs/verbs-compat.md, "Attached
/// memory").
///
/// roced reads and writes registered memory through a mapping of its own, so the pages must be
/// shared memory: adopt() replaces the pages of the range's page-aligned cover with a
/// MAP_SHARED mapping of a memfd holding the same bytes, at the same address, with the same
/// protection (copy into the memfd, then mmap MAP_FIXED over the range), and registers that
/// part of the memfd with the Context (Context::register_memfd_at). Every page a process
/// adopts lives in one memfd (sealed against shrinking, sparse) at file offset = its address:
/// any range over adopted and new pages is one contiguous piece of that file, every region
/// roced maps of a page is the page the program sees, and a page is copied once however many
/// registrations share it.
///
/// What a registration meets:
///   - pages already adopted (offset = address): nothing copied; a region of the Context that
///     covers the range is shared (a count), else one more region is registered. A region
///     spans the 2 MiB-aligned windows around its range (registrations near each other share
///     it: roced's max_regions); at roced's max_memory, the range's own pages;
///   - private memory (anonymous, the heap, stacks, private file mappings such as a program's
///     .data/.bss): adopted; pages never touched are left as holes (zero);
///   - a hole, PROT_NONE, [vvar]/[vdso], or a read-only page asked for write access: EFAULT,
///     as the kernel's ib_umem_get answers ibv_reg_mr;
///   - a MAP_SHARED mapping that is not ours (a file, shared anonymous memory, SysV shm):
///     EOPNOTSUPP. Its pages are shared with a file or another process; a copy would cut that
///     sharing silently, and they are not the range's pages to move. In-process mode
///     registers it.
///   - a hugetlb mapping: EOPNOTSUPP (a memfd of small pages cannot replace part of it).
///
/// Release (ibv_dereg_mr): the count drops; the last reference frees the Context's region
/// (roced unmaps it). The program's pages stay memfd pages at their address for good; the
/// file's copy of them is dropped (a hole punched) once no region covers them and the program
/// has unmapped them, checked at each adopt() and release().
///
/// Writers: other threads writing to the cover while it is copied lose what they wrote
/// between the copy of that page and the remap (the first and last pages, which the range may
/// share with other objects, are copied last). fork: the child gets a private copy of every
/// adopted page it inherits (a pthread_atfork handler, as the kernel's copy of pinned pages
/// since 5.13); pages adopted with AdoptOptions::dontfork are not inherited (rdma-core's
/// MADV_DONTFORK after ibv_fork_init).
///
/// Thread safety: the functions take one process-wide lock; the Context's own calls are made
/// with it held (take the Context's lock, verbs_compat::lock_of, first).
#pragma once

#include <roce/client.h>

#include <cstddef>
#include <cstdint>

namespace roce::verbs_compat {

struct AdoptOptions {
  /// The MR may be written (IBV_ACCESS_LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC): pages that
  /// are not writable are EFAULT.
  bool writable = true;
  /// MADV_DONTFORK on the adopted pages: libibverbs' ibv_fork_init asked for it (it advised
  /// the old mapping, which the remap replaces).
  bool dontfork = false;
};

/// Makes [addr, addr + length) shared with the Context's roced and returns the Buffer it lies
/// in, for Context::reg_mr(pd, addr, length, ...). Null with *err: EINVAL (null, empty,
/// wrapping), EFAULT, EOPNOTSUPP (see above), ENOMEM, or what register_memfd_at gave (EDQUOT:
/// roced's max_regions or max_memory). Each success takes one reference, dropped by release().
client::Buffer* adopt(client::Context& ctx, void* addr, std::size_t length, int* err,
                      const AdoptOptions& opt = {});

/// Drops a reference adopt() gave for `buffer` (after Context::dereg_mr of the MR on it).
/// 0, or EINVAL for a Buffer adopt() did not give.
int release(client::Context& ctx, client::Buffer* buffer);

/// The Context is about to be destroyed (its regions go with it): forgets its Buffers.
void forget(client::Context& ctx);

/// For tests and the benchmark.
struct AdoptStats {
  int fd = -1;                   ///< the memfd (-1: nothing adopted yet)
  std::uint64_t file_bytes = 0;  ///< memory the memfd holds
  std::size_t regions = 0;       ///< Buffers of every Context, live
  std::size_t references = 0;    ///< adopt() references not yet released
  std::size_t pending = 0;       ///< ranges no region covers that the program still maps
};
AdoptStats adopt_stats();

}  // namespace roce::verbs_compat
