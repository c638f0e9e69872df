/* The guest-access module: the only code that reads a guest's memory, fetches its fds or
 * reads /proc/<tid>/... for a notification. Each answer is taken once, and every task
 * resource opened for it (a pidfd, /proc/<tid>/...) is followed by a check that the
 * notification is still pending (SECCOMP_IOCTL_NOTIF_ID_VALID, the rule of the kernel's
 * samples/seccomp/user-trap.c): the thread is then alive and blocked in its call, so the tid
 * was not reused and what was read or fetched is that thread's. Callers decide on the copy
 * they got and act with that copy, never by looking the same thing up again. */
#ifndef CV_GUEST_H
#define CV_GUEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cv_guest_memo;

/* The thread a notification came from. */
struct cv_guest {
    int listener;
    uint64_t id;  /* the notification */
    pid_t tid;
    pid_t tgid;   /* these three: read once from /proc/<tid>/status (0 until then) */
    int threads;
    mode_t umask;
    int owed;     /* memory was read whose check is still to come (cv_guest_path_owed) */
    struct cv_guest_memo *memo; /* cv_guest_memo_begin's, or NULL */
};

/* A guest without a notification: a process (the unit tests) that plays its own guest. */
#define CV_GUEST_UNNOTIFIED (-1)

static inline void cv_guest_init(struct cv_guest *g, int listener, uint64_t id, pid_t tid) {
    *g = (struct cv_guest){.listener = listener, .id = id, .tid = tid};
}

/* From here to cv_guest_memo_end every answer about this notification's guest (its memory,
 * fds, /proc links) is kept, and asking again gives the first answer: two readers of one call
 * (an embedder's hook, then the handler) see one copy, whatever the guest changes between.
 * A write into the guest or a change of its fd table forgets what it made stale. */
void cv_guest_memo_begin(struct cv_guest *g);
void cv_guest_memo_end(struct cv_guest *g);

/* The notification is still pending (its thread is alive and still waits). */
int cv_guest_valid(const struct cv_guest *g);
pid_t cv_guest_tgid(struct cv_guest *g);
mode_t cv_guest_umask(struct cv_guest *g);
/* The caller's fd table cannot change before the reply: its process has one thread, and no
 * other process shares the table (the filter refuses CLONE_FILES without CLONE_THREAD). An fd
 * the supervisor looked at is then the one the kernel uses if the call is continued. Not checked
 * on its own: it counts once a checked call follows (cv_guest_fd, cv_guest_link) before acting. */
int cv_guest_fds_stable(struct cv_guest *g);

/* A NUL-terminated string at addr (a path): 0, or -EFAULT, -ENAMETOOLONG, -ESRCH. */
int cv_guest_path(struct cv_guest *g, uint64_t addr, char *buf, size_t len);
/* The same, with the check owed: the next checked call pays it (one check covers every access
 * before it), or cv_guest_settle. For a path handed straight to cv_vresolve, which settles
 * before acting on it: a path relative to a guest fd then costs one check, not two. */
int cv_guest_path_owed(struct cv_guest *g, uint64_t addr, char *buf, size_t len);
/* Pay an owed check: 0, or -ESRCH when the notification is gone (drop what was read). */
int cv_guest_settle(struct cv_guest *g);
/* Exactly len bytes at addr: 0 or -EFAULT, -ESRCH. */
int cv_guest_read(struct cv_guest *g, uint64_t addr, void *buf, size_t len);
/* The same without the validity check, for a series of reads (argv, envp): the caller checks
 * cv_guest_valid after the last one, before acting on any of it. */
int cv_guest_peek(const struct cv_guest *g, uint64_t addr, void *buf, size_t len);
ssize_t cv_guest_peek_str(const struct cv_guest *g, uint64_t addr, char *buf, size_t len);
/* Write a result into the guest's buffer: 0 or -EFAULT, -ESRCH. */
int cv_guest_write(struct cv_guest *g, uint64_t addr, const void *buf, size_t len);

/* A copy of the guest's fd gfd (pidfd_getfd): the same open file, to decide on and act with.
 * -EBADF when the guest has no such fd, -ESRCH when it is gone. */
int cv_guest_fd(struct cv_guest *g, int gfd);
/* readlink of /proc/<tid>/<what> ("cwd", "fd/3"): its length, or -errno. */
ssize_t cv_guest_link(struct cv_guest *g, const char *what, char *buf, size_t len);
/* open of /proc/<tid>/<what>: an fd, or -errno. */
int cv_guest_open(struct cv_guest *g, const char *what, int flags);
/* Install fd in the guest (SECCOMP_IOCTL_NOTIF_ADDFD; with send, as the reply): the guest's fd
 * number, or -errno (-ESRCH when the guest is gone). fd stays the caller's. */
int cv_guest_addfd(struct cv_guest *g, int fd, int cloexec, int send);
/* The guest's fd numbers whose file is the inode (dev, ino), up to max of them into out: how
 * many, or -errno. Looked at through /proc/<tid>/fd, one stat each, no fd fetched. */
int cv_guest_fds_of(struct cv_guest *g, dev_t dev, ino_t ino, int *out, int max);
/* The guest's fds of regular files, with their inodes, up to max: how many, or -errno. */
struct cv_guest_file {
    int fd;
    dev_t dev;
    ino_t ino;
};
int cv_guest_file_fds(struct cv_guest *g, struct cv_guest_file *out, int max);
/* Our fd put at the guest's number gfd, replacing the file there (as dup2 would). 0 or -errno. */
int cv_guest_setfd(struct cv_guest *g, int fd, int gfd, int cloexec);

/* Another process of the sandbox, by pid: a pidfd that pins it, once member() (if not NULL)
 * said yes after the pin; -ENOENT when it is gone or member() said no. */
int cv_task_pin(pid_t pid, int (*member)(pid_t pid, void *arg), void *arg);
/* The pinned process is still alive (so its pid still names it). */
int cv_task_alive(int pidfd);
/* A copy of fd gfd of a pinned process. */
int cv_task_fd(int pidfd, int gfd);

#endif
