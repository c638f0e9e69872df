/* The run: one sandboxed command, its threads and its result. Internal to
 * libcvisor; the public face is include/cvisor.h. */
#ifndef CV_RUN_H
#define CV_RUN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "cvisor.h"
#include "netrules.h"

#define CV_MAX_NR 512

/* An exec redirected to the relay: the plan it will ask for, and the bytes of a
 * vfork parent's memory the path rewrite changed. */
struct cv_relay {
    pid_t tgid;
    char *plan;
    size_t len;
    int fd;                /* an upper executable's copy to inject into the relay, or -1 */
    char *exe;             /* ... and its virtual path */
    pid_t restore_pid;     /* a parent sharing the memory (vfork), or 0 */
    uint64_t restore_addr;
    unsigned char saved[24];  /* the bytes the rewrite replaced */
    char repl[24];            /* what it wrote ("/dev/fd/K") */
    size_t saved_len;
};

struct cv_fifo_wait {
    int dir;
    char name[256];
};

/* A call the supervisor refused (the run report's "denials"). */
struct cv_denial {
    int nr;
    unsigned long count;
    char *target; /* the path, address or fd it named */
    char *why;
    pid_t pid;     /* the first process refused it (0: unknown), and its name */
    char comm[16];
};

/* What /proc/<pid>/exe reads for a process the relay started from a memfd copy. */
struct cv_exe {
    pid_t tgid;
    unsigned long long start;
    char *vpath;
};

/* A process whose working directory exists only in the upper layer, where the
 * kernel cannot follow the guest's own path: the supervisor remembers it. */
struct cv_cwd {
    pid_t tgid;
    unsigned long long start; /* the process's start time (pid reuse) */
    unsigned long long since; /* boot-time ticks when set: children forked later inherit */
    char *vpath;              /* where it was at the run's directory rename `renames` */
    unsigned long renames;
    int fd;                   /* the directory itself (O_PATH): still there if it is removed */
};

/* A host or layer file copied up: the inode an fd opened before holds, and its copy. */
struct cv_copied {
    dev_t dev, udev;
    ino_t ino, uino;
    char *vpath; /* where the copy was made */
};

/* A directory a rename brought up from the host or a read-only layer (overlay/moved.h). */
struct cv_moved {
    char *from; /* its virtual path before */
    int up;     /* its copy in the upper (O_PATH), wherever it is now */
};

struct cv_alias; /* overlay/alias.c */

struct cv_pty_pin; /* handlers/pty.c */

struct cv_unix_name; /* handlers/sock.c */

#define CV_MAX_CGROUPS 8
#define CV_MAX_PIDS_RESV 64

