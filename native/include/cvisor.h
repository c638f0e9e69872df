/*
 * cvisor.h — the whole C ABI of libcvisor.so. src/core/native.ts is the only
 * module that binds it (koffi); keep the two in step.
 *
 * A run, in four steps:
 *
 *   cv_run *r = cv_run_new(helper_path);      // helper: path of cvisor-helper
 *   cv_run_add_arg(r, "ls"); cv_run_add_env(r, "PATH=/usr/bin");
 *   cv_run_set_stdio(r, 0, out_fd, 2);        // fds of this process, dup'd
 *   int done_fd; cv_run_start(r, &done_fd);   // returns at once
 *   ... poll done_fd: it reaches EOF when the run is over ...
 *   cv_run_result res; cv_run_get_result(r, &res);
 *   cv_run_free(r);                           // the caller closes done_fd
 *
 * Every function returning int returns 0 or a negative cv_error / -errno.
 * Strings passed in are copied; the caller keeps ownership.
 * Supervision and teardown happen on threads owned by the library. What blocks:
 * cv_run_start spawns the helper before returning when called from the process's
 * main thread (about half a millisecond); cv_run_wait_forwarding waits for the run;
 * cv_probe runs the helper's probe to its end.
 */
#ifndef CVISOR_H
#define CVISOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CV_ABI_VERSION 11

#define CV_API __attribute__((visibility("default")))

/* Errors of cvisor itself (never the guest's). Mirrored in src/core/errors.ts. */
enum cv_error {
    CV_OK = 0,
    CV_ERR_NOMEM = -1001,          /* out of memory */
    CV_ERR_INVALID = -1002,        /* bad argument (empty argv, bad fd, ...) */
    CV_ERR_STATE = -1003,          /* call not valid in the run's current state */
    CV_ERR_HELPER = -1004,         /* cvisor-helper missing or not executable */
    CV_ERR_SPAWN = -1005,          /* fork/exec of the helper failed */
    CV_ERR_SECCOMP = -1006,        /* seccomp user notification unavailable */
    CV_ERR_LANDLOCK = -1007,       /* Landlock unavailable or refused */
    CV_ERR_HANDSHAKE = -1008,      /* helper died before handing over the listener */
    CV_ERR_PIDFD = -1009,          /* pidfd_open / pidfd_getfd unavailable */
    CV_ERR_CWD = -1010,            /* working directory cannot be entered */
};

/* Network policy. */
enum cv_network {
    CV_NET_ALLOW = 0,  /* AF_INET/AF_INET6 allowed (listening: enum cv_listen) */
    CV_NET_DENY = 1,   /* AF_INET/AF_INET6 sockets fail with EACCES in BPF */
    CV_NET_LIST = 2,   /* inet destinations only where a cv_run_add_net_rule allows */
};

/* Where a guest may bind an inet port and listen (the default: loopback). */
enum cv_listen {
    CV_LISTEN_NONE = 0,     /* nowhere (EACCES) */
    CV_LISTEN_ANY = 1,      /* any address */
    CV_LISTEN_LOOPBACK = 2, /* 127.0.0.0/8 and ::1 (also as ::ffff:127.x.y.z) only */
};

/* How a run ended (cv_run_result.state). */
enum cv_run_state {
    CV_RUN_EXITED = 1,     /* guest exited: exit_code */
    CV_RUN_SIGNALED = 2,   /* guest killed by signal: signal */
    CV_RUN_EXEC_FAILED = 3,/* guest command could not be executed: exec_errno */
    CV_RUN_FAILED = 4,     /* cvisor failed before the guest ran: error, message */
};

typedef struct cv_run cv_run;

typedef struct cv_run_result {
    int32_t state;         /* enum cv_run_state */
    int32_t exit_code;     /* CV_RUN_EXITED: the guest's status, else -1 */
    int32_t signal;        /* CV_RUN_SIGNALED: the signal number, else 0 */
    int32_t timed_out;     /* 1 when the deadline killed the tree */
    int32_t killed;        /* 1 when cv_run_kill() killed the tree */
    int32_t exec_errno;    /* CV_RUN_EXEC_FAILED: errno of execvp (ENOENT, EACCES, ...) */
    int32_t error;         /* CV_RUN_FAILED: enum cv_error */
    int32_t denials;       /* distinct calls the supervisor refused (cv_run_denials_json) */
    double duration_ms;    /* from cv_run_start to the end of the tree */
    double user_ms;        /* rusage of the guest tree (children of the init) */
    double system_ms;
    int64_t max_rss_kb;
    uint64_t notifications;/* seccomp notifications handled for this run */
    char message[256];     /* CV_RUN_FAILED: one line saying what went wrong */
} cv_run_result;

