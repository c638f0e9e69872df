/* Look-ups in the merged view: stat, lstat, newfstatat, statx, access,
 * faccessat(2), readlink(at), statfs, getxattr, lgetxattr, listxattr,
 * llistxattr, inotify_add_watch. The path is resolved over the layers and the
 * answer is taken from the real object in its layer (opened O_PATH by the
 * supervisor, never through a symlink) and written into the guest's buffer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/answers_fmt.h"
#include "common/relay_proto.h"
#include "common/util.h"
#include "handlers.h"
#include "overlay/alias.h"
#include "overlay/dirsnap.h"
#include "overlay/layers.h"
#include "overlay/vfs.h"
#include "supervisor/answers.h"

#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

/* The real object of a resolved node, O_PATH. -errno on failure. */
int cv_vnode_open(const struct cv_vnode *v, int flags) {
    if (v->in_proc) {
        int fd = open(v->proc.path, O_PATH | O_NOFOLLOW | O_CLOEXEC | flags);
        return fd < 0 ? -errno : fd;
    }
    if (v->aino) {
        int fd = cv_alias_open(v->run, v->adev, v->aino, O_PATH | flags);
        if (fd != -ENOENT) return fd;
    }
    int dir = v->psrc;
    if (dir < 0) return -ENOENT;
    int fd = openat(dir, *v->name ? v->name : ".", O_PATH | O_NOFOLLOW | O_CLOEXEC | flags);
    return fd < 0 ? -errno : fd;
}

/* Resolve a path the guest gave (already read). For AT_EMPTY_PATH with "", the dirfd itself.
 * missing_at: set, when the answer is ENOENT for a missing final in an existing directory, to
 * that name's own virtual path (when it is short enough for the answer table), else "". */
#define MISSING_AT_MAX (CV_ANS_KEY_MAX + 1)
static int resolve_text(struct cv_notif *n, int dirfd, const char *path, int flags, int empty_ok, struct cv_vnode *v,
                        int *fd_only, char missing_at[MISSING_AT_MAX]) {
    *fd_only = 0;
    missing_at[0] = 0;
    if (!*path && empty_ok && dirfd != AT_FDCWD) {
        *fd_only = 1;
        return cv_guest_settle(&n->g);
    }
    int e = cv_vresolve(&n->ctx, dirfd, !*path && empty_ok ? "." : path, flags, v); /* "" at AT_FDCWD: the cwd */
    if (e < 0) return e;
    if (v->in_proc && (e = cv_proc_access(n, &v->proc, 0)) < 0) {
        cv_vnode_release(v);
        return e;
    }
    if (!v->exists) {
        if (!v->in_proc && v->vpath && strlen(v->vpath) < MISSING_AT_MAX) strcpy(missing_at, v->vpath);
        cv_vnode_release(v);
        return -ENOENT;
    }
    return 0;
}

/* Read and resolve the path argument of this call; null_ok: the stat family, where AT_EMPTY_PATH
 * with a NULL path means "" (Linux 6.11+; the access family still says EFAULT). */
static int resolve_arg_null(struct cv_notif *n, int dirfd, uint64_t addr, int flags, int empty_ok, int null_ok,
                            struct cv_vnode *v, int *fd_only) {
    char path[PATH_MAX] = "";
    /* The filter lets a NULL path through only with an fd, so what comes here is AT_FDCWD or a bad fd. */
    int e = addr == 0 && empty_ok && null_ok ? 0 : cv_guest_path_owed(&n->g, addr, path, sizeof path); /* resolve_text settles */
    *fd_only = 0;
    if (e < 0) return e;
    struct cv_ans_gens g = cv_answers_gens(n->run);
    char missing[MISSING_AT_MAX];
    e = resolve_text(n, dirfd, path, flags, empty_ok, v, fd_only, missing);
    if (e == -ENOENT) cv_notif_missing(n, g, path, missing[0] ? missing : NULL);
    return e;
}

