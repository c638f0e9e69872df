/* open, openat, creat, over the layers:
 *  - a read-only open of a host file the kernel resolves exactly as the merged
 *    view does is CONTINUEd (Landlock grants read only, so a racing thread that
 *    swaps the path can only read another visible file), unless an embedder's
 *    hook decided on the path (n->decided): then the supervisor opens it;
 *  - never an O_PATH open: Landlock does not check those, so a swapped path would
 *    give an fd of a hidden file, and its metadata through fstat;
 *  - everything else is opened by the supervisor and injected (ADDFD):
 *    upper files, new files (made in the upper), host files opened for writing
 *    (copied up first), merged directories (the upper twin: getdents merges);
 *  - anything in /proc goes to handlers/proc.c;
 *  - CV_ANS_MAGIC is the run's answer table, read-only (supervisor/answers.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/answers_fmt.h"
#include "common/opath_proto.h"
#include "common/prefetch_proto.h"
#include "common/util.h"
#include "overlay/alias.h"
#include "handlers.h"
#include "overlay/layers.h"
#include "overlay/resolve.h"
#include "overlay/vfs.h"
#include "supervisor/answers.h"

#ifndef O_TMPFILE
#define O_TMPFILE (020000000 | O_DIRECTORY)
#endif

static int writes(int flags) {
    return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) ||
           (flags & O_TMPFILE) == O_TMPFILE;
}

static struct cv_reply inject_checked(struct cv_notif *n, int fd, int flags) {
    if (!cv_guest_valid(&n->g)) {
        close(fd);
        return cv_err(ESRCH);
    }
    return cv_notif_give(n, fd, flags);
}

/* O_CREAT of a missing name: made in the upper, the guest's umask applied. */
static struct cv_reply create(struct cv_notif *n, const struct cv_vnode *v, int flags, mode_t mode) {
    struct cv_run *r = n->run;
    if (!cv_ov_writable(r)) return cv_err(EROFS);
    if (v->trailing) return cv_err(EISDIR);
    if (flags & O_DIRECTORY) return cv_err(EINVAL);
    if (cv_ov_reserved(v->name)) return cv_err(EINVAL);
    int e = cv_vnode_may_change(v);
    if (e < 0) return cv_err(-e);
    cv_autoclose int dir = cv_vnode_upper_parent(r, v);
    if (dir < 0) return cv_err(-dir);
    cv_notif_naming(n, v->vpath);
    int base = (flags & ~(O_CREAT | O_EXCL | O_CLOEXEC)) | O_CLOEXEC | O_NOFOLLOW;
    int fd = openat(dir, v->name, base | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
        fchmod(fd, mode & 07777 & ~cv_guest_umask(&n->g));
        if (r->upper) cv_ov_unwhiteout(dir, v->name);
    } else if (errno == EEXIST && !(flags & O_EXCL)) {
        fd = openat(dir, v->name, base); /* made meanwhile by another run of this sandbox */
    }
    if (fd < 0) return cv_err(errno);
    return inject_checked(n, fd, flags);
}

static struct cv_reply open_tmpfile(struct cv_notif *n, const struct cv_vnode *v, int flags, mode_t mode) {
    if (!v->exists) return cv_err(ENOENT);
    if (!S_ISDIR(v->st.st_mode)) return cv_err(ENOTDIR);
    if (!cv_ov_writable(n->run)) return cv_err(EROFS);
    cv_autoclose int dir = cv_ov_upper_dir(n->run, v->vpath);
    if (dir < 0) return cv_err(-dir);
    int fd = openat(dir, ".", (flags & ~O_CLOEXEC) | O_CLOEXEC, mode & 07777 & ~cv_guest_umask(&n->g));
    if (fd < 0) return cv_err(errno);
    return inject_checked(n, fd, flags);
}

/* The kernel may open it from the guest's own arguments: a host object the view shows as it is,
 * no hook decided on our copy of the path, and an open Landlock checks (not O_PATH). */
static int kernel_may_open(const struct cv_notif *n, const struct cv_vnode *v, int flags) {
    return !v->touched && v->layer == CV_LOWER && !n->decided && !(flags & O_PATH);
}

