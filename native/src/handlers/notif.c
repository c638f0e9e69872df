/* Helpers every handler uses: validity, guest paths, fd injection and dups. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/seccomp_defs.h"
#include "common/util.h"
#include "guest/mem.h"
#include "handlers.h"
#include "common/sysnr.h"

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

int cv_notif_valid(const struct cv_notif *n) {
    uint64_t id = n->req->id;
    return ioctl(n->listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

pid_t cv_notif_tgid(struct cv_notif *n) {
    if (n->tgid) return n->tgid;
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/status", (int)n->tid);
    long t = cv_read_small(path, buf, sizeof buf) > 0 ? cv_proc_field(buf, "Tgid") : -1;
    n->tgid = t > 0 ? (pid_t)t : n->tid;
    return n->tgid;
}

int cv_notif_path(struct cv_notif *n, uint64_t addr, char *buf, size_t len) {
    ssize_t r = cv_guest_read_str(n->tid, addr, buf, len);
    if (r < 0) return (int)r;
    if (!cv_notif_valid(n)) return -ESRCH;
    return 0;
}

struct cv_reply cv_notif_inject(struct cv_notif *n, int fd, int cloexec) {
    /* ADDFD without SEND, then our copy closed, then the reply: the guest's close() of its fd is
     * then the last one, so close-time effects (inotify IN_CLOSE_WRITE, releasing a lease) happen
     * when the guest closes, not when the supervisor gets to it. The guest thread stays blocked
     * in its syscall until the reply, so no other thread of it can act on the new fd first. */
    struct seccomp_notif_addfd add = {
        .id = n->req->id,
        .srcfd = (uint32_t)fd,
        .newfd_flags = cloexec ? O_CLOEXEC : 0,
    };
    int r = ioctl(n->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
    int e = errno;
    close(fd);
    if (r < 0) return cv_err(e == ENOENT ? ESRCH : e);
    return cv_val(r);
}

int cv_notif_dup_fd(struct cv_notif *n, int guest_fd) {
    /* A thread pidfd reaches the thread's own fd table (threads made without CLONE_FILES). */
    int pidfd = (int)syscall(__NR_pidfd_open, n->tid, PIDFD_THREAD);
    if (pidfd < 0) pidfd = (int)syscall(__NR_pidfd_open, cv_notif_tgid(n), 0);
    if (pidfd < 0) return -ESRCH;
    int fd = (int)syscall(__NR_pidfd_getfd, pidfd, guest_fd, 0);
    int e = errno;
    close(pidfd);
    return fd < 0 ? -e : fd;
}

mode_t cv_notif_umask(struct cv_notif *n) {
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/status", (int)n->tid);
    if (cv_read_small(path, buf, sizeof buf) <= 0) return 022;
    const char *u = strstr(buf, "Umask:");
    return u ? (mode_t)strtol(u + 6, NULL, 8) & 0777 : 022;
}

int cv_notif_write(struct cv_notif *n, uint64_t addr, const void *buf, size_t len) {
    if (!cv_notif_valid(n)) return -ESRCH;
    return cv_guest_write(n->tid, addr, buf, len);
}

int cv_writable_device(const struct cv_run *r, dev_t rdev) {
    unsigned ma = major(rdev), mi = minor(rdev);
    if (ma == 1 && (mi == 3 || mi == 5 || mi == 7)) return 1; /* null, zero, full */
    if (ma == 5 && (mi == 0 || mi == 2)) return 1;            /* tty, ptmx */
    for (int i = 0; i < 3; i++)
        if (r->stdio_rdev[i] && r->stdio_rdev[i] == rdev) return 1;
    return 0;
}
