/* The guest's /proc. Landlock hides every procfs from guests, so each /proc path they use
 * comes here (through the open, stat, readlink and other handlers):
 *  - /proc/<pid>/... exists only for the guest's own processes (its process, the rest of the
 *    sandbox's tree); the sandbox's init shows its stat, status, cmdline, comm and statm, read
 *    only, and nothing else (its memory, fds and environment are not the guest's to touch);
 *  - another process is pinned (a pidfd) before it is checked, and the answer is used only if
 *    it is still alive afterwards, so a pid that was reused never lends its number;
 *  - /proc/<pid>/fd/N is the file the guest holds: fetched once (pidfd_getfd), decided on and
 *    reopened from that copy; cwd, root and exe are their targets, read once and opened in the
 *    merged view, never by a second look-up of the link;
 *  - host-wide files (/proc/cpuinfo, /proc/sys/...) are read-only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/opath_proto.h"
#include "common/util.h"
#include "handlers.h"
#include "overlay/layers.h"
#include "overlay/resolve.h"
#include "overlay/vfs.h"

static int writes(int flags) {
    return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
}

/* What of the init a guest may see: enough for ps and for a parent's name. */
static const char *const init_visible[] = {"", "/stat", "/status", "/cmdline", "/comm", "/statm"};

/* "/proc/<pid><rest>": rest, or NULL when the path is not below a pid. */
static const char *pid_rest(const char *path) {
    if (strncmp(path, "/proc/", 6)) return NULL;
    const char *p = path + 6;
    if (*p < '0' || *p > '9') return NULL;
    while (*p >= '0' && *p <= '9') p++;
    return p;
}

static int member_of(pid_t pid, void *arg) {
    struct cv_notif *n = arg;
    return pid == cv_guest_tgid(&n->g) || cv_tree_is_member(n->run, pid);
}

int cv_proc_visible(struct cv_notif *n, pid_t pid) {
    return !pid || pid == n->run->init_pid || member_of(pid, n);
}

int cv_proc_access(struct cv_notif *n, const struct cv_resolved *res, int write) {
    pid_t pid = res->proc_pid;
    if (!pid) return write ? -EROFS : 0;
    if (pid == n->run->init_pid) {
        const char *rest = pid_rest(res->path);
        for (size_t i = 0; rest && i < sizeof init_visible / sizeof init_visible[0]; i++)
            if (!strcmp(rest, init_visible[i]) && !write) return 0;
        cv_run_deny(n->run, n->req->data.nr, (pid_t)n->req->pid, res->path, "the sandbox's init: only its name and status show");
        return -EACCES;
    }
    return member_of(pid, n) ? 0 : -ENOENT;
}

int cv_proc_pin(struct cv_notif *n, pid_t pid) {
    if (!pid || pid == cv_guest_tgid(&n->g)) return -1; /* itself: blocked in this call, alive */
    if (pid == n->run->init_pid) return cv_task_pin(pid, NULL, NULL);
    int fd = cv_task_pin(pid, member_of, n);
    return fd < 0 ? -ENOENT : fd;
}

/* The pinned process (if any) is still the one the path named. */
static int still(int pin) { return pin < 0 || cv_task_alive(pin); }

static struct cv_reply inject_checked(struct cv_notif *n, int fd, int pin, int flags) {
    if (!still(pin)) {
        close(fd);
        return cv_err(ENOENT);
    }
    return cv_notif_give(n, fd, flags);
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
    return cv_notif_inject(n, fd, flags & O_CLOEXEC);
}

/* Open our copy S again with the guest's flags: the file the guest holds, never a name. A pipe
 * or FIFO must not block the receiver (its other end may wait for an answer from it). */
