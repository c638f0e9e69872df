/* The public API: describe a run, start it, kill it, read its result. */
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/landlock.h"
#include "common/sysnr.h"
#include "common/util.h"
#include "filter/table.h"
#include "overlay/lowers.h"
#include "overlay/alias.h"
#include "overlay/moved.h"
#include "overlay/walkmemo.h"
#include "supervisor/answers.h"

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

static int push(char ***v, size_t *n, size_t *cap, const char *s) {
    if (*n + 2 > *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        char **nv = realloc(*v, c * sizeof *nv);
        if (!nv) return CV_ERR_NOMEM;
        *v = nv;
        *cap = c;
    }
    char *d = strdup(s);
    if (!d) return CV_ERR_NOMEM;
    (*v)[(*n)++] = d;
    (*v)[*n] = NULL;
    return 0;
}

double cv_ms_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

CV_API cv_run *cv_run_new(const char *helper_path) {
    if (!helper_path) return NULL;
    struct cv_run *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->helper = strdup(helper_path);
    if (!r->helper) { free(r); return NULL; }
    r->stdio[0] = r->stdio[1] = r->stdio[2] = -1;
    r->ctl_efd = r->done_w = r->init_pidfd = r->status_r = r->go_w = r->listener = -1;
    r->fin_efd = r->ending_efd = -1;
    r->upper_fd = r->work_fd = -1;
    r->hook_fd = r->trace_fd = r->divert_fd = r->grant_fd = r->note_fd = -1;
    r->oom_efd = r->oom_ctl = -1;
    pthread_mutex_init(&r->fifo_lock, NULL);
    pthread_mutex_init(&r->deny_lock, NULL);
    pthread_mutex_init(&r->state_lock, NULL);
    pthread_mutex_init(&r->abstract_lock, NULL);
    pthread_mutex_init(&r->pty_lock, NULL);
    atomic_init(&r->refs, 1);
    r->network = CV_NET_ALLOW;
    r->listen = CV_LISTEN_LOOPBACK;
    return r;
}

#define NOT_STARTED(r) \
    do { if (!(r)) return CV_ERR_INVALID; if (atomic_load(&(r)->started)) return CV_ERR_STATE; } while (0)

CV_API int cv_run_add_arg(cv_run *r, const char *arg) {
    NOT_STARTED(r);
    if (!arg) return CV_ERR_INVALID;
    return push(&r->argv, &r->argc, &r->argv_cap, arg);
}

CV_API int cv_run_add_env(cv_run *r, const char *kv) {
    NOT_STARTED(r);
    if (!kv || !strchr(kv, '=')) return CV_ERR_INVALID;
    return push(&r->envp, &r->envc, &r->env_cap, kv);
}

/* Keep hide_common the deepest directory holding every hidden path: a path outside it is hidden
 * by none of them, which is what nearly every look-up asks (overlay/vfs.c). */
static int add_hidden(struct cv_run *r, const char *real) {
    int e = push(&r->hide, &r->nhide, &r->hide_cap, real);
    if (e < 0) return e;
    size_t l = strlen(real);
    if (r->nhide == 1) {
        r->hide_common_len = l;
        return 0;
    }
    const char *first = r->hide[0];
    size_t c = 0;
    while (c < r->hide_common_len && c < l && first[c] == real[c]) c++;
    /* a directory boundary of both, else back to the last '/' */
    if (!((c == r->hide_common_len || first[c] == '/') && (c == l || real[c] == '/')))
        while (c > 0 && first[c] != '/') c--;
    r->hide_common_len = c;
    return 0;
}

CV_API int cv_run_add_hidden(cv_run *r, const char *path) {
    NOT_STARTED(r);
    if (!path || path[0] != '/') return CV_ERR_INVALID;
    /* Landlock rules name inodes: hide where the path really is (hide.c). */
    if (!r->hide_round) r->hide_round = cv_hide_round();
    char real[PATH_MAX];
    int e = cv_hide_canonical(path, r->hide_round, real, sizeof real);
    if (e == -ENOENT) return 0; /* no parent: nothing to hide */
    if (e < 0) return CV_ERR_INVALID;
    return add_hidden(r, real);
}