/* An existing object, opened by the supervisor in its layer. */
static struct cv_reply open_existing(struct cv_notif *n, const struct cv_vnode *v, int flags) {
    int oflags = (flags & ~(O_CREAT | O_EXCL | O_CLOEXEC | CV_O_FD_BY_SOCKET)) | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY;
    if (flags & CV_O_FD_BY_SOCKET) {
        oflags = O_PATH | O_CLOEXEC | O_NOFOLLOW | (flags & O_DIRECTORY); /* the real one (the shim's) */
    } else if (flags & O_PATH) {
        /* ADDFD cannot pass O_PATH files (the kernel's fget skips them): a read-only open stands in,
         * which is all an O_PATH fd is used for (a dirfd, fstat, fchdir, /proc/self/fd). A device
         * it would open for reading must be one the guest may read (a new pty's master: no). */
        if ((S_ISCHR(v->st.st_mode) || S_ISBLK(v->st.st_mode)) &&
            (cv_pty_is_master(&v->st) || !cv_device_allowed(n->run, &v->st, 0))) {
            cv_run_deny(n->run, n->req->data.nr, (pid_t)n->req->pid, v->vpath, "a host device the sandbox does not give");
            return cv_err(EACCES);
        }
        oflags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | (flags & O_DIRECTORY);
    }
    if (v->aino && !writes(flags)) {
        /* An alias reads as the file it stands for, so that fstat agrees with stat. */
        int fd = cv_alias_open(n->run, v->adev, v->aino, oflags & ~(O_NOFOLLOW | O_NOCTTY));
        if (fd != -ENOENT) return fd < 0 ? cv_err(-fd) : inject_checked(n, fd, flags);
    }
    if (cv_vnode_merged_dir(v)) {
        int fd = cv_vnode_open_lower(v, oflags & ~O_NOCTTY);
        if (fd >= 0) return inject_checked(n, fd, flags);
    }
    int dir = v->psrc;
    const char *name = *v->name ? v->name : ".";
    if (dir < 0) return cv_err(ENOENT);
    if (S_ISFIFO(v->st.st_mode) && !(flags & (O_NONBLOCK | O_PATH)) && cv_guest_valid(&n->g))
        return cv_fifo_open_async(n, dir, name, flags); /* waits for the other end, like the kernel */
    int fd = openat(dir, name, oflags);
    if (fd < 0) return cv_err(errno);
    return inject_checked(n, fd, flags);
}

/* CV_FOLLOW_MAGIC: -1 (every fd), CV_FOLLOW_MAGIC "/<fd>": that fd; anything else: -2. */
static int follow_asked(const char *path) {
    size_t len = strlen(CV_FOLLOW_MAGIC);
    if (strncmp(path, CV_FOLLOW_MAGIC, len)) return -2;
    if (!path[len]) return -1;
    if (path[len] != '/' || !path[len + 1]) return -2;
    long fd = 0;
    for (const char *c = path + len + 1; *c; c++) {
        if (*c < '0' || *c > '9' || fd > 0x7fffffff / 10) return -2;
        fd = fd * 10 + (*c - '0');
    }
    return fd <= 0x7fffffff ? (int)fd : -2;
}

struct cv_reply cv_h_open(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    int dirfd = AT_FDCWD, flags;
    uint64_t path_addr;
    mode_t mode;
    switch (n->req->data.nr) {
    case __NR_openat:
        dirfd = (int)a[0], path_addr = a[1], flags = (int)a[2], mode = (mode_t)a[3];
        break;
    case __NR_creat:
        path_addr = a[0], flags = O_CREAT | O_WRONLY | O_TRUNC, mode = (mode_t)a[1];
        break;
    default:
        path_addr = a[0], flags = (int)a[1], mode = (mode_t)a[2];
    }
    if (flags & CV_O_PREFETCH) { /* the shim's ask travels where the mode would */
        n->prefetch_ask = n->req->data.nr == __NR_openat ? a[3] : a[2];
        flags &= ~CV_O_PREFETCH;
    }
    char path[PATH_MAX];
    int r = cv_guest_path_owed(&n->g, path_addr, path, sizeof path); /* cv_vresolve settles */
    if (r < 0) return cv_err(-r);
    int follow = follow_asked(path);
    if (follow != -2) { /* the shim saw a copy-up: its fds follow */
        cv_notif_follow_copies(n, follow);
        return cv_err(ENOENT);
    }
    if (!strcmp(path, CV_ANS_MAGIC)) { /* the shim asks for the answer table */
        if (writes(flags) || (flags & (O_CREAT | O_PATH))) return cv_err(EACCES);
        int fd = cv_answers_fd(n->run);
        return fd < 0 ? cv_err(-fd) : inject_checked(n, fd, flags);
    }
    return cv_open_path(n, dirfd, path, flags, mode);
}