/* Create a run description. helper_path: the cvisor-helper binary. NULL on ENOMEM. */
CV_API cv_run *cv_run_new(const char *helper_path);
CV_API int cv_run_add_arg(cv_run *r, const char *arg);          /* argv[0] is looked up in the guest PATH */
CV_API int cv_run_add_env(cv_run *r, const char *key_eq_value); /* the guest environment, exactly */
CV_API int cv_run_set_cwd(cv_run *r, const char *dir);          /* default: the caller's cwd */
/* An absolute path the guest must not read (credentials, the sandbox storage): left out
 * of the Landlock grant, with everything below it. Repeatable. */
CV_API int cv_run_add_hidden(cv_run *r, const char *path);
/* The same for several paths at once: len bytes of NUL-terminated paths, one after another. */
CV_API int cv_run_add_hidden_list(cv_run *r, const char *paths, size_t len);
/* Fds of the calling process given to the guest as 0, 1, 2 (-1: /dev/null). They are
 * dup'd into the guest at start; the caller may close its copies after cv_run_start. */
CV_API int cv_run_set_stdio(cv_run *r, int in_fd, int out_fd, int err_fd);
CV_API int cv_run_set_network(cv_run *r, int network /* enum cv_network */);
CV_API int cv_run_set_allow_listen(cv_run *r, int listen /* enum cv_listen */);
/* An inet destination a guest may connect and send to: an address (IPv4 or IPv6 text, a
 * v4-mapped one is its IPv4 address), the leading bits that must match (0..32 or 0..128), and a
 * port range (0..65535, lo <= hi). CV_NET_LIST: the only destinations allowed; CV_NET_ALLOW:
 * what is allowed in the cloud metadata range (169.254.0.0/16, fd00:ec2::254), refused by
 * default. Repeatable. */
CV_API int cv_run_add_net_rule(cv_run *r, const char *addr, int prefix, int port_lo, int port_hi);
/* The same destinations, but a TCP connect there is made to to_addr:to_port instead (a host-side
 * service of the caller's, such as a proxy), on the supervisor's copy of the socket; UDP is not
 * diverted, and a TCP Fast Open send there is refused. Each diverted connect is announced on the
 * cv_run_set_divert_fd fd, before the guest learns of it, as one line
 * "LOCALADDR LOCALPORT ADDR PORT TID\n": the socket's own address, the destination the guest asked
 * for and the thread that asked, so the service can serve only those connections. Repeatable. */
CV_API int cv_run_add_net_divert(cv_run *r, const char *addr, int prefix, int port_lo, int port_hi,
                                 const char *to_addr, int to_port);
CV_API int cv_run_set_divert_fd(cv_run *r, int fd); /* dup'd (the caller closes its own) */
/* A stream socket (dup'd) on which a service of the caller's grants destinations while the run
 * goes, one line each, answered "1\n" (done) or "0\n" (refused) before the next is read:
 * "A ADDR LO HI" allows one address (not loopback, unspecified or link-local) and a port range,
 * as cv_run_add_net_rule would; "D NAME [TID]" notes a name lookup the service refused (the
 * report's denials, syscall "dns"; TID: the thread a divert announced). A grant is in force for
 * every call the supervisor decides after its answer. At most 4096 grants a run. */
CV_API int cv_run_set_grant_fd(cv_run *r, int fd);
/* A host unix socket (absolute path) the guest may connect and send to. Repeatable. Without
 * one, host unix sockets are refused (EACCES); sockets made in the sandbox always work. */
CV_API int cv_run_allow_unix(cv_run *r, const char *path);
CV_API int cv_run_set_timeout_ms(cv_run *r, uint32_t ms);       /* 0: none */
/* An embedder's hook (the library's onSyscall): every call of the syscalls nrs is described on
 * sock_fd (a stream socket, cv_socketpair) before cvisor handles it, and waits for the answer,
 * which can only deny it (src/supervisor/hook.h has the messages). The run owns sock_fd (it is
 * closed here when this fails). */
