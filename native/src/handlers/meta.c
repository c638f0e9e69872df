/* Metadata changes: chmod, chown, utimes, truncate, xattrs — by path and by
 * fd. Landlock does not cover them, so they are always emulated, never
 * continued: a host file is copied up and the change made on the copy; an
 * upper file, or an object that is no file at all (pipe, socket, memfd), is
 * changed directly (on a dup of the guest's fd, which is what the kernel would
 * have done). xattrs: the user.* namespace only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <utime.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "handlers.h"
#include "overlay/layers.h"
#include "overlay/resolve.h"
#include "overlay/vfs.h"
#include "common/sysnr.h"

/* What the call asks, read from the guest before anything is changed. */
struct meta_op {
    int nr;
    mode_t mode;
    uid_t uid;
    gid_t gid;
    int has_times;
    struct timespec ts[2];
    off_t length;
    char name[XATTR_NAME_MAX + 1];
    void *value;
    size_t size;
    int xflags;
};

static int read_times(struct cv_notif *n, struct meta_op *op, uint64_t addr, int kind) {
    if (!addr) return 0;
    op->has_times = 1;
    if (kind == 0) { /* struct timespec[2] */
        return cv_guest_read(&n->g, addr, op->ts, sizeof op->ts);
    }
    if (kind == 1) { /* struct timeval[2] */
        struct timeval tv[2];
        if (cv_guest_read(&n->g, addr, tv, sizeof tv) < 0) return -EFAULT;
        for (int i = 0; i < 2; i++) {
            if (tv[i].tv_usec < 0 || tv[i].tv_usec >= 1000000) return -EINVAL;
            op->ts[i].tv_sec = tv[i].tv_sec;
            op->ts[i].tv_nsec = tv[i].tv_usec * 1000;
        }
        return 0;
    }
    struct utimbuf ub; /* utime() */
    if (cv_guest_read(&n->g, addr, &ub, sizeof ub) < 0) return -EFAULT;
    op->ts[0] = (struct timespec){ub.actime, 0};
    op->ts[1] = (struct timespec){ub.modtime, 0};
    return 0;
}

