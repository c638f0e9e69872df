/* The spawner: one long-lived thread that forks every cvisor-helper (or the
 * main thread itself, when cv_run_start is called from it).
 * PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so
 * forking from a short-lived thread (a receiver, or a koffi async worker)
 * would kill sandboxes at random. This thread lives as long as the process. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/proto.h"
#include "common/util.h"
#include "filter/table.h"
#include "run.h"

struct spawn_req {
    struct cv_run *run;
    int err;
    char *msg;
    size_t msglen;
    int done;
    struct spawn_req *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t finished = PTHREAD_COND_INITIALIZER;
static struct spawn_req *queue;
static int thread_started;

static int above_targets(int fd) {
    if (fd < 0 || fd > CV_HELPER_GO_FD + 1) return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, CV_HELPER_GO_FD + 2);
    close(fd);
    return moved;
}

static int do_spawn(struct cv_run *r, char *msg, size_t msglen) {
    if (access(r->helper, X_OK) < 0) {
        snprintf(msg, msglen, "cvisor-helper not found or not executable at %s: %s (run npm install)",
                 r->helper, strerror(errno));
        return CV_ERR_HELPER;
    }
    /* The Landlock ruleset goes to the helper as fd 5: the cached one directly; else a
     * socket on which it is sent once built, so that the build overlaps the helper's exec. */
    cv_autoclose int ruleset = cv_ruleset_cached(r);
    int sock[2] = {-1, -1};
    if (ruleset < 0) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock) < 0) {
            snprintf(msg, msglen, "socketpair: %s", strerror(errno));
            return CV_ERR_SPAWN;
        }
        ruleset = sock[1];
    }
    int status[2] = {-1, -1}, go[2] = {-1, -1};
    if (pipe2(status, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) {
        snprintf(msg, msglen, "pipe: %s", strerror(errno));
        if (status[0] >= 0) { close(status[0]); close(status[1]); }
        if (sock[0] >= 0) close(sock[0]);
        return CV_ERR_SPAWN;
    }
    /* The child's dup2s run in order onto fds 0..5: no source may sit below 6,
     * or an earlier dup2 would overwrite it. */
    status[1] = above_targets(status[1]);
    go[0] = above_targets(go[0]);
    ruleset = above_targets(ruleset);
    /* argv: helper init --ppid P [--cwd D] [--no-network] [--ctty] [--hook NRS] [--host-view] --ruleset-* 5 -- argv... */
    size_t n = 0;
    char **av = calloc(r->argc + 15, sizeof *av);
    if (!av) {
        snprintf(msg, msglen, "out of memory");
        close(status[0]); close(status[1]); close(go[0]); close(go[1]);
        if (sock[0] >= 0) close(sock[0]);
        return CV_ERR_NOMEM;
    }
    char ppid[32];
    snprintf(ppid, sizeof ppid, "%d", (int)getpid());
    av[n++] = r->helper;
    av[n++] = "init";
    av[n++] = "--ppid";
    av[n++] = ppid;
    if (r->cwd) { av[n++] = "--cwd"; av[n++] = r->cwd; }
    if (r->network == CV_NET_DENY) av[n++] = "--no-network";
    if (r->ctty) av[n++] = "--ctty";
    /* The syscalls the embedder hooks or traces: notified whatever their rows say. */
    char hooks[CV_MAX_NR * 4];
    size_t hl = 0;
    for (int nr = 0; nr < CV_MAX_NR; nr++)
        if (cv_nr_in(r->hooked, nr) || cv_nr_in(r->traced, nr) || cv_limits_counts(r, nr))
            hl += (size_t)snprintf(hooks + hl, sizeof hooks - hl, "%s%d", hl ? "," : "", nr);
    if (hl) { av[n++] = "--hook"; av[n++] = hooks; }
    /* No snapshot layer and nothing in an upper yet: the guest sees the host (minus hidden
     * paths), so the helper may look the command up before its filter (helper/init.c). */
    if (r->nlower == 0 && !r->upper) av[n++] = "--host-view";
    av[n++] = sock[0] >= 0 ? "--ruleset-sock" : "--ruleset-fd";
    av[n++] = "5";
    av[n++] = "--";
    for (size_t i = 0; i < r->argc; i++) av[n++] = r->argv[i];
    av[n] = NULL;
    char *empty_env[] = {NULL};

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    for (int i = 0; i < 3; i++) {
        if (r->stdio[i] >= 0) posix_spawn_file_actions_adddup2(&fa, r->stdio[i], i);
        else posix_spawn_file_actions_addopen(&fa, i, "/dev/null", i ? O_WRONLY : O_RDONLY, 0);
    }
    posix_spawn_file_actions_adddup2(&fa, status[1], CV_HELPER_STATUS_FD);
    posix_spawn_file_actions_adddup2(&fa, go[0], CV_HELPER_GO_FD);
    posix_spawn_file_actions_adddup2(&fa, ruleset, CV_HELPER_GO_FD + 1);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    /* Node ignores SIGPIPE; the guest must not inherit that. */
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_USEVFORK);
    pid_t pid;
    int e = posix_spawn(&pid, r->helper, &fa, &attr, av, r->envp ? r->envp : empty_env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    free(av);
    close(status[1]);
    close(go[0]);
    if (e) {
        close(status[0]);
        close(go[1]);
        if (sock[0] >= 0) close(sock[0]);
        snprintf(msg, msglen, "cannot start cvisor-helper: %s", strerror(e));
        return CV_ERR_SPAWN;
    }
    if (sock[0] >= 0) {
        /* The helper execs meanwhile. If the build fails, it sees the socket close and
         * reports; the message here is the more precise one. */
        int built = cv_ruleset_for(r, msg, msglen);
        if (built >= 0) {
            cv_send_fd(sock[0], built, 'r');
            close(built);
        }
        close(sock[0]);
        if (built < 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            close(status[0]);
            close(go[1]);
            return CV_ERR_LANDLOCK;
        }
    }
    r->init_pid = pid;
    r->status_r = status[0];
    r->go_w = go[1];
    return 0;
}

static void *spawner_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!queue) pthread_cond_wait(&work, &mu);
        struct spawn_req *q = queue;
        queue = q->next;
        pthread_mutex_unlock(&mu);
        q->err = do_spawn(q->run, q->msg, q->msglen);
        pthread_mutex_lock(&mu);
        q->done = 1;
        pthread_cond_broadcast(&finished);
    }
    return NULL;
}

int cv_spawn_helper(struct cv_run *r, char *msg, size_t msglen) {
    /* The process's main thread lives as long as the process, like the spawner:
     * spawning from it directly saves a thread wake-up on a busy host (Node's
     * main thread is where library calls come from). */
    if (gettid() == getpid()) return do_spawn(r, msg, msglen);
    struct spawn_req q = {.run = r, .msg = msg, .msglen = msglen};
    pthread_mutex_lock(&mu);
    if (!thread_started) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        /* The spawner must not take signals meant for the host process. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int e = pthread_create(&t, &attr, spawner_main, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (e) {
            pthread_mutex_unlock(&mu);
            snprintf(msg, msglen, "cannot start the spawner thread: %s", strerror(e));
            return CV_ERR_SPAWN;
        }
        thread_started = 1;
    }
    q.next = queue;
    queue = &q;
    pthread_cond_signal(&work);
    while (!q.done) pthread_cond_wait(&finished, &mu);
    pthread_mutex_unlock(&mu);
    return q.err;
}
