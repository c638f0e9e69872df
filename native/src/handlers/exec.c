/* execve, execveat. A host binary the kernel finds by the guest's own path is
 * CONTINUEd (Landlock grants execute on visible host files only). Anything
 * else — a file that exists only in the upper layer, a path through an upper
 * directory or a whiteout — needs the exec relay (not built yet): until then
 * such an exec fails with the errno the kernel would give for a missing or
 * non-executable file, never by running the host's file instead. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "handlers.h"
#include "overlay/vfs.h"

#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

struct cv_reply cv_h_exec(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    int dirfd = AT_FDCWD, flags = 0;
    uint64_t addr = a[0];
    if (n->req->data.nr == __NR_execveat) dirfd = (int)a[0], addr = a[1], flags = (int)a[4];
    char path[PATH_MAX];
    int e = cv_notif_path(n, addr, path, sizeof path);
    if (e < 0) return cv_err(-e);
    if (!*path && (flags & AT_EMPTY_PATH)) return cv_continue(); /* fexecve: an fd the guest holds */
    struct cv_vnode v;
    e = cv_vresolve(n, dirfd, path, (flags & AT_SYMLINK_NOFOLLOW) ? 0 : CV_RES_FOLLOW, &v);
    if (e < 0) return cv_err(-e);
    struct cv_reply out;
    if (v.in_proc) out = cv_continue(); /* /proc/self/exe and friends: the kernel's answer */
    else if (!v.exists) out = cv_err(ENOENT);
    else if (S_ISLNK(v.st.st_mode)) out = cv_err(ELOOP);
    else if (!S_ISREG(v.st.st_mode)) out = cv_err(EACCES);
    else if (!v.touched && v.layer == CV_LOWER) out = cv_continue();
    else out = cv_err(EACCES); /* upper-layer executables: the exec relay is not built yet */
    cv_vnode_release(&v);
    return out;
}
