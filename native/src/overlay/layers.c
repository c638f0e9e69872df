#include "layers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/sysnr.h"
#include "common/util.h"
#include "overlay/vfs.h"
#include "overlay/longpath.h"
#include "overlay/walkmemo.h"
#include "supervisor/answers.h"

int cv_ov_reserved(const char *name) { return !strncmp(name, CV_WH_PREFIX, 4); }

static int wh_name(char *out, size_t len, const char *name) {
    return snprintf(out, len, CV_WH_PREFIX "%s", name) < (int)len ? 0 : -ENAMETOOLONG;
}

int cv_ov_whited_out(int upper_dir, const char *name) {
    char wh[NAME_MAX + 8];
    if (wh_name(wh, sizeof wh, name) < 0) return 0;
    return faccessat(upper_dir, wh, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

int cv_ov_whiteout(int upper_dir, const char *name) {
    char wh[NAME_MAX + 8];
    if (wh_name(wh, sizeof wh, name) < 0 || strlen(wh) > NAME_MAX) return -ENAMETOOLONG;
    int fd = openat(upper_dir, wh, O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    close(fd);
    return 0;
}

void cv_ov_unwhiteout(int upper_dir, const char *name) {
    char wh[NAME_MAX + 8];
    if (wh_name(wh, sizeof wh, name) == 0) unlinkat(upper_dir, wh, 0);
}

int cv_ov_is_opaque(int dir) {
    struct stat st;
    return dir >= 0 && fstatat(dir, CV_OPAQUE_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

int cv_ov_set_opaque(int upper_dir) {
    int fd = openat(upper_dir, CV_OPAQUE_NAME, O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    close(fd);
    return 0;
}

int cv_ov_writable(const struct cv_run *r) { return r->upper_fd >= 0 || r->upper_lazy; }

int cv_ov_ensure_upper(struct cv_run *r) {
    if (r->upper_fd >= 0) return 0;
    if (!r->upper_lazy) return -EROFS;
    /* upper and work share a parent (the sandbox's directory): made first, EEXIST is fine. */
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", r->upper_want);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        if (mkdir(parent, 0700) < 0 && errno != EEXIST) return -errno;
    }
    if ((mkdir(r->upper_want, 0700) < 0 && errno != EEXIST) || (mkdir(r->work_want, 0700) < 0 && errno != EEXIST))
        return -errno;
    char real[PATH_MAX];
    int u = open(r->upper_want, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int w = open(r->work_want, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (u < 0 || w < 0 || !realpath(r->upper_want, real)) {
        int e = errno;
        if (u >= 0) close(u);
        if (w >= 0) close(w);
        return -e;
    }
    char *copy = strdup(real);
    if (!copy) {
        close(u);
        close(w);
        return -ENOMEM;
    }
    r->upper = copy;
    r->work_fd = w;
    r->upper_fd = u; /* last: from here on the layer exists */
    return 0;
}

int cv_ov_open_upper(const struct cv_run *r, const char *vpath, int flags, mode_t mode) {
    if (r->upper_fd < 0) return -EROFS;
    struct open_how how = {.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
                           .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    const char *rel = vpath[0] == '/' && vpath[1] ? vpath + 1 : ".";
    return cv_openat2_long(r->upper_fd, rel, &how);
}

void cv_ov_tmpname(char *out, size_t len) {
    static atomic_ulong seq;
    snprintf(out, len, "tmp.%d.%d.%lu", (int)getpid(), (int)gettid(), atomic_fetch_add(&seq, 1));
}

void cv_ov_copy_attrs(int fd, const struct stat *st) {
    if (geteuid() == 0) (void)fchown(fd, st->st_uid, st->st_gid);
    fchmod(fd, st->st_mode & 07777);
    struct timespec ts[2] = {st->st_atim, st->st_mtim};
    futimens(fd, ts);
}

/* The attributes of the directory vdir as the layers below the upper show it. */
static int lower_dir_stat(struct cv_run *r, const char *vdir, struct stat *st) {
    if (!r->nlower) {
        int e = cv_fstatat_long(AT_FDCWD, vdir, st, AT_SYMLINK_NOFOLLOW);
        return e < 0 ? e : S_ISDIR(st->st_mode) ? 0 : -ENOTDIR;
    }
    struct cv_vstack s;
    int e = cv_vdir_stack(r, vdir, &s);
    if (e < 0) return e;
    e = -ENOENT;
    for (int l = 1; l < s.n && e; l++)
        if (s.fd[l] >= 0) e = fstat(s.fd[l], st) < 0 ? -errno : 0;
    cv_vstack_close(&s);
    return e;
}

int cv_ov_upper_dir(struct cv_run *r, const char *vdir) {
    int made = cv_ov_ensure_upper(r);
    if (made < 0) return made;
    /* Most often it is there already: one look-up, not an open a level. */
    int there = cv_ov_open_upper(r, vdir, O_RDONLY | O_DIRECTORY, 0);
    if (there >= 0) return there;
    int cur = openat(r->upper_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0) return -errno;
    struct cv_lpath buf, host;
    cv_lpath_init(&buf);
    cv_lpath_init(&host);
    int e = cv_lpath_set(&buf, vdir);
    if (e < 0) {
        close(cur);
        return e;
    }
    for (char *save = NULL, *c = strtok_r(buf.s, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        e = cv_lpath_join(&host, *host.s ? host.s : "/", c);
        int next = e < 0 ? -1 : openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (e < 0) errno = -e;
        if (next < 0 && errno == ENOENT) {
            /* Make it: a twin of the directory below (a layer's or the host's), built in work and
             * renamed in. */
            struct stat st;
            if (lower_dir_stat(r, host.s, &st) < 0) {
                close(cur);
                cur = -ENOENT;
                break;
            }
            cv_answers_dir_changing(r, st.st_dev, st.st_ino); /* the shim's records of it go first */
            char tmp[64];
            cv_ov_tmpname(tmp, sizeof tmp);
            if (mkdirat(r->work_fd, tmp, 0700) < 0) {
                int err = errno;
                close(cur);
                cur = -err;
                break;
            }
            int t = openat(r->work_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (t >= 0) {
                cv_ov_copy_attrs(t, &st);
                close(t);
            }
            if (renameat2(r->work_fd, tmp, cur, c, RENAME_NOREPLACE) < 0) unlinkat(r->work_fd, tmp, AT_REMOVEDIR);
            cv_wmemo_forget(r, host.s); /* a layer's directory kept without an upper one */
            next = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        int err = errno;
        close(cur);
        cur = next < 0 ? -err : next;
        if (next < 0) break;
    }
    cv_lpath_free(&buf);
    cv_lpath_free(&host);
    return cur;
}

int cv_ov_upper_parent(struct cv_run *r, const char *vpath) {
    if (!strchr(vpath, '/')) return -EINVAL;
    struct cv_lpath parent;
    cv_lpath_init(&parent);
    int e = cv_lpath_parent(&parent, vpath);
    if (e == 0) e = cv_ov_upper_dir(r, parent.s);
    cv_lpath_free(&parent);
    return e;
}

int cv_ov_rmdir_upper(int parent, const char *name) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -ENOMEM;
    }
    struct dirent *de;
    int e = 0;
    int opened_up = 0; /* its mode had to change to clear it: `was` */
    mode_t was = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (!cv_ov_reserved(de->d_name)) {
            e = -ENOTEMPTY;
            break;
        }
        if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno == EACCES && !opened_up) {
            /* The guest's mode on it (0600, 0500) keeps even its owner out; it is going. */
            struct stat st;
            if (fstat(dirfd(d), &st) == 0 && fchmod(dirfd(d), 0700) == 0) {
                opened_up = 1;
                was = st.st_mode & 07777;
                unlinkat(dirfd(d), de->d_name, 0);
            }
        }
    }
    if (!e && unlinkat(parent, name, AT_REMOVEDIR) < 0) e = -errno;
    if (e && opened_up) fchmod(dirfd(d), was);
    closedir(d);
    return e;
}
