/* cvisor-helper: the sandbox's init (static binary, spawned by the supervisor).
 *
 *   cvisor-helper init --ppid PID [--cwd DIR] [--no-network]
 *                      [--ruleset-fd FD | --ruleset-sock FD] -- CMD [ARGS...]
 *   cvisor-helper probe
 *
 * init: subreaper, capabilities, NO_NEW_PRIVS, Landlock domain A, the seccomp
 * filter (its listener fd number goes to the supervisor, which takes it with
 * pidfd_getfd), then fork the guest (Landlock domain B: signal scope) and
 * reap everything. The main guest's wait status and rusage are reported as a
 * record on the status pipe (fd 3); the supervisor kills what is left. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/landlock.h"
#include "common/landlock_rules.h"
#include "common/proto.h"
#include "common/seccomp_defs.h"
#include "common/util.h"
#include "cvisor.h"
#include "filter/table.h"
#include "filter_progs.h"
#include "policy.h"
#include "relay.h"

int cv_helper_probe(void);

static void send_rec(const struct cv_rec *r) { cv_write_full(CV_HELPER_STATUS_FD, r, sizeof *r); }

static _Noreturn void setup_failed(int cv_err, int err, const char *what) {
    struct cv_rec r = {.type = CV_REC_SETUP_FAILED, .a = cv_err, .b = err};
    snprintf(r.text, sizeof r.text, "%s: %s", what, strerror(err));
    send_rec(&r);
    _exit(125);
}

static const int job_signals[] = {SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE, SIGHUP};

static void set_job_signals(void (*handler)(int)) {
    for (size_t i = 0; i < sizeof job_signals / sizeof job_signals[0]; i++) signal(job_signals[i], handler);
}

/* The program for these options: one compiled from the table at build time (filter_progs.h),
 * or, when an embedder hooks syscalls (--hook), one compiled here with them notified. */
static int install_filter(int deny_network, int signals_scoped, const uint64_t *hooked) {
    struct sock_fprog prog = cv_progs[!!deny_network][!!signals_scoped];
    static struct sock_filter code[CV_FILTER_MAX];
    if (hooked) {
        struct cv_filter_opts o = {.deny_network = deny_network, .signals_scoped = signals_scoped,
                                   .hooked = hooked};
        int len = cv_filter_build(&o, code, CV_FILTER_MAX);
        if (len <= 0) return -EINVAL;
        prog = (struct sock_fprog){.len = (unsigned short)len, .filter = code};
    }
    unsigned long flags = SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
    int fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
    if (fd < 0 && errno == EINVAL) /* kernels before 5.19 */
        fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    return fd < 0 ? -errno : fd;
}

/* --hook "2,257,59": the syscall numbers into bits; 0, or -1 when the list is not one. */
static int parse_hooks(const char *list, uint64_t *bits) {
    memset(bits, 0, CV_FILTER_NR_MAX / 8);
    while (*list) {
        char *end;
        long nr = strtol(list, &end, 10);
        if (end == list || nr < 0 || nr >= CV_FILTER_NR_MAX || (*end && *end != ',')) return -1;
        bits[nr / 64] |= 1ull << (nr % 64);
        list = *end ? end + 1 : end;
    }
    return 0;
}

static int recv_fd(int sock) {
    char data;
    struct iovec iov = {&data, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    if (CV_RETRY(recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) <= 0) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

/* Look CMD up in PATH (what execvp would run): every miss of execvp's own walk would
 * be a notified execve. Misses and odd cases are left to execvp. */
static const char *resolve_cmd(const char *cmd, char *buf, size_t len) {
    if (!*cmd || strchr(cmd, '/')) return cmd;
    const char *path = getenv("PATH");
    if (!path) path = "/bin:/usr/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t dl = end ? (size_t)(end - path) : strlen(path);
        if (dl && (size_t)snprintf(buf, len, "%.*s/%s", (int)dl, path, cmd) < len) {
            struct stat st;
            if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0) return buf;
        }
        path += dl + (end ? 1 : 0);
    }
    return cmd;
}

/* The supervisor died (its thread that spawned us exited): the sandbox goes with it. */
static volatile sig_atomic_t orphaned;
static void on_parent_death(int sig) {
    (void)sig;
    orphaned = 1;
}

/* Kill every process of the sandbox. The init's signal scope (Landlock, ABI >= 6) confines
 * kill(-1) to its own domain and the ones below it: the guests, setsid daemons included, and
 * nothing else of the user's. Without scopes the kill family goes to the supervisor, which is
 * gone; then only the main guest's own parent-death signal takes it down. */