struct cv_reply cv_open_path(struct cv_notif *n, int dirfd, const char *path, int flags, mode_t mode) {
    /* The rest is ignored; the shim's ask for a real O_PATH fd counts only with O_PATH. */
    flags &= (flags & O_PATH) ? O_PATH | O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW | CV_O_FD_BY_SOCKET : ~CV_O_FD_BY_SOCKET;
    int r;
    int w = writes(flags), creat = flags & O_CREAT, excl = creat && (flags & O_EXCL);
    int tmpfile = (flags & O_TMPFILE) == O_TMPFILE;
    int rflags = ((flags & O_NOFOLLOW) || excl ? 0 : CV_RES_FOLLOW) | (w || creat ? CV_RES_PARENT : 0);
    struct cv_ans_gens gen = cv_answers_gens(n->run);
    uint64_t tree_gen = cv_answers_tree_gen(n->run);
    struct cv_vnode v;
    r = cv_vresolve(&n->ctx, dirfd, path, rflags, &v);
    if (r == -ENOENT && !creat) cv_notif_missing(n, gen, path, NULL); /* a name on the way is missing */
    if (r < 0) return cv_err(-r);
    if (v.exists || !creat || v.in_proc) cv_notif_naming(n, NULL);
    struct cv_reply out;
    const struct stat *st = &v.st;
    if (creat && (flags & O_DIRECTORY) && !tmpfile) {
        out = cv_err(EINVAL); /* the kernel refuses the pair outright (since 6.4) */
    } else if (v.in_proc) {
        out = cv_proc_open(n, &v.proc, flags, mode);
    } else if (tmpfile) {
        out = open_tmpfile(n, &v, flags, mode);
    } else if (!v.exists) {
        out = creat ? create(n, &v, flags, mode) : cv_err(ENOENT);
        if (!creat) cv_notif_missing(n, gen, path, v.vpath);
    } else if (excl) {
        out = cv_err(EEXIST);
    } else if (S_ISLNK(st->st_mode)) {
        /* Only O_PATH opens a symlink: the real one when the shim asks for it (it receives the
         * fd itself, common/opath_proto.h). Else there is no stand-in: ADDFD cannot pass O_PATH
         * files, nothing else opens a link, and the kernel cannot be left to do it (above).
         * EOPNOTSUPP is what the usual caller, glibc's fchmodat(AT_SYMLINK_NOFOLLOW) (lchmod:
         * tar as root, cp -P, Python's follow_symlinks=False), answers once it sees a link, so
         * those behave as on the host. */
        out = (flags & CV_O_FD_BY_SOCKET) ? open_existing(n, &v, flags) : cv_err(flags & O_PATH ? EOPNOTSUPP : ELOOP);
    } else if ((flags & O_DIRECTORY) && !S_ISDIR(st->st_mode)) {
        out = cv_err(ENOTDIR);
    } else if (S_ISDIR(st->st_mode)) {
        if (w) {
            out = cv_err(EISDIR);
        } else if (kernel_may_open(n, &v, flags)) {
            cv_notif_publish_listing(n, &v, tree_gen); /* opendir's, fts's, tar's */
            cv_notif_prefetch(n, &v, n->prefetch_ask, tree_gen);
            out = cv_continue();
        } else {
            out = open_existing(n, &v, flags);
        }
    } else if (cv_pty_is_master(st) && !(flags & O_PATH)) {
        out = v.psrc < 0 ? cv_err(ENOENT) : cv_pty_open_master(n, v.psrc, *v.name ? v.name : ".", flags);
    } else if (S_ISCHR(st->st_mode) && cv_writable_device(n->run, st->st_rdev)) {
        out = v.touched || n->decided || (flags & O_PATH) ? open_existing(n, &v, flags) : cv_continue();
    } else if (cv_pty_is_slave(st) && !(flags & O_PATH)) {
        out = cv_pty_open_slave(n, st, v.vpath, flags);
    } else if ((S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) && !(flags & O_PATH) &&
               !(S_ISCHR(st->st_mode) && cv_readable_device(n->run, st->st_rdev))) {
        /* disks, other terminals, input devices, the kernel log: not even for reading */
        cv_run_deny(n->run, n->req->data.nr, (pid_t)n->req->pid, v.vpath, "a host device the sandbox does not give");
        out = cv_err(EACCES);
    } else if (!w && kernel_may_open(n, &v, flags)) {
        if (S_ISREG(st->st_mode)) cv_notif_prefetch(n, &v, n->prefetch_ask, tree_gen); /* tar's */
        out = cv_continue();
    } else if (!w) {
        out = open_existing(n, &v, flags);
    } else if (v.layer == CV_UPPER) {
        cv_notif_settle_alias(n, &v);
        out = open_existing(n, &v, flags);
    } else if (!S_ISREG(st->st_mode)) {
        out = cv_err(S_ISSOCK(st->st_mode) ? ENXIO : EROFS); /* host devices and FIFOs stay read-only */
    } else {
        /* A host file opened for writing: permission as on the host, then copy-up. */
        char self[64];
        cv_autoclose int fd = cv_vnode_open(&v, 0);
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        if (fd < 0 || (access(self, W_OK) < 0 && errno != EROFS)) {
            out = cv_err(fd < 0 ? -fd : errno);
        } else if ((r = cv_notif_copy_up(n, &v, !(flags & O_TRUNC))) < 0) {
            out = cv_err(-r);
        } else {
            int ufd = cv_ov_open_upper(n->run, v.vpath, flags & ~(O_CREAT | O_EXCL | O_CLOEXEC), 0);
            out = ufd < 0 ? cv_err(-ufd) : inject_checked(n, ufd, flags);
        }
    }
    cv_vnode_release(&v);
    return out;
}
