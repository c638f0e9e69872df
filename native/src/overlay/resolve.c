#include "resolve.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/sysnr.h"
#include "common/util.h"
#include "guest/guest.h"

static int is_procfs_fd(int fd) {
    struct statfs sf;
    return fstatfs(fd, &sf) == 0 && sf.f_type == PROC_SUPER_MAGIC;
}

/* The directory a relative path starts from, as the guest sees it: our O_PATH copy of it. */
static int start_fd(const struct cv_vctx *c, int dirfd) {
    char what[32];
    if (dirfd == AT_FDCWD) snprintf(what, sizeof what, "cwd");
    else snprintf(what, sizeof what, "fd/%d", dirfd);
    /* A dirfd that is not a directory needs no check of its own here: resolving from it
     * fails with ENOTDIR, as in the kernel (and this runs for every relative open). */
    int fd = cv_guest_open(c->guest, what, O_PATH);
    if (fd == -ESRCH) return fd;
    if (fd < 0) return dirfd == AT_FDCWD ? -ENOENT : -EBADF;
    return fd;
}

/* The real path of that directory (read from our copy, never from the guest's fd again). */
static int start_text(int fd, char *buf, size_t len) {
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    ssize_t r = cv_readlink(self, buf, len);
    if (r < 0) return (int)r;
    return buf[0] == '/' ? 0 : -ENOTDIR;
}

/* "/proc/<digits>" prefix: the pid, and where the rest starts. */
static pid_t proc_pid_of(const char *path, const char **rest) {
    if (strncmp(path, "/proc/", 6) || !isdigit((unsigned char)path[6])) return 0;
    char *end;
    long pid = strtol(path + 6, &end, 10);
    if (*end && *end != '/') return 0;
    if (rest) *rest = end;
    return (pid_t)pid;
}

/* /proc/<pid>/fd/<n> or /proc/<pid>/task/<tid>/fd/<n>: n, else -1. */
static int magic_fd_of(const char *path) {
    const char *rest;
    if (!proc_pid_of(path, &rest)) return -1;
    if (!strncmp(rest, "/task/", 6)) {
        char *end;
        strtol(rest + 6, &end, 10);
        if (end == rest + 6) return -1;
        rest = end;
    }
    if (strncmp(rest, "/fd/", 4) || !isdigit((unsigned char)rest[4])) return -1;
    char *end;
    long fd = strtol(rest + 4, &end, 10);
    return *end ? -1 : (int)fd;
}

static void set_proc(struct cv_resolved *o) {
    o->proc_pid = proc_pid_of(o->path, NULL);
    o->magic_fd = o->magic ? magic_fd_of(o->path) : -1;
    o->in_proc = !strcmp(o->path, "/proc") || !strncmp(o->path, "/proc/", 6);
    if (!o->in_proc) {
        /* procfs mounted elsewhere: treat as /proc without a pid (read-only, no pids). */
        struct statfs sf;
        if (statfs(o->path, &sf) == 0 && sf.f_type == PROC_SUPER_MAGIC) o->in_proc = 1;
    }
}

