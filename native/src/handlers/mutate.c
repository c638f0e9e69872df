/* Namespace changes over the layers: mkdir, mknod, symlink, link, unlink, rmdir,
 * rename. Always done by the supervisor in the upper layer, never continued.
 * Host names that go away get a whiteout; a directory made where a host
 * directory was deleted is opaque; renaming a host directory first brings its
 * whole tree into the upper layer. The order of steps is chosen so that a crash
 * at any point loses nothing: the new name appears before the old one goes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "handlers.h"
#include "overlay/alias.h"
#include "overlay/dirsnap.h"
#include "overlay/layers.h"
#include "overlay/moved.h"
#include "overlay/vfs.h"
#include "overlay/walkmemo.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE 2
#endif


/* Something below the upper shows under v's name (so deleting it needs a whiteout). */
static int lower_has(const struct cv_vnode *v) {
    struct stat st;
    return cv_vnode_lower(v, &st) == 1;
}

static int lower_has_dir(const struct cv_vnode *v) {
    struct stat st;
    return cv_vnode_lower(v, &st) == 1 && S_ISDIR(st.st_mode);
}

static int skip_hidden(const char *name, void *arg) {
    const struct cv_vnode *v = arg;
    cv_lpath_scoped struct cv_lpath vp;
    cv_lpath_init(&vp);
    return cv_lpath_join(&vp, v->vpath, name) < 0 || cv_vfs_hidden(v->run, vp.s); /* in doubt: hidden */
}

/* A directory is empty in the merged view. 1, 0, or -errno. */
static int merged_empty(struct cv_run *r, const struct cv_vnode *v) {
    if (v->layer == CV_UPPER && !v->lower_dir && v->pup >= 0 && *v->name) {
        /* Nothing below the upper shows through it: its own entries (the walk's fd, not a walk
         * again by its path, which in a deep tree is long). */
        int fds[2] = {openat(v->pup, v->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), -1};
        if (fds[0] < 0) return -errno;
        struct cv_dirsnap *s = cv_dirsnap_build_stack(fds, 2, NULL, NULL);
        int e = s ? cv_dirsnap_count(s) == 2 : -(errno ? errno : ENOMEM);
        cv_dirsnap_unref(s);
        close(fds[0]);
        return e;
    }
    struct cv_vstack st;
    int e = cv_vdir_stack(r, v->vpath, &st);
    if (e < 0) return e;
    struct cv_dirsnap *s = cv_dirsnap_build_stack(st.fd, st.n, skip_hidden, (void *)v);
    e = s ? cv_dirsnap_count(s) == 2 : -(errno ? errno : ENOMEM);
    cv_dirsnap_unref(s);
    cv_vstack_close(&st);
    return e;
}

/* Resolve the name a call creates; 0 with v and the upper parent (dir), or -errno. */
static int prepare_new(struct cv_notif *n, int dirfd, uint64_t addr, struct cv_vnode *v, int *dir) {
    char path[PATH_MAX];
    int e = cv_guest_path(&n->g, addr, path, sizeof path);
    if (e < 0) return e;
    e = cv_vresolve(&n->ctx, dirfd, path, CV_RES_PARENT, v);
    if (e < 0) return e;
    if (v->exists) e = -EEXIST;
    else if (v->in_proc) e = -ENOENT;
    else if (!cv_ov_writable(n->run)) e = -EROFS;
    else if (cv_ov_reserved(v->name)) e = -EINVAL;
    else e = cv_vnode_may_change(v);
    if (e == 0) {
        *dir = cv_vnode_upper_parent(n->run, v);
        if (*dir < 0) e = *dir;
    }
    if (e == 0) cv_notif_naming(n, v->vpath);
    if (e < 0) cv_vnode_release(v);
    return e;
}