static int resolve_arg(struct cv_notif *n, int dirfd, uint64_t addr, int flags, int empty_ok, struct cv_vnode *v,
                       int *fd_only) {
    return resolve_arg_null(n, dirfd, addr, flags, empty_ok, 0, v, fd_only);
}

static struct cv_reply reply_write(struct cv_notif *n, uint64_t addr, const void *buf, size_t len, int64_t val) {
    int e = cv_guest_write(&n->g, addr, buf, len);
    return e < 0 ? cv_err(-e) : cv_val(val);
}

/* A directory whose entries come from more than one layer counts the subdirectories of the
 * merged view, as a directory's link count does (2 and one per subdirectory), not those of the
 * layer it lives in: find and fts read it. A filesystem that keeps 1 there keeps it. */
static void merged_nlink(struct cv_run *r, const struct cv_vnode *v, nlink_t *nlink) {
    if (!v->exists || v->in_proc || !S_ISDIR(v->st.st_mode) || *nlink == 1 || !v->vpath) return;
    if (!v->lower_dir || v->opaque || (v->layer != CV_UPPER && v->lidx == 0)) return; /* one layer: its own count */
    struct cv_vstack st;
    if (cv_vdir_stack(r, v->vpath, &st) < 0) return;
    int layers = 0;
    for (int i = 0; i < st.n; i++) {
        int q = st.fd[i] < 0 ? -1 : cv_reopen_dir_quietly(st.fd[i], O_RDONLY | O_DIRECTORY); /* no atime */
        if (q >= 0) close(st.fd[i]), st.fd[i] = q;
        layers += st.fd[i] >= 0;
    }
    struct cv_dirsnap *snap = layers > 1 ? cv_dirsnap_build_stack(st.fd, st.n, NULL, NULL) : NULL;
    cv_vstack_close(&st);
    if (!snap) return;
    nlink_t dirs = 0;
    for (uint32_t i = 2; i < cv_dirsnap_count(snap); i++) dirs += cv_dirsnap_entry(snap, i)->type == DT_DIR;
    cv_dirsnap_unref(snap);
    *nlink = 2 + dirs;
}

static struct cv_reply do_stat(struct cv_notif *n, int dirfd, uint64_t path, uint64_t buf, int flags) {
    struct cv_vnode v;
    int fd_only;
    uint64_t gen = cv_answers_tree_gen(n->run);
    int e = resolve_arg_null(n, dirfd, path, (flags & AT_SYMLINK_NOFOLLOW) ? 0 : CV_RES_FOLLOW, flags & AT_EMPTY_PATH,
                             1, &v, &fd_only);
    if (e < 0) return cv_err(-e);
    struct stat st;
    if (fd_only) {
        cv_autoclose int fd = cv_guest_fd(&n->g, dirfd);
        if (fd < 0) return cv_err(EBADF);
        if (fstat(fd, &st) < 0) return cv_err(errno);
    } else {
        st = v.st;
        if (v.in_proc && ((flags & AT_SYMLINK_NOFOLLOW) ? lstat(v.proc.path, &st) : stat(v.proc.path, &st)) < 0)
            st = v.st;
        struct stat twin;
        if (cv_vnode_lower_id(&v, &twin)) st.st_dev = twin.st_dev, st.st_ino = twin.st_ino;
        merged_nlink(n->run, &v, &st.st_nlink);
        cv_notif_publish_dir(n, &v, gen, 0);
        cv_vnode_release(&v);
    }
    return reply_write(n, buf, &st, sizeof st, 0);
}

