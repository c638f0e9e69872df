/* Copy-up: a host object becomes an upper object, atomically. The copy is made
 * in the work directory (data, mode, times, owner when we are root, user.*
 * xattrs), then renamed into place without replacing anything: when two runs
 * of one sandbox copy the same file at once, the first rename wins and the
 * other copy is dropped, so no write to the winner is ever lost. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/util.h"
#include "overlay/layers.h"
#include "overlay/vfs.h"
#include "supervisor/answers.h"

static int copy_data(int from, int to) {
    for (;;) {
        ssize_t n = copy_file_range(from, NULL, to, NULL, 1 << 30, 0);
        if (n == 0) return 0;
        if (n > 0) continue;
        if (errno == EINTR) continue;
        if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return -errno;
        break;
    }
    char buf[65536];
    for (;;) {
        ssize_t n = CV_RETRY(read(from, buf, sizeof buf));
        if (n < 0) return -errno;
        if (n == 0) return 0;
        if (cv_write_full(to, buf, (size_t)n) < 0) return -errno;
    }
}

static void copy_xattrs(int from, int to) {
    char names[4096];
    ssize_t len = flistxattr(from, names, sizeof names);
    for (ssize_t i = 0; i < len; i += (ssize_t)strlen(names + i) + 1) {
        if (strncmp(names + i, "user.", 5)) continue;
        char val[4096];
        ssize_t vl = fgetxattr(from, names + i, val, sizeof val);
        if (vl >= 0) fsetxattr(to, names + i, val, (size_t)vl, 0);
    }
}

/* Make the copy of a host object (dirfd + name) as work/tmp. 0 or -errno. */
static int make_copy(struct cv_run *r, int host_dir, const char *name, const struct stat *st, int with_data,
                     const char *tmp) {
    if (S_ISREG(st->st_mode)) {
        cv_autoclose int out = openat(r->work_fd, tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
        if (out < 0) return -errno;
        cv_autoclose int in = openat(host_dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (in < 0) return -errno;
        int e = with_data ? copy_data(in, out) : 0;
        if (e < 0) return e;
        copy_xattrs(in, out);
        struct timespec ts[2] = {st->st_atim, st->st_mtim};
        if (geteuid() == 0) (void)fchown(out, st->st_uid, st->st_gid);
        fchmod(out, st->st_mode & 07777);
        if (with_data) futimens(out, ts);
        return 0;
    }
    if (S_ISLNK(st->st_mode)) {
        char target[PATH_MAX];
        ssize_t n = cv_readlinkat(host_dir, name, target, sizeof target);
        if (n < 0) return (int)n;
        if (symlinkat(target, r->work_fd, tmp) < 0) return -errno;
        struct timespec ts[2] = {st->st_atim, st->st_mtim};
        utimensat(r->work_fd, tmp, ts, AT_SYMLINK_NOFOLLOW);
        if (geteuid() == 0) (void)fchownat(r->work_fd, tmp, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW);
        return 0;
    }
    if (S_ISFIFO(st->st_mode) || S_ISSOCK(st->st_mode)) {
        if (mknodat(r->work_fd, tmp, (st->st_mode & S_IFMT) | 0600, 0) < 0) return -errno;
        fchmodat(r->work_fd, tmp, st->st_mode & 07777, 0);
        struct timespec ts[2] = {st->st_atim, st->st_mtim};
        utimensat(r->work_fd, tmp, ts, AT_SYMLINK_NOFOLLOW);
        return 0;
    }
    return -EROFS; /* device nodes: making one needs CAP_MKNOD */
}

static int place(struct cv_run *r, const char *tmp, int parent, const char *name, int is_dir) {
    if (renameat2(r->work_fd, tmp, parent, name, RENAME_NOREPLACE) == 0) return 0;
    int e = errno;
    unlinkat(r->work_fd, tmp, is_dir ? AT_REMOVEDIR : 0);
    return e == EEXIST ? 0 : -e; /* someone else copied it up first */
}

int cv_ov_copy_up(struct cv_run *r, const struct cv_vnode *v, int with_data) {
    if (v->layer != CV_LOWER || v->psrc < 0) return 0;
    cv_autoclose int pfd = cv_vnode_upper_parent(r, v);
    if (pfd < 0) return pfd;
    if (S_ISDIR(v->st.st_mode)) {
        cv_autoclose int d = cv_ov_upper_dir(r, v->vpath);
        return d < 0 ? d : 0;
    }
    char tmp[64];
    cv_ov_tmpname(tmp, sizeof tmp);
    int e = make_copy(r, v->psrc, v->name, &v->st, with_data, tmp);
    if (e < 0) {
        unlinkat(r->work_fd, tmp, 0);
        return e;
    }
    return place(r, tmp, pfd, v->name, 0);
}

/* Where name of the directory stack s shows from: the index of the layer below the upper that
 * provides it, or -1 when the upper has it or deletes it, or nothing shows. */
static int shown_from(const struct cv_vstack *s, const char *name) {
    struct stat st;
    if (s->fd[0] >= 0 && (fstatat(s->fd[0], name, &st, AT_SYMLINK_NOFOLLOW) == 0 || cv_ov_whited_out(s->fd[0], name)))
        return -1;
    for (int l = 1; l < s->n; l++) {
        if (s->fd[l] < 0) continue;
        if (fstatat(s->fd[l], name, &st, AT_SYMLINK_NOFOLLOW) == 0) return l;
        if (l < s->n - 1 && cv_ov_whited_out(s->fd[l], name)) return -1;
    }
    return -1;
}

/* Copy every entry the layers below the upper show in the merged directory vdir (upper `up`)
 * that the upper does not already have or delete, recursively; then make up opaque. */
static int materialize_at(struct cv_run *r, int up, const char *vdir, int depth) {
    if (depth > 256) return -ELOOP;
    if (cv_ov_is_opaque(up)) return 0; /* nothing shows */
    struct cv_vstack s;
    int e = cv_vdir_stack(r, vdir, &s);
    if (e < 0) return e;
    for (int l = 1; l < s.n && !e; l++) {
        if (s.fd[l] < 0) continue;
        int lfd = cv_reopen_dir(s.fd[l], O_RDONLY | O_DIRECTORY);
        DIR *d = lfd < 0 ? NULL : fdopendir(lfd);
        if (!d) {
            if (lfd >= 0) close(lfd);
            e = -ENOMEM;
            break;
        }
        struct dirent *de;
        while (!e && (de = readdir(d))) {
            const char *name = de->d_name;
            if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
            if (l < s.n - 1 && cv_ov_reserved(name)) continue;
            char vp[PATH_MAX];
            if (snprintf(vp, sizeof vp, "%s/%s", strcmp(vdir, "/") ? vdir : "", name) >= (int)sizeof vp) {
                e = -ENAMETOOLONG;
                break;
            }
            if (shown_from(&s, name) != l) continue; /* the upper's, deleted, or from a layer above */
            if (l == s.n - 1 && cv_vfs_hidden(r, vp)) continue;
            struct stat ls;
            if (fstatat(dirfd(d), name, &ls, AT_SYMLINK_NOFOLLOW) < 0) continue;
            if (S_ISDIR(ls.st_mode)) {
                cv_answers_dir_changing(r, ls.st_dev, ls.st_ino); /* the shim's records of it go first */
                char tmp[64];
                cv_ov_tmpname(tmp, sizeof tmp);
                if (mkdirat(r->work_fd, tmp, 0700) < 0) {
                    e = -errno;
                    break;
                }
                int t = openat(r->work_fd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (t >= 0) {
                    fchmod(t, (ls.st_mode & 07777) | 0700); /* restored below, once filled */
                    close(t);
                }
                e = place(r, tmp, up, name, 1);
                if (e < 0) break;
                cv_autoclose int cu = openat(up, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (cu < 0) {
                    e = -errno;
                    break;
                }
                e = materialize_at(r, cu, vp, depth + 1);
                cv_ov_copy_attrs(cu, &ls);
                continue;
            }
            char tmp[64];
            cv_ov_tmpname(tmp, sizeof tmp);
            e = make_copy(r, dirfd(d), name, &ls, 1, tmp);
            if (e == -EROFS) { /* a device node: it cannot come along */
                e = 0;
                continue;
            }
            if (e < 0) {
                unlinkat(r->work_fd, tmp, 0);
                break;
            }
            e = place(r, tmp, up, name, 0);
        }
        closedir(d);
    }
    /* Upper directories over lower ones: what shows below them must come up too. */
    if (!e) {
        int ufd = cv_reopen_dir(up, O_RDONLY | O_DIRECTORY);
        DIR *d = ufd < 0 ? NULL : fdopendir(ufd);
        if (!d && ufd >= 0) close(ufd);
        struct dirent *de;
        while (d && !e && (de = readdir(d))) {
            const char *name = de->d_name;
            if (!strcmp(name, ".") || !strcmp(name, "..") || cv_ov_reserved(name)) continue;
            struct stat us;
            if (fstatat(dirfd(d), name, &us, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(us.st_mode)) continue;
            int below = 0;
            for (int l = 1; l < s.n && !below; l++) {
                struct stat ls;
                below = s.fd[l] >= 0 && fstatat(s.fd[l], name, &ls, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(ls.st_mode);
            }
            if (!below) continue;
            char vp[PATH_MAX];
            if (snprintf(vp, sizeof vp, "%s/%s", strcmp(vdir, "/") ? vdir : "", name) >= (int)sizeof vp) {
                e = -ENAMETOOLONG;
                break;
            }
            cv_autoclose int cu = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            e = cu < 0 ? -errno : materialize_at(r, cu, vp, depth + 1);
        }
        if (d) closedir(d);
    }
    cv_vstack_close(&s);
    if (e < 0) return e;
    return cv_ov_set_opaque(up);
}

int cv_ov_materialize(struct cv_run *r, const char *vdir, int lower_shows) {
    cv_autoclose int up = cv_ov_upper_dir(r, vdir);
    if (up < 0) return up;
    if (!lower_shows) return cv_ov_set_opaque(up);
    return materialize_at(r, up, vdir, 0);
}