static struct cv_reply do_mkdir(struct cv_notif *n, int dirfd, uint64_t addr, mode_t mode) {
    struct cv_vnode v;
    int dir;
    int e = prepare_new(n, dirfd, addr, &v, &dir);
    if (e < 0) return cv_err(-e);
    struct cv_run *r = n->run;
    char tmp[64];
    cv_ov_tmpname(tmp, sizeof tmp);
    if (mkdirat(r->work_fd, tmp, 0700) < 0) {
        e = -errno;
    } else {
        int t = openat(r->work_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        /* Where a host directory was deleted, the new one must not show its old entries. */
        if (t >= 0 && lower_has(&v)) cv_ov_set_opaque(t);
        /* The mode goes on before the rename, so the directory appears whole; a mode that takes
         * the owner's rights away (0555) only after it: moving a directory to another parent needs
         * write permission on it (its ".." changes). */
        mode_t want = mode & 07777 & ~cv_guest_umask(&n->g);
        if (t >= 0) fchmod(t, want | S_IRWXU);
        if (renameat2(r->work_fd, tmp, dir, v.name, RENAME_NOREPLACE) < 0) {
            e = -errno;
            cv_ov_rmdir_upper(r->work_fd, tmp);
        } else {
            if (t >= 0 && (want & S_IRWXU) != S_IRWXU) fchmod(t, want);
            cv_ov_unwhiteout(dir, v.name);
        }
        if (t >= 0) close(t);
    }
    close(dir);
    cv_vnode_release(&v);
    return e < 0 ? cv_err(-e) : cv_val(0);
}

static struct cv_reply do_mknod(struct cv_notif *n, int dirfd, uint64_t addr, mode_t mode) {
    mode_t type = mode & S_IFMT;
    if (type == S_IFCHR || type == S_IFBLK) return cv_err(EPERM); /* device nodes need CAP_MKNOD */
    if (type && type != S_IFREG && type != S_IFIFO && type != S_IFSOCK) return cv_err(EINVAL);
    struct cv_vnode v;
    int dir;
    int e = prepare_new(n, dirfd, addr, &v, &dir);
    if (e < 0) return cv_err(-e);
    mode_t perm = mode & 07777 & ~cv_guest_umask(&n->g);
    if (mknodat(dir, v.name, (type ? type : S_IFREG) | 0600, 0) < 0) e = -errno;
    else {
        /* Never through a symlink: another run of this sandbox may have replaced the name meanwhile. */
        fchmodat(dir, v.name, perm, AT_SYMLINK_NOFOLLOW);
        cv_ov_unwhiteout(dir, v.name);
    }
    close(dir);
    cv_vnode_release(&v);
    return e < 0 ? cv_err(-e) : cv_val(0);
}

static struct cv_reply do_symlink(struct cv_notif *n, uint64_t target_addr, int dirfd, uint64_t addr) {
    char target[PATH_MAX];
    int e = cv_guest_path(&n->g, target_addr, target, sizeof target);
    if (e < 0) return cv_err(-e);
    if (!*target) return cv_err(ENOENT);
    struct cv_vnode v;
    int dir;
    e = prepare_new(n, dirfd, addr, &v, &dir);
    if (e < 0) return cv_err(-e);
    if (symlinkat(target, dir, v.name) < 0) e = -errno;
    else cv_ov_unwhiteout(dir, v.name);
    close(dir);
    cv_vnode_release(&v);
    return e < 0 ? cv_err(-e) : cv_val(0);
}

/* The upper directory holding an existing node, after copying the node up if it is a host one. */
static int bring_up(struct cv_notif *n, const struct cv_vnode *v, int *dir) {
    struct cv_run *r = n->run;
    int e = 0;
    if (S_ISDIR(v->st.st_mode)) {
        if (v->layer == CV_LOWER || v->lower_dir) e = cv_ov_materialize(r, v->vpath, 1);
    } else if (v->layer == CV_LOWER) {
        e = cv_notif_copy_up(n, v, 1);
    }
    if (e < 0) return e;
    *dir = cv_vnode_upper_parent(r, v);
    return *dir < 0 ? *dir : 0;
}

/* link(2) of an existing node to the new name (ndir, name): in the upper. A host or layer file
 * is copied up, and the copy stands for it while unchanged (overlay/alias.h): both names are
 * then the file that was there, as a hard link makes them; the caller's fds stay on it. */
static int link_node(struct cv_notif *n, const struct cv_vnode *v, int ndir, const char *name) {
    cv_autoclose int src = v->layer == CV_LOWER && S_ISREG(v->st.st_mode) ? cv_vnode_open(v, 0) : -1;
    int e = 0, odir = -1;
    if (src >= 0) {
        e = cv_ov_copy_up(n->run, v, 1);
        if (e == 0) odir = cv_vnode_upper_parent(n->run, v);
        if (e == 0 && odir < 0) e = odir;
    } else {
        e = bring_up(n, v, &odir);
    }
    if (e == 0 && linkat(odir, v->name, ndir, name, 0) < 0) e = -errno;
    struct stat now;
    if (e == 0 && (src >= 0 || v->aino) && fstatat(ndir, name, &now, AT_SYMLINK_NOFOLLOW) == 0) {
        if (src >= 0) cv_alias_note(n->run, src, &now); /* failing, the copy answers for itself */
        else cv_alias_relinked(n->run, v->adev, v->aino, &now);
    }
    if (odir >= 0) close(odir);
    return e;
}

/* After this run changed the names of an alias's copy (overlay/alias.h): its stat now, through
 * `pin` (an O_PATH fd taken before) or its new name. */
static void relinked(struct cv_run *r, const struct cv_vnode *v, int pin, int dir, const char *name) {
    struct stat now;
    if (!v->aino || (pin < 0 && !name)) return; /* no pin: its ctime moves, the copy answers alone */
    if ((pin >= 0 ? fstat(pin, &now) : fstatat(dir, name, &now, AT_SYMLINK_NOFOLLOW)) == 0)
        cv_alias_relinked(r, v->adev, v->aino, &now);
}

static struct cv_reply do_link(struct cv_notif *n, int odirfd, uint64_t oaddr, int ndirfd, uint64_t naddr, int flags) {
    if (flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH)) return cv_err(EINVAL);
    char path[PATH_MAX];
    int e = cv_guest_path(&n->g, oaddr, path, sizeof path);
    if (e < 0) return cv_err(-e);
    struct cv_vnode ov, nv;
    if (!*path && (flags & AT_EMPTY_PATH)) return cv_err(ENOENT); /* flink() needs CAP_DAC_READ_SEARCH */
    e = cv_vresolve(&n->ctx, odirfd, path, (flags & AT_SYMLINK_FOLLOW) ? CV_RES_FOLLOW : 0, &ov);
    if (e < 0) return cv_err(-e);
    if (!ov.exists) {
        cv_vnode_release(&ov);
        return cv_err(ENOENT);
    }
    int ndir;
    e = prepare_new(n, ndirfd, naddr, &nv, &ndir);
    if (e < 0) {
        cv_vnode_release(&ov);
        return cv_err(-e);
    }
    if (ov.in_proc) {
        /* A file named through /proc/self/fd/N, fetched once: a file of this sandbox's upper (an
         * O_TMPFILE too) is linked as it is; a host file as the guest sees it (copied up first),
         * and only while the view still shows that very file — a host file must never get a
         * second name in the upper, or writes would reach it. */
        int got = ov.proc.magic_fd >= 0 && ov.proc.proc_pid == cv_guest_tgid(&n->g)
                      ? cv_guest_fd(&n->g, ov.proc.magic_fd)
                      : -EXDEV;
        cv_autoclose int s = got;
        char self[64], real[PATH_MAX], vp[PATH_MAX];
        snprintf(self, sizeof self, "/proc/self/fd/%d", s);
        struct stat held;
        if (got < 0) e = got == -EBADF ? -ENOENT : -EXDEV;
        else if (cv_readlink(self, real, sizeof real) < 0 || fstat(s, &held) < 0) e = -EXDEV;
        else if (cv_vfs_in_upper(n->run, real)) {
            if (linkat(AT_FDCWD, self, ndir, nv.name, AT_SYMLINK_FOLLOW) < 0) e = errno == ENOENT ? -ENOENT : -EXDEV;
        } else if (real[0] != '/' || cv_virtual_of_real(n->run, real, vp, sizeof vp) < 0) {
            e = -EXDEV;
        } else {
            struct cv_vnode hv;
            e = cv_vresolve(&n->ctx, AT_FDCWD, vp, 0, &hv);
            if (e == 0 && (!hv.exists || hv.in_proc || S_ISDIR(hv.st.st_mode))) e = -EXDEV;
            else if (e == 0 && hv.layer == CV_LOWER && (hv.st.st_dev != held.st_dev || hv.st.st_ino != held.st_ino))
                e = -EXDEV;
            if (e == 0) e = link_node(n, &hv, ndir, nv.name);
            cv_vnode_release(&hv);
        }
    } else if (S_ISDIR(ov.st.st_mode)) {
        e = -EPERM;
    } else {
        e = link_node(n, &ov, ndir, nv.name);
    }
    if (e == 0) cv_ov_unwhiteout(ndir, nv.name);
    close(ndir);
    cv_vnode_release(&ov);
    cv_vnode_release(&nv);
    return e < 0 ? cv_err(-e) : cv_val(0);
}

