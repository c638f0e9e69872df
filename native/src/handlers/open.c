/* open, openat, creat. The filesystem is read-only for the guest:
 *  - read-only opens of host files are CONTINUEd (Landlock grants read only,
 *    so a racing thread that swaps the path can only read another visible file);
 *  - anything in /proc is opened by the supervisor, after checking that a
 *    /proc/<pid> belongs to this sandbox, and injected (ADDFD|SEND);
 *  - write opens succeed only on the writable devices and on the guest's own
 *    stdio reopened through /proc/self/fd; everything else is EROFS. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "handlers.h"
#include "overlay/resolve.h"

#ifndef O_TMPFILE
#define O_TMPFILE (020000000 | O_DIRECTORY)
#endif

static int writes(int flags) {
    return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) ||
           (flags & O_TMPFILE) == O_TMPFILE;
}

/* The guest's own fd N: may it be reopened for writing? Yes when it is itself
 * open for writing, or is not a host file (pipe, socket, terminal, device we allow). */
static int reopen_writable(struct cv_notif *n, const struct cv_resolved *res) {
    const struct stat *st = &res->st;
    if (S_ISFIFO(st->st_mode) || S_ISSOCK(st->st_mode)) return 1;
    if (S_ISCHR(st->st_mode) && cv_writable_device(n->run, st->st_rdev)) return 1;
    char path[96], buf[512];
    char *fd_part = strstr(res->path, "/fd/");
    if (!fd_part) return 0;
    snprintf(path, sizeof path, "%.*s/fdinfo/%d", (int)(fd_part - res->path), res->path, res->magic_fd);
    if (cv_read_small(path, buf, sizeof buf) <= 0) return 0;
    const char *f = strstr(buf, "flags:");
    if (!f) return 0;
    long flags = strtol(f + 6, NULL, 8);
    return (flags & O_ACCMODE) != O_RDONLY;
}

/* /proc/sys/kernel/hostname agrees with uname: a memfd holding the sandbox's name. */
static struct cv_reply open_hostname(struct cv_notif *n, int flags) {
    int fd = memfd_create("hostname", MFD_CLOEXEC);
    if (fd < 0) return cv_err(errno);
    const char *name = cv_run_hostname(n->run);
    if (cv_write_full(fd, name, strlen(name)) < 0 || cv_write_full(fd, "\n", 1) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
        close(fd);
        return cv_err(EIO);
    }
    if (!cv_notif_valid(n)) {
        close(fd);
        return cv_err(ESRCH);
    }
    return cv_notif_inject(n, fd, flags & O_CLOEXEC);
}

static struct cv_reply open_proc(struct cv_notif *n, const struct cv_resolved *res, int flags, mode_t mode) {
    if (!res->proc_pid && !strcmp(res->path, "/proc/sys/kernel/hostname") && !writes(flags))
        return open_hostname(n, flags);
    if (res->proc_pid && res->proc_pid != cv_notif_tgid(n) && !cv_tree_is_member(n->run, res->proc_pid) &&
        res->proc_pid != n->run->init_pid)
        return cv_err(ENOENT); /* other processes do not exist for the guest */
    if (!res->proc_pid && res->have_path && strncmp(res->path, "/proc", 5) != 0)
        return cv_err(EACCES); /* a procfs mounted elsewhere */
    if (writes(flags)) {
        if (!res->proc_pid) return cv_err(EROFS); /* /proc/sys and friends change the host */
        if (res->magic_fd >= 0 && !reopen_writable(n, res)) return cv_err(EROFS);
        if (res->magic && res->magic_fd < 0 && !S_ISFIFO(res->st.st_mode) && !S_ISSOCK(res->st.st_mode))
            return cv_err(EROFS); /* cwd, root, exe, map_files: host files */
    }
    if (!res->exists && (flags & O_CREAT)) return cv_err(EROFS);
    /* A pipe or FIFO reopened here must not block the receiver (the other end may
     * need a notification answered first): open non-blocking, then restore. */
    int fifo = S_ISFIFO(res->st.st_mode);
    int fd = open(res->path, (flags & ~O_CLOEXEC) | O_CLOEXEC | O_NOCTTY | (fifo ? O_NONBLOCK : 0), mode);
    if (fd < 0) return cv_err(errno);
    if (fifo && !(flags & O_NONBLOCK)) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (!cv_notif_valid(n)) {
        close(fd);
        return cv_err(ESRCH);
    }
    return cv_notif_inject(n, fd, flags & O_CLOEXEC);
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
    if (flags & O_PATH) flags &= O_PATH | O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW; /* the rest is ignored */
    char path[PATH_MAX];
    int r = cv_notif_path(n, path_addr, path, sizeof path);
    if (r < 0) return cv_err(-r);
    int w = writes(flags);
    int rflags = ((flags & O_NOFOLLOW) || ((flags & O_CREAT) && (flags & O_EXCL)) ? 0 : CV_RES_FOLLOW) |
                 (w || (flags & O_CREAT) ? CV_RES_PARENT | CV_RES_STAT : 0);
    struct cv_resolved res;
    r = cv_resolve(n, dirfd, path, rflags, &res);
    if (r < 0) return cv_err(-r);
    if (res.in_proc) return open_proc(n, &res, flags, mode);
    if (!res.exists) return (flags & O_CREAT) ? cv_err(EROFS) : cv_continue();
    if ((flags & O_CREAT) && (flags & O_EXCL)) return cv_err(EEXIST);
    if (!w) return cv_continue();
    if (S_ISDIR(res.st.st_mode)) return cv_err((flags & O_TMPFILE) == O_TMPFILE ? EROFS : EISDIR);
    if (S_ISCHR(res.st.st_mode) && cv_writable_device(n->run, res.st.st_rdev)) return cv_continue();
    return cv_err(EROFS);
}