static struct cv_reply reopen(struct cv_notif *n, int s, const struct stat *st, int flags) {
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", s);
    int fifo = S_ISFIFO(st->st_mode);
    int oflags = (flags & ~(O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_PATH)) | O_CLOEXEC | O_NOCTTY;
    if (flags & CV_O_FD_BY_SOCKET) oflags = O_PATH | O_CLOEXEC | (flags & O_DIRECTORY); /* the held object, a link too */
    else if (flags & O_PATH) oflags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (flags & O_DIRECTORY);
    int fd = open(self, oflags | (fifo && !(oflags & O_PATH) ? O_NONBLOCK : 0));
    if (fd < 0) return cv_err(errno);
    if (fifo && !(oflags & O_NONBLOCK)) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return cv_notif_give(n, fd, flags);
}

/* A host or layer file the guest holds, reopened for writing: the sandbox's copy of it, made
 * now if the view still shows that very file, or the one made since (the guest's later writes
 * went there). */
static struct cv_reply reopen_copy_up(struct cv_notif *n, const char *real, const struct stat *held, int flags) {
    char vpath[PATH_MAX];
    if (cv_virtual_of_real(n->run, real, vpath, sizeof vpath) < 0) return cv_err(EROFS);
    struct cv_vnode v;
    int e = cv_vresolve(&n->ctx, AT_FDCWD, vpath, 0, &v);
    if (e < 0) return cv_err(EROFS);
    int same = v.exists && !v.in_proc && S_ISREG(v.st.st_mode) &&
               (v.layer == CV_UPPER || (v.st.st_dev == held->st_dev && v.st.st_ino == held->st_ino));
    if (!same) e = -EROFS;
    else if (!cv_ov_writable(n->run)) e = -EROFS;
    else if (v.layer == CV_LOWER) e = cv_notif_copy_up(n, &v, !(flags & O_TRUNC));
    else cv_notif_settle_alias(n, &v);
    cv_vnode_release(&v);
    if (e < 0) return cv_err(-e);
    int fd = cv_ov_open_upper(n->run, vpath, flags & ~(O_CREAT | O_EXCL | O_CLOEXEC), 0);
    if (fd < 0) return cv_err(-fd);
    return cv_notif_inject(n, fd, flags & O_CLOEXEC);
}

/* /proc/<pid>/fd/N: decided on and reopened from our copy of the guest's file. */
static struct cv_reply reopen_fd(struct cv_notif *n, int pin, int gfd, int flags) {
    int got = pin >= 0 ? cv_task_fd(pin, gfd) : cv_guest_fd(&n->g, gfd);
    if (got < 0) return cv_err(got == -EBADF ? ENOENT : -got);
    cv_autoclose int s = got;
    struct stat st;
    char self[64], real[PATH_MAX];
    snprintf(self, sizeof self, "/proc/self/fd/%d", s);
    if (fstat(s, &st) < 0 || cv_readlink(self, real, sizeof real) < 0) return cv_err(ENOENT);
    if (!still(pin)) return cv_err(ENOENT);
    /* memfds, pipes, sockets and anonymous inodes name no path */
    int on_path = real[0] == '/' && strncmp(real, "/memfd:", 7);
    size_t rl = strlen(real);
    int deleted = rl > 10 && !strcmp(real + rl - 10, " (deleted)");
    char vpath[PATH_MAX];
    /* A path the guest cannot see (another sandbox's, a hidden one) is not the guest's to open. */
    if (on_path && !deleted && !cv_vfs_in_store(n->run, real) && cv_virtual_of_real(n->run, real, vpath, sizeof vpath) < 0)
        return cv_err(ENOENT);
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        /* Held is not opened: an O_PATH fd of a device gives what its path would, no more. */
        if (cv_pty_is_master(&st) && !(flags & O_PATH)) return cv_pty_reopen_master(n, real, flags);
        if (!cv_device_allowed(n->run, &st, writes(flags) && !(flags & O_PATH))) {
            cv_run_deny(n->run, n->req->data.nr, (pid_t)n->req->pid, real, "a host device the sandbox does not give");
            return cv_err(EACCES);
        }
        return reopen(n, s, &st, flags);
    }
    if (!writes(flags) || (flags & O_PATH)) return reopen(n, s, &st, flags);
    if (S_ISDIR(st.st_mode)) return cv_err(EISDIR);
    if (!S_ISREG(st.st_mode) || !on_path) return reopen(n, s, &st, flags); /* pipes, sockets, memfds */
    /* A file the guest holds open for writing already (a caller's file given as its stdout):
     * reopening it so gives it nothing it did not have. */
    if ((fcntl(s, F_GETFL) & O_ACCMODE) != O_RDONLY) return reopen(n, s, &st, flags);
    if (cv_vfs_in_upper(n->run, real)) return reopen(n, s, &st, flags);  /* the sandbox's own file */
    return reopen_copy_up(n, real, &st, flags);
}