static struct cv_reply do_remove(struct cv_notif *n, int dirfd, uint64_t addr, int rmdir) {
    char path[PATH_MAX];
    int e = cv_guest_path(&n->g, addr, path, sizeof path);
    if (e < 0) return cv_err(-e);
    size_t pl = strlen(path);
    while (pl > 1 && path[pl - 1] == '/') pl--;
    if (rmdir && pl >= 1 && path[pl - 1] == '.' && (pl == 1 || path[pl - 2] == '/')) return cv_err(EINVAL);
    struct cv_vnode v;
    e = cv_vresolve(&n->ctx, dirfd, path, 0, &v);
    if (e < 0) return cv_err(-e);
    struct cv_run *r = n->run;
    if (!v.exists) e = -ENOENT;
    else if (v.in_proc) e = -EACCES;
    else if (!*v.name || !strcmp(v.vpath, "/")) e = -EBUSY;
    else if (rmdir && !S_ISDIR(v.st.st_mode)) e = -ENOTDIR;
    else if (!rmdir && S_ISDIR(v.st.st_mode)) e = -EISDIR;
    else if (!cv_ov_writable(r)) e = -EROFS;
    else e = cv_vnode_may_change(&v);
    if (e == 0 && rmdir) {
        int empty = merged_empty(r, &v);
        e = empty < 0 ? empty : empty ? 0 : -ENOTEMPTY;
    }
    if (e == 0) {
        cv_notif_naming(n, v.vpath);
        cv_autoclose int dir = cv_vnode_upper_parent(r, &v);
        if (dir < 0) e = dir;
        /* The whiteout first: a crash after it leaves the name deleted, never half-removed. */
        if (e == 0 && lower_has(&v)) e = cv_ov_whiteout(dir, v.name);
        cv_autoclose int pin = e == 0 && v.aino ? openat(dir, v.name, O_PATH | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (e == 0 && v.layer == CV_UPPER)
            e = rmdir ? cv_ov_rmdir_upper(dir, v.name) : (unlinkat(dir, v.name, 0) < 0 ? -errno : 0);
        if (e == 0) relinked(r, &v, pin, -1, NULL);
        if (e == 0 && rmdir) cv_wmemo_forget(r, v.vpath);
    }
    cv_vnode_release(&v);
    return e < 0 ? cv_err(-e) : cv_val(0);
}

static int is_inside(const char *path, const char *dir) {
    size_t l = strlen(dir);
    return !strncmp(path, dir, l) && (path[l] == '/' || (l == 1 && dir[0] == '/'));
}

/* The upper directory a moved directory lands in must hide the host's directory of that name. */
static int hide_host_twin(int updir, const char *name, const struct cv_vnode *dest) {
    if (!lower_has_dir(dest)) return 0;
    cv_autoclose int d = openat(updir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return d < 0 ? -errno : cv_ov_set_opaque(d);
}

/* A directory brought up from the host or a read-only layer is now dir/name in the upper: the
 * cwds and fds the kernel holds of the old one follow it there. Not noting it (no memory, no
 * fd) only loses that. */
static void note_moved(struct cv_run *r, const struct cv_vnode *from, int dir, const char *name) {
    if (!S_ISDIR(from->st.st_mode) || !(from->layer == CV_LOWER || from->lower_dir)) return;
    cv_autoclose int fd = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) cv_moved_note(r, from->vpath, fd);
}

/* RENAME_EXCHANGE: both names exist; both come up, then swap in the upper layer. */
static int exchange(struct cv_notif *n, struct cv_vnode *ov, struct cv_vnode *nv) {
    if (!ov->exists || !nv->exists) return -ENOENT;
    if (ov->in_proc || nv->in_proc) return -EXDEV;
    if (!*ov->name || !*nv->name) return -EBUSY;
    if (!cv_ov_writable(n->run)) return -EROFS;
    if (!strcmp(ov->vpath, nv->vpath)) return 0;
    int e = cv_vnode_may_change(ov);
    if (e == 0) e = cv_vnode_may_change(nv);
    int odir = -1, ndir = -1;
    if (e == 0) e = bring_up(n, ov, &odir);
    if (e == 0) e = bring_up(n, nv, &ndir);
    if (e == 0 && S_ISDIR(ov->st.st_mode)) e = hide_host_twin(odir, ov->name, nv);
    if (e == 0 && S_ISDIR(nv->st.st_mode)) e = hide_host_twin(ndir, nv->name, ov);
    if (e == 0 && renameat2(odir, ov->name, ndir, nv->name, RENAME_EXCHANGE) < 0) e = -errno;
    if (e == 0) {
        relinked(n->run, ov, -1, ndir, nv->name);
        relinked(n->run, nv, -1, odir, ov->name);
        n->run->dir_renames++;
        note_moved(n->run, ov, ndir, nv->name);
        note_moved(n->run, nv, odir, ov->name);
    }
    if (odir >= 0) close(odir);
    if (ndir >= 0) close(ndir);
    return e;
}

static struct cv_reply do_rename(struct cv_notif *n, int odirfd, uint64_t oaddr, int ndirfd, uint64_t naddr,
                                 unsigned flags) {
    if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) || flags == (RENAME_NOREPLACE | RENAME_EXCHANGE))
        return cv_err(EINVAL); /* RENAME_WHITEOUT: not emulated */
    struct cv_run *r = n->run;
    char opath[PATH_MAX], npath[PATH_MAX];
    int e = cv_guest_path(&n->g, oaddr, opath, sizeof opath);
    if (e == 0) e = cv_guest_path(&n->g, naddr, npath, sizeof npath);
    if (e < 0) return cv_err(-e);
    struct cv_vnode ov, nv;
    e = cv_vresolve(&n->ctx, odirfd, opath, 0, &ov);
    if (e < 0) return cv_err(-e);
    e = cv_vresolve(&n->ctx, ndirfd, npath, CV_RES_PARENT, &nv);
    if (e < 0) {
        cv_vnode_release(&ov);
        return cv_err(-e);
    }
    if (flags & RENAME_EXCHANGE) {
        e = exchange(n, &ov, &nv);
        cv_vnode_release(&ov);
        cv_vnode_release(&nv);
        return e < 0 ? cv_err(-e) : cv_val(0);
    }
    int odir = -1, ndir = -1;
    if (!ov.exists) e = -ENOENT;
    else if (ov.in_proc || nv.in_proc) e = -EXDEV;
    else if (!*ov.name || !*nv.name) e = -EBUSY;
    else if (cv_ov_reserved(nv.name)) e = -EINVAL;
    else if (nv.exists && (flags & RENAME_NOREPLACE)) e = -EEXIST;
    else if (!strcmp(ov.vpath, nv.vpath)) e = 1; /* the same file: nothing to do */
    else if (S_ISDIR(ov.st.st_mode) && is_inside(nv.vpath, ov.vpath)) e = -EINVAL;
    else if (nv.exists && S_ISDIR(ov.st.st_mode) && !S_ISDIR(nv.st.st_mode)) e = -ENOTDIR;
    else if (nv.exists && !S_ISDIR(ov.st.st_mode) && S_ISDIR(nv.st.st_mode)) e = -EISDIR;
    else if (!cv_ov_writable(r)) e = -EROFS;
    else if ((e = cv_vnode_may_change(&ov)) == 0) e = cv_vnode_may_change(&nv);
    if (e == 0 && nv.exists && S_ISDIR(nv.st.st_mode)) {
        int empty = merged_empty(r, &nv);
        e = empty < 0 ? empty : empty ? 0 : -ENOTEMPTY;
    }
    if (e == 0) e = bring_up(n, &ov, &odir);
    if (e == 0) {
        ndir = cv_vnode_upper_parent(r, &nv);
        if (ndir < 0) e = ndir;
    }
    if (e == 0 && S_ISDIR(ov.st.st_mode)) {
        /* The moved directory must hide whatever the host has under its new name. */
        e = hide_host_twin(odir, ov.name, &nv);
        /* An empty target directory in the upper may still hold whiteouts: clear it. */
        if (e == 0 && nv.exists && nv.layer == CV_UPPER) e = cv_ov_rmdir_upper(ndir, nv.name);
    }
    cv_autoclose int pin = e == 0 && nv.exists && nv.aino ? openat(ndir, nv.name, O_PATH | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (e == 0 && renameat2(odir, ov.name, ndir, nv.name, flags) < 0) e = -errno;
    if (e == 0) {
        relinked(r, &ov, -1, ndir, nv.name);
        relinked(r, &nv, pin, -1, NULL); /* the name it lost */
        cv_ov_unwhiteout(ndir, nv.name);
        if (lower_has(&ov)) e = cv_ov_whiteout(odir, ov.name);
        if (S_ISDIR(ov.st.st_mode)) r->dir_renames++;
        note_moved(r, &ov, ndir, nv.name);
    }
    if (odir >= 0) close(odir);
    if (ndir >= 0) close(ndir);
    cv_vnode_release(&ov);
    cv_vnode_release(&nv);
    return e < 0 ? cv_err(-e) : cv_val(0);
}

