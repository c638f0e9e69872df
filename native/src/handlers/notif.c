/* What every handler shares: the notification's context, fd injection, writable devices. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/answers_fmt.h"
#include "common/opath_proto.h"
#include "common/util.h"
#include "overlay/alias.h"
#include "overlay/layers.h"

#include "handlers.h"
#include "supervisor/answers.h"

static int remembered_cwd(const struct cv_vctx *c, struct cv_lpath *out, int *fd) {
    return cv_cwd_override(c->run, c->guest, out, fd);
}

void cv_notif_init(struct cv_notif *n, struct cv_run *r, const struct seccomp_notif *req) {
    n->run = r;
    n->req = req;
    cv_guest_init(&n->g, r->listener, req->id, (pid_t)req->pid);
    n->ctx = (struct cv_vctx){.run = r, .guest = &n->g, .nr = req->data.nr, .cwd = remembered_cwd};
    n->decided = 0;
    n->prefetch_ask = 0;
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

/* A real O_PATH file, which ADDFD cannot pass: sent over a socket injected in its place
 * (common/opath_proto.h). */
static struct cv_reply inject_by_socket(struct cv_notif *n, int fd) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0) {
        close(fd);
        return cv_err(errno);
    }
    int e = cv_send_fd(sv[0], fd, CV_OPATH_TAG);
    close(fd);
    close(sv[0]);
    if (e < 0) {
        close(sv[1]);
        return cv_err(-e);
    }
    return cv_notif_inject(n, sv[1], 1);
}

struct cv_reply cv_notif_give(struct cv_notif *n, int fd, int flags) {
    return (flags & CV_O_FD_BY_SOCKET) ? inject_by_socket(n, fd) : cv_notif_inject(n, fd, flags & O_CLOEXEC);
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

/* The guest's fd gfd is close-on-exec (a flag of the fd table, not of the file). */
static int guest_cloexec(struct cv_notif *n, int gfd) {
    char what[48], buf[256];
    snprintf(what, sizeof what, "fdinfo/%d", gfd);
    cv_autoclose int fd = cv_guest_open(&n->g, what, O_RDONLY);
    ssize_t len = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (len <= 0) return 1;
    buf[len] = 0;
    const char *f = strstr(buf, "\nflags:");
    return f ? (strtol(f + 8, NULL, 8) & O_CLOEXEC) != 0 : 1;
}

/* The guest's read-only fd gfd of the old file `was` becomes the same open of its copy at vpath
 * (checked to be that copy when `want` is given), at the same offset, as overlayfs fds follow a
 * copy-up. fetched: our copy of gfd when the caller has one, else -1 (fetched here). */
static void follow_fd(struct cv_notif *n, int gfd, int fetched, const struct stat *was, const char *vpath,
                      const struct stat *want) {
    cv_autoclose int own = fetched < 0 ? cv_guest_fd(&n->g, gfd) : -1;
    int c = fetched < 0 ? own : fetched; /* the copy we decide on, and read the offset of */
    struct stat st;
    if (c < 0 || fstat(c, &st) < 0 || st.st_dev != was->st_dev || st.st_ino != was->st_ino) return;
    int fl = fcntl(c, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) != O_RDONLY || (fl & O_PATH)) return;
    cv_autoclose int u = cv_ov_open_upper(n->run, vpath, O_RDONLY | (fl & (O_NONBLOCK | O_NOATIME)), 0);
    struct stat ust;
    if (u < 0 || (want && (fstat(u, &ust) < 0 || ust.st_dev != want->st_dev || ust.st_ino != want->st_ino))) return;
    off_t pos = lseek(c, 0, SEEK_CUR);
    if (pos > 0) lseek(u, pos, SEEK_SET);
    cv_guest_setfd(&n->g, u, gfd, guest_cloexec(n, gfd));
}

/* A file was just copied up for this process: its own read-only fds of the old file would go on
 * reading the old bytes and metadata, so each follows. Only with a stable fd table (one thread,
 * no sharer), so the numbers looked at are the ones replaced; other processes' fds are out of
 * reach here, since ADDFD places fds only in the caller: their shim asks (cv_notif_follow_copies),
 * as does this process's after it, when it has other threads. */
static void follow_copy_up(struct cv_notif *n, const struct stat *was, const char *vpath) {
    if (!cv_guest_fds_stable(&n->g)) return;
    int gfds[64];
    int k = cv_guest_fds_of(&n->g, was->st_dev, was->st_ino, gfds, 64);
    for (int i = 0; i < k; i++) follow_fd(n, gfds[i], -1, was, vpath, NULL);
}

static size_t copied_slot(const struct cv_run *r, dev_t dev, ino_t ino) {
    size_t mask = r->copied_cap * 2 - 1, i = (size_t)(ino * 0x9e3779b97f4a7c15ull ^ dev) & mask;
    for (; r->copied_index[i]; i = (i + 1) & mask) {
        const struct cv_copied *c = &r->copied[r->copied_index[i] - 1];
        if (c->dev == dev && c->ino == ino) break;
    }
    return i;
}