static struct cv_reply do_statx(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    int flags = (int)a[2];
    struct cv_vnode v;
    int fd_only;
    uint64_t gen = cv_answers_tree_gen(n->run);
    int e = resolve_arg_null(n, (int)a[0], a[1], (flags & AT_SYMLINK_NOFOLLOW) ? 0 : CV_RES_FOLLOW,
                             flags & AT_EMPTY_PATH, 1, &v, &fd_only);
    if (e < 0) return cv_err(-e);
    cv_autoclose int fd = fd_only ? cv_guest_fd(&n->g, (int)a[0]) : cv_vnode_open(&v, 0);
    struct stat twin;
    int merged = !fd_only && cv_vnode_lower_id(&v, &twin);
    nlink_t nlink = 0;
    if (!fd_only) {
        nlink = v.st.st_nlink;
        merged_nlink(n->run, &v, &nlink);
        cv_notif_publish_dir(n, &v, gen, 0);
        cv_vnode_release(&v);
    }
    if (fd < 0) return cv_err(fd_only ? EBADF : -fd);
    struct statx stx;
    if (statx(fd, "", AT_EMPTY_PATH | (flags & AT_STATX_SYNC_TYPE), (unsigned)a[3], &stx) < 0) return cv_err(errno);
    if (merged) {
        stx.stx_ino = twin.st_ino;
        stx.stx_dev_major = major(twin.st_dev);
        stx.stx_dev_minor = minor(twin.st_dev);
    }
    /* an alias's names, not its source's; a merged directory's subdirectories */
    if (!fd_only && (v.aino || S_ISDIR(stx.stx_mode))) stx.stx_nlink = (__u32)nlink;
    return reply_write(n, a[4], &stx, sizeof stx, 0);
}

static struct cv_reply do_access(struct cv_notif *n, int dirfd, uint64_t path, int mode, int flags) {
    if ((mode & ~(R_OK | W_OK | X_OK)) || (flags & ~(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)))
        return cv_err(EINVAL); /* checked first, as the kernel does */
    struct cv_vnode v;
    int fd_only;
    int e = resolve_arg(n, dirfd, path, (flags & AT_SYMLINK_NOFOLLOW) ? 0 : CV_RES_FOLLOW, flags & AT_EMPTY_PATH, &v,
                        &fd_only);
    if (e < 0) return cv_err(-e);
    cv_autoclose int fd = fd_only ? cv_guest_fd(&n->g, dirfd) : cv_vnode_open(&v, 0);
    if (!fd_only) cv_vnode_release(&v);
    if (fd < 0) return cv_err(fd_only ? EBADF : -fd);
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    /* The supervisor has the guest's uid: the kernel's answer for the real object. A host file the
     * guest may write is copied up on open, so W_OK is the host's permission, not its mount's. */
    if (faccessat(AT_FDCWD, self, mode, flags & AT_EACCESS) < 0) {
        if (errno == EROFS && !fd_only) return cv_val(0);
        return cv_err(errno);
    }
    return cv_val(0);
}