static _Noreturn void end_sandbox(int scoped) {
    for (int round = 0; scoped && round < 1000; round++) {
        int left = kill(-1, SIGKILL) == 0;
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        if (!left) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    _exit(137);
}

static _Noreturn void run_guest(const char *file, char **argv, int abi) {
    set_job_signals(SIG_DFL);
    signal(SIGUSR1, SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* if the init is killed, the main guest goes with it */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0); /* the init is not (below); the supervisor reads guests */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int r = cv_apply_scope_domain(abi);
    if (r < 0) setup_failed(CV_ERR_LANDLOCK, -r, "landlock scope domain");
    execvp(file, argv);
    int err = errno;
    /* A file the kernel cannot run (no #!, not ELF) is a shell script: glibc's execvp runs it
     * with /bin/sh, musl's leaves that to its caller (the helper may be built with either). */
    if (err == ENOEXEC && strchr(file, '/')) {
        size_t n = 0;
        while (argv[n]) n++;
        char **sh = calloc(n + 2, sizeof *sh);
        if (sh) {
            sh[0] = "/bin/sh";
            sh[1] = (char *)file;
            for (size_t i = 1; i < n; i++) sh[i + 1] = argv[i];
            execv("/bin/sh", sh);
        }
    }
    struct cv_rec rec = {.type = CV_REC_EXEC_FAILED, .a = err};
    send_rec(&rec);
    _exit(err == ENOENT ? 127 : 126);
}

/* Is file still a regular executable file (asked in the sandbox's view)? */
static int still_runnable(const char *file) {
    struct stat st;
    return stat(file, &st) == 0 && S_ISREG(st.st_mode) && access(file, X_OK) == 0;
}

static int init_main(int argc, char **argv) {
    long ppid = -1;
    const char *cwd = NULL;
    int deny_network = 0, ruleset = -1, ruleset_sock = 0, host_view = 0, ctty = 0, i = 2;
    static uint64_t hook_bits[CV_FILTER_NR_MAX / 64];
    const uint64_t *hooked = NULL;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--")) { i++; break; }
        if (!strcmp(argv[i], "--ppid") && i + 1 < argc) ppid = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cwd") && i + 1 < argc) cwd = argv[++i];
        else if (!strcmp(argv[i], "--no-network")) deny_network = 1;
        else if (!strcmp(argv[i], "--ctty")) ctty = 1;
        else if (!strcmp(argv[i], "--host-view")) host_view = 1;
        else if (!strcmp(argv[i], "--hook") && i + 1 < argc) {
            if (parse_hooks(argv[++i], hook_bits) < 0) setup_failed(CV_ERR_INVALID, EINVAL, "cvisor-helper: bad --hook");
            hooked = hook_bits;
        }
        else if ((!strcmp(argv[i], "--ruleset-fd") || !strcmp(argv[i], "--ruleset-sock")) && i + 1 < argc) {
            ruleset_sock = !strcmp(argv[i], "--ruleset-sock");
            ruleset = (int)strtol(argv[++i], NULL, 10);
        }
        else setup_failed(CV_ERR_INVALID, EINVAL, "cvisor-helper: bad argument");
    }
    if (i >= argc) setup_failed(CV_ERR_INVALID, EINVAL, "cvisor-helper: no command");
    char **guest_argv = argv + i;

    /* End the sandbox with the supervisor's spawner thread (end_sandbox); refuse to run orphaned. */
    struct sigaction sa = {.sa_handler = on_parent_death};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL); /* no SA_RESTART: wait4 below returns EINTR */
    prctl(PR_SET_PDEATHSIG, SIGUSR1);
    if (ppid > 0 && getppid() != ppid) _exit(125);
    /* An interactive run's terminal (a pty of its own on fd 0): the init leads a new session
     * with it as controlling terminal, before any filter, and the guest is born in front. */
    if (ctty && (setsid() < 0 || ioctl(0, TIOCSCTTY, 0) < 0))
        setup_failed(CV_ERR_SPAWN, errno, "taking the sandbox's terminal (setsid, TIOCSCTTY)");
    fcntl(CV_HELPER_STATUS_FD, F_SETFD, FD_CLOEXEC);
    fcntl(CV_HELPER_GO_FD, F_SETFD, FD_CLOEXEC);
    if (ruleset > CV_HELPER_GO_FD) {
        if (dup2(ruleset, CV_HELPER_GO_FD + 1) < 0) setup_failed(CV_ERR_LANDLOCK, errno, "ruleset fd");
        ruleset = CV_HELPER_GO_FD + 1;
    }
    syscall(SYS_close_range, CV_HELPER_GO_FD + (ruleset >= 0 ? 2 : 1), ~0u, 0);

    /* A directory the host does not have may exist in the sandbox (made there, copied in, from a
     * snapshot): entered again once the supervisor answers for the filesystem. */
    const char *late_cwd = NULL;
    if (cwd && chdir(cwd) < 0) {
        if (errno != ENOENT && errno != ENOTDIR) setup_failed(CV_ERR_CWD, errno, cwd);
        late_cwd = cwd;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) setup_failed(CV_ERR_SPAWN, errno, "PR_SET_CHILD_SUBREAPER");
    set_job_signals(SIG_IGN); /* init survives ^C and job control; the guest does not inherit this */

    int r = cv_drop_capabilities();
    if (r < 0) setup_failed(CV_ERR_SPAWN, -r, "dropping capabilities");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) setup_failed(CV_ERR_SPAWN, errno, "PR_SET_NO_NEW_PRIVS");
    int abi = cv_landlock_abi();
    if (abi < 1) setup_failed(CV_ERR_LANDLOCK, errno ? errno : ENOSYS, "Landlock is not available (cvisor doctor explains)");
    const char *what = "landlock_restrict_self";
    if (ruleset_sock) {
        /* The supervisor built the ruleset while we exec'd: it arrives on this socket. */
        int got = recv_fd(ruleset);
        close(ruleset);
        if (got < 0) setup_failed(CV_ERR_LANDLOCK, EPROTO, "no Landlock ruleset from the supervisor");
        ruleset = got;
    }
    /* Fail closed: a ruleset built here would not know the run's hidden paths. */
    if (ruleset < 0) setup_failed(CV_ERR_LANDLOCK, EINVAL, "no Landlock ruleset from the supervisor");
    if (cv_landlock_restrict(ruleset) < 0) setup_failed(CV_ERR_LANDLOCK, errno, what);
    close(ruleset); /* domain A also scopes the init's signals (common/landlock_rules.c) */
    /* With --host-view the sandbox shows the host minus hidden paths: a PATH entry before the
     * host's first hit has no CMD in the sandbox either, so the walk is done here, before the
     * filter, where a stat is not a round trip to the supervisor. The hit itself is checked
     * again once the supervisor answers (it may be hidden: then the whole walk is done there). */
    char file_buf[4096];
    const char *file = guest_argv[0], *host_hit = NULL;
    if (host_view && !late_cwd) {
        file = resolve_cmd(guest_argv[0], file_buf, sizeof file_buf);
        if (file == file_buf) host_hit = file;
    }
    int listener = install_filter(deny_network, abi >= 6, hooked);
    if (listener < 0) setup_failed(CV_ERR_SECCOMP, -listener, "seccomp user notification");

    /* Hand the listener over: the supervisor takes it with pidfd_getfd, then says go. */
    struct cv_rec rec = {.type = CV_REC_LISTENER, .a = listener};
    send_rec(&rec);
    char go;
    if (cv_read_full(CV_HELPER_GO_FD, &go, 1) != 1) _exit(125);
    close(listener);
    close(CV_HELPER_GO_FD);
    /* From here on the init is not the guest's to read or write: its /proc entries (memory, fds,
     * environment) belong to root and need CAP_SYS_PTRACE, which no guest has. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (orphaned || getppid() != ppid) end_sandbox(abi >= 6);
    if (late_cwd && chdir(late_cwd) < 0) setup_failed(CV_ERR_CWD, errno, late_cwd);
    if (host_hit ? !still_runnable(host_hit) : !host_view || late_cwd)
        file = resolve_cmd(guest_argv[0], file_buf, sizeof file_buf);

    pid_t main_pid = fork();
    if (main_pid < 0) setup_failed(CV_ERR_SPAWN, errno, "fork");
    if (main_pid == 0) run_guest(file, guest_argv, abi);

    for (;;) {
        int status;
        struct rusage ru;
        pid_t p = wait4(-1, &status, 0, &ru);
        if (orphaned) end_sandbox(abi >= 6);
        if (p < 0) {
            if (errno == EINTR) continue;
            break; /* ECHILD: the tree is empty */
        }
        if (p != main_pid) continue;
        /* Take the terminal back for the caller if the guest left its own group in front. */
        if (isatty(0) && tcgetpgrp(0) != getpgrp()) tcsetpgrp(0, getpgrp());
        /* b: does anything of the tree outlive the main process? Orphans were
         * reparented to us before the main process became reapable. */
        siginfo_t si;
        int others = waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
        struct cv_rec done = {.type = CV_REC_EXIT, .a = status, .b = others};
        done.utime_us = (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec;
        done.stime_us = (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
        done.maxrss_kb = ru.ru_maxrss;
        send_rec(&done);
    }
    /* exit, not exit_group (one thread: the same end): the filter lets it through, where
     * exit_group waits for the supervisor's answer while the run's end waits for this exit. */
    syscall(SYS_exit, 0);
    return 0;
}

int main(int argc, char **argv) {
    if (cv_is_relay()) return cv_relay_main();
    if (argc >= 2 && !strcmp(argv[1], "init")) return init_main(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "probe")) return cv_helper_probe();
    fprintf(stderr, "cvisor-helper: internal helper of cvisor; run `cvisor --help`\n");
    return 2;
}
