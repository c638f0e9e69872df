/* The receiver: one thread per run. It spawns the helper (through the
 * spawner thread), takes the seccomp listener, answers notifications inline
 * (so the woken guest thread is answered by the thread that received, which is
 * what SYNC_WAKE_UP rewards; an embedder's hook answers later, see hook.c), enforces the deadline, kills the tree, and
 * reports the result by closing the done pipe. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/proto.h"
#include "common/seccomp_defs.h"
#include "common/util.h"
#include "handlers/handlers.h"
#include "run.h"
#include "common/sysnr.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

struct state {
    int main_exited, others_left, exec_errno, status, have_status, setup_failed;
    int64_t utime_us, stime_us, maxrss_kb;
};

static void handle_record(struct cv_run *r, struct state *s, const struct cv_rec *rec) {
    switch (rec->type) {
    case CV_REC_SETUP_FAILED:
        if (!s->setup_failed) cv_run_fail(r, rec->a, "%s", rec->text);
        s->setup_failed = 1;
        break;
    case CV_REC_EXEC_FAILED:
        s->exec_errno = rec->a;
        break;
    case CV_REC_EXIT:
        s->main_exited = 1;
        s->others_left = rec->b;
        s->have_status = 1;
        s->status = rec->a;
        s->utime_us = rec->utime_us;
        s->stime_us = rec->stime_us;
        s->maxrss_kb = rec->maxrss_kb;
        break;
    default:
        break;
    }
}

/* Read whole records; returns 0 at EOF, 1 when more may come. */
static int drain_status(struct cv_run *r, struct state *s) {
    struct cv_rec rec;
    for (;;) {
        ssize_t n = read(r->status_r, &rec, sizeof rec);
        if (n == (ssize_t)sizeof rec) {
            handle_record(r, s, &rec);
            continue;
        }
        if (n == 0) return 0;
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
        return 0; /* short or failed read: the helper is gone */
    }
}

void cv_receiver_reply(struct cv_run *r, uint64_t id, struct cv_reply rep) {
    struct seccomp_notif_resp resp = {.id = id};
    if (rep.kind == CV_REPLY_CONTINUE) resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    else if (rep.kind == CV_REPLY_ERRNO) resp.error = -(rep.err ? rep.err : EIO);
    else resp.val = rep.val;
    ioctl(r->listener, SECCOMP_IOCTL_NOTIF_SEND, &resp); /* ENOENT: the caller died meanwhile */
}

static void answer(struct cv_run *r, struct seccomp_notif *req) {
    memset(req, 0, sizeof *req);
    if (ioctl(r->listener, SECCOMP_IOCTL_NOTIF_RECV, req) < 0) return; /* ENOENT: the caller died */
    int nr = req->data.nr;
    if (nr >= 0 && nr < CV_MAX_NR) atomic_fetch_add_explicit(&r->counts[nr], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->total, 1, memory_order_relaxed);
    struct cv_notif n;
    cv_notif_init(&n, r, req);
    struct cv_reply rep;
    if (cv_limits_counts(r, nr)) {
        /* Notified for the pids limit alone: counted, then the hook (if any) or the kernel. */
        rep = cv_limits_fork(&n);
        if (rep.kind == CV_REPLY_CONTINUE && cv_hook_wants(r, nr)) rep = cv_hook_answer(&n);
    } else {
        rep = cv_hook_wants(r, nr) ? cv_hook_answer(&n) : cv_dispatch(&n);
    }
    if (rep.kind != CV_REPLY_DONE) cv_receiver_reply(r, req->id, rep);
}