static struct cv_reply do_readlink(struct cv_notif *n, int dirfd, uint64_t path, uint64_t buf, int64_t size) {
    if (size <= 0) return cv_err(EINVAL);
    char text[PATH_MAX];
    int e = cv_guest_path(&n->g, path, text, sizeof text);
    if (e < 0) return cv_err(-e);
    struct cv_reply relay;
    if (dirfd == AT_FDCWD && !strcmp(text, CV_RELAY_MAGIC) && cv_relay_request(n, text, buf, (size_t)size, &relay))
        return relay;
    struct cv_ans_gens gen = cv_answers_gens(n->run);
    struct cv_vnode v;
    int fd_only;
    char missing[MISSING_AT_MAX];
    e = resolve_text(n, dirfd, text, 0, 1, &v, &fd_only, missing);
    if (e == -ENOENT) cv_notif_missing(n, gen, text, missing[0] ? missing : NULL);
    if (e < 0) return cv_err(-e);
    /* The guest's shim may serve this answer again: only under the path it wrote, and only when
     * that is the link's own symlink-free path (no other path names it). */
    int keep = !fd_only && !v.in_proc && v.exists && v.vpath && !strcmp(text, v.vpath);
    char target[PATH_MAX], mapped[PATH_MAX];
    cv_lpath_scoped struct cv_lpath cwd;
    cv_lpath_init(&cwd);
    ssize_t len;
    if (fd_only) { /* an O_PATH fd of a link (the shim's, common/opath_proto.h), else ENOENT */
        cv_autoclose int fd = cv_guest_fd(&n->g, dirfd);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISLNK(st.st_mode)) return cv_err(fd == -EBADF ? EBADF : ENOENT);
        len = readlinkat(fd, "", target, sizeof target);
        if (len < 0) return cv_err(errno);
        size_t got = (size_t)len < (size_t)size ? (size_t)len : (size_t)size;
        return reply_write(n, buf, target, got, (int64_t)got);
    }
    if (v.in_proc) {
        cv_autoclose int pin = cv_proc_pin(n, v.proc.proc_pid);
        len = cv_readlink(v.proc.path, target, sizeof target);
        int gone = v.proc.proc_pid && pin == -ENOENT;
        cv_vnode_release(&v);
        if (gone || (pin >= 0 && !cv_task_alive(pin))) return cv_err(ENOENT);
        if (len < 0) return cv_err((int)-len);
        /* cwd, exe, fd/N name real paths: the guest sees its virtual ones, and no hidden one. */
        if (target[0] == '/') {
            const char *p = v.proc.path;
            size_t pl = strlen(p);
            const char *exe = pl > 4 && !strcmp(p + pl - 4, "/exe") ? cv_exe_of(n->run, v.proc.proc_pid) : NULL;
            if (pl > 4 && !strcmp(p + pl - 4, "/cwd") && v.proc.proc_pid == cv_guest_tgid(&n->g) &&
                cv_cwd_override(n->run, &n->g, &cwd, NULL)) {
                /* one longer than a path cannot be read back, as in the kernel */
                if (snprintf(target, sizeof target, "%s", cwd.s) >= (int)sizeof target) return cv_err(ENAMETOOLONG);
            } else if (exe)
                snprintf(target, sizeof target, "%s", exe);
            else if (cv_virtual_of_real(n->run, target, mapped, sizeof mapped) == 0)
                snprintf(target, sizeof target, "%s", mapped);
            else if (cv_vfs_hidden(n->run, target))
                return cv_err(ENOENT);
            len = (ssize_t)strlen(target);
        }
    } else {
        if (!S_ISLNK(v.st.st_mode)) {
            cv_vnode_release(&v);
            if (keep) cv_answers_put(n->run, gen, text, EINVAL, NULL, 0);
            return cv_err(EINVAL);
        }
        len = cv_readlinkat(v.psrc, v.name, target, sizeof target);
        cv_vnode_release(&v);
        if (len < 0) return cv_err((int)-len);
        if (keep) cv_answers_put(n->run, gen, text, 0, target, (size_t)len);
    }
    size_t out = (size_t)len < (size_t)size ? (size_t)len : (size_t)size;
    return reply_write(n, buf, target, out, (int64_t)out);
}

static struct cv_reply do_statfs(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    struct cv_vnode v;
    int fd_only;
    int e = resolve_arg(n, AT_FDCWD, a[0], CV_RES_FOLLOW, 0, &v, &fd_only);
    if (e < 0) return cv_err(-e);
    cv_autoclose int fd = cv_vnode_open(&v, 0);
    cv_vnode_release(&v);
    if (fd < 0) return cv_err(-fd);
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0) return cv_err(errno);
    return reply_write(n, a[1], &sf, sizeof sf, 0);
}

static struct cv_reply do_xattr(struct cv_notif *n, int follow, int list) {
    const __u64 *a = n->req->data.args;
    struct cv_vnode v;
    int fd_only;
    uint64_t gen = cv_answers_tree_gen(n->run);
    int e = resolve_arg(n, AT_FDCWD, a[0], follow ? CV_RES_FOLLOW : 0, 0, &v, &fd_only);
    if (e < 0) return cv_err(-e);
    cv_autoclose int fd = cv_vnode_open(&v, 0);
    if (!list) cv_notif_publish_dir(n, &v, gen, 1); /* ls -l asks each entry */
    cv_vnode_release(&v);
    if (fd < 0) return cv_err(-fd);
    char self[64], name[XATTR_NAME_MAX + 1];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    uint64_t buf = list ? a[1] : a[2];
    size_t size = (size_t)(list ? a[2] : a[3]);
    if (size > XATTR_SIZE_MAX) size = XATTR_SIZE_MAX;
    if (!list) {
        e = cv_guest_path(&n->g, a[1], name, sizeof name);
        if (e < 0) return cv_err(e == -ENAMETOOLONG ? ERANGE : -e);
    }
    char *val = size ? malloc(size) : NULL;
    if (size && !val) return cv_err(ENOMEM);
    ssize_t r = list ? listxattr(self, val, size) : getxattr(self, name, val, size);
    struct cv_reply out = r < 0 ? cv_err(errno) : size ? reply_write(n, buf, val, (size_t)r, r) : cv_val(r);
    free(val);
    return out;
}