struct cv_run {
    /* configuration, fixed once started */
    char *helper;
    char **argv;
    size_t argc, argv_cap;
    char **envp;
    size_t envc, env_cap;
    char **hide;              /* absolute, symlink-free paths the guest must not read */
    size_t hide_common_len;   /* hide[0]'s first hide_common_len bytes: a directory holding all */
    uint64_t hide_round;      /* hide.c: this run's check of the cached directories */
    size_t nhide, hide_cap;
    char *cwd;
    char *hostname;
    char *upper;              /* realpath of the upper layer, or NULL: read-only */
    int upper_fd, work_fd;    /* O_DIRECTORY fds of upper and work (-1 without, or not made yet) */
    int upper_lazy;           /* upper_want and work_want are made on the first change */
    char *upper_want, *work_want;
    char *lower[CV_MAX_LOWERS]; /* realpaths of the read-only layers, top first */
    int lower_fd[CV_MAX_LOWERS];/* their O_DIRECTORY fds */
    int nlower;
    struct cv_lcache *lcache;   /* their directory listings (overlay/lowers.c) */
    struct cv_wmemo *wmemo;     /* directories the walk found in them (overlay/walkmemo.c) */
    struct cv_answers *answers; /* answers the guests' shim serves again (supervisor/answers.c) */
    int walk_level;             /* what the last stat-driven publication had to hold (handlers/statpub.c) */
    uint64_t walk_at;           /* and when (CLOCK_MONOTONIC ns) */
    struct cv_misses *misses;   /* the guest's misses by directory (handlers/statpub.c), made at the first */
    struct cv_prefetcher *prefetcher; /* the walk ahead's thread (handlers/prefetch.c), made at the first */
    struct cv_copied *copied;   /* files copied up this run, for fds opened before (handlers/notif.c) */
    size_t ncopied, copied_cap;
    uint32_t *copied_index;     /* open addressing by inode: 1 + an index into copied, 0 empty */
    uint64_t copies;            /* how many: the answer table's count */
    int stdio[3];
    dev_t stdio_rdev[3]; /* terminal devices among the stdio fds (0: none) */
    int network;              /* enum cv_network */
    struct cv_net_rule *net_rules; /* cv_run_add_net_rule; grants.c adds to them on the receiver thread */
    size_t nnet_rules, net_rules_cap;
    int divert_fd;            /* where each diverted connect is announced, or -1 */
    int grant_fd;             /* destinations granted while the run goes (grants.c), or -1 */
    char grant_buf[512];      /* a line: "D " + a name of up to 253 bytes + a tid, or an "A" grant */
    size_t grant_len, ngranted;
    int listen;               /* enum cv_listen */
    int ctty;                 /* the guest's session takes its stdin as controlling terminal */
    char *cgroup_procs[CV_MAX_CGROUPS]; /* cgroup.procs files the init joins (limits.c) */
    int ncgroup;
    int oom_efd, oom_ctl;     /* cgroup v1 OOM eventfd and its memory.oom_control, or -1 */
    uint64_t watch_mem;       /* limits the supervisor holds itself (limits.c), 0: none */
    uint32_t watch_pids, watch_cpu_milli;
    cv_run_limits limits;     /* what the watch saw: peaks, the limits hit */
    int cpu_paused;           /* the tree is stopped: ahead of its CPU share */
    struct { uint32_t expect; struct timespec t; } pids_resv[CV_MAX_PIDS_RESV]; /* forks in flight */
    int npids_resv;
    struct timespec watch_t;  /* the last sample */
    uint64_t disk_limit;      /* bytes the upper layer may hold (limits.c), 0: none */
    char *disk_path;          /* the upper layer's path, walked by the disk thread */
    pthread_t disk_thread;
    int disk_started;
    atomic_int disk_over;     /* the disk thread saw the layer over its limit */
    _Atomic uint64_t disk_peak;
    char **allow_unix;        /* host unix sockets the guest may reach (real paths) */
    size_t nallow_unix, allow_unix_cap;
    uint32_t timeout_ms;
    int hook_fd;              /* the embedder's hook socket (supervisor/hook.c), or -1 */
    uint64_t hooked[CV_MAX_NR / 64]; /* the syscalls it watches */
    int trace_fd;             /* where trace lines go (supervisor/trace.c), or -1 */
    uint64_t traced[CV_MAX_NR / 64]; /* the syscalls traced */
    uint64_t hook_seq;        /* the last call described */
    int hook_dead;            /* it stopped answering: hooked calls fail closed */
    struct cv_hook_parked *hook_parked; /* calls waiting for its answer (supervisor/hook.c) */
    unsigned char hook_rbuf[24]; /* a reply read in part */
    size_t hook_rlen;
    int signals_scoped;       /* Landlock scopes signals here (the filter's kill family) */

    /* runtime */
    atomic_int refs;          /* the caller's and the receiver thread's */
    atomic_int started;
    atomic_int kill_requested;
    atomic_int finished;
    int fin_efd;              /* becomes readable when the run is over */
    int ending_efd;           /* becomes readable when the tree is being killed: calls still
                                 waiting on threads of their own give up (handlers/async.c) */
    int ctl_efd;              /* wakes the receiver: kill requested */
    int done_w;               /* closed when the run is over: the caller sees EOF */
    int note_fd;              /* ... and end_note sent on it (cv_run_set_end_note), or -1 */
    uint64_t end_note;
    pid_t init_pid;
    int init_pidfd;
    int status_r, go_w;
    int listener;
    int spawned;              /* cv_run_start spawned the helper already */
    int spawn_err;            /* ... or failed to: cv_error, spawn_msg says why */
    char spawn_msg[200];
    struct timespec t0;
    cv_run_result result;
    struct cv_relay *relays;  /* exec plans waiting for their relay (handlers/exec.c) */
    size_t nrelay, relay_cap;
    pthread_mutex_t fifo_lock;    /* FIFOs being opened on threads of their own (handlers/fifo.c) */
    struct cv_fifo_wait *fifo_waits;
    size_t nfifo;
    struct cv_exe *exes;      /* processes running an upper executable (a memfd copy) */
    size_t nexe, exe_cap;
    struct cv_cwd *cwds;      /* working directories the kernel cannot hold (handlers/cwd.c) */
    size_t ncwd, cwd_cap;
    unsigned long dir_renames; /* directories this run renamed: a remembered cwd may have moved */
    struct cv_moved *moved;   /* directories brought up by a rename (overlay/moved.c) */
    size_t nmoved, moved_cap;
    struct cv_alias *aliases; /* upper copies standing for the host files they were linked from */
    size_t nalias, alias_cap;
    pthread_mutex_t state_lock;   /* makes the handler families' states below, on first use */
    struct cv_lock_state *locks;  /* POSIX locks' shadows (handlers/lock.c) */
    pthread_mutex_t deny_lock;    /* refused calls (supervisor/denials.c) */
    struct cv_denial *denials;
    size_t ndeny, deny_cap;
    pthread_mutex_t pty_lock;     /* ptys this run's guests made (handlers/pty.c) */
    struct cv_pty_pin *ptys;
    size_t nptys, pty_cap;
    pthread_mutex_t abstract_lock; /* abstract unix names this run's guests bound (handlers/sock.c) */
    char **abstract;
    size_t nabstract, abstract_cap;
    struct cv_unix_name *unames;  /* unix paths bound through /proc/self/fd (handlers/sock.c), same lock */
    size_t nunames, uname_cap;
    unsigned bind_turn;           /* the fd number the next such bind names its directory by */
    atomic_ulong counts[CV_MAX_NR];
    atomic_ulong total;
};