CV_API int cv_run_set_hook(cv_run *r, const int32_t *nrs, size_t n, int sock_fd);
/* Trace the syscalls nrs: one line per call on fd (`PID NAME(ARGS) = RESULT`; the run writes
 * to its own dup of fd). */
CV_API int cv_run_set_trace(cv_run *r, const int32_t *nrs, size_t n, int fd);
CV_API int cv_run_set_hostname(cv_run *r, const char *name);    /* the guest's nodename (default "cvisor"); copied */
/* The guest gets a session of its own whose controlling terminal is its stdin (the slave of
 * cv_openpty): the sandbox's init starts the session and takes the terminal before any guest
 * code runs, so job control and ^C work on it as on a login terminal. */
CV_API int cv_run_set_ctty(cv_run *r);
/* Resource limits (supervisor/limits.c): the sandbox's init is written into each cgroup.procs
 * file given (at most 8) before any guest code runs; a failure fails the run. With
 * cv_run_watch_oom_v1, an OOM in that cgroup v1 memory cgroup kills the whole guest tree. */
CV_API int cv_run_add_cgroup(cv_run *r, const char *procs_file);
CV_API int cv_run_watch_oom_v1(cv_run *r, const char *memcg_dir);
/* Limits the supervisor holds the tree to itself, where no cgroup can (0: none): memory in
 * bytes (the tree's resident sets, sampled), tasks at once (counted at each fork), CPU in
 * thousandths of a core (the tree stopped while ahead of its share). */
CV_API int cv_run_set_watch_limits(cv_run *r, uint64_t memory_bytes, uint32_t pids, uint32_t cpu_milli);
/* What the run's upper layer may hold, in bytes (its files' blocks, walked on a thread of its
 * own every 20 ms, or ten times as long as a walk takes); over it, the run ends. 0: none. */
CV_API int cv_run_set_disk_limit(cv_run *r, uint64_t bytes);
enum { CV_LIMIT_MEMORY = 1, CV_LIMIT_PIDS = 2, CV_LIMIT_DISK = 4 };
typedef struct cv_run_limits {
    uint64_t memory_peak;  /* bytes: the most the watch saw resident at once */
    uint32_t pids_peak;    /* the most tasks at once it counted */
    uint32_t hit;          /* CV_LIMIT_* the run reached */
    uint64_t cpu_ms;       /* CPU time of the tree */
    uint64_t disk_peak;    /* bytes: the most the upper layer held when walked */
} cv_run_limits;
/* After the run: what the watch limits saw. CV_ERR_STATE before the end. */
CV_API int cv_run_get_limits(cv_run *r, cv_run_limits *out);
/* The sandbox's copy-on-write layer: upper_dir is the writable tree the guest's changes land
 * in (docs/ARCHITECTURE.md, "The overlay"), work_dir a private directory on the same
 * filesystem for atomic copy-ups. When upper_dir does not exist, both (absolute paths with one
 * parent) are made, mode 0700 with that parent, on the guest's first change: a run that
 * changes nothing leaves nothing on disk. Without a layer every change fails EROFS. */
CV_API int cv_run_set_upper(cv_run *r, const char *upper_dir, const char *work_dir);
/* A read-only layer below the upper (a snapshot's frozen tree, same on-disk format), over the
 * host. Call once per layer, from the top of the chain to the bottom, at most CV_MAX_LOWERS
 * times. The layer is never written: changes to what it holds are copied up into the upper. */
#define CV_MAX_LOWERS 32
CV_API int cv_run_add_lower(cv_run *r, const char *layer_dir);

/* Start the run. *done_fd receives a non-blocking, close-on-exec pipe read end that
 * reaches EOF when the run is over (also on a failed start). The caller owns it and
 * closes it. The stdio fds are dup'd before this returns. */
CV_API int cv_run_start(cv_run *r, int *done_fd);
/* Also tell the end on fd (a stream socket; the run takes a dup): the 8 bytes of token, in one
 * send, as the done fd reaches EOF. One socket can so tell a caller of many runs which ended,
 * where watching each run's own fd costs an event-loop handle a run. Before cv_run_start. */
CV_API int cv_run_set_end_note(cv_run *r, int fd, uint64_t token);
/* Ask for the whole tree to be killed (setsid daemons and double forks included).
 * Asynchronous and idempotent. */
CV_API int cv_run_kill(cv_run *r);
/* Send sig to the main guest process only (what the command started as), as kill(1) would;
 * nothing when it has not started or is over. */
