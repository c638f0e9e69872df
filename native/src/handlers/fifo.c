/* Opening a FIFO of the upper layer without blocking the receiver. A blocking
 * open waits for the other end, which may be a guest process whose own
 * notification this receiver has yet to answer; so the open runs on a thread
 * of its own, which injects the fd (ADDFD|SEND) when the open returns. When
 * the run ends, every FIFO still waited on is opened once for reading and
 * writing, which lets the pending opens return; their notifications are gone
 * by then, so the fds are dropped. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/seccomp_defs.h"
#include "handlers.h"

struct fifo_job {
    int dir, listener, flags;
    uint64_t id;
    char name[256];
};

static void *fifo_open_thread(void *arg) {
    struct fifo_job *j = arg;
    int fd = openat(j->dir, j->name, (j->flags & ~O_CLOEXEC) | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
    struct seccomp_notif_resp resp = {.id = j->id, .error = fd < 0 ? -errno : 0};
    if (fd >= 0) {
        struct seccomp_notif_addfd add = {.id = j->id, .flags = SECCOMP_ADDFD_FLAG_SEND, .srcfd = (uint32_t)fd,
                                          .newfd_flags = (j->flags & O_CLOEXEC) ? O_CLOEXEC : 0};
        ioctl(j->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add); /* fails harmlessly if the guest is gone */
        close(fd);
    } else {
        ioctl(j->listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
    close(j->dir);
    close(j->listener);
    free(j);
    return NULL;
}

struct cv_reply cv_fifo_open_async(struct cv_notif *n, int dir, const char *name, int flags) {
    struct cv_run *r = n->run;
    struct fifo_job *j = calloc(1, sizeof *j);
    if (!j || strlen(name) >= sizeof j->name) {
        free(j);
        return cv_err(ENOMEM);
    }
    snprintf(j->name, sizeof j->name, "%s", name);
    j->flags = flags;
    j->id = n->req->id;
    j->dir = fcntl(dir, F_DUPFD_CLOEXEC, 3);
    j->listener = fcntl(n->g.listener, F_DUPFD_CLOEXEC, 3);
    /* Remember it for the end of the run (see above). */
    pthread_mutex_lock(&r->fifo_lock);
    struct cv_fifo_wait *w = realloc(r->fifo_waits, (r->nfifo + 1) * sizeof *w);
    if (w) {
        r->fifo_waits = w;
        w[r->nfifo].dir = fcntl(dir, F_DUPFD_CLOEXEC, 3);
        snprintf(w[r->nfifo].name, sizeof w[r->nfifo].name, "%s", name);
        r->nfifo++;
    }
    pthread_mutex_unlock(&r->fifo_lock);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t t;
    int e = (j->dir < 0 || j->listener < 0 || !w) ? EMFILE : pthread_create(&t, &attr, fifo_open_thread, j);
    pthread_attr_destroy(&attr);
    if (e) {
        if (j->dir >= 0) close(j->dir);
        if (j->listener >= 0) close(j->listener);
        free(j);
        return cv_err(e == EMFILE ? EMFILE : EAGAIN);
    }
    return (struct cv_reply){CV_REPLY_DONE, 0, 0};
}

void cv_fifo_release_all(struct cv_run *r) {
    pthread_mutex_lock(&r->fifo_lock);
    for (size_t i = 0; i < r->nfifo; i++) {
        int fd = openat(r->fifo_waits[i].dir, r->fifo_waits[i].name, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0) close(fd);
        close(r->fifo_waits[i].dir);
    }
    free(r->fifo_waits);
    r->fifo_waits = NULL;
    r->nfifo = 0;
    pthread_mutex_unlock(&r->fifo_lock);
}
