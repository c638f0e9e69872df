/* Which handler answers which syscall: the filter table's row names its handler family
 * (filter/table.c), and this maps each family to its function. A notified call whose row names
 * none fails ENOSYS (test_filter checks that every row that can notify names one, and that
 * every handler is named by some row). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "filter/table.h"
#include "handlers.h"
#include "supervisor/answers.h"

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

/* What a call may do to the names of the view, as the answer table needs to know before it
 * is made (supervisor/answers.h): decided on the syscall and its flag registers alone, so that
 * no handler's path can forget it. */
static int changes_names(const struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    switch (n->req->data.nr) {
    case __NR_open: return (int)a[1] & O_CREAT ? CV_ANS_MADE : 0;
    case __NR_openat: return (int)a[2] & O_CREAT ? CV_ANS_MADE : 0;
    case __NR_creat:
    case __NR_mkdir:
    case __NR_mkdirat:
    case __NR_mknod:
    case __NR_mknodat:
    case __NR_link:
    case __NR_linkat:
    case __NR_bind: return CV_ANS_MADE;
    /* a symlink can make names below it exist, as a rename brings whole trees */
    case __NR_symlink:
    case __NR_symlinkat: return CV_ANS_MADE | CV_ANS_TREE;
    case __NR_unlink:
    case __NR_unlinkat:
    case __NR_rmdir: return CV_ANS_GONE;
    case __NR_rename:
    case __NR_renameat:
    case __NR_renameat2: return CV_ANS_GONE | CV_ANS_MADE | CV_ANS_TREE;
    default: return 0;
    }
}

struct cv_reply cv_dispatch(struct cv_notif *n) {
    pthread_once(&once, build);
    int nr = n->req->data.nr;
    cv_handler_fn fn = nr >= 0 && nr < CV_MAX_NR ? by_nr[nr] : NULL;
    int what = changes_names(n);
    /* A rename moves whole trees, a symlink makes all the names below it: every record of their
     * kind goes. A call that makes or removes one name with nothing below it says which
     * (cv_notif_naming) before it acts, and only that name's record goes. */
    if (what & CV_ANS_TREE) cv_answers_changing(n->run, what);
    n->names_told = 0;
    struct cv_reply rep = fn ? fn(n) : cv_err(ENOSYS);
    /* A way of changing a name that did not say which: late, but not a second late. */
    if (what && !(what & CV_ANS_TREE) && !n->names_told && rep.kind != CV_REPLY_ERRNO)
        cv_answers_changing(n->run, what);
    return rep;
}
