/* What every handler shares: the notification's context, fd injection, writable devices. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/util.h"

#include "handlers.h"

static int remembered_cwd(const struct cv_vctx *c, char *out, size_t len, int *fd) {
    return cv_cwd_override(c->run, c->guest, out, len, fd);
}

void cv_notif_init(struct cv_notif *n, struct cv_run *r, const struct seccomp_notif *req) {
    n->run = r;
    n->req = req;
    cv_guest_init(&n->g, r->listener, req->id, (pid_t)req->pid);
    n->ctx = (struct cv_vctx){.run = r, .guest = &n->g, .nr = req->data.nr, .cwd = remembered_cwd};
}

struct cv_reply cv_notif_inject(struct cv_notif *n, int fd, int cloexec) {
    /* ADDFD without SEND, then our copy closed, then the reply: the guest's close() of its fd is
     * then the last one, so close-time effects (inotify IN_CLOSE_WRITE, releasing a lease) happen
     * when the guest closes, not when the supervisor gets to it. The guest thread stays blocked
     * in its syscall until the reply, so no other thread of it can act on the new fd first. */
    int r = cv_guest_addfd(&n->g, fd, cloexec, 0);
    close(fd);
    return r < 0 ? cv_err(-r) : cv_val(r);
}

int cv_writable_device(const struct cv_run *r, dev_t rdev) {
    unsigned ma = major(rdev), mi = minor(rdev);
    if (ma == 1 && (mi == 3 || mi == 5 || mi == 7)) return 1; /* null, zero, full */
    if (ma == 5 && (mi == 0 || mi == 2)) return 1;            /* tty, ptmx */
    for (int i = 0; i < 3; i++)
        if (r->stdio_rdev[i] && r->stdio_rdev[i] == rdev) return 1;
    return 0;
}

int cv_readable_device(const struct cv_run *r, dev_t rdev) {
    unsigned ma = major(rdev), mi = minor(rdev);
    if (ma == 1 && (mi == 8 || mi == 9)) return 1; /* random, urandom */
    return cv_writable_device(r, rdev);
}

int cv_device_allowed(struct cv_run *r, const struct stat *st, int write) {
    if (!S_ISCHR(st->st_mode)) return 0; /* block devices: never */
    if (cv_writable_device(r, st->st_rdev)) return 1;
    if (!write && cv_readable_device(r, st->st_rdev)) return 1;
    return cv_pty_is_ours(r, st);
}

int cv_fd_of_host(const struct cv_run *r, int fd) {
    struct stat st;
    if (fstat(fd, &st) < 0) return 1;
    if (S_ISBLK(st.st_mode)) return 1;
    if (S_ISCHR(st.st_mode)) return !cv_writable_device(r, st.st_rdev);
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) return 0; /* pipes, sockets, ... */
    char self[64], real[PATH_MAX];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    if (cv_readlink(self, real, sizeof real) < 0) return 1;
    if (real[0] != '/' || !strncmp(real, "/memfd:", 7)) return 0; /* anonymous inodes, memfds */
    return !cv_vfs_in_upper(r, real);
}
