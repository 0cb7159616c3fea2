/* The lock holder and contender of tests/interop/nfs4_locks.sh, run in the rxe VM on an NFS
 * mount (built static on the host, passed in through the 9p share). Every line it prints starts
 * with a word the host script looks for and ends with CLOCK_MONOTONIC in ms (one clock for every
 * process of the VM), so that delays between processes can be computed.
 *   nfslock hold FILE KIND UNTIL   take the lock (blocking), then every 0.5 s append a line
 *                                  ("line N") through the descriptor and fsync, until the file
 *                                  UNTIL exists; read the file back through the descriptor
 *                                  (DATA-OK N or DATA-BAD), unlock, close
 *   nfslock try FILE KIND          one non-blocking attempt: GOT (then unlock) or DENIED; exit 0/1
 *   nfslock wait FILE KIND         a blocking attempt (F_SETLKW or flock): WAITING, then GOT
 * KIND: w (fcntl F_WRLCK, the file opened read-write), r (fcntl F_RDLCK, opened read-only),
 *       f (flock LOCK_EX, opened read-only), x (flock LOCK_EX, opened read-write). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static long long ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int open_for(const char* file, char kind) {
  int fd = open(file, kind == 'w' || kind == 'x' ? O_RDWR | O_CREAT : O_RDONLY, 0666);
  if (fd < 0) {
    printf("OPEN-FAILED %s %s %lld\n", file, strerror(errno), ms());
    exit(2);
  }
  return fd;
}

/* 0 when taken; errno otherwise. */
static int lock(int fd, char kind, int block) {
  if (kind == 'f' || kind == 'x')
    return flock(fd, LOCK_EX | (block ? 0 : LOCK_NB)) == 0 ? 0 : errno;
  struct flock l = {.l_type = kind == 'w' ? F_WRLCK : F_RDLCK, .l_whence = SEEK_SET};
  return fcntl(fd, block ? F_SETLKW : F_SETLK, &l) == 0 ? 0 : errno;
}

static void unlock(int fd, char kind) {
  if (kind == 'f' || kind == 'x') {
    flock(fd, LOCK_UN);
    return;
  }
  struct flock l = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
  fcntl(fd, F_SETLK, &l);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 4 || strlen(argv[3]) != 1 || !strchr("wrfx", argv[3][0])) {
    fprintf(stderr, "usage: nfslock hold FILE KIND UNTIL | try FILE KIND | wait FILE KIND\n");
    return 2;
  }
  const char* cmd = argv[1];
  const char* file = argv[2];
  char kind = argv[3][0];
  int fd = open_for(file, kind);
  if (!strcmp(cmd, "try")) {
    int e = lock(fd, kind, 0);
    if (e) {
      printf("DENIED %s %lld\n", strerror(e), ms());
      return 1;
    }
    printf("GOT %lld\n", ms());
    unlock(fd, kind);
    return 0;
  }
  if (!strcmp(cmd, "wait")) {
    printf("WAITING %lld\n", ms());
    int e = lock(fd, kind, 1);
    if (e) {
      printf("FAILED %s %lld\n", strerror(e), ms());
      return 1;
    }
    printf("GOT %lld\n", ms());
    unlock(fd, kind);
    return 0;
  }
  if (strcmp(cmd, "hold") || argc < 5) return 2;
  int e = lock(fd, kind, 1);
  if (e) {
    printf("FAILED %s %lld\n", strerror(e), ms());
    return 1;
  }
  printf("HELD %lld\n", ms());
  char expect[1 << 16];
  size_t len = 0;
  int n = 0, bad = 0;
  while (access(argv[4], F_OK) != 0) {
    if (kind == 'w' && len + 32 < sizeof expect) {
      char line[32];
      int k = snprintf(line, sizeof line, "line %d\n", ++n);
      if (pwrite(fd, line, k, (off_t)len) != k || fsync(fd) != 0) {
        printf("WRITE-FAILED %d %s %lld\n", n, strerror(errno), ms());
        bad = 1;
        break;
      }
      memcpy(expect + len, line, k);
      len += k;
      printf("WROTE %d %lld\n", n, ms());
    }
    usleep(500000);
  }
  if (kind == 'w') {
    char got[sizeof expect];
    ssize_t r = pread(fd, got, sizeof got, 0);
    if (!bad && r == (ssize_t)len && memcmp(got, expect, len) == 0)
      printf("DATA-OK %d lines %lld\n", n, ms());
    else
      printf("DATA-BAD read %zd of %zu bytes %lld\n", r, len, ms());
  }
  unlock(fd, kind);
  printf("RELEASED %lld\n", ms());
  close(fd);
  return bad;
}
