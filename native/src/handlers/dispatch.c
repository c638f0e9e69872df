/* Which handler answers which syscall: the filter table's row names its handler family
 * (filter/table.c), and this maps each family to its function. A notified call whose row names
 * none fails ENOSYS (test_filter checks that every row that can notify names one, and that
 * every handler is named by some row). */
#include <errno.h>
#include <pthread.h>

#include "filter/table.h"
#include "handlers.h"

static const cv_handler_fn handlers[CV_H_COUNT] = {
    [CV_H_OPEN] = cv_h_open,         [CV_H_EXEC] = cv_h_exec,     [CV_H_MUTATE] = cv_h_mutate,
    [CV_H_META] = cv_h_meta,         [CV_H_STAT] = cv_h_stat,     [CV_H_DIRENT] = cv_h_dirent,
    [CV_H_CWD] = cv_h_cwd,           [CV_H_SOCK] = cv_h_sock,     [CV_H_SIGNAL] = cv_h_signal,
    [CV_H_IDENTITY] = cv_h_identity, [CV_H_IOCTL] = cv_h_ioctl,   [CV_H_LOCK] = cv_h_lock,
};

static cv_handler_fn by_nr[CV_MAX_NR];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build(void) {
    for (size_t i = 0; i < cv_syscalls_len; i++) {
        const struct cv_syscall *s = &cv_syscalls[i];
        if (s->nr >= 0 && s->nr < CV_MAX_NR && s->handler < CV_H_COUNT) by_nr[s->nr] = handlers[s->handler];
    }
}

cv_handler_fn cv_handler_of(int handler) {
    return handler > CV_H_NONE && handler < CV_H_COUNT ? handlers[handler] : NULL;
}

struct cv_reply cv_dispatch(struct cv_notif *n) {
    pthread_once(&once, build);
    int nr = n->req->data.nr;
    cv_handler_fn fn = nr >= 0 && nr < CV_MAX_NR ? by_nr[nr] : NULL;
    return fn ? fn(n) : cv_err(ENOSYS);
}
