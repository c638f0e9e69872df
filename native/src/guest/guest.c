#include "guest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/seccomp_defs.h"
#include "common/sysnr.h"
#include "common/util.h"
#include "memo.h"

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

#define PAGE 4096u

int cv_guest_valid(const struct cv_guest *g) {
    if (g->listener == CV_GUEST_UNNOTIFIED) return 1;
    uint64_t id = g->id;
    return ioctl(g->listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

/* The check after an access; it covers every earlier one too, so a path read on credit is paid. */
static int checked(struct cv_guest *g) {
    if (!cv_guest_valid(g)) return 0;
    g->owed = 0;
    return 1;
}

int cv_guest_settle(struct cv_guest *g) {
    return !g->owed || checked(g) ? 0 : -ESRCH;
}

/* Tgid, Threads and Umask, from one read of /proc/<tid>/status. */
static void read_status(struct cv_guest *g) {
    if (g->tgid) return;
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/status", (int)g->tid);
    long tgid = -1, threads = -1;
    mode_t mask = 022;
    if (cv_read_small(path, buf, sizeof buf) > 0) {
        tgid = cv_proc_field(buf, "Tgid");
        threads = cv_proc_field(buf, "Threads");
        const char *u = strstr(buf, "Umask:");
        if (u) mask = (mode_t)strtol(u + 6, NULL, 8) & 0777;
    }
    if (!checked(g)) tgid = threads = -1; /* not this thread's any more */
    g->tgid = tgid > 0 ? (pid_t)tgid : g->tid;
    if (!g->threads) g->threads = threads > 0 ? (int)threads : -1; /* unknown: never taken as stable */
    g->umask = mask;
}

pid_t cv_guest_tgid(struct cv_guest *g) {
    read_status(g);
    return g->tgid;
}

mode_t cv_guest_umask(struct cv_guest *g) {
    read_status(g);
    return g->umask;
}

/* The thread count is the link count of /proc/<tid>/task minus 2. An fd of that directory pins
 * the task it was opened for: once that task is gone its count reads 0 and the fd is opened
 * again, so a cached fd never answers for another task that took the tid. */
#define TASK_SLOTS 128
static struct {
    pid_t tid;
    int fd;
} task_dirs[TASK_SLOTS];
static pthread_mutex_t task_mu = PTHREAD_MUTEX_INITIALIZER;

static int thread_count(pid_t tid) {
    pthread_mutex_lock(&task_mu);
    unsigned slot = (unsigned)tid % TASK_SLOTS;
    struct stat st;
    int n = -1;
    for (int attempt = 0; attempt < 2 && n < 1; attempt++) {
        if (attempt || task_dirs[slot].tid != tid || task_dirs[slot].fd <= 0) {
            if (task_dirs[slot].fd > 0) close(task_dirs[slot].fd);
            char path[64];
            snprintf(path, sizeof path, "/proc/%d/task", (int)tid);
            task_dirs[slot].fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
            task_dirs[slot].tid = tid;
            if (task_dirs[slot].fd < 0) break;
        }
        if (fstat(task_dirs[slot].fd, &st) == 0) n = (int)st.st_nlink - 2;
    }
    pthread_mutex_unlock(&task_mu);
    return n;
}

int cv_guest_fds_stable(struct cv_guest *g) {
    if (g->threads) return g->threads == 1;
    /* One thread now means none can appear before the reply (only this blocked one could make
     * it). The count is about this thread's process only if the notification is still pending
     * afterwards: every caller fetches or reads the fd next, a checked call, before acting. */
    int n = thread_count(g->tid);
    g->threads = n > 0 ? n : -1;
    return g->threads == 1;
}

/* Read page by page: a string may end right before an unmapped page. The first read is short
 * (most paths are): copying a whole page for a 20-byte path costs more than a second call. */
static ssize_t peek_str(const struct cv_guest *g, uint64_t addr, char *buf, size_t len) {
    if (!addr) return -EFAULT;
    size_t done = 0;
    while (done < len) {
        size_t chunk = PAGE - (size_t)((addr + done) % PAGE);
        if (done == 0 && chunk > 256) chunk = 256;
        if (chunk > len - done) chunk = len - done;
        struct iovec local = {buf + done, chunk};
        struct iovec remote = {(void *)(uintptr_t)(addr + done), chunk};
        ssize_t n = process_vm_readv(g->tid, &local, 1, &remote, 1, 0);
        if (n <= 0) return -EFAULT;
        char *nul = memchr(buf + done, 0, (size_t)n);
        if (nul) return (ssize_t)(nul - buf);
        done += (size_t)n;
    }
    return -ENAMETOOLONG;
}

ssize_t cv_guest_peek_str(const struct cv_guest *g, uint64_t addr, char *buf, size_t len) {
    ssize_t r;
    if (cv_memo_get(g->memo, CV_MEMO_STR, addr, NULL, buf, len, &r, NULL)) return r;
    r = peek_str(g, addr, buf, len);
    cv_memo_put(g->memo, CV_MEMO_STR, addr, NULL, buf, len, r, -1);
    return r;
}

int cv_guest_peek(const struct cv_guest *g, uint64_t addr, void *buf, size_t len) {
    ssize_t r;
    if (cv_memo_get(g->memo, CV_MEMO_MEM, addr, NULL, buf, len, &r, NULL)) return (int)r;
    struct iovec local = {buf, len};
    struct iovec remote = {(void *)(uintptr_t)addr, len};
    ssize_t n = process_vm_readv(g->tid, &local, 1, &remote, 1, 0);
    r = n == (ssize_t)len ? 0 : -EFAULT;
    cv_memo_put(g->memo, CV_MEMO_MEM, addr, NULL, buf, len, r, -1);
    return (int)r;
}

void cv_guest_memo_begin(struct cv_guest *g) {
    if (!g->memo) g->memo = cv_memo_new();
}

void cv_guest_memo_end(struct cv_guest *g) {
    cv_memo_free(g->memo);
    g->memo = NULL;
}

int cv_guest_path(struct cv_guest *g, uint64_t addr, char *buf, size_t len) {
    ssize_t r = cv_guest_peek_str(g, addr, buf, len);
    if (!checked(g)) return -ESRCH;
    return r < 0 ? (int)r : 0;
}

int cv_guest_path_owed(struct cv_guest *g, uint64_t addr, char *buf, size_t len) {
    ssize_t r = cv_guest_peek_str(g, addr, buf, len);
    g->owed = 1;
    return r < 0 ? (int)r : 0;
}

int cv_guest_read(struct cv_guest *g, uint64_t addr, void *buf, size_t len) {
    int r = cv_guest_peek(g, addr, buf, len);
    if (!checked(g)) return -ESRCH;
    return r;
}

int cv_guest_write(struct cv_guest *g, uint64_t addr, const void *buf, size_t len) {
    /* Checked first: a tid that died is reused only after the pid counter wrapped around, not in
     * the microsecond between the check and the write. */
    if (!checked(g)) return -ESRCH;
    cv_memo_forget(g->memo, addr, len, -1);
    struct iovec local = {(void *)buf, len};
    struct iovec remote = {(void *)(uintptr_t)addr, len};
    ssize_t n = process_vm_writev(g->tid, &local, 1, &remote, 1, 0);
    return n == (ssize_t)len ? 0 : -EFAULT;
}

static int fetch_fd(struct cv_guest *g, int gfd) {
    /* A thread pidfd reaches the thread's own fd table (threads made without CLONE_FILES). */
    cv_autoclose int pidfd = (int)syscall(__NR_pidfd_open, g->tid, PIDFD_THREAD);
    if (pidfd < 0) pidfd = (int)syscall(__NR_pidfd_open, cv_guest_tgid(g), 0);
    if (pidfd < 0) return -ESRCH;
    if (!checked(g)) return -ESRCH; /* the pidfd may name a process that took the tid */
    int fd = (int)syscall(__NR_pidfd_getfd, pidfd, gfd, 0);
    return fd < 0 ? -errno : fd;
}

int cv_guest_fd(struct cv_guest *g, int gfd) {
    if (gfd < 0) return -EBADF;
    ssize_t r;
    int fd = -1;
    if (cv_memo_get(g->memo, CV_MEMO_FD, (uint64_t)gfd, NULL, NULL, 0, &r, &fd)) return r < 0 ? (int)r : fd;
    fd = fetch_fd(g, gfd);
    cv_memo_put(g->memo, CV_MEMO_FD, (uint64_t)gfd, NULL, NULL, 0, fd, fd);
    return fd;
}

ssize_t cv_guest_link(struct cv_guest *g, const char *what, char *buf, size_t len) {
    ssize_t n;
    if (cv_memo_get(g->memo, CV_MEMO_LINK, 0, what, buf, len, &n, NULL)) return n;
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)g->tid, what);
    n = cv_readlink(path, buf, len);
    if (!checked(g)) return -ESRCH;
    cv_memo_put(g->memo, CV_MEMO_LINK, 0, what, buf, len, n, -1);
    return n;
}

