/* Metadata changes: chmod, chown, utimes, truncate, xattrs — by path and by
 * fd. Landlock does not cover them, so they are always emulated: on a host
 * file the answer is EROFS (ENOENT when missing). On objects that are not
 * host files (pipes, sockets, memfds) the change is made on a dup of the
 * guest's own fd, which is what the kernel would have done. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "guest/mem.h"
#include "handlers.h"
#include "overlay/resolve.h"
#include "common/sysnr.h"

/* Not a file of any host filesystem: anonymous pipe, socket, anon inode, memfd. */
static int fd_is_private(struct cv_notif *n, int fd, int *bad) {
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/%d/fd/%d", (int)n->tid, fd);
    *bad = 0;
    if (cv_readlink(link, target, sizeof target) < 0) {
        *bad = 1;
        return 0;
    }
    return !strncmp(target, "pipe:", 5) || !strncmp(target, "socket:", 7) ||
           !strncmp(target, "anon_inode:", 11) || !strncmp(target, "/memfd:", 7);
}

static struct cv_reply on_fd(struct cv_notif *n, int fd) {
    const __u64 *a = n->req->data.args;
    int nr = n->req->data.nr, bad;
    int private = fd_is_private(n, fd, &bad);
    if (bad) return cv_err(EBADF);
    if (!private) return cv_err(EROFS);
    if (nr == __NR_fsetxattr || nr == __NR_fremovexattr) return cv_err(EPERM);
    struct timespec ts[2];
    int has_times = 0;
    if (nr == __NR_utimensat && a[2]) {
        if (cv_guest_read(n->tid, a[2], ts, sizeof ts) < 0) return cv_err(EFAULT);
        has_times = 1;
    }
    if (nr == __NR_futimesat && a[2]) return cv_err(EROFS); /* timevals on a pipe: not worth it */
    if (!cv_notif_valid(n)) return cv_err(ESRCH);
    cv_autoclose int dup = cv_notif_dup_fd(n, fd);
    if (dup < 0) return cv_err(-dup);
    int r;
    switch (nr) {
    case __NR_fchmod: r = fchmod(dup, (mode_t)a[1]); break;
    case __NR_fchmodat: case __NR_fchmodat2: r = fchmod(dup, (mode_t)a[2]); break;
    case __NR_fchown: r = fchown(dup, (uid_t)a[1], (gid_t)a[2]); break;
    case __NR_fchownat: r = fchown(dup, (uid_t)a[2], (gid_t)a[3]); break;
    default: r = futimens(dup, has_times ? ts : NULL);
    }
    return r < 0 ? cv_err(errno) : cv_val(0);
}

struct cv_reply cv_h_meta(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    int nr = n->req->data.nr;
    int dirfd = AT_FDCWD, follow = 1, at_flags = 0;
    uint64_t addr;
    switch (nr) {
    case __NR_fchmod: case __NR_fchown: case __NR_fsetxattr: case __NR_fremovexattr:
        return on_fd(n, (int)a[0]);
    case __NR_lchown: case __NR_lsetxattr: case __NR_lremovexattr:
        addr = a[0], follow = 0;
        break;
    case __NR_fchmodat: dirfd = (int)a[0], addr = a[1]; break;
    case __NR_fchmodat2: dirfd = (int)a[0], addr = a[1], at_flags = (int)a[3]; break;
    case __NR_fchownat: dirfd = (int)a[0], addr = a[1], at_flags = (int)a[4]; break;
    case __NR_utimensat: dirfd = (int)a[0], addr = a[1], at_flags = (int)a[3]; break;
    case __NR_futimesat: dirfd = (int)a[0], addr = a[1]; break;
    default: addr = a[0]; /* chmod chown utime utimes truncate setxattr removexattr */
    }
    if (at_flags & AT_SYMLINK_NOFOLLOW) follow = 0;
    /* utimensat/futimesat with a NULL path act on dirfd itself. */
    if (!addr && (nr == __NR_utimensat || nr == __NR_futimesat)) {
        if (dirfd == AT_FDCWD) return cv_err(EFAULT);
        return on_fd(n, dirfd);
    }
    char path[PATH_MAX];
    int r = cv_notif_path(n, addr, path, sizeof path);
    if (r < 0) return cv_err(-r);
    if (!path[0] && (at_flags & AT_EMPTY_PATH)) return on_fd(n, dirfd);
    struct cv_resolved res;
    r = cv_resolve(n, dirfd, path, (follow ? CV_RES_FOLLOW : 0) | CV_RES_STAT, &res);
    if (r < 0) return cv_err(-r);
    if (!res.exists) return cv_err(ENOENT);
    if (res.in_proc && res.proc_pid && res.proc_pid != cv_notif_tgid(n) &&
        !cv_tree_is_member(n->run, res.proc_pid))
        return cv_err(ENOENT);
    if (nr == __NR_truncate && S_ISDIR(res.st.st_mode)) return cv_err(EISDIR);
    return cv_err(EROFS);
}