/* cwd, root, exe of a process: their target, read once, opened in the merged view. */
static struct cv_reply open_target(struct cv_notif *n, const struct cv_resolved *res, int pin, int flags, mode_t mode) {
    const char *name = strrchr(res->path, '/') + 1;
    char target[PATH_MAX], vpath[PATH_MAX];
    pid_t pid = res->proc_pid;
    int self = pid == cv_guest_tgid(&n->g);
    cv_lpath_scoped struct cv_lpath cwd;
    cv_lpath_init(&cwd);
    if (!strcmp(name, "cwd") && self && cv_cwd_override(n->run, &n->g, &cwd, NULL)) {
        /* the remembered directory (one longer than a path cannot be named, as in the kernel) */
        if (snprintf(vpath, sizeof vpath, "%s", cwd.s) >= (int)sizeof vpath) return cv_err(ENAMETOOLONG);
    } else {
        const char *exe = !strcmp(name, "exe") ? cv_exe_of(n->run, pid) : NULL;
        if (exe) snprintf(vpath, sizeof vpath, "%s", exe);
        else if (cv_readlink(res->path, target, sizeof target) < 0 || !still(pin) ||
                 cv_virtual_of_real(n->run, target, vpath, sizeof vpath) < 0)
            return cv_err(ENOENT);
    }
    return cv_open_path(n, AT_FDCWD, vpath, flags, mode);
}

struct cv_reply cv_proc_open(struct cv_notif *n, const struct cv_resolved *res, int flags, mode_t mode) {
    if (!res->proc_pid && !strcmp(res->path, "/proc/sys/kernel/hostname") && !writes(flags))
        return open_hostname(n, flags);
    if (!res->proc_pid && res->have_path && strncmp(res->path, "/proc", 5) != 0)
        return cv_err(EACCES); /* a procfs mounted elsewhere */
    int e = cv_proc_access(n, res, writes(flags) && !res->magic);
    if (e < 0) return cv_err(-e);
    if (!res->exists) return cv_err((flags & O_CREAT) ? EROFS : ENOENT);
    cv_autoclose int pin = cv_proc_pin(n, res->proc_pid);
    if (res->proc_pid && pin == -ENOENT) return cv_err(ENOENT);
    if (res->magic_fd >= 0) return reopen_fd(n, pin, res->magic_fd, flags);
    if (res->magic) {
        const char *name = strrchr(res->path, '/') + 1;
        if (!strcmp(name, "cwd") || !strcmp(name, "root") || !strcmp(name, "exe"))
            return open_target(n, res, pin, flags, mode);
        /* ns/...: the process's namespaces, which no guest can change (setns, unshare are denied) */
        if (!strstr(res->path, "/ns/") || writes(flags)) return cv_err(EACCES);
    }
    if (writes(flags) && pin >= 0 && !strcmp(strrchr(res->path, '/'), "/mem")) return cv_err(EACCES); /* another's memory */
    int fifo = S_ISFIFO(res->st.st_mode);
    int fd = open(res->path, (flags & ~(O_CLOEXEC | O_CREAT | O_EXCL)) | O_CLOEXEC | O_NOCTTY | (fifo ? O_NONBLOCK : 0));
    if (fd < 0) return cv_err(errno);
    return inject_checked(n, fd, pin, flags);
}