CV_API int cv_run_add_hidden_list(cv_run *r, const char *paths, size_t len) {
    NOT_STARTED(r);
    if (!paths) return CV_ERR_INVALID;
    for (size_t at = 0; at < len;) {
        const char *p = paths + at;
        const char *nul = memchr(p, 0, len - at);
        if (!nul) return CV_ERR_INVALID;
        int e = cv_run_add_hidden(r, p);
        if (e < 0) return e;
        at += (size_t)(nul - p) + 1;
    }
    return 0;
}

CV_API int cv_run_set_cwd(cv_run *r, const char *dir) {
    NOT_STARTED(r);
    free(r->cwd);
    r->cwd = xstrdup(dir);
    return 0;
}

CV_API int cv_run_set_stdio(cv_run *r, int in_fd, int out_fd, int err_fd) {
    NOT_STARTED(r);
    r->stdio[0] = in_fd;
    r->stdio[1] = out_fd;
    r->stdio[2] = err_fd;
    return 0;
}

CV_API int cv_run_set_network(cv_run *r, int network) {
    NOT_STARTED(r);
    if (network != CV_NET_ALLOW && network != CV_NET_DENY && network != CV_NET_LIST) return CV_ERR_INVALID;
    r->network = network;
    return 0;
}

int cv_run_add_rule(cv_run *r, const struct cv_net_rule *rule) {
    if (r->nnet_rules == r->net_rules_cap) {
        size_t cap = r->net_rules_cap ? r->net_rules_cap * 2 : 8;
        struct cv_net_rule *n = realloc(r->net_rules, cap * sizeof *n);
        if (!n) return CV_ERR_NOMEM;
        r->net_rules = n;
        r->net_rules_cap = cap;
    }
    r->net_rules[r->nnet_rules++] = *rule;
    return 0;
}

CV_API int cv_run_add_net_rule(cv_run *r, const char *addr, int prefix, int port_lo, int port_hi) {
    NOT_STARTED(r);
    struct cv_net_rule rule;
    if (!addr || cv_net_rule_make(&rule, addr, prefix, port_lo, port_hi) < 0) return CV_ERR_INVALID;
    return cv_run_add_rule(r, &rule);
}

CV_API int cv_run_add_net_divert(cv_run *r, const char *addr, int prefix, int port_lo, int port_hi,
                                 const char *to_addr, int to_port) {
    NOT_STARTED(r);
    struct cv_net_rule rule;
    if (!addr || cv_net_rule_make(&rule, addr, prefix, port_lo, port_hi) < 0) return CV_ERR_INVALID;
    if (cv_net_rule_divert(&rule, to_addr, to_port) < 0) return CV_ERR_INVALID;
    return cv_run_add_rule(r, &rule);
}

/* A service's fd the receiver writes to (and reads from): our own dup, never blocking, so a
 * stalled service cannot stall the run. */
static int set_service_fd(cv_run *r, int fd, int *slot) {
    NOT_STARTED(r);
    if (fd < 0 || *slot >= 0) return CV_ERR_INVALID;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (own < 0) return -errno;
    fcntl(own, F_SETFL, fcntl(own, F_GETFL) | O_NONBLOCK);
    *slot = own;
    return 0;
}

CV_API int cv_run_set_divert_fd(cv_run *r, int fd) {
    return r ? set_service_fd(r, fd, &r->divert_fd) : CV_ERR_INVALID;
}

CV_API int cv_run_set_grant_fd(cv_run *r, int fd) {
    return r ? set_service_fd(r, fd, &r->grant_fd) : CV_ERR_INVALID;
}

CV_API int cv_run_set_allow_listen(cv_run *r, int listen) {
    NOT_STARTED(r);
    if (listen != CV_LISTEN_NONE && listen != CV_LISTEN_ANY && listen != CV_LISTEN_LOOPBACK) return CV_ERR_INVALID;
    r->listen = listen;
    return 0;
}

/* Syscall numbers into bits: 0, or CV_ERR_INVALID for one the table does not know. */
static int syscall_bits(const int32_t *nrs, size_t n, uint64_t *bits) {
    if (!nrs || n == 0) return CV_ERR_INVALID;
    for (size_t i = 0; i < n; i++)
        if (nrs[i] < 0 || nrs[i] >= CV_MAX_NR || !cv_syscall_name(nrs[i])) return CV_ERR_INVALID;
    for (size_t i = 0; i < n; i++) bits[nrs[i] / 64] |= 1ull << (nrs[i] % 64);
    return 0;
}

