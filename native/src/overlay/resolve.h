/* Resolving a guest path under /proc the way the kernel would for the guest,
 * from the supervisor: the reader-relative parts (/proc/self, /proc/thread-self
 * and the magic links under /proc/<pid>/) as the guest sees them. Every other
 * path goes through the merged view (overlay/vfs.c), which hands /proc here. */
#ifndef CV_RESOLVE_H
#define CV_RESOLVE_H

#include <limits.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "overlay/ctx.h"

struct cv_resolved {
    int exists;          /* the final object exists (else its parent does) */
    struct stat st;      /* the final object (lstat when not following); see CV_RES_STAT */
    int in_proc;         /* the final object lies in a procfs */
    pid_t proc_pid;      /* /proc/<pid>/...: pid, else 0 */
    int magic;           /* final is a /proc/<pid>/... magic link to open as is */
    int magic_fd;        /* /proc/<pid>/fd/<n>: n, else -1 */
    int have_path;       /* path below is valid (always when in_proc) */
    char path[PATH_MAX]; /* absolute, symlink-free (except a magic final) */
};

#define CV_RES_FOLLOW 1 /* follow a final symlink */
#define CV_RES_PARENT 2 /* when the final is missing, make sure its parent exists */
#define CV_RES_STAT 4   /* fill st even when the fast path found the object (an fstat more) */

/* 0, or -errno for a failure before the final component (ENOENT, ENOTDIR,
 * ELOOP, EBADF, ENAMETOOLONG, EACCES). Without CV_RES_PARENT a missing final
 * may also stand for a missing parent. */
int cv_resolve(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_resolved *out);

#endif
