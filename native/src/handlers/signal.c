/* Calls aimed at other processes: the kill family (only notified when Landlock
 * cannot scope signals, ABI < 6) and limits/scheduling of another pid. They
 * may only reach this sandbox's processes, never the init or the host. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "handlers.h"

static int member(struct cv_notif *n, pid_t pid) {
    return pid == cv_guest_tgid(&n->g) || cv_tree_is_member(n->run, pid);
}

static int send_sig(pid_t pid, void *arg) { return kill(pid, *(int *)arg); }

/* kill(0|-pgrp|-1, sig): deliver to the members of the group, never beyond. */
static struct cv_reply group_kill(struct cv_notif *n, pid_t pid, int sig) {
    pid_t pgrp = 0;
    if (pid == 0) pgrp = getpgid(cv_guest_tgid(&n->g));
    else if (pid < -1) pgrp = -pid;
    int count = cv_tree_each(n->run, pgrp, sig ? send_sig : NULL, &sig);
    return count > 0 ? cv_val(0) : cv_err(ESRCH);
}

struct cv_reply cv_h_signal(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    pid_t target;
    switch (n->req->data.nr) {
    case __NR_kill: {
        pid_t pid = (pid_t)a[0];
        if (pid <= 0) return group_kill(n, pid, (int)a[1]);
        target = pid;
        break;
    }
    case __NR_setpriority:
    case __NR_ioprio_set:
        /* which: only the per-process form may name another process */
        if ((int)a[0] != (n->req->data.nr == __NR_setpriority ? 0 : 1)) return cv_err(EPERM);
        target = (pid_t)a[1];
        break;
    case __NR_pidfd_send_signal: {
        /* The pidfd is fetched once; unless the guest's fd table cannot change before the reply,
         * the signal is sent on that copy (the supervisor shows as the sender). */
        int stable = cv_guest_fds_stable(&n->g);
        cv_autoclose int s = cv_guest_fd(&n->g, (int)a[0]);
        if (s < 0) return cv_err(EBADF);
        target = cv_pidfd_pid(s);
        if (target <= 0) return cv_err(target == 0 ? ESRCH : EBADF);
        if (!member(n, target)) return cv_err(ESRCH);
        if (stable) return cv_continue();
        return syscall(__NR_pidfd_send_signal, s, (int)a[1], NULL, 0) < 0 ? cv_err(errno) : cv_val(0);
    }
    default: /* tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo prlimit64 sched_set* */
        target = (pid_t)a[0];
    }
    if (target == 0) return cv_continue();
    if (!member(n, target)) return cv_err(n->req->data.nr == __NR_kill ? EPERM : ESRCH);
    return cv_continue();
}