CV_API int cv_run_set_hook(cv_run *r, const int32_t *nrs, size_t n, int sock_fd) {
    int e = !r ? CV_ERR_INVALID : atomic_load(&r->started) ? CV_ERR_STATE : 0;
    if (!e && (sock_fd < 0 || r->hook_fd >= 0)) e = CV_ERR_INVALID;
    if (!e) e = syscall_bits(nrs, n, r->hooked);
    if (e) {
        if (sock_fd >= 0) close(sock_fd); /* the run owns it, even now */
        return e;
    }
    r->hook_fd = sock_fd;
    r->signals_scoped = cv_landlock_abi() >= 6;
    return 0;
}

CV_API int cv_run_set_end_note(cv_run *r, int fd, uint64_t token) {
    NOT_STARTED(r);
    if (fd < 0 || r->note_fd >= 0) return CV_ERR_INVALID;
    r->note_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (r->note_fd < 0) return -errno;
    r->end_note = token;
    return 0;
}

CV_API int cv_run_set_trace(cv_run *r, const int32_t *nrs, size_t n, int fd) {
    NOT_STARTED(r);
    if (fd < 0 || r->trace_fd >= 0) return CV_ERR_INVALID;
    uint64_t bits[CV_MAX_NR / 64] = {0};
    int e = syscall_bits(nrs, n, bits);
    if (e) return e;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (own < 0) return -errno;
    memcpy(r->traced, bits, sizeof bits);
    r->trace_fd = own;
    r->signals_scoped = cv_landlock_abi() >= 6;
    return 0;
}

CV_API int cv_socketpair(int fds[2]) {
    if (!fds) return CV_ERR_INVALID;
    return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0 ? -errno : 0;
}

CV_API int cv_syscall_number(const char *name) {
    if (!name) return CV_ERR_INVALID;
    for (size_t i = 0; i < cv_syscalls_len; i++)
        if (!strcmp(cv_syscalls[i].name, name)) return cv_syscalls[i].nr;
    return CV_ERR_INVALID;
}

CV_API int cv_run_allow_unix(cv_run *r, const char *path) {
    NOT_STARTED(r);
    if (!path || path[0] != '/') return CV_ERR_INVALID;
    /* Compared with where a guest's connect really leads: the real path (the socket may not be
     * there yet: then its real parent and its name). */
    char real[PATH_MAX], parent[PATH_MAX], canon[PATH_MAX];
    if (realpath(path, real)) return push(&r->allow_unix, &r->nallow_unix, &r->allow_unix_cap, real);
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (!slash || !slash[1]) return CV_ERR_INVALID;
    *slash = 0;
    if (!realpath(parent[0] ? parent : "/", canon)) return push(&r->allow_unix, &r->nallow_unix, &r->allow_unix_cap, path);
    if ((size_t)snprintf(real, sizeof real, "%s/%s", strcmp(canon, "/") ? canon : "", slash + 1) >= sizeof real)
        return CV_ERR_INVALID;
    return push(&r->allow_unix, &r->nallow_unix, &r->allow_unix_cap, real);
}

CV_API int cv_run_set_timeout_ms(cv_run *r, uint32_t ms) {
    NOT_STARTED(r);
    r->timeout_ms = ms;
    return 0;
}

CV_API int cv_run_set_ctty(cv_run *r) {
    NOT_STARTED(r);
    r->ctty = 1;
    return 0;
}

CV_API int cv_run_set_hostname(cv_run *r, const char *name) {
    NOT_STARTED(r);
    free(r->hostname);
    r->hostname = xstrdup(name);
    return 0;
}

