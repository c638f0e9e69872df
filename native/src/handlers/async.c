/* Calls that may block (a connect that waits for its peer, a send into a full socket, a lock
 * held by another process) run on a thread of their own, which answers the notification when
 * the call returns: the receiver must never wait for a guest, since the other side may be a
 * guest whose own notification is queued behind. The thread owns copies of everything it
 * uses (the listener, the run's end-of-run eventfd, its argument), so it outlives nothing. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/seccomp_defs.h"
#include "handlers.h"

struct job {
    int listener, ending;
    uint64_t id;
    long (*fn)(void *arg, int ending);
    void *arg;
    void (*free_arg)(void *arg);
};

static void *job_main(void *p) {
    struct job *j = p;
    long r = j->fn(j->arg, j->ending);
    struct seccomp_notif_resp resp = {.id = j->id};
    if (r < 0) resp.error = (int32_t)r;
    else resp.val = r;
    ioctl(j->listener, SECCOMP_IOCTL_NOTIF_SEND, &resp); /* fails harmlessly if the guest is gone */
    if (j->free_arg) j->free_arg(j->arg);
    close(j->listener);
    close(j->ending);
    free(j);
    return NULL;
}

struct cv_reply cv_async(struct cv_notif *n, long (*fn)(void *arg, int ending), void *arg,
                         void (*free_arg)(void *arg)) {
    struct job *j = calloc(1, sizeof *j);
    if (!j) {
        if (free_arg) free_arg(arg);
        return cv_err(ENOMEM);
    }
    *j = (struct job){.id = n->req->id, .fn = fn, .arg = arg, .free_arg = free_arg};
    j->listener = fcntl(n->g.listener, F_DUPFD_CLOEXEC, 3);
    j->ending = fcntl(n->run->ending_efd, F_DUPFD_CLOEXEC, 3);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    pthread_t t;
    int e = j->listener < 0 || j->ending < 0 ? EMFILE : pthread_create(&t, &attr, job_main, j);
    pthread_attr_destroy(&attr);
    if (e) {
        if (j->listener >= 0) close(j->listener);
        if (j->ending >= 0) close(j->ending);
        if (free_arg) free_arg(arg);
        free(j);
        return cv_err(e == EMFILE ? EMFILE : EAGAIN);
    }
    return (struct cv_reply){CV_REPLY_DONE, 0, 0};
}
