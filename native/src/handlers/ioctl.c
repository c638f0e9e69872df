/* ioctl requests the filter did not allow (the safe ones, filter/rules.h, never come here),
 * decided on our copy of the guest's fd:
 *  - a host object (a file or directory of the host or of a snapshot layer, a device the guest
 *    may not write) is never changed: ENOTTY, as for a request the object does not know;
 *  - a pidfd of a process outside the sandbox: ENOTTY (what it tells is not the guest's);
 *  - TIOCGPTPEER: the slave of our copy of the master, opened here (handlers/pty.c);
 *  - anything else (a file of the sandbox, a pipe, a socket, an eventfd, the guest's terminal,
 *    the master of a pty it made) is the kernel's to answer: CONTINUE, when the guest's fd table
 *    cannot change before the reply, so the kernel acts on the fd looked at here. A guest with
 *    several threads gets ENOTTY instead: the supervisor does not know the request's argument
 *    to make the call itself, and a continued call could find another fd. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "handlers.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

struct cv_reply cv_h_ioctl(struct cv_notif *n) {
    int stable = cv_guest_fds_stable(&n->g);
    cv_autoclose int s = cv_guest_fd(&n->g, (int)n->req->data.args[0]);
    if (s < 0) return cv_err(s == -ESRCH ? ESRCH : EBADF);
    if ((uint32_t)n->req->data.args[1] == TIOCGPTPEER) return cv_pty_peer(n, s, (unsigned long)n->req->data.args[2]);
    char req[32];
    snprintf(req, sizeof req, "request 0x%llx", (unsigned long long)(uint32_t)n->req->data.args[1]);
    if (cv_fd_of_host(n->run, s)) {
        cv_run_deny(n->run, n->req->data.nr, (pid_t)n->req->pid, req, "an ioctl on a host file or device (not on the safe list)");
        return cv_err(ENOTTY);
    }
    char self[64], link[PATH_MAX];
    snprintf(self, sizeof self, "/proc/self/fd/%d", s);
    if (cv_readlink(self, link, sizeof link) > 0 && !strcmp(link, "anon_inode:[pidfd]")) {
        pid_t pid = cv_pidfd_pid(s);
        if (pid > 0 && !cv_proc_visible(n, pid)) return cv_err(ENOTTY);
    }
    if (stable) return cv_continue();
    cv_run_deny(n->run, n->req->data.nr, (pid_t)n->req->pid, req, "an ioctl not on the safe list, from a multithreaded guest");
    return cv_err(ENOTTY);
}