CV_API int cv_run_set_upper(cv_run *r, const char *upper_dir, const char *work_dir) {
    NOT_STARTED(r);
    if (!upper_dir || !work_dir || r->upper || r->upper_lazy) return CV_ERR_INVALID;
    char real[PATH_MAX];
    if (!realpath(upper_dir, real)) {
        /* Not there yet: made on the first change (both absolute, beside each other). */
        if (errno != ENOENT || upper_dir[0] != '/' || work_dir[0] != '/') return CV_ERR_INVALID;
        r->upper_want = xstrdup(upper_dir);
        r->work_want = xstrdup(work_dir);
        if (!r->upper_want || !r->work_want) return CV_ERR_NOMEM;
        r->upper_lazy = 1;
        return 0;
    }
    int u = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int w = open(work_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat us, ws;
    /* One filesystem: copy-ups are renamed from work into upper. */
    if (u < 0 || w < 0 || fstat(u, &us) < 0 || fstat(w, &ws) < 0 || us.st_dev != ws.st_dev || !strcmp(real, "/")) {
        if (u >= 0) close(u);
        if (w >= 0) close(w);
        return CV_ERR_INVALID;
    }
    r->upper = xstrdup(real);
    r->upper_fd = u;
    r->work_fd = w;
    return 0;
}

CV_API int cv_run_add_lower(cv_run *r, const char *layer_dir) {
    NOT_STARTED(r);
    if (!layer_dir || r->nlower >= CV_MAX_LOWERS) return CV_ERR_INVALID;
    char real[PATH_MAX];
    if (!realpath(layer_dir, real) || !strcmp(real, "/")) return CV_ERR_INVALID;
    if (cv_lower_cache_new(r) < 0) return CV_ERR_NOMEM;
    int fd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return CV_ERR_INVALID;
    char *copy = xstrdup(real);
    if (!copy) {
        close(fd);
        return CV_ERR_NOMEM;
    }
    r->lower[r->nlower] = copy;
    r->lower_fd[r->nlower++] = fd;
    return 0;
}

void cv_run_fail(struct cv_run *r, int err, const char *fmt, ...) {
    r->result.state = CV_RUN_FAILED;
    r->result.error = err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->result.message, sizeof r->result.message, fmt, ap);
    va_end(ap);
}

CV_API int cv_run_start(cv_run *r, int *done_fd) {
    NOT_STARTED(r);
    if (!done_fd || r->argc == 0) return CV_ERR_INVALID;
    /* Own copies of the stdio fds: the caller may close its own right away. */
    int own[3] = {-1, -1, -1};
    for (int i = 0; i < 3; i++) {
        if (r->stdio[i] < 0) continue;
        struct stat st;
        if (fstat(r->stdio[i], &st) == 0 && S_ISCHR(st.st_mode) && isatty(r->stdio[i]))
            r->stdio_rdev[i] = st.st_rdev;
        own[i] = fcntl(r->stdio[i], F_DUPFD_CLOEXEC, 16); /* above the helper's fixed fds */
        if (own[i] < 0) {
            for (int j = 0; j < i; j++)
                if (own[j] >= 0) close(own[j]);
            return CV_ERR_INVALID;
        }
    }
    memcpy(r->stdio, own, sizeof own);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) return -errno;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    r->ctl_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->fin_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->ending_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->ctl_efd < 0 || r->fin_efd < 0 || r->ending_efd < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return -e;
    }
    r->done_w = p[1];
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
    atomic_store(&r->started, 1);
    atomic_fetch_add(&r->refs, 1); /* the receiver's */
    /* From the main thread the helper is spawned right here (see spawn.c); from
     * any other thread, the receiver asks the spawner thread. */
    if (gettid() == getpid()) {
        r->spawn_err = cv_spawn_helper(r, r->spawn_msg, sizeof r->spawn_msg);
        if (!r->spawn_err) r->spawned = 1;
    }

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t t;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the host's signals are not ours */
    int e = pthread_create(&t, &attr, cv_receiver_main, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (e) {
        cv_run_fail(r, CV_ERR_SPAWN, "cannot start the supervisor thread: %s", strerror(e));
        cv_run_announce_end(r);
        atomic_fetch_sub(&r->refs, 1);
    }
    *done_fd = p[0];
    return 0;
}

CV_API int cv_run_kill(cv_run *r) {
    if (!r) return CV_ERR_INVALID;
    if (!atomic_load(&r->started) || atomic_load(&r->finished)) return 0;
    atomic_store(&r->kill_requested, 1);
    uint64_t one = 1;
    if (write(r->ctl_efd, &one, sizeof one) < 0 && errno != EAGAIN) return -errno;
    return 0;
}

CV_API int cv_run_signal(cv_run *r, int sig) {
    if (!r || sig <= 0 || sig >= 65) return CV_ERR_INVALID;
    if (!atomic_load(&r->started) || atomic_load(&r->finished) || r->init_pid <= 0) return 0;
    pid_t pid = cv_tree_main(r);
    if (pid <= 0) return 0; /* not running yet, or over */
    /* Signalled through a pidfd taken while the pid is still the sandbox's: a pid reused in
     * between is never another process of the user's. */
    int fd = (int)syscall(__NR_pidfd_open, pid, 0);
    if (fd < 0) return errno == ESRCH ? 0 : -errno;
    int rc = 0;
    if (cv_tree_is_member(r, pid) && syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) < 0 && errno != ESRCH)
        rc = -errno;
    close(fd);
    return rc;
}

