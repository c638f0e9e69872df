/* Locks: flock and fcntl's record locks, decided on and taken with our copy of the guest's fd.
 * A guest's lock never reaches a host inode (a lock there would stall the host's own users):
 *  - on a host file (one the guest only reads: writing copies it up) a lock is granted and
 *    not taken; readers' shared locks never conflicted anyway, and an exclusive flock there no
 *    longer excludes another guest. Leases are refused by the filter.
 *  - on anything else (the sandbox's own files, pipes, sockets): flock and open file
 *    description locks (F_OFD_*) act on the very open file, so the supervisor takes them on its
 *    copy, exactly as the guest would have. POSIX record locks (F_SETLK...) belong to a process,
 *    not an open file: each process gets one open file description of its own per file, kept by
 *    the supervisor ("shadow"), on which its locks are taken as OFD locks. They are released
 *    when it unlocks, when it exits, or (checked when another process meets the lock) once it
 *    holds no fd of the file any more.
 * A lock that has to wait does so on a thread of its own (handlers/async.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "handlers.h"

#ifndef F_OFD_GETLK
#define F_OFD_GETLK 36
#define F_OFD_SETLK 37
#define F_OFD_SETLKW 38
#endif

struct shadow {
    pid_t tgid;
    unsigned long long start; /* the process's start time (pid reuse) */
    dev_t dev;
    ino_t ino;
    int fd;
};

struct cv_lock_state {
    pthread_mutex_t mu;
    struct shadow *sh;
    size_t n, cap;
};

static struct cv_lock_state *state(struct cv_run *r) {
    pthread_mutex_lock(&r->state_lock);
    if (!r->locks) {
        struct cv_lock_state *s = calloc(1, sizeof *s);
        if (s) pthread_mutex_init(&s->mu, NULL);
        r->locks = s;
    }
    pthread_mutex_unlock(&r->state_lock);
    return r->locks;
}

void cv_locks_free(struct cv_run *r) {
    struct cv_lock_state *s = r->locks;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) close(s->sh[i].fd);
    free(s->sh);
    pthread_mutex_destroy(&s->mu);
    free(s);
    r->locks = NULL;
}

/* Does process tgid (started at start) still hold an fd of dev/ino? */
static int still_holds(pid_t tgid, unsigned long long start, dev_t dev, ino_t ino) {
    pid_t ppid;
    unsigned long long now;
    if (cv_proc_stat(tgid, &ppid, &now) < 0 || now != start) return 0;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)tgid);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        struct stat st;
        found = e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, 0) == 0 && st.st_dev == dev &&
                st.st_ino == ino;
    }
    closedir(d);
    return found;
}

/* Drop the shadows of dev/ino whose process is gone or holds no fd of the file any more
 * (closing a shadow releases its locks). Called with s->mu held. */
static void sweep(struct cv_lock_state *s, dev_t dev, ino_t ino, pid_t keep) {
    for (size_t i = 0; i < s->n;) {
        struct shadow *h = &s->sh[i];
        if (h->dev == dev && h->ino == ino && h->tgid != keep && !still_holds(h->tgid, h->start, dev, ino)) {
            close(h->fd);
            *h = s->sh[--s->n];
            continue;
        }
        i++;
    }
}

/* The shadow of (tgid, the file of our copy fd): an fd, owned by the table. -errno. */
static int shadow_of(struct cv_lock_state *s, pid_t tgid, int fd, const struct stat *st) {
    pid_t ppid;
    unsigned long long start;
    if (cv_proc_stat(tgid, &ppid, &start) < 0) return -ESRCH;
    for (size_t i = 0; i < s->n; i++) {
        struct shadow *h = &s->sh[i];
        if (h->tgid != tgid || h->dev != st->st_dev || h->ino != st->st_ino) continue;
        if (h->start == start) return h->fd;
        close(h->fd); /* a dead process's, its pid reused */
        *h = s->sh[--s->n];
        break;
    }
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    int sh = open(self, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (sh < 0) sh = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (sh < 0) return -errno;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        struct shadow *ns = realloc(s->sh, cap * sizeof *ns);
        if (!ns) {
            close(sh);
            return -ENOMEM;
        }
        s->sh = ns;
        s->cap = cap;
    }
    s->sh[s->n++] = (struct shadow){tgid, start, st->st_dev, st->st_ino, sh};
    return sh;
}

/* The kernel's own checks of the lock against the guest's fd (its access mode). */
static int lock_fits_mode(int fd, short type) {
    int acc = fcntl(fd, F_GETFL) & O_ACCMODE;
    if (type == F_RDLCK && acc == O_WRONLY) return -EBADF;
    if (type == F_WRLCK && acc == O_RDONLY) return -EBADF;
    return 0;
}

/* ---- waiting ------------------------------------------------------------------------------ */

struct wait_job {
    struct cv_run *run; /* for the shadow table (the run outlives the wait: see below) */
    int fd;             /* our copy (flock, OFD) or the shadow's dup (POSIX) */
    int op;             /* flock op, or 0 for a record lock */
    struct flock fl;
    pid_t tgid;
    dev_t dev;
    ino_t ino;
};

static void wait_job_free(void *p) {
    struct wait_job *j = p;
    close(j->fd);
    cv_run_unref(j->run);
    free(j);
}

/* Retry every few milliseconds until the lock is ours, or the run ends. For POSIX locks the
 * holders are checked each time (a process that left, or closed the file, lets go). */
