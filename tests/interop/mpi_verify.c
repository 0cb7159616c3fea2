/* A two-rank MPI job that moves data and checks every byte: rank 0 sends messages of several
 * sizes (eager and rendezvous for UCX: 1 B to 4 MiB) with a pattern that depends on the size,
 * the iteration and the byte's offset; rank 1 checks each one and sends it back changed
 * (every byte xor 0x5a); rank 0 checks the echo. Ends with an MPI_Allreduce of the byte
 * counts. Prints "PASS mpi_verify: N messages, M bytes" on rank 0, or the first wrong byte.
 * Built with Debian's mpicc; run by tests/interop/mpi_ucx.sh under Debian's mpirun. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned char pattern(size_t size, int iter, size_t i) {
  return (unsigned char)((i * 131u) ^ (size * 7u) ^ ((unsigned)iter * 29u) ^ (i >> 8));
}

static int check(const unsigned char* buf, size_t size, int iter, unsigned char x, int rank) {
  for (size_t i = 0; i < size; ++i) {
    const unsigned char want = (unsigned char)(pattern(size, iter, i) ^ x);
    if (buf[i] != want) {
      fprintf(stderr, "FAIL mpi_verify: rank %d size %zu iter %d: byte %zu is 0x%02x, not 0x%02x\n",
              rank, size, iter, i, buf[i], want);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2) {
    if (rank == 0) fprintf(stderr, "FAIL mpi_verify: needs 2 ranks, has %d\n", n);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  static const size_t sizes[] = {1, 16, 63, 64, 1000, 4096, 8192, 65536, 1 << 20, 4 << 20};
  const int iters = argc > 1 ? atoi(argv[1]) : 3;
  unsigned char* buf = malloc(4 << 20);
  long long bytes = 0, msgs = 0;
  int bad = 0;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0] && !bad; ++s) {
    const size_t size = sizes[s];
    for (int it = 0; it < iters && !bad; ++it) {
      if (rank == 0) {
        for (size_t i = 0; i < size; ++i) buf[i] = pattern(size, it, i);
        MPI_Send(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD);
        for (size_t i = 0; i < size; ++i) buf[i] = 0;
        MPI_Recv(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        bad = check(buf, size, it, 0x5a, rank);
      } else {
        for (size_t i = 0; i < size; ++i) buf[i] = 0;
        MPI_Recv(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        bad = check(buf, size, it, 0, rank);
        for (size_t i = 0; i < size; ++i) buf[i] ^= 0x5a;
        MPI_Send(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD);
      }
      bytes += 2 * (long long)size;
      msgs += 2;
    }
  }
  int any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  long long total = 0;
  MPI_Allreduce(&bytes, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && !any_bad)
    printf("PASS mpi_verify: %lld messages, %lld bytes checked on both ranks\n", msgs, total / 2);
  free(buf);
  MPI_Finalize();
  return any_bad;
}