static void mark_finished(struct cv_run *r) {
    atomic_store(&r->finished, 1);
    uint64_t one = 1;
    if (r->fin_efd >= 0 && write(r->fin_efd, &one, sizeof one) < 0) { /* counter full: still readable */ }
}

void cv_run_announce_end(struct cv_run *r) {
    mark_finished(r);
    close(r->done_w);
    r->done_w = -1;
    if (r->note_fd >= 0) {
        /* Blocks only while the caller is behind by a socket buffer of ends. */
        if (CV_RETRY(send(r->note_fd, &r->end_note, sizeof r->end_note, MSG_NOSIGNAL)) < 0) { /* caller gone */ }
        close(r->note_fd);
        r->note_fd = -1;
    }
}

/* Self-pipe for cv_run_wait_forwarding: the handler may run on any thread. */
static int sig_pipe[2] = {-1, -1};
static pthread_once_t sig_once = PTHREAD_ONCE_INIT;
static void sig_pipe_init(void) {
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) sig_pipe[0] = sig_pipe[1] = -1;
}
static void on_forwarded_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) { /* pipe full: a signal is pending anyway */ }
    errno = saved;
}

CV_API int cv_run_wait_forwarding(cv_run *r, int interactive) {
    if (!r) return CV_ERR_INVALID;
    if (!atomic_load(&r->started)) return CV_ERR_STATE;
    pthread_once(&sig_once, sig_pipe_init);
    if (sig_pipe[0] < 0) return CV_ERR_NOMEM;
    static const int sigs[] = {SIGTERM, SIGHUP, SIGINT, SIGQUIT};
    struct sigaction old[4], sa = {.sa_handler = on_forwarded_signal};
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &sa, &old[i]);
    int forwarded = 0;
    while (!atomic_load(&r->finished)) {
        struct pollfd pf[2] = {{r->fin_efd, POLLIN, 0}, {sig_pipe[0], POLLIN, 0}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR) break;
        unsigned char b;
        while (read(sig_pipe[0], &b, 1) == 1) {
            if (interactive && (b == SIGINT || b == SIGQUIT)) continue;
            forwarded = b;
            cv_run_kill(r);
        }
    }
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &old[i], NULL);
    return forwarded;
}

CV_API int cv_run_get_result(cv_run *r, cv_run_result *out) {
    if (!r || !out) return CV_ERR_INVALID;
    if (!atomic_load(&r->finished)) return CV_ERR_STATE;
    *out = r->result;
    return 0;
}

CV_API int cv_run_stats_json(cv_run *r, char *buf, size_t len) {
    if (!r) return CV_ERR_INVALID;
    size_t need = 0;
    char tmp[96];
    int first = 1;
#define PUT(s)                                                                 \
    do {                                                                       \
        size_t l_ = strlen(s);                                                 \
        if (buf && need + l_ < len) memcpy(buf + need, s, l_);                 \
        need += l_;                                                            \
    } while (0)
    PUT("{");
    for (int nr = 0; nr < CV_MAX_NR; nr++) {
        unsigned long c = atomic_load(&r->counts[nr]);
        if (!c) continue;
        const char *name = cv_syscall_name(nr);
        if (name) snprintf(tmp, sizeof tmp, "%s\"%s\":%lu", first ? "" : ",", name, c);
        else snprintf(tmp, sizeof tmp, "%s\"syscall_%d\":%lu", first ? "" : ",", nr, c);
        PUT(tmp);
        first = 0;
    }
    PUT("}");
#undef PUT
    if (buf && len) buf[need < len ? need : len - 1] = 0;
    return (int)need;
}

