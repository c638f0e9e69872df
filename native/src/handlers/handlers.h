/* One notification being answered, and the handlers (one syscall family per file). */
#ifndef CV_HANDLERS_H
#define CV_HANDLERS_H

#include <linux/seccomp.h>
#include <stdint.h>
#include <sys/types.h>

#include "guest/guest.h"
#include "overlay/vfs.h"
#include "supervisor/answers.h"
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
    struct cv_guest g;   /* the calling thread, reached only through guest/guest.h */
    struct cv_vctx ctx;  /* how the overlay resolves this guest's paths */
    /* An embedder's hook allowed the call on the supervisor's copy of its arguments: a handler
     * that can act with that copy does, instead of a CONTINUE that lets the kernel read them
     * again (the guest may have changed them since). */
    int decided;
    /* The handler said which name it makes (cv_notif_naming), or that it makes none: the answer
     * table's records of missing names need not all go (handlers/dispatch.c). */
    int names_told;
    /* The shim's ask for opens ahead of its walk (common/prefetch_proto.h), or 0. */
    uint64_t prefetch_ask;
};

/* text resolved to ENOENT: record that in the answer table. at: the missing name's own
 * virtual path when the resolution reached the directory it would be in (NULL: a name on the
 * way is missing). Recorded when text is that path; else only an absolute text whose first
 * missing name lies in an existing directory reached without a symlink or "..", so that only a
 * name made there (or a tree brought in) can change the answer. And the missing name's
 * directory counts a probe (cv_notif_probed), by `at` or an absolute text: never by a guest fd
 * or cwd fetched again. g: the table's generations before the resolution. */
void cv_notif_missing(struct cv_notif *n, struct cv_ans_gens g, const char *text, const char *at);

/* A name is about to be made or removed at vpath (NULL: none will be), said before the change
 * (supervisor/answers.h, cv_answers_named). */
void cv_notif_naming(struct cv_notif *n, const char *vpath);

/* Fill n for a notification just received. */
void cv_notif_init(struct cv_notif *n, struct cv_run *r, const struct seccomp_notif *req);

static inline struct cv_reply cv_err(int e) { return (struct cv_reply){CV_REPLY_ERRNO, e, 0}; }
static inline struct cv_reply cv_val(int64_t v) { return (struct cv_reply){CV_REPLY_VALUE, 0, v}; }
static inline struct cv_reply cv_continue(void) { return (struct cv_reply){CV_REPLY_CONTINUE, 0, 0}; }

/* Install fd in the guest (ADDFD), close the supervisor's copy, and reply with its number: the
 * guest's close() is then the last one. Consumes fd. */
struct cv_reply cv_notif_inject(struct cv_notif *n, int fd, int cloexec);
/* An fd for the guest, as the flags of its open say: close-on-exec, and the real O_PATH file
 * (fd opened O_PATH) through a socket when the shim asked for it (common/opath_proto.h). */
struct cv_reply cv_notif_give(struct cv_notif *n, int fd, int flags);
/* v was just looked up for a stat (for an xattr: xattrs): when its directory's view is the
 * host's and the guest walks it, every entry's lstat goes into the answer table for the shim
 * (statpub.c). tree_gen: cv_answers_tree_gen, read before v was resolved. */
struct cv_vnode;
void cv_notif_publish_dir(struct cv_notif *n, const struct cv_vnode *v, uint64_t tree_gen, int xattrs);
/* v, a directory whose own view is the host's, is being opened for a listing: its listing and
 * its subdirectories' lstat go into the table, and the shim serves the guest's getdents64. */
void cv_notif_publish_listing(struct cv_notif *n, const struct cv_vnode *v, uint64_t tree_gen);
/* The name at the absolute path `missing` was looked up and found missing: at the second such
 * look-up in its directory within a short window (a compiler's include path, probed for every
 * header), the nearest of that directory and the ones above it that exists is published as
 * opened for a listing when it is a small one whose own view is the host's, and the shim answers
 * the names it does not hold. */
void cv_notif_probed(struct cv_notif *n, const char *missing);
/* After a read-only open of v the kernel makes: the guest's walk's next objects, opened and
 * placed where its shim's ask (at ask, or 0) says (handlers/prefetch.c). */
void cv_notif_prefetch(struct cv_notif *n, const struct cv_vnode *v, uint64_t ask, uint64_t tree_gen);
/* The walk ahead's thread stops (the run's end, before its table goes). */
void cv_prefetch_stop(struct cv_run *r);
/* The guest's read-only fds of files copied up this run become opens of their copies (asked by
 * its shim, CV_FOLLOW_MAGIC): all of them with a stable fd table, else only gfd (if >= 0). */
void cv_notif_follow_copies(struct cv_notif *n, int gfd);
/* cv_ov_copy_up, and then the caller's own read-only fds of the old file follow the copy. */
int cv_notif_copy_up(struct cv_notif *n, const struct cv_vnode *v, int with_data);
/* Before an upper file changes: if it stands for the host file it was linked from
 * (overlay/alias.h), it stops, and the caller's read-only fds of that file follow to the copy. */
void cv_notif_settle_alias(struct cv_notif *n, const struct cv_vnode *v);

struct cv_reply cv_dispatch(struct cv_notif *n);
/* The run's embedder hooks syscall nr (supervisor/hook.c). */
int cv_hook_wants(const struct cv_run *r, int nr);
/* A hooked call: the embedder's answer first, then what the filter's row says. CV_REPLY_DONE
 * when the call waits for the answer (parked; cv_hook_replies answers it). */
