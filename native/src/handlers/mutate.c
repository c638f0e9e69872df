/* Namespace changes: mkdir, mknod, symlink, link, unlink, rmdir, rename.
 * The filesystem is read-only for the guest: answer as a read-only mount
 * would (EEXIST for an existing name, ENOENT/ENOTDIR for a bad parent, else
 * EROFS). Never continued. */
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>

#include "handlers.h"
#include "overlay/resolve.h"

struct cv_reply cv_h_mutate(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    int dirfd = AT_FDCWD, creates = 1;
    uint64_t addr;
    switch (n->req->data.nr) {
    case __NR_mkdir: case __NR_mknod: addr = a[0]; break;
    case __NR_mkdirat: case __NR_mknodat: dirfd = (int)a[0], addr = a[1]; break;
    case __NR_symlink: case __NR_link: addr = a[1]; break;
    case __NR_symlinkat: dirfd = (int)a[1], addr = a[2]; break;
    case __NR_linkat: dirfd = (int)a[2], addr = a[3]; break;
    case __NR_unlink: case __NR_rmdir: case __NR_rename: addr = a[0], creates = 0; break;
    default: /* unlinkat, renameat, renameat2 */ dirfd = (int)a[0], addr = a[1], creates = 0;
    }
    char path[PATH_MAX];
    int r = cv_notif_path(n, addr, path, sizeof path);
    if (r < 0) return cv_err(-r);
    struct cv_resolved res;
    r = cv_resolve(n, dirfd, path, CV_RES_PARENT, &res);
    if (r < 0) return cv_err(-r);
    if (creates && res.exists) return cv_err(EEXIST);
    if (!creates && !res.exists) return cv_err(ENOENT);
    return cv_err(EROFS);
}