/* Component walk over the textual path, resolving symlinks ourselves. */
static int walk(const struct cv_vctx *c, const char *base, const char *path, int follow,
                struct cv_resolved *o) {
    char cur[PATH_MAX], rest[PATH_MAX * 2], next[PATH_MAX], target[PATH_MAX];
    int hops = 0;
    if (path[0] == '/') strcpy(cur, "/");
    else snprintf(cur, sizeof cur, "%s", base);
    if (snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest) return -ENAMETOOLONG;
    char *p = rest;
    o->exists = 1;
    if (lstat(cur, &o->st) < 0) return -errno;
    for (;;) {
        int trailing, last;
        char *comp = cv_next_component(&p, &trailing, &last);
        if (!comp) break;
        if (!strcmp(comp, ".")) continue;
        if (!strcmp(comp, "..")) {
            char *slash = strrchr(cur, '/');
            if (slash == cur) cur[1] = 0;
            else if (slash) *slash = 0;
            if (lstat(cur, &o->st) < 0) return -errno;
            continue;
        }
        int w = snprintf(next, sizeof next, "%s%s%s", cur, strcmp(cur, "/") ? "/" : "", comp);
        if (w >= (int)sizeof next) return -ENAMETOOLONG;
        /* The reader-relative links: they count as a symlink hop, as in the kernel. */
        int self = !strcmp(next, "/proc/self"), thread_self = !strcmp(next, "/proc/thread-self");
        if ((self || thread_self) && (!last || follow || trailing)) {
            if (++hops > 40) return -ELOOP;
            pid_t tgid = cv_guest_tgid(c->guest);
            if (self) snprintf(next, sizeof next, "/proc/%d", (int)tgid);
            else snprintf(next, sizeof next, "/proc/%d/task/%d", (int)tgid, (int)c->guest->tid);
        }
        struct stat st;
        if (lstat(next, &st) < 0) {
            if (errno == ENOENT && last) {
                o->exists = 0;
                snprintf(o->path, sizeof o->path, "%s", next);
                return 0;
            }
            return -errno;
        }
        if (S_ISLNK(st.st_mode) && (!last || follow || trailing)) {
            if (++hops > 40) return -ELOOP;
            ssize_t tl = cv_readlink(next, target, sizeof target);
            if (tl < 0) return (int)tl;
            int under_pid = proc_pid_of(next, NULL) != 0;
            /* Magic links of a process: open them as they are when last
             * (an fd may be a pipe, a deleted file, a memfd); as a directory
             * in the middle, follow the path they name. */
            if (under_pid && last && !trailing) {
                if (stat(next, &o->st) < 0) return -errno;
                o->magic = 1;
                snprintf(o->path, sizeof o->path, "%s", next);
                return 0;
            }
            if (under_pid && target[0] != '/') return -ENOTDIR;
            char merged[PATH_MAX * 2];
            if (snprintf(merged, sizeof merged, "%s%s%s", target, (*p || trailing) ? "/" : "", p) >= (int)sizeof merged)
                return -ENAMETOOLONG;
            snprintf(rest, sizeof rest, "%s", merged);
            p = rest;
            if (target[0] == '/') {
                strcpy(cur, "/");
                if (lstat(cur, &o->st) < 0) return -errno;
            }
            continue;
        }
        if (!S_ISDIR(st.st_mode) && (!last || trailing)) return -ENOTDIR;
        snprintf(cur, sizeof cur, "%s", next);
        o->st = st;
    }
    snprintf(o->path, sizeof o->path, "%s", cur);
    return 0;
}

int cv_resolve(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_resolved *o) {
    int follow = flags & CV_RES_FOLLOW;
    memset(o, 0, sizeof *o);
    o->magic_fd = -1;
    if (!*path) return -ENOENT;
    cv_autoclose int start = AT_FDCWD;
    if (path[0] != '/') {
        start = start_fd(c, dirfd);
        if (start < 0) return start;
    }
    /* Fast path: the kernel resolves it with symlinks but no magic links; if it ends outside
     * procfs the answer is the guest's too. Not for absolute /proc paths: /proc/self would be
     * the supervisor's, and a name missing there may exist for the guest. */
    if ((start == AT_FDCWD && strncmp(path, "/proc", 5) != 0) || (start != AT_FDCWD && !is_procfs_fd(start))) {
        struct open_how how = {.flags = O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW),
                               .resolve = RESOLVE_NO_MAGICLINKS};
        cv_autoclose int fd = (int)syscall(__NR_openat2, start, path, &how, sizeof how);
        if (fd >= 0 && !is_procfs_fd(fd)) {
            /* A read-only open only needs "exists, not in procfs": no fstat on that hot path. */
            o->exists = !(flags & CV_RES_STAT) || fstat(fd, &o->st) == 0;
            return 0;
        }
        if (fd < 0 && errno == ENOENT && !(flags & CV_RES_PARENT)) {
            o->exists = 0;
            return 0;
        }
        if (fd < 0 && errno != ELOOP && errno != ENOENT && errno != EXDEV) return -errno;
    }
    char base[PATH_MAX] = "/";
    if (path[0] != '/') {
        int r = start_text(start, base, sizeof base);
        if (r < 0) return r;
    }
    int r = walk(c, base, path, follow, o);
    if (r < 0) return r;
    o->have_path = 1;
    set_proc(o);
    return 0;
}