struct cv_reply cv_h_mutate(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    switch (n->req->data.nr) {
    case __NR_mkdir: return do_mkdir(n, AT_FDCWD, a[0], (mode_t)a[1]);
    case __NR_mkdirat: return do_mkdir(n, (int)a[0], a[1], (mode_t)a[2]);
    case __NR_mknod: return do_mknod(n, AT_FDCWD, a[0], (mode_t)a[1]);
    case __NR_mknodat: return do_mknod(n, (int)a[0], a[1], (mode_t)a[2]);
    case __NR_symlink: return do_symlink(n, a[0], AT_FDCWD, a[1]);
    case __NR_symlinkat: return do_symlink(n, a[0], (int)a[1], a[2]);
    case __NR_link: return do_link(n, AT_FDCWD, a[0], AT_FDCWD, a[1], 0);
    case __NR_linkat: return do_link(n, (int)a[0], a[1], (int)a[2], a[3], (int)a[4]);
    case __NR_unlink: return do_remove(n, AT_FDCWD, a[0], 0);
    case __NR_rmdir: return do_remove(n, AT_FDCWD, a[0], 1);
    case __NR_unlinkat:
        if ((int)a[2] & ~AT_REMOVEDIR) return cv_err(EINVAL);
        return do_remove(n, (int)a[0], a[1], ((int)a[2] & AT_REMOVEDIR) != 0);
    default: break;
    }
    /* A rename moves whole trees and may bring directories up from the host: the walk's memo
     * starts over, whatever came of it. */
    struct cv_reply out = n->req->data.nr == __NR_rename     ? do_rename(n, AT_FDCWD, a[0], AT_FDCWD, a[1], 0)
                          : n->req->data.nr == __NR_renameat ? do_rename(n, (int)a[0], a[1], (int)a[2], a[3], 0)
                                                             : do_rename(n, (int)a[0], a[1], (int)a[2], a[3], (unsigned)a[4]);
    cv_wmemo_clear(n->run);
    return out;
}