/* Kept for the fds other processes opened before: the old inode (its latest copy), and the copy's. */
static void remember_copy(struct cv_notif *n, const struct stat *was, const char *vpath) {
    struct cv_run *r = n->run;
    cv_autoclose int u = cv_ov_open_upper(r, vpath, O_PATH, 0);
    struct stat ust;
    char *v = u >= 0 && fstat(u, &ust) == 0 ? strdup(vpath) : NULL;
    if (!v) return;
    if (r->ncopied == r->copied_cap) {
        size_t cap = r->copied_cap ? r->copied_cap * 2 : 16;
        struct cv_copied *nc = realloc(r->copied, cap * sizeof *nc);
        uint32_t *ni = calloc(cap * 2, sizeof *ni);
        if (!nc || !ni || cap > UINT32_MAX / 2) {
            free(v), free(ni);
            if (nc) r->copied = nc;
            return;
        }
        r->copied = nc, r->copied_cap = cap;
        free(r->copied_index);
        r->copied_index = ni;
        for (size_t i = 0; i < r->ncopied; i++)
            r->copied_index[copied_slot(r, r->copied[i].dev, r->copied[i].ino)] = (uint32_t)i + 1;
    }
    size_t slot = copied_slot(r, was->st_dev, was->st_ino);
    if (r->copied_index[slot]) { /* copied up again (removed and made again, say): the latest */
        struct cv_copied *c = &r->copied[r->copied_index[slot] - 1];
        free(c->vpath);
        *c = (struct cv_copied){was->st_dev, ust.st_dev, was->st_ino, ust.st_ino, v};
    } else {
        r->copied[r->ncopied] = (struct cv_copied){was->st_dev, ust.st_dev, was->st_ino, ust.st_ino, v};
        r->copied_index[slot] = (uint32_t)++r->ncopied;
    }
    cv_answers_copied(r);
}

/* The caller's fd gfd (fetched: our copy, or -1), an open of inode (dev, ino): if that file was
 * copied up this run, the same open of its copy. */
static void follow_copied(struct cv_notif *n, int gfd, int fetched, dev_t dev, ino_t ino) {
    struct cv_run *r = n->run;
    uint32_t at = r->copied_index[copied_slot(r, dev, ino)];
    if (!at) return;
    const struct cv_copied *c = &r->copied[at - 1];
    struct stat was = {.st_dev = c->dev, .st_ino = c->ino}, want = {.st_dev = c->udev, .st_ino = c->uino};
    follow_fd(n, gfd, fetched, &was, c->vpath, &want);
}

void cv_notif_follow_copies(struct cv_notif *n, int gfd) {
    struct cv_run *r = n->run;
    if (!r->ncopied) return;
    if (!cv_guest_fds_stable(&n->g)) {
        /* Other threads may close an fd and reuse its number while we swap it: only the one the
         * asking thread is about to read, which its program does not close meanwhile. */
        cv_autoclose int c = gfd >= 0 ? cv_guest_fd(&n->g, gfd) : -1;
        struct stat st;
        if (c >= 0 && fstat(c, &st) == 0 && S_ISREG(st.st_mode)) follow_copied(n, gfd, c, st.st_dev, st.st_ino);
        return;
    }
    struct cv_guest_file files[256];
    int k = cv_guest_file_fds(&n->g, files, 256);
    for (int i = 0; i < k; i++) follow_copied(n, files[i].fd, -1, files[i].dev, files[i].ino);
}

void cv_notif_missing(struct cv_notif *n, struct cv_ans_gens g, const char *text, const char *at) {
    if (at || text[0] == '/') cv_notif_probed(n, at ? at : text);
    int final_self = at && !strcmp(text, at);
    if (final_self) {
        cv_answers_put(n->run, g, text, ENOENT, NULL, 0);
        return;
    }
    size_t len = g.made && text[0] == '/' ? cv_ans_key_ok(text) : 0; /* no table, no walk */
    if (!len) return;
    char p[CV_ANS_KEY_MAX + 1];
    memcpy(p, text, len + 1);
    size_t top = len; /* the outermost missing name: p's first `top` bytes */
    /* From text up, no symlink followed: text itself must be missing (a dangling symlink is
     * there), and the nearest name that exists must be a directory of its own path. */
    for (int below = 0;; below = 1) {
        struct cv_vnode v;
        int e = cv_vresolve(&n->ctx, AT_FDCWD, p, 0, &v);
        if (e < 0 && e != -ENOENT) return;
        if (e == 0) {
            int exists = v.exists, dir = S_ISDIR(v.st.st_mode) && !v.in_proc && !strcmp(p, v.vpath);
            cv_vnode_release(&v);
            if (exists && (!below || !dir)) return;
            if (exists) break;
        }
        if (!p[1]) return; /* "/" is always there: not reached */
        top = strlen(p);
        char *slash = strrchr(p, '/');
        slash[slash == p] = 0; /* "/a" goes to "/" */
    }
    cv_answers_put(n->run, g, text, ENOENT, NULL, 0);
    /* The outermost missing directory too: the shim answers every name below it (the 13 files
     * of a locale that is not there, as glibc looks for each) from that one record. */
    if (top < len) {
        memcpy(p, text, top);
        p[top] = 0;
        cv_answers_put(n->run, g, p, ENOENT, NULL, 0);
    }
}

void cv_notif_naming(struct cv_notif *n, const char *vpath) {
    cv_answers_named(n->run, vpath);
    n->names_told = 1;
}

int cv_notif_copy_up(struct cv_notif *n, const struct cv_vnode *v, int with_data) {
    int e = cv_ov_copy_up(n->run, v, with_data);
    if (e == 0 && S_ISREG(v->st.st_mode)) {
        follow_copy_up(n, &v->st, v->vpath);
        remember_copy(n, &v->st, v->vpath);
    }
    return e;
}

void cv_notif_settle_alias(struct cv_notif *n, const struct cv_vnode *v) {
    struct stat was;
    if (v->aino && cv_alias_drop(n->run, v->adev, v->aino, &was) > 0) {
        follow_copy_up(n, &was, v->vpath);
        remember_copy(n, &was, v->vpath);
    }
}