/* A watch follows the sandbox's view: a host file is copied up first and the copy watched (the
 * guest's writes go there), a host directory is watched through its upper twin (made if missing:
 * an empty twin changes nothing in the merged view), where the guest's changes happen. */
static struct cv_reply do_inotify(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    uint32_t mask = (uint32_t)a[2];
    struct cv_vnode v;
    int fd_only;
    int e = resolve_arg(n, AT_FDCWD, a[1], (mask & IN_DONT_FOLLOW) ? 0 : CV_RES_FOLLOW, 0, &v, &fd_only);
    if (e < 0) return cv_err(-e);
    int fd = -1;
    if (!v.in_proc && v.layer == CV_LOWER && cv_ov_writable(n->run) &&
        (S_ISREG(v.st.st_mode) || S_ISDIR(v.st.st_mode))) {
        e = S_ISDIR(v.st.st_mode) ? 0 : cv_notif_copy_up(n, &v, 1);
        int d = e < 0 ? e : cv_ov_upper_dir(n->run, S_ISDIR(v.st.st_mode) ? v.vpath : "/");
        if (d >= 0) close(d);
        fd = e < 0 ? e : d < 0 ? d : cv_ov_open_upper(n->run, v.vpath, O_PATH, 0);
    } else {
        fd = cv_vnode_open(&v, 0);
    }
    cv_vnode_release(&v);
    if (fd < 0) return cv_err(-fd);
    cv_autoclose int obj = fd;
    cv_autoclose int ino = cv_guest_fd(&n->g, (int)a[0]);
    if (ino < 0) return cv_err(EBADF);
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", obj);
    int wd = inotify_add_watch(ino, self, mask & ~IN_DONT_FOLLOW);
    return wd < 0 ? cv_err(errno) : cv_val(wd);
}

struct cv_reply cv_h_stat(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    switch (n->req->data.nr) {
    case __NR_stat: return do_stat(n, AT_FDCWD, a[0], a[1], 0);
    case __NR_lstat: return do_stat(n, AT_FDCWD, a[0], a[1], AT_SYMLINK_NOFOLLOW);
    case __NR_newfstatat: return do_stat(n, (int)a[0], a[1], a[2], (int)a[3]);
    case __NR_statx: return do_statx(n);
    case __NR_access: return do_access(n, AT_FDCWD, a[0], (int)a[1], 0);
    case __NR_faccessat: return do_access(n, (int)a[0], a[1], (int)a[2], 0);
    case __NR_faccessat2: return do_access(n, (int)a[0], a[1], (int)a[2], (int)a[3]);
    case __NR_readlink: return do_readlink(n, AT_FDCWD, a[0], a[1], (int64_t)(int)a[2]);
    case __NR_readlinkat: return do_readlink(n, (int)a[0], a[1], a[2], (int64_t)(int)a[3]);
    case __NR_statfs: return do_statfs(n);
    case __NR_getxattr: return do_xattr(n, 1, 0);
    case __NR_lgetxattr: return do_xattr(n, 0, 0);
    case __NR_listxattr: return do_xattr(n, 1, 1);
    case __NR_llistxattr: return do_xattr(n, 0, 1);
    case __NR_inotify_add_watch: return do_inotify(n);
    default: return cv_err(ENOSYS);
    }
}