/* Spawn, then take the listener the helper announces. 0 or a cv_error (result filled). */
static int handshake(struct cv_run *r, struct state *s) {
    char msg[256] = "";
    int e = r->spawn_err;
    if (e) snprintf(msg, sizeof msg, "%s", r->spawn_msg);
    else if (!r->spawned) e = cv_spawn_helper(r, msg, sizeof msg);
    if (e) {
        cv_run_fail(r, e, "%s", msg);
        return e;
    }
    r->init_pidfd = (int)syscall(__NR_pidfd_open, r->init_pid, 0);
    if (r->init_pidfd < 0) {
        cv_run_fail(r, CV_ERR_PIDFD, "pidfd_open: %s (Linux 5.3 or later is needed)", strerror(errno));
        kill(r->init_pid, SIGKILL);
        waitpid(r->init_pid, NULL, 0);
        return CV_ERR_PIDFD;
    }
    struct cv_rec rec;
    ssize_t n = cv_read_full(r->status_r, &rec, sizeof rec);
    if (n != (ssize_t)sizeof rec || rec.type != CV_REC_LISTENER) {
        if (n == (ssize_t)sizeof rec) handle_record(r, s, &rec);
        else cv_run_fail(r, CV_ERR_HANDSHAKE, "cvisor-helper exited before the sandbox was ready");
        return CV_ERR_HANDSHAKE;
    }
    r->listener = (int)syscall(__NR_pidfd_getfd, r->init_pidfd, rec.a, 0);
    if (r->listener < 0) {
        cv_run_fail(r, CV_ERR_PIDFD, "pidfd_getfd of the seccomp listener: %s", strerror(errno));
        return CV_ERR_PIDFD;
    }
    ioctl(r->listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
    /* Into its cgroups while it waits for go: no guest code runs outside its limits. */
    if ((e = cv_limits_join(r, msg, sizeof msg)) != 0) {
        cv_run_fail(r, e, "%s", msg);
        return e;
    }
    if (cv_write_full(r->go_w, "g", 1) != 1) {
        cv_run_fail(r, CV_ERR_HANDSHAKE, "cvisor-helper exited before the sandbox was ready");
        return CV_ERR_HANDSHAKE;
    }
    close(r->go_w);
    r->go_w = -1;
    fcntl(r->status_r, F_SETFL, O_NONBLOCK);
    return 0;
}

static void finish(struct cv_run *r, struct state *s, int timed_out, int killed) {
    cv_run_result *res = &r->result;
    if (res->state != CV_RUN_FAILED) {
        res->exit_code = -1;
        if (s->exec_errno) {
            res->state = CV_RUN_EXEC_FAILED;
            res->exec_errno = s->exec_errno;
        } else if (s->have_status && WIFSIGNALED(s->status)) {
            res->state = CV_RUN_SIGNALED;
            res->signal = WTERMSIG(s->status);
        } else if (s->have_status) {
            res->state = CV_RUN_EXITED;
            res->exit_code = WEXITSTATUS(s->status);
        } else {
            /* the init died without reporting: it was killed */
            res->state = CV_RUN_SIGNALED;
            res->signal = SIGKILL;
        }
    }
    res->timed_out = timed_out;
    res->killed = killed;
    res->user_ms = (double)s->utime_us / 1e3;
    res->system_ms = (double)s->stime_us / 1e3;
    res->max_rss_kb = s->maxrss_kb;
    res->notifications = atomic_load(&r->total);
    pthread_mutex_lock(&r->deny_lock);
    res->denials = (int32_t)r->ndeny;
    pthread_mutex_unlock(&r->deny_lock);
    res->duration_ms = cv_ms_since(&r->t0);
}

void *cv_receiver_main(void *arg) {
    struct cv_run *r = arg;
    struct state s = {0};
    int timed_out = 0, killed = 0, over_limit = 0;
    struct seccomp_notif_sizes sizes = {0};
    syscall(__NR_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes);
    size_t req_size = sizes.seccomp_notif > sizeof(struct seccomp_notif) ? sizes.seccomp_notif : sizeof(struct seccomp_notif);
    struct seccomp_notif *req = calloc(1, req_size);

    if (!req) {
        cv_run_fail(r, CV_ERR_NOMEM, "out of memory");
    } else {
        /* A helper that never got its go byte would wait for it forever. */
        if (handshake(r, &s) != 0 && r->init_pid > 0) kill(r->init_pid, SIGKILL);
        else cv_limits_start(r);
    }
    if (req && r->init_pidfd >= 0) {
        int status_open = r->status_r >= 0, listening = r->listener >= 0;
        /* Ending: the tree is killed, and killed again every few ms until the init
         * is gone (a guest forked after a scan, or before the first one, is caught by
         * the next); after a grace period the init itself goes. */
        int ending = 0;
        struct timespec end_t0 = {0};
        for (;;) {
            struct pollfd pf[7] = {
                {listening ? r->listener : -1, POLLIN, 0},
                {status_open ? r->status_r : -1, POLLIN, 0},
                {r->ctl_efd, POLLIN, 0},
                {r->init_pidfd, POLLIN, 0},
                {cv_hook_readable(r) ? r->hook_fd : -1, POLLIN, 0}, /* answers for parked calls */
                {over_limit ? -1 : r->oom_efd, POLLIN, 0},
                {r->grant_fd, POLLIN, 0},
            };
            int wait_ms = -1;
            if (r->timeout_ms && !timed_out) {
                double left = r->timeout_ms - cv_ms_since(&r->t0);
                wait_ms = left <= 0 ? 0 : (int)left + 1;
            }
            if (cv_limits_watching(r) && (wait_ms < 0 || wait_ms > 20)) wait_ms = 20;
            if (ending) wait_ms = 10;
            int pr = poll(pf, 7, wait_ms);
            if (pr < 0 && errno != EINTR) break;
            if (pf[0].revents & POLLIN) answer(r, req);
            if (pf[4].revents) cv_hook_replies(r);
            else if (pf[0].revents & (POLLHUP | POLLERR | POLLNVAL)) listening = 0;
            if (pf[6].revents && cv_grants_read(r) < 0) close(r->grant_fd), r->grant_fd = -1;
            if (pf[1].revents) status_open = drain_status(r, &s);
            if (pf[2].revents & POLLIN) {
                uint64_t v;
                if (read(r->ctl_efd, &v, sizeof v) < 0) { /* spurious */ }
                if (atomic_load(&r->kill_requested) && !killed) killed = 1;
            }
            if ((pf[5].revents & POLLIN) && cv_limits_oom(r)) over_limit = 1;
            if (!ending && cv_limits_watching(r) && cv_limits_tick(r)) over_limit = 1;
            if (cv_limits_disk_over(r)) over_limit = 1; /* over a limit: the run ends */
            if (r->timeout_ms && !timed_out && cv_ms_since(&r->t0) >= r->timeout_ms) timed_out = 1;
            /* The main guest is gone, or the run must end: nothing of the tree survives it. */
            int must_end = (s.main_exited && s.others_left) || timed_out || killed || over_limit ||
                           s.setup_failed;
            if (must_end && !ending) {
                ending = 1;
                clock_gettime(CLOCK_MONOTONIC, &end_t0);
            }
            if (ending == 1) {
                uint64_t one = 1;
                if (write(r->ending_efd, &one, sizeof one) < 0) { /* counter full: readable anyway */ }
                ending = 2;
            }
            if (ending && !(pf[3].revents & POLLIN)) {
                cv_tree_kill(r);
                if (cv_ms_since(&end_t0) > 2000) kill(r->init_pid, SIGKILL); /* should have left by now */
            }
            if (pf[3].revents & POLLIN) {
                siginfo_t si;
                syscall(SYS_waitid, P_PIDFD, r->init_pidfd, &si, WEXITED, NULL);
                if (status_open) drain_status(r, &s);
                break;
            }
        }
    }
    if (r->init_pid > 0 && r->init_pidfd < 0) waitpid(r->init_pid, NULL, 0);
    uint64_t one = 1;
    if (r->ending_efd >= 0 && write(r->ending_efd, &one, sizeof one) < 0) { /* readable anyway */ }
    cv_limits_stop(r); /* after the ending_efd write: the disk thread has left its wait */
    cv_prefetch_stop(r);
    cv_fifo_release_all(r);
    cv_hook_drop_parked(r);
    finish(r, &s, timed_out, killed);
    free(req);
    /* Our copies of the stdio fds go now, so captured pipes reach EOF with the run. */
    for (int i = 0; i < 3; i++)
        if (r->stdio[i] >= 0) close(r->stdio[i]), r->stdio[i] = -1;
    cv_run_announce_end(r);
    cv_run_unref(r);
    return NULL;
}