/* Apply op to the object behind fd (any open file, O_PATH included). */
static int apply(const struct meta_op *op, int fd) {
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    int r;
    switch (op->nr) {
    case __NR_chmod: case __NR_fchmodat: case __NR_fchmodat2: case __NR_fchmod:
        r = chmod(self, op->mode);
        break;
    case __NR_chown: case __NR_lchown: case __NR_fchownat: case __NR_fchown:
        r = fchownat(fd, "", op->uid, op->gid, AT_EMPTY_PATH);
        break;
    case __NR_truncate: {
        int w = open(self, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (w < 0) return -errno;
        r = ftruncate(w, op->length);
        int e = errno;
        close(w);
        errno = e;
        break;
    }
    case __NR_setxattr: case __NR_lsetxattr: case __NR_fsetxattr:
        r = setxattr(self, op->name, op->value, op->size, op->xflags);
        break;
    case __NR_removexattr: case __NR_lremovexattr: case __NR_fremovexattr:
        r = removexattr(self, op->name);
        break;
    default: /* the utime family */
        r = utimensat(AT_FDCWD, self, op->has_times ? op->ts : NULL, 0);
    }
    return r < 0 ? -errno : 0;
}

/* chmod, chown and explicit times need ownership; checked against the host file before it is
 * copied up (the copy belongs to the guest's uid). */
static int owner_ok(const struct meta_op *op, const struct stat *st) {
    int nr = op->nr;
    int needs = nr == __NR_chmod || nr == __NR_fchmodat || nr == __NR_fchmodat2 || nr == __NR_fchmod ||
                nr == __NR_chown || nr == __NR_lchown || nr == __NR_fchownat || nr == __NR_fchown ||
                ((nr == __NR_utimensat || nr == __NR_utimes || nr == __NR_utime || nr == __NR_futimesat) &&
                 op->has_times);
    return !needs || geteuid() == 0 || st->st_uid == geteuid();
}

/* Change the host file named by a resolved node: copy it up, then change the copy. */
static int on_node(struct cv_notif *n, struct cv_vnode *v, const struct meta_op *op) {
    if (v->layer == CV_LOWER) {
        if (!owner_ok(op, &v->st)) return -EPERM;
        if (op->nr == __NR_truncate) {
            cv_autoclose int fd = cv_vnode_open(v, 0);
            char self[64];
            snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
            if (fd < 0) return fd;
            if (access(self, W_OK) < 0 && errno != EROFS) return -errno;
        }
        int e = cv_notif_copy_up(n, v, op->nr != __NR_truncate || op->length != 0);
        if (e < 0) return e;
    } else {
        cv_notif_settle_alias(n, v);
    }
    cv_autoclose int fd = cv_ov_open_upper(n->run, v->vpath, O_PATH, 0);
    if (fd < 0) return fd;
    return apply(op, fd);
}

/* The file behind the guest's fd gfd, fetched once: the copy is what is decided on and changed.
 * A file of the sandbox, a pipe, a socket, a memfd: changed as the kernel would. A host (or
 * snapshot layer) file: its copy in the upper, made now if the view still shows that very file,
 * or the copy made since. */
static struct cv_reply on_fd(struct cv_notif *n, int gfd, const struct meta_op *op) {
    int got = cv_guest_fd(&n->g, gfd);
    if (got < 0) return cv_err(got == -ESRCH ? ESRCH : EBADF);
    cv_autoclose int s = got;
    char self[64], real[PATH_MAX], vpath[PATH_MAX];
    snprintf(self, sizeof self, "/proc/self/fd/%d", s);
    if (cv_readlink(self, real, sizeof real) < 0) return cv_err(EBADF);
    int on_path = real[0] == '/' && strncmp(real, "/memfd:", 7);
    if (!on_path || cv_vfs_in_upper(n->run, real)) {
        int e = apply(op, s);
        return e < 0 ? cv_err(-e) : cv_val(0);
    }
    struct stat held;
    if (fstat(s, &held) < 0 || cv_virtual_of_real(n->run, real, vpath, sizeof vpath) < 0) return cv_err(EROFS);
    struct cv_vnode v;
    int e = cv_vresolve(&n->ctx, AT_FDCWD, vpath, 0, &v);
    if (e == 0 && (!v.exists || v.in_proc)) e = -EROFS; /* deleted in the view, or not ours to change */
    else if (e == 0 && v.layer == CV_LOWER && (v.st.st_dev != held.st_dev || v.st.st_ino != held.st_ino))
        e = -EROFS; /* the name shows another file now: the one the guest holds is not in the view */
    else if (e == 0 && !cv_ov_writable(n->run)) e = -EROFS;
    if (e == 0) e = on_node(n, &v, op);
    cv_vnode_release(&v); /* safe after any cv_vresolve: it holds nothing on failure */
    return e < 0 ? cv_err(-e) : cv_val(0);
}

struct cv_reply cv_h_meta(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    int nr = n->req->data.nr;
    int dirfd = AT_FDCWD, follow = 1, at_flags = 0, fd_call = -1, e = 0;
    uint64_t addr = 0;
    struct meta_op op = {.nr = nr};
    switch (nr) {
    case __NR_fchmod: fd_call = (int)a[0], op.mode = (mode_t)a[1]; break;
    case __NR_fchown: fd_call = (int)a[0], op.uid = (uid_t)a[1], op.gid = (gid_t)a[2]; break;
    case __NR_fsetxattr: case __NR_fremovexattr: fd_call = (int)a[0]; break;
    case __NR_chmod: addr = a[0], op.mode = (mode_t)a[1]; break;
    case __NR_fchmodat: dirfd = (int)a[0], addr = a[1], op.mode = (mode_t)a[2]; break;
    case __NR_fchmodat2: dirfd = (int)a[0], addr = a[1], op.mode = (mode_t)a[2], at_flags = (int)a[3]; break;
    case __NR_chown: addr = a[0], op.uid = (uid_t)a[1], op.gid = (gid_t)a[2]; break;
    case __NR_lchown: addr = a[0], op.uid = (uid_t)a[1], op.gid = (gid_t)a[2], follow = 0; break;
    case __NR_fchownat:
        dirfd = (int)a[0], addr = a[1], op.uid = (uid_t)a[2], op.gid = (gid_t)a[3], at_flags = (int)a[4];
        break;
    case __NR_utime: addr = a[0], e = read_times(n, &op, a[1], 2); break;
    case __NR_utimes: addr = a[0], e = read_times(n, &op, a[1], 1); break;
    case __NR_futimesat: dirfd = (int)a[0], addr = a[1], e = read_times(n, &op, a[2], 1); break;
    case __NR_utimensat: dirfd = (int)a[0], addr = a[1], at_flags = (int)a[3], e = read_times(n, &op, a[2], 0); break;
    case __NR_truncate: addr = a[0], op.length = (off_t)a[1]; break;
    case __NR_lsetxattr: case __NR_lremovexattr: addr = a[0], follow = 0; break;
    default: addr = a[0]; /* setxattr removexattr */
    }
    if (e < 0) return cv_err(-e);
    if (nr == __NR_truncate && op.length < 0) return cv_err(EINVAL);
    if (nr == __NR_setxattr || nr == __NR_lsetxattr || nr == __NR_fsetxattr || nr == __NR_removexattr ||
        nr == __NR_lremovexattr || nr == __NR_fremovexattr) {
        e = cv_guest_path(&n->g, a[1], op.name, sizeof op.name);
        if (e < 0) return cv_err(e == -ENAMETOOLONG ? ERANGE : -e);
        /* trusted., security., system. (ACLs): unsupported here, so tools fall back to chmod */
        if (strncmp(op.name, "user.", 5)) return cv_err(EOPNOTSUPP);
        if (nr == __NR_setxattr || nr == __NR_lsetxattr || nr == __NR_fsetxattr) {
            op.size = (size_t)a[3];
            op.xflags = (int)a[4];
            if (op.size > XATTR_SIZE_MAX) return cv_err(E2BIG);
            op.value = malloc(op.size ? op.size : 1);
            if (!op.value) return cv_err(ENOMEM);
            if (op.size && cv_guest_read(&n->g, a[2], op.value, op.size) < 0) {
                free(op.value);
                return cv_err(EFAULT);
            }
        }
    }
    struct cv_reply out;
    if (at_flags & AT_SYMLINK_NOFOLLOW) follow = 0;
    char path[PATH_MAX] = "";
    if (fd_call < 0 && addr) {
        e = cv_guest_path(&n->g, addr, path, sizeof path);
        if (e < 0) {
            free(op.value);
            return cv_err(-e);
        }
    }
    /* utimensat/futimesat with a NULL path, and AT_EMPTY_PATH with "", act on dirfd itself. */
    if (fd_call < 0 && ((!addr && (nr == __NR_utimensat || nr == __NR_futimesat)) ||
                        (!path[0] && (at_flags & AT_EMPTY_PATH)))) {
        if (dirfd == AT_FDCWD && !addr) {
            free(op.value);
            return cv_err(EFAULT);
        }
        fd_call = dirfd;
    }
    if (fd_call >= 0 || (fd_call == AT_FDCWD && dirfd == AT_FDCWD)) {
        out = fd_call >= 0 ? on_fd(n, fd_call, &op) : cv_err(EBADF);
        free(op.value);
        return out;
    }
    struct cv_vnode v;
    e = cv_vresolve(&n->ctx, dirfd, path, follow ? CV_RES_FOLLOW : 0, &v);
    if (e == 0) {
        if (!v.exists) e = -ENOENT;
        else if (v.in_proc && v.proc.magic_fd >= 0 && v.proc.proc_pid == cv_guest_tgid(&n->g)) {
            /* /proc/self/fd/N: the file behind the guest's own fd (glibc's fchmodat(AT_SYMLINK_NOFOLLOW)). */
            cv_vnode_release(&v);
            out = on_fd(n, v.proc.magic_fd, &op);
            free(op.value);
            return out;
        } else if (v.in_proc) e = cv_proc_access(n, &v.proc, 0) == -ENOENT ? -ENOENT : -EPERM;
        else if (nr == __NR_truncate && S_ISDIR(v.st.st_mode)) e = -EISDIR;
        else if (!cv_ov_writable(n->run)) e = -EROFS;
        else e = on_node(n, &v, &op);
        cv_vnode_release(&v);
    }
    free(op.value);
    return e < 0 ? cv_err(-e) : cv_val(0);
}