struct cv_reply cv_hook_answer(struct cv_notif *n);
/* The hook socket may have answers: poll it for POLLIN. */
int cv_hook_readable(const struct cv_run *r);
/* Read the answers there are and answer their parked calls (all of them, EPERM, when the hook
 * is gone). */
void cv_hook_replies(struct cv_run *r);
/* The run is over: forget the parked calls (their guests are gone). */
void cv_hook_drop_parked(struct cv_run *r);
/* Answer notification id (the receiver's reply, for a call answered later). */
void cv_receiver_reply(struct cv_run *r, uint64_t id, struct cv_reply rep);

typedef struct cv_reply (*cv_handler_fn)(struct cv_notif *n);
/* The function of a handler family (enum cv_handler in filter/table.h), or NULL. */
cv_handler_fn cv_handler_of(int handler);

/* Open path for the guest as open(2) would (handlers/open.c): also for a path of our own, such
 * as the target of a /proc magic link, read once. */
struct cv_reply cv_open_path(struct cv_notif *n, int dirfd, const char *path, int flags, mode_t mode);

/* The guest's /proc (handlers/proc.c). A /proc/<pid> path the guest may see at all (its own
 * processes and the init): 1 or 0. */
int cv_proc_visible(struct cv_notif *n, pid_t pid);
/* May it use this /proc path (write: for writing)? 0, -ENOENT (no such process for it),
 * -EACCES (the init's private parts), -EROFS (host-wide files written). */
int cv_proc_access(struct cv_notif *n, const struct cv_resolved *res, int write);
/* A pidfd pinning pid for the answer (-1: none needed, the guest's own process; -ENOENT: gone
 * or not visible). */
int cv_proc_pin(struct cv_notif *n, pid_t pid);
/* open(2) of a /proc path. */
struct cv_reply cv_proc_open(struct cv_notif *n, const struct cv_resolved *res, int flags, mode_t mode);

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
struct cv_reply cv_h_ioctl(struct cv_notif *n);
struct cv_reply cv_h_lock(struct cv_notif *n);

/* The guest process's remembered working directory (a virtual path the kernel's cwd cannot
 * hold), inherited by children forked after it was set: 1 and out set, or 0. */
int cv_cwd_override(struct cv_run *r, struct cv_guest *g, struct cv_lpath *out,
                    int *fd /* the directory (O_PATH), or NULL */);

/* A process's parent and start time (/proc/<pid>/stat). 0 or -1. */
int cv_proc_stat(pid_t pid, pid_t *ppid, unsigned long long *start);
/* The virtual path of the upper executable process pid runs (its /proc/<pid>/exe), or NULL. */
const char *cv_exe_of(struct cv_run *r, pid_t pid);

/* Run fn(arg, ending) on a thread of its own, which answers the notification with what fn
 * returns (a value, or -errno): for calls that may block. ending becomes readable when the run
 * ends; fn must then give up. free_arg(arg) runs after (also when the thread cannot start). */
struct cv_reply cv_async(struct cv_notif *n, long (*fn)(void *arg, int ending), void *arg,
                         void (*free_arg)(void *arg));

/* Open the FIFO dir/name on a thread of its own (a blocking open waits for the other end);
 * the thread answers the notification. */
/* pty.c: ptys made in the sandbox (the ptmx node opened here, slaves through their pins). */
int cv_pty_is_master(const struct stat *st);
int cv_pty_is_slave(const struct stat *st);
int cv_pty_is_ours(struct cv_run *r, const struct stat *st);
struct cv_reply cv_pty_reopen_master(struct cv_notif *n, const char *real, int flags);
struct cv_reply cv_pty_open_master(struct cv_notif *n, int dir, const char *name, int flags);
struct cv_reply cv_pty_open_slave(struct cv_notif *n, const struct stat *st, const char *vpath, int flags);
struct cv_reply cv_pty_peer(struct cv_notif *n, int master, unsigned long arg);

struct cv_reply cv_fifo_open_async(struct cv_notif *n, int dir, const char *name, int flags);
/* At the end of a run: let every FIFO open still waiting return. */
void cv_fifo_release_all(struct cv_run *r);

/* readlink of the relay's magic path: 1 and *out set when handled. */
int cv_relay_request(struct cv_notif *n, const char *path, uint64_t buf, size_t size, struct cv_reply *out);


/* The guest's hostname: the sandbox's name, or "cvisor". */
const char *cv_run_hostname(const struct cv_run *r);

/* A device the guest may write: null, zero, full, tty, ptmx, or its own terminal. */
int cv_writable_device(const struct cv_run *r, dev_t rdev);
/* A device the guest may open at all: those, random and urandom. Other host devices (disks,
 * other users' terminals, input devices, the kernel log) stay out of its reach. */
int cv_readable_device(const struct cv_run *r, dev_t rdev);
/* fd (the supervisor's copy of a guest's) is a host object: a file or directory of the host or
 * of a snapshot layer, or a device the guest may not write. 0 for the sandbox's own files,
 * pipes, sockets, memfds and other anonymous inodes, the guest's terminal. */
int cv_fd_of_host(const struct cv_run *r, int fd);
/* A device the guest may open (for writing, when write): the writable and readable ones above
 * and the ptys the sandbox made; never a block device. */
int cv_device_allowed(struct cv_run *r, const struct stat *st, int write);

#endif