/* spawn.c: start cvisor-helper for this run on the long-lived spawner thread.
 * Fills init_pid, status_r, go_w. Returns 0 or a cv_error. */
int cv_spawn_helper(struct cv_run *r, char *msg, size_t msglen);

/* ruleset.c: a dup of the cached Landlock domain A ruleset, built if needed, or -errno
 * (msg filled); cv_ruleset_cached never builds (-1 when a build is needed). */
int cv_ruleset_for(const struct cv_run *r, char *msg, size_t msglen);
int cv_ruleset_cached(const struct cv_run *r);

/* receiver.c: the per-run thread. */
void *cv_receiver_main(void *arg);

/* run.c */
void cv_run_unref(struct cv_run *r);
/* limits.c: join the run's cgroups (before the go byte); 1 when its memory cgroup had an OOM. */
int cv_limits_join(struct cv_run *r, char *msg, size_t msglen);
int cv_limits_oom(struct cv_run *r);
void cv_limits_free(struct cv_run *r);
/* The supervisor's own limits: a sample every few ms while watching (1: over the memory limit),
 * and the count at each fork the filter notifies for them. */
int cv_limits_watching(const struct cv_run *r);
int cv_limits_tick(struct cv_run *r);
int cv_limits_counts(const struct cv_run *r, int nr);
/* The disk limit's thread: started once the guest may run, stopped (joined) at the end. */
void cv_limits_start(struct cv_run *r);
void cv_limits_stop(struct cv_run *r);
int cv_limits_disk_over(struct cv_run *r);
struct cv_notif;
struct cv_reply cv_limits_fork(struct cv_notif *n);
/* hook.c: what the run's filter row does with a call, on the notification's own registers
 * (for calls notified only for a hook or a limit: the row still applies). */
struct seccomp_data;
uint32_t cv_run_row_policy(const struct cv_run *r, const struct seccomp_data *d);
/* The run is over: finished, the done fd's EOF, the end note (cv_run_set_end_note). */
void cv_run_announce_end(struct cv_run *r);
void cv_run_fail(struct cv_run *r, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* hide.c: path canonicalized as Landlock sees it, from directories cached for the process and
 * checked once per round (one round per run). 0, -ENOENT (its parent does not exist), -errno. */
uint64_t cv_hide_round(void);
int cv_hide_canonical(const char *path, uint64_t round, char *out, size_t len);
/* The directory fds that cache holds (kept for the life of the process). */
size_t cv_hide_cached_fds(void);

/* handlers/lock.c: the shadows go with the run. */
void cv_locks_free(struct cv_run *r);
/* handlers/pty.c: so do the pins of the ptys the guests made. */
void cv_ptys_free(struct cv_run *r);
/* handlers/sock.c: the names of unix sockets bound in the sandbox. */
void cv_unames_free(struct cv_run *r);

/* run.c: one more inet rule (0, or CV_ERR_NOMEM). */
int cv_run_add_rule(struct cv_run *r, const struct cv_net_rule *rule);
/* grants.c: the lines the grant fd holds, applied and answered; -1 when it is closed or broken. */
int cv_grants_read(struct cv_run *r);

/* denials.c; nr CV_DENY_DNS: a name lookup the credential broker refused (target: the name).
 * tid: the calling thread (0: unknown); the first one's process is kept. */
#define CV_DENY_DNS (-2)
void cv_run_deny(struct cv_run *r, int nr, pid_t tid, const char *target, const char *why);
void cv_run_denials_free(struct cv_run *r);

/* tree.c: the sandbox's processes are the init's descendants. */
int cv_tree_is_member(const struct cv_run *r, pid_t pid); /* init excluded */
/* The processes whose parent is parent (threads' children included): up to max into out; the count. */
int cv_tree_children(pid_t parent, pid_t *out, int max);
/* The main guest process: the init's child started first (orphans the init adopts started
 * after it), or 0 when there is none. */
pid_t cv_tree_main(const struct cv_run *r);
int cv_tree_kill(const struct cv_run *r);                 /* SIGKILL every descendant of init */
struct cv_tree_usage {
    uint64_t rss_pages; /* resident pages, summed over the processes */
    uint64_t ticks;     /* CPU time, clock ticks */
    uint32_t tasks;     /* live threads, the init's included */
};
void cv_tree_usage(const struct cv_run *r, struct cv_tree_usage *u);
void cv_tree_pause(const struct cv_run *r, int stop);     /* SIGSTOP/SIGCONT the descendants */
/* Call fn for every member process (tgid) whose process group is pgrp (0: any). */
int cv_tree_each(const struct cv_run *r, pid_t pgrp, int (*fn)(pid_t pid, void *arg), void *arg);

double cv_ms_since(const struct timespec *t0);

#endif