int cv_guest_open(struct cv_guest *g, const char *what, int flags) {
    /* Only a name is kept (O_PATH): an open file's offset or data would be shared. */
    ssize_t r;
    int kept = -1, named = (flags & O_PATH) != 0;
    if (named && cv_memo_get(g->memo, CV_MEMO_OPEN, (uint64_t)flags, what, NULL, 0, &r, &kept))
        return r < 0 ? (int)r : kept;
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)g->tid, what);
    int fd = open(path, flags | O_CLOEXEC);
    int e = errno;
    if (!checked(g)) {
        if (fd >= 0) close(fd);
        return -ESRCH;
    }
    if (named) cv_memo_put(g->memo, CV_MEMO_OPEN, (uint64_t)flags, what, NULL, 0, fd < 0 ? -e : fd, fd);
    return fd < 0 ? -e : fd;
}

int cv_guest_addfd(struct cv_guest *g, int fd, int cloexec, int send) {
    struct seccomp_notif_addfd add = {
        .id = g->id,
        .flags = send ? SECCOMP_ADDFD_FLAG_SEND : 0,
        .srcfd = (uint32_t)fd,
        .newfd_flags = cloexec ? O_CLOEXEC : 0,
    };
    int r = ioctl(g->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
    if (r < 0) return errno == ENOENT ? -ESRCH : -errno;
    cv_memo_forget(g->memo, 0, 0, r);
    return r;
}

/* fn(arg, fd, its stat) for each of the guest's fds, through /proc/<tid>/fd, one stat each, no fd
 * fetched, until fn says stop (nonzero). 0 or -errno. */
static int each_fd(struct cv_guest *g, int (*fn)(void *arg, int fd, const struct stat *st), void *arg) {
    /* The directory fd stays the task's even if the tid is reused, so one check covers the scan. */
    int dfd = cv_guest_open(g, "fd", O_RDONLY | O_DIRECTORY);
    if (dfd < 0) return dfd;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -ENOMEM;
    }
    struct dirent *de;
    int stop = 0;
    while (!stop && (de = readdir(d))) {
        char *end;
        long fd = strtol(de->d_name, &end, 10);
        struct stat st;
        if (*end || end == de->d_name || fd < 0 || fd > INT_MAX) continue;
        if (fstatat(dirfd(d), de->d_name, &st, 0) == 0) stop = fn(arg, (int)fd, &st);
    }
    closedir(d);
    return 0;
}