CV_API int cv_run_signal(cv_run *r, int sig);
/* For a command-line front end whose one job is this run: block the calling thread
 * until the run is over while SIGTERM and SIGHUP (and SIGINT and SIGQUIT unless
 * interactive: on a terminal the guest gets those itself) kill the run's tree.
 * The process's previous handlers for these four signals are restored on return.
 * Returns the last signal that killed the run, 0 if none, or a negative error. */
CV_API int cv_run_wait_forwarding(cv_run *r, int interactive);
/* After done_fd reached EOF (or cv_run_wait_forwarding returned): the result. CV_ERR_STATE before that. */
CV_API int cv_run_get_result(cv_run *r, cv_run_result *out);
/* JSON object {"openat": 12, ...}: notifications per syscall name. Returns the length
 * that the whole text needs (excluding NUL); writes at most len-1 bytes plus NUL. */
CV_API int cv_run_stats_json(cv_run *r, char *buf, size_t len);
/* JSON array [{"syscall": "connect", "count": 1, "target": "/run/docker.sock", "why": "...",
 * "pid": 42, "process": "curl"}]: what the supervisor refused (each distinct refusal once; pid and
 * process: the first process refused it, when known). Length convention as above. */
CV_API int cv_run_denials_json(cv_run *r, char *buf, size_t len);
/* Free everything. If the run is still going it is killed first (asynchronously). */
CV_API void cv_run_free(cv_run *r);

/* Create a pipe for the caller: fds[0] read end, fds[1] write end, both O_CLOEXEC
 * and blocking (libuv makes its own end non-blocking). Node has no pipe(2); used
 * for captured stdout/stderr and for stdin contents. */
CV_API int cv_pipe(int fds[2]);
/* close(2), for callers without one. */
CV_API int cv_close(int fd);
/* A connected pair of stream sockets, close-on-exec (the hook channel). */
CV_API int cv_socketpair(int fds[2]);
/* A new pseudo-terminal of cols x rows: fds[0] the master (the caller's end: what the guest
 * writes is read there, what is written there is the guest's input), fds[1] the slave (the
 * guest's stdio, with cv_run_set_ctty). Both close-on-exec, neither a controlling terminal. */
CV_API int cv_openpty(int fds[2], uint16_t cols, uint16_t rows);
/* The window size of the pty whose master is fd (the guest gets SIGWINCH). */
CV_API int cv_pty_resize(int master_fd, uint16_t cols, uint16_t rows);
/* The number of a syscall the filter table knows ("openat" → 257), or CV_ERR_INVALID. */
CV_API int cv_syscall_number(const char *name);
/* renameat2(RENAME_EXCHANGE): swaps two paths at once (a directory replaced with no moment
 * where neither is there); -errno on failure. */
CV_API int cv_rename_exchange(const char *a, const char *b);
/* isatty(3), for callers that would otherwise load a terminal module to ask. */
CV_API int cv_isatty(int fd);

/* Feature probe for `cvisor doctor`: tries each feature for real. */
typedef struct cv_probe_result {
    int32_t seccomp_unotify;   /* 1 ok, 0 missing; *_errno says why */
    int32_t seccomp_errno;
    int32_t addfd_send;
    int32_t addfd_errno;
    int32_t sync_wakeup;
    int32_t killable_recv;
    int32_t pidfd_open;
    int32_t pidfd_getfd;
    int32_t pidfd_errno;
    int32_t landlock_abi;      /* 0: unavailable */
    int32_t landlock_errno;
    int32_t proc_mem_force;    /* forced write to /proc/pid/mem of a read-only page works */
    int32_t proc_mem_errno;
    int32_t helper_ok;         /* helper exists and ran `cvisor-helper probe` */
    int32_t helper_errno;
    int32_t pad_;
} cv_probe_result;
CV_API int cv_probe(const char *helper_path, cv_probe_result *out);

/* The addresses a host name resolves to on this host (getaddrinfo: /etc/hosts, DNS, as the
 * host's NSS says), as text, one per line, into out (len bytes, NUL-terminated): how many, or
 * -1 when the name does not resolve (out then holds gai_strerror's sentence). */
CV_API int cv_resolve_host(const char *name, char *out, size_t len);

/* Name of an error code, e.g. "CV_ERR_HELPER"; a sentence for -errno values. */
CV_API const char *cv_strerror(int err);
CV_API int cv_abi_version(void);

#ifdef __cplusplus
}
#endif
#endif
