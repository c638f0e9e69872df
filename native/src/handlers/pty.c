/* Pseudo-terminals made in the sandbox. Landlock grants /dev/ptmx but no /dev/pts/N (another
 * session's terminal must stay out of reach), so the kernel cannot open a new pty's slave for
 * the guest, by path or by TIOCGPTPEER. The supervisor does it and hands the fd over:
 *  - an open of the ptmx node is made here; the new pty's slave is pinned at once (an O_PATH
 *    fd of /dev/pts/N, taken while our master holds the index, so it is that pty's);
 *  - an open of /dev/pts/N is served through its pin, and only through it: a pin whose pty
 *    was released (the kernel drops its link count) opens nothing, so an index a host session
 *    reuses later is never reached;
 *  - TIOCGPTPEER is made on our copy of the guest's master.
 * Every tty fd is opened O_NOCTTY here; a guest takes its controlling terminal with TIOCSCTTY
 * (login_tty, forkpty, script, tmux do), not by an open. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/sysnr.h"
#include "common/util.h"
#include "handlers.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

#define PTY_SLAVE_MAJOR 136 /* UNIX98_PTY_SLAVE_MAJOR: one major, 20-bit minors */
#define MAX_PINS 4096

struct cv_pty_pin {
    int fd;     /* O_PATH of /dev/pts/N */
    dev_t dev;  /* the devpts instance */
    dev_t rdev; /* the slave's device number */
};

int cv_pty_is_master(const struct stat *st) { return S_ISCHR(st->st_mode) && st->st_rdev == makedev(5, 2); }

int cv_pty_is_slave(const struct stat *st) { return S_ISCHR(st->st_mode) && major(st->st_rdev) == PTY_SLAVE_MAJOR; }

static int alive(const struct cv_pty_pin *p) {
    struct stat st;
    return fstat(p->fd, &st) == 0 && st.st_nlink > 0;
}

/* Forget pins of released ptys. Caller holds pty_lock. */
static void sweep(struct cv_run *r) {
    size_t w = 0;
    for (size_t i = 0; i < r->nptys; i++) {
        if (alive(&r->ptys[i])) r->ptys[w++] = r->ptys[i];
        else close(r->ptys[i].fd);
    }
    r->nptys = w;
}

/* Pin the slave of master, found where the kernel found it: the devpts instance the ptmx node
 * lives in, or the "pts" beside it. Best effort: without a pin, opening the slave by path fails
 * (TIOCGPTPEER still works). */
static void pin_slave(struct cv_run *r, int node_dir, int master) {
    unsigned idx;
    if (ioctl(master, TIOCGPTN, &idx) < 0) return;
    char name[32];
    struct statfs sf;
    int in_devpts = fstatfs(node_dir, &sf) == 0 && sf.f_type == DEVPTS_SUPER_MAGIC;
    snprintf(name, sizeof name, "%s%u", in_devpts ? "" : "pts/", idx);
    struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
    if (!in_devpts) how.resolve &= ~(uint64_t)RESOLVE_NO_XDEV; /* pts is a mount of its own */
    int fd = (int)syscall(__NR_openat2, node_dir, name, &how, sizeof how);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) < 0 || fstatfs(fd, &sf) < 0 || sf.f_type != DEVPTS_SUPER_MAGIC ||
        st.st_rdev != makedev(PTY_SLAVE_MAJOR, idx)) {
        close(fd);
        return;
    }
    pthread_mutex_lock(&r->pty_lock);
    sweep(r);
    if (r->nptys == r->pty_cap && r->pty_cap < MAX_PINS) {
        size_t cap = r->pty_cap ? r->pty_cap * 2 : 8;
        struct cv_pty_pin *p = realloc(r->ptys, cap * sizeof *p);
        if (p) r->ptys = p, r->pty_cap = cap;
    }
    if (r->nptys < r->pty_cap) {
        r->ptys[r->nptys++] = (struct cv_pty_pin){fd, st.st_dev, st.st_rdev};
        fd = -1;
    }
    pthread_mutex_unlock(&r->pty_lock);
    if (fd >= 0) close(fd);
}

/* Flags for a tty fd made for the guest: its access mode and O_NONBLOCK, never a ctty. */
static int tty_flags(int flags) { return (flags & (O_ACCMODE | O_NONBLOCK)) | O_NOCTTY | O_CLOEXEC; }

struct cv_reply cv_pty_open_master(struct cv_notif *n, int dir, const char *name, int flags) {
    int fd = openat(dir, name, tty_flags(flags) | O_NOFOLLOW);
    if (fd < 0) return cv_err(errno);
    pin_slave(n->run, dir, fd);
    if (!cv_guest_valid(&n->g)) {
        close(fd);
        return cv_err(ESRCH);
    }
    return cv_notif_inject(n, fd, flags & O_CLOEXEC);
}

int cv_pty_is_ours(struct cv_run *r, const struct stat *st) {
    if (!cv_pty_is_slave(st)) return 0;
    int ours = 0;
    pthread_mutex_lock(&r->pty_lock);
    for (size_t i = 0; i < r->nptys && !ours; i++)
        ours = r->ptys[i].rdev == st->st_rdev && r->ptys[i].dev == st->st_dev && alive(&r->ptys[i]);
    pthread_mutex_unlock(&r->pty_lock);
    return ours;
}

struct cv_reply cv_pty_reopen_master(struct cv_notif *n, const char *real, int flags) {
    /* Opening a ptmx again makes a new pty, as its path would: the node the guest's fd names. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", real);
    char *slash = strrchr(dir, '/');
    if (real[0] != '/' || !slash || !slash[1]) return cv_err(ENOENT);
    *slash = 0;
    cv_autoclose int d = open(*dir ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) return cv_err(ENOENT);
    return cv_pty_open_master(n, d, slash + 1, flags);
}

struct cv_reply cv_pty_open_slave(struct cv_notif *n, const struct stat *st, const char *vpath, int flags) {
    struct cv_run *r = n->run;
    int fd = -1, found = 0;
    pthread_mutex_lock(&r->pty_lock);
    for (size_t i = 0; i < r->nptys && !found; i++) {
        const struct cv_pty_pin *p = &r->ptys[i];
        if (p->rdev != st->st_rdev || p->dev != st->st_dev || !alive(p)) continue;
        found = 1;
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", p->fd);
        fd = open(self, tty_flags(flags));
    }
    pthread_mutex_unlock(&r->pty_lock);
    if (!found) {
        cv_run_deny(r, n->req->data.nr, (pid_t)n->req->pid, vpath, "a terminal the sandbox did not make");
        return cv_err(EACCES);
    }
    if (fd < 0) return cv_err(errno);
    if (!cv_guest_valid(&n->g)) {
        close(fd);
        return cv_err(ESRCH);
    }
    return cv_notif_inject(n, fd, flags & O_CLOEXEC);
}

struct cv_reply cv_pty_peer(struct cv_notif *n, int master, unsigned long arg) {
    struct stat st;
    if (fstat(master, &st) < 0 || !cv_pty_is_master(&st)) return cv_err(ENOTTY);
    int fd = ioctl(master, TIOCGPTPEER, (unsigned long)tty_flags((int)arg));
    if (fd < 0) return cv_err(errno);
    return cv_notif_inject(n, fd, (int)arg & O_CLOEXEC);
}

void cv_ptys_free(struct cv_run *r) {
    for (size_t i = 0; i < r->nptys; i++) close(r->ptys[i].fd);
    free(r->ptys);
    r->ptys = NULL;
    r->nptys = r->pty_cap = 0;
}