struct fds_of {
    dev_t dev;
    ino_t ino;
    int *out, n, max;
};

static int fd_of(void *arg, int fd, const struct stat *st) {
    struct fds_of *a = arg;
    if (st->st_dev == a->dev && st->st_ino == a->ino) a->out[a->n++] = fd;
    return a->n == a->max;
}

int cv_guest_fds_of(struct cv_guest *g, dev_t dev, ino_t ino, int *out, int max) {
    struct fds_of a = {dev, ino, out, 0, max};
    int e = max > 0 ? each_fd(g, fd_of, &a) : 0;
    return e < 0 ? e : a.n;
}

struct file_fds {
    struct cv_guest_file *out;
    int n, max;
};

static int file_fd(void *arg, int fd, const struct stat *st) {
    struct file_fds *a = arg;
    if (S_ISREG(st->st_mode)) a->out[a->n++] = (struct cv_guest_file){fd, st->st_dev, st->st_ino};
    return a->n == a->max;
}

int cv_guest_file_fds(struct cv_guest *g, struct cv_guest_file *out, int max) {
    struct file_fds a = {out, 0, max};
    int e = max > 0 ? each_fd(g, file_fd, &a) : 0;
    return e < 0 ? e : a.n;
}

int cv_guest_setfd(struct cv_guest *g, int fd, int gfd, int cloexec) {
    struct seccomp_notif_addfd add = {
        .id = g->id,
        .flags = SECCOMP_ADDFD_FLAG_SETFD,
        .srcfd = (uint32_t)fd,
        .newfd = (uint32_t)gfd,
        .newfd_flags = cloexec ? O_CLOEXEC : 0,
    };
    cv_memo_forget(g->memo, 0, 0, gfd);
    int r = ioctl(g->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
    if (r < 0) return errno == ENOENT ? -ESRCH : -errno;
    return 0;
}

int cv_task_pin(pid_t pid, int (*member)(pid_t pid, void *arg), void *arg) {
    int pidfd = (int)syscall(__NR_pidfd_open, pid, 0);
    if (pidfd < 0) return -ENOENT;
    /* Asked after the pin: if the process is still alive afterwards, the answer was about it. */
    if ((member && !member(pid, arg)) || !cv_task_alive(pidfd)) {
        close(pidfd);
        return -ENOENT;
    }
    return pidfd;
}

int cv_task_alive(int pidfd) {
    return syscall(__NR_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
}

int cv_task_fd(int pidfd, int gfd) {
    int fd = (int)syscall(__NR_pidfd_getfd, pidfd, gfd, 0);
    return fd < 0 ? -errno : fd;
}