static void run_destroy(struct cv_run *r) {
    for (int i = 0; i < 3; i++) /* still ours only if the receiver never ran */
        if (atomic_load(&r->started) && r->stdio[i] >= 0) close(r->stdio[i]);
    int *fds[] = {&r->upper_fd, &r->work_fd,     &r->ctl_efd,  &r->fin_efd,  &r->ending_efd,
                  &r->done_w,   &r->init_pidfd, &r->status_r, &r->go_w,     &r->listener};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (*fds[i] >= 0) close(*fds[i]);
    for (size_t i = 0; i < r->argc; i++) free(r->argv[i]);
    for (size_t i = 0; i < r->envc; i++) free(r->envp[i]);
    for (size_t i = 0; i < r->nhide; i++) free(r->hide[i]);
    for (size_t i = 0; i < r->nallow_unix; i++) free(r->allow_unix[i]);
    free(r->allow_unix);
    free(r->net_rules);
    if (r->hook_fd >= 0) close(r->hook_fd);
    if (r->trace_fd >= 0) close(r->trace_fd);
    if (r->divert_fd >= 0) close(r->divert_fd);
    if (r->grant_fd >= 0) close(r->grant_fd);
    if (r->note_fd >= 0) close(r->note_fd);
    for (size_t i = 0; i < r->nabstract; i++) free(r->abstract[i]);
    free(r->abstract);
    cv_unames_free(r);
    cv_limits_free(r);
    cv_run_denials_free(r);
    cv_locks_free(r);
    pthread_mutex_destroy(&r->state_lock);
    pthread_mutex_destroy(&r->deny_lock);
    pthread_mutex_destroy(&r->abstract_lock);
    cv_ptys_free(r);
    pthread_mutex_destroy(&r->pty_lock);
    for (int i = 0; i < r->nlower; i++) {
        free(r->lower[i]);
        close(r->lower_fd[i]);
    }
    cv_lower_cache_free(r);
    cv_wmemo_free(r);
    cv_answers_free(r);
    free(r->misses);
    for (size_t i = 0; i < r->ncopied; i++) free(r->copied[i].vpath);
    free(r->copied);
    free(r->copied_index);
    for (size_t i = 0; i < r->ncwd; i++) {
        free(r->cwds[i].vpath);
        if (r->cwds[i].fd >= 0) close(r->cwds[i].fd);
    }
    for (size_t i = 0; i < r->nfifo; i++) close(r->fifo_waits[i].dir);
    free(r->fifo_waits);
    pthread_mutex_destroy(&r->fifo_lock);
    for (size_t i = 0; i < r->nexe; i++) free(r->exes[i].vpath);
    free(r->exes);
    for (size_t i = 0; i < r->nrelay; i++) {
        free(r->relays[i].exe);
        free(r->relays[i].plan);
        if (r->relays[i].fd >= 0) close(r->relays[i].fd);
    }
    free(r->relays);
    free(r->cwds);
    cv_moved_free(r);
    cv_alias_free(r);
    free(r->argv);
    free(r->envp);
    free(r->hide);
    free(r->cwd);
    free(r->hostname);
    free(r->upper);
    free(r->upper_want);
    free(r->work_want);
    free(r->helper);
    free(r);
}

void cv_run_unref(struct cv_run *r) {
    if (atomic_fetch_sub(&r->refs, 1) == 1) run_destroy(r);
}

CV_API void cv_run_free(cv_run *r) {
    if (!r) return;
    cv_run_kill(r);
    cv_run_unref(r);
}

CV_API int cv_pipe(int fds[2]) {
    if (!fds) return CV_ERR_INVALID;
    return pipe2(fds, O_CLOEXEC) < 0 ? -errno : 0;
}

CV_API int cv_close(int fd) { return close(fd) < 0 ? -errno : 0; }

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

CV_API int cv_rename_exchange(const char *a, const char *b) {
    if (!a || !b) return CV_ERR_INVALID;
    return syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) < 0 ? -errno : 0;
}

CV_API int cv_abi_version(void) { return CV_ABI_VERSION; }

CV_API int cv_isatty(int fd) { return isatty(fd); }

CV_API const char *cv_strerror(int err) {
    switch (err) {
    case CV_OK: return "CV_OK";
    case CV_ERR_NOMEM: return "CV_ERR_NOMEM";
    case CV_ERR_INVALID: return "CV_ERR_INVALID";
    case CV_ERR_STATE: return "CV_ERR_STATE";
    case CV_ERR_HELPER: return "CV_ERR_HELPER";
    case CV_ERR_SPAWN: return "CV_ERR_SPAWN";
    case CV_ERR_SECCOMP: return "CV_ERR_SECCOMP";
    case CV_ERR_LANDLOCK: return "CV_ERR_LANDLOCK";
    case CV_ERR_HANDSHAKE: return "CV_ERR_HANDSHAKE";
    case CV_ERR_PIDFD: return "CV_ERR_PIDFD";
    case CV_ERR_CWD: return "CV_ERR_CWD";
    default: return err < 0 && err > -4096 ? strerror(-err) : "unknown error";
    }
}
