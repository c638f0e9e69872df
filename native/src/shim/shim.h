/* What the shim's files share (shim.c, prefetch.c). */
#ifndef CV_SHIM_SHIM_H
#define CV_SHIM_SHIM_H

#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/answers_fmt.h"

static inline long raw6(long nr, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

static inline long set_errno(long r) {
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

/* The lstat of path (a name in the directory fd, a path relative to the cwd, or an absolute
 * path) when the supervisor published its directory's entries (handlers/statpub.c): 1 with it,
 * its bits and (dir, if not NULL) the directory's identity. */
int cv_shim_entry(int fd, const char *path, struct statx *stx, uint32_t *bits, struct cv_ans_id *dir);

/* An open the walk ahead can answer (common/prefetch_proto.h): 1 with *out its result (an fd,
 * or -1 and errno), 0 when the caller opens as ever. */
int cv_pf_open(int dirfd, const char *path, int flags, long *out);
/* The slots' fds closed, and no more placed there (an open said EMFILE): how many. */
int cv_pf_release(void);
/* This process listed the directory (its getdents64 was served): the walk's sign. */
void cv_pf_listed(const struct cv_ans_id *id);

#endif