static long lock_wait(void *p, int ending) {
    struct wait_job *j = p;
    for (;;) {
        int r;
        if (j->op) r = flock(j->fd, j->op | LOCK_NB) < 0 ? -errno : 0;
        else {
            struct flock fl = j->fl;
            r = fcntl(j->fd, F_OFD_SETLK, &fl) < 0 ? -errno : 0;
        }
        if (r != -EWOULDBLOCK && r != -EAGAIN) return r;
        struct pollfd pf = {ending, POLLIN, 0};
        if (poll(&pf, 1, 10) > 0) return -EINTR;
        if (!j->op && j->run->locks) {
            struct cv_lock_state *s = j->run->locks;
            pthread_mutex_lock(&s->mu);
            sweep(s, j->dev, j->ino, j->tgid);
            pthread_mutex_unlock(&s->mu);
        }
    }
}

static struct cv_reply wait_for(struct cv_notif *n, int fd, int op, const struct flock *fl, const struct stat *st) {
    struct wait_job *j = calloc(1, sizeof *j);
    int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (!j || dup < 0) {
        free(j);
        if (dup >= 0) close(dup);
        return cv_err(ENOMEM);
    }
    *j = (struct wait_job){.run = n->run, .fd = dup, .op = op, .tgid = cv_guest_tgid(&n->g)};
    atomic_fetch_add(&n->run->refs, 1); /* the shadow table stays while this waits */
    if (fl) j->fl = *fl;
    if (st) j->dev = st->st_dev, j->ino = st->st_ino;
    return cv_async(n, lock_wait, j, wait_job_free);
}

/* ---- the calls ------------------------------------------------------------------------------ */

static struct cv_reply do_flock(struct cv_notif *n, int s) {
    int op = (int)n->req->data.args[1], kind = op & ~LOCK_NB;
    if (kind != LOCK_SH && kind != LOCK_EX && kind != LOCK_UN) return cv_err(EINVAL);
    if (cv_fd_of_host(n->run, s)) return cv_val(0);
    if (flock(s, op | LOCK_NB) == 0) return cv_val(0);
    if (errno != EWOULDBLOCK || (op & LOCK_NB)) return cv_err(errno);
    return wait_for(n, s, op & ~LOCK_NB, NULL, NULL);
}

static struct cv_reply do_fcntl(struct cv_notif *n, int s) {
    const __u64 *a = n->req->data.args;
    int cmd = (int)a[1];
    struct flock fl;
    int e = cv_guest_read(&n->g, a[2], &fl, sizeof fl);
    if (e < 0) return cv_err(-e);
    int get = cmd == F_GETLK || cmd == F_OFD_GETLK, wait = cmd == F_SETLKW || cmd == F_OFD_SETLKW;
    int ofd = cmd == F_OFD_GETLK || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
    if (fl.l_type != F_RDLCK && fl.l_type != F_WRLCK && fl.l_type != F_UNLCK) return cv_err(EINVAL);
    if (ofd && fl.l_pid != 0) return cv_err(EINVAL);
    if (!get && (e = lock_fits_mode(s, fl.l_type)) < 0) return cv_err(-e);
    if (cv_fd_of_host(n->run, s)) {
        if (!get) return cv_val(0);
        fl.l_type = F_UNLCK;
        e = cv_guest_write(&n->g, a[2], &fl, sizeof fl);
        return e < 0 ? cv_err(-e) : cv_val(0);
    }
    /* The lock's start relative to the guest's offset: our copy shares it, a shadow does not. */
    if (fl.l_whence == SEEK_CUR) {
        off_t cur = lseek(s, 0, SEEK_CUR);
        if (cur < 0) return cv_err(errno);
        fl.l_start += cur;
        fl.l_whence = SEEK_SET;
    }
    struct stat st;
    if (fstat(s, &st) < 0) return cv_err(errno);
    struct cv_lock_state *ls = NULL;
    int target = s;
    if (!ofd) {
        ls = state(n->run);
        if (!ls) return cv_err(ENOMEM);
        pthread_mutex_lock(&ls->mu);
        target = shadow_of(ls, cv_guest_tgid(&n->g), s, &st);
        if (target < 0) {
            pthread_mutex_unlock(&ls->mu);
            return cv_err(-target);
        }
        fl.l_pid = 0;
    }
    struct cv_reply out;
    struct flock try = fl;
    int r = fcntl(target, get ? F_OFD_GETLK : F_OFD_SETLK, &try);
    if (r < 0 && (errno == EAGAIN || errno == EACCES) && ls) {
        sweep(ls, st.st_dev, st.st_ino, cv_guest_tgid(&n->g)); /* the holder may have let go */
        try = fl;
        r = fcntl(target, F_OFD_SETLK, &try);
    }
    if (get && r == 0) {
        if (try.l_type != F_UNLCK && !ofd) try.l_pid = -1; /* held through a shadow or an OFD */
        e = cv_guest_write(&n->g, a[2], &try, sizeof try);
        out = e < 0 ? cv_err(-e) : cv_val(0);
    } else if (r == 0) {
        out = cv_val(0);
    } else if ((errno == EAGAIN || errno == EACCES) && wait) {
        out = wait_for(n, target, 0, &fl, &st);
    } else {
        out = cv_err(errno);
    }
    if (ls) pthread_mutex_unlock(&ls->mu);
    return out;
}

struct cv_reply cv_h_lock(struct cv_notif *n) {
    cv_autoclose int s = cv_guest_fd(&n->g, (int)n->req->data.args[0]);
    if (s < 0) return cv_err(s == -ESRCH ? ESRCH : EBADF);
    return n->req->data.nr == __NR_flock ? do_flock(n, s) : do_fcntl(n, s);
}
