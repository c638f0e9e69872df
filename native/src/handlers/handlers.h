/* One notification being answered, and the handlers (one syscall family per file). */
#ifndef CV_HANDLERS_H
#define CV_HANDLERS_H

#include <linux/seccomp.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/run.h"

enum cv_reply_kind {
    CV_REPLY_ERRNO = 1, /* fail with err */
    CV_REPLY_VALUE,     /* succeed with val */
    CV_REPLY_CONTINUE,  /* let the kernel run the call as issued */
    CV_REPLY_DONE,      /* the handler answers itself, later (a FIFO open on its own thread) */
};

struct cv_reply {
    int kind;
    int err;
    int64_t val;
};

struct cv_notif {
    struct cv_run *run;
    const struct seccomp_notif *req;
    int listener;
    pid_t tid;
    pid_t tgid; /* 0 until cv_notif_tgid() */
};

static inline struct cv_reply cv_err(int e) { return (struct cv_reply){CV_REPLY_ERRNO, e, 0}; }
static inline struct cv_reply cv_val(int64_t v) { return (struct cv_reply){CV_REPLY_VALUE, 0, v}; }
static inline struct cv_reply cv_continue(void) { return (struct cv_reply){CV_REPLY_CONTINUE, 0, 0}; }

/* The notification is still pending (the thread did not die, its tid not reused). */
int cv_notif_valid(const struct cv_notif *n);
pid_t cv_notif_tgid(struct cv_notif *n);
/* Read a path argument; then checks validity. 0 or -errno. */
int cv_notif_path(struct cv_notif *n, uint64_t addr, char *buf, size_t len);
/* Install fd in the guest (ADDFD), close the supervisor's copy, and reply with its number: the
 * guest's close() is then the last one. Consumes fd. */
struct cv_reply cv_notif_inject(struct cv_notif *n, int fd, int cloexec);
/* A duplicate of the guest's fd (shares the open file description). -errno on failure. */
int cv_notif_dup_fd(struct cv_notif *n, int guest_fd);

struct cv_reply cv_dispatch(struct cv_notif *n);

struct cv_reply cv_h_open(struct cv_notif *n);
struct cv_reply cv_h_exec(struct cv_notif *n);
struct cv_reply cv_h_mutate(struct cv_notif *n);
struct cv_reply cv_h_meta(struct cv_notif *n);
struct cv_reply cv_h_sock(struct cv_notif *n);
struct cv_reply cv_h_signal(struct cv_notif *n);
struct cv_reply cv_h_identity(struct cv_notif *n);
struct cv_reply cv_h_stat(struct cv_notif *n);
struct cv_reply cv_h_dirent(struct cv_notif *n);
struct cv_reply cv_h_cwd(struct cv_notif *n);

/* The guest process's remembered working directory (a virtual path the kernel's cwd cannot
 * hold), inherited by children forked after it was set: 1 and out filled, or 0. */
int cv_cwd_override(struct cv_notif *n, char *out, size_t len, int *fd /* the directory (O_PATH), or NULL */);

/* A process's parent and start time (/proc/<pid>/stat). 0 or -1. */
int cv_proc_stat(pid_t pid, pid_t *ppid, unsigned long long *start);
/* The virtual path of the upper executable process pid runs (its /proc/<pid>/exe), or NULL. */
const char *cv_exe_of(struct cv_run *r, pid_t pid);

/* Open the FIFO dir/name on a thread of its own (a blocking open waits for the other end);
 * the thread answers the notification. */
struct cv_reply cv_fifo_open_async(struct cv_notif *n, int dir, const char *name, int flags);
/* At the end of a run: let every FIFO open still waiting return. */
void cv_fifo_release_all(struct cv_run *r);

/* readlink of the relay's magic path: 1 and *out set when handled. */
int cv_relay_request(struct cv_notif *n, const char *path, uint64_t buf, size_t size, struct cv_reply *out);

/* The guest's umask (new files and directories are made by the supervisor). */
mode_t cv_notif_umask(struct cv_notif *n);
/* Write a result struct into the guest. 0 or -EFAULT. */
int cv_notif_write(struct cv_notif *n, uint64_t addr, const void *buf, size_t len);

/* The guest's hostname: the sandbox's name, or "cvisor". */
const char *cv_run_hostname(const struct cv_run *r);

/* A device the guest may write: null, zero, full, tty, ptmx, or its own terminal. */
int cv_writable_device(const struct cv_run *r, dev_t rdev);

#endif
