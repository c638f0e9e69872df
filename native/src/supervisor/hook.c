/* An embedder's per-syscall hook (cv_run_set_hook), and the trace (cv_run_set_trace, the CLI's
 * --trace) built on the same description. The init compiles the run's filter with the hooked
 * and traced syscalls notified whatever their rows say; here each one is first described to the
 * embedder (number, thread, registers, and the strings its arguments point to, read once from
 * the guest) and its answer awaited: allow, deny with an errno, or a value the call returns
 * without being made. Then the row is applied as the filter would have applied it
 * (cv_policy_eval without hooks, on the same registers): a row's own denial stands whatever the
 * hook says; otherwise a deny or a value is the answer, and an allow continues a native call or
 * dispatches a handled one. So a hook can only make the sandbox stricter: nothing it answers
 * makes a call that cvisor's own rules would refuse, or skips them.
 *
 * A described call is parked until its answer comes (cv_hook_replies, from the receiver's loop):
 * the receiver goes on with the run's other calls meanwhile, so a handler that takes its time
 * holds only the thread that asked. The run's end (exit, kill, deadline) drops what is parked.
 * A hook that is gone (its socket closed, a broken message) fails the calls waiting and every
 * hooked call after it closed, EPERM; the refusal is in the run's denials. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/landlock.h"
#include "common/util.h"
#include "filter/table.h"
#include "guest/guest.h"
#include "handlers/handlers.h"
#include "overlay/vfs.h"
#include "hook.h"
#include "run.h"

typedef struct cv_hook_strings strings_t;

#define P(i) (uint8_t)(1u << (i))
static const strings_t string_args[] = {
    {SYS_open, P(0), -1, -1, -1, 3},          {SYS_openat, P(1), -1, -1, -1, 4},
    {SYS_openat2, P(1), -1, -1, -1, 4},       {SYS_creat, P(0), -1, -1, -1, 2},
    {SYS_stat, P(0), -1, -1, -1, 2},          {SYS_lstat, P(0), -1, -1, -1, 2},
    {SYS_newfstatat, P(1), -1, -1, -1, 4},    {SYS_statx, P(1), -1, -1, -1, 5},
    {SYS_access, P(0), -1, -1, -1, 2},        {SYS_faccessat, P(1), -1, -1, -1, 3},
    {SYS_faccessat2, P(1), -1, -1, -1, 4},    {SYS_readlink, P(0), -1, -1, -1, 3},
    {SYS_readlinkat, P(1), -1, -1, -1, 4},    {SYS_unlink, P(0), -1, -1, -1, 1},
    {SYS_unlinkat, P(1), -1, -1, -1, 3},      {SYS_mkdir, P(0), -1, -1, -1, 2},
    {SYS_mkdirat, P(1), -1, -1, -1, 3},       {SYS_rmdir, P(0), -1, -1, -1, 1},
    {SYS_rename, P(0) | P(1), -1, -1, -1, 2}, {SYS_renameat, P(1) | P(3), -1, -1, -1, 4},
    {SYS_renameat2, P(1) | P(3), -1, -1, -1, 5}, {SYS_link, P(0) | P(1), -1, -1, -1, 2},
    {SYS_linkat, P(1) | P(3), -1, -1, -1, 5}, {SYS_symlink, P(0) | P(1), -1, -1, -1, 2},
    {SYS_symlinkat, P(0) | P(2), -1, -1, -1, 3}, {SYS_chmod, P(0), -1, -1, -1, 2},
    {SYS_fchmodat, P(1), -1, -1, -1, 3},      {SYS_chown, P(0), -1, -1, -1, 3},
    {SYS_lchown, P(0), -1, -1, -1, 3},        {SYS_fchownat, P(1), -1, -1, -1, 5},
    {SYS_truncate, P(0), -1, -1, -1, 2},      {SYS_chdir, P(0), -1, -1, -1, 1},
    {SYS_utimensat, P(1), -1, -1, -1, 4},     {SYS_mknod, P(0), -1, -1, -1, 3},
    {SYS_mknodat, P(1), -1, -1, -1, 4},       {SYS_execve, P(0), 1, -1, -1, 3},
    {SYS_execveat, P(1), 2, -1, -1, 5},       {SYS_connect, 0, -1, 1, 2, 3},
    {SYS_bind, 0, -1, 1, 2, 3},               {SYS_sendto, 0, -1, 4, 5, 6},
};
#undef P

#define ARGV_MAX 64          /* argv items described; the rest are left out */
#define MSG_MAX (64 * 1024)  /* a description stops growing here */

struct msg { char *buf; size_t len, cap; int full; };

static void put(struct msg *m, const void *p, size_t n) {
    if (m->full || m->len + n > MSG_MAX) { m->full = 1; return; }
    if (m->len + n > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        while (cap < m->len + n) cap *= 2;
        char *b = realloc(m->buf, cap);
        if (!b) { m->full = 1; return; }
        m->buf = b;
        m->cap = cap;
    }
    memcpy(m->buf + m->len, p, n);
    m->len += n;
}

static void put_str(struct msg *m, uint32_t *nstr, int what, int arg, const char *s, size_t n) {
    struct cv_hook_str h = {.what = (uint8_t)what, .arg = (uint8_t)arg, .len = (uint32_t)n};
    if (m->len + sizeof h + n > MSG_MAX) return; /* a string that does not fit is left out whole */
    put(m, &h, sizeof h);
    put(m, s, n);
    if (!m->full) (*nstr)++;
}

const struct cv_hook_strings *cv_hook_strings_of(int nr) {
    for (size_t i = 0; i < sizeof string_args / sizeof string_args[0]; i++)
        if (string_args[i].nr == nr) return &string_args[i];
    return NULL;
}

/* The *at calls: their path argument i is relative to the fd in argument i-1. */
static int at_call(int nr) {
    switch (nr) {
    case SYS_openat: case SYS_openat2: case SYS_newfstatat: case SYS_statx: case SYS_faccessat:
    case SYS_faccessat2: case SYS_readlinkat: case SYS_unlinkat: case SYS_mkdirat: case SYS_renameat:
    case SYS_renameat2: case SYS_linkat: case SYS_symlinkat: case SYS_fchmodat: case SYS_fchownat:
    case SYS_utimensat: case SYS_mknodat: case SYS_execveat:
        return 1;
    default:
        return 0;
    }
}

static int open_follows(uint64_t flags) {
    return !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL);
}

/* Whether the call follows a final symlink in its path argument i (as the kernel would). */
static int follows(struct cv_notif *n, const uint64_t *a, int i) {
    uint64_t how = 0;
    switch (n->req->data.nr) {
    case SYS_open: return open_follows(a[1]);
    case SYS_openat: return open_follows(a[2]);
    case SYS_openat2: return cv_guest_peek(&n->g, a[2], &how, sizeof how) == 0 && open_follows(how);
    case SYS_creat: case SYS_stat: case SYS_access: case SYS_faccessat: case SYS_chmod: case SYS_fchmodat:
    case SYS_chown: case SYS_truncate: case SYS_chdir: case SYS_execve:
        return 1;
    case SYS_newfstatat: case SYS_faccessat2: case SYS_utimensat: return !(a[3] & AT_SYMLINK_NOFOLLOW);
    case SYS_statx: return !(a[2] & AT_SYMLINK_NOFOLLOW);
    case SYS_fchownat: case SYS_execveat: return !(a[4] & AT_SYMLINK_NOFOLLOW);
    case SYS_linkat: return i == 1 && (a[4] & AT_SYMLINK_FOLLOW);
    default: return 0; /* lstat, lchown, readlink, and the calls that make, remove or rename a name */
    }
}

/* Path argument i resolved in the sandbox's view, into m after its text: the hook sees what the
 * call acts on, not only what it wrote (relative to its cwd or an fd, through symlinks). The
 * guest's memory and fds are read once for the whole call (the memo), so the handler resolves
 * from the same text and the same fds. */
static void put_resolved(struct cv_notif *n, struct msg *m, uint32_t *nstr, const uint64_t *a, int i,
                         const char *path) {
    int nr = n->req->data.nr;
    if (!*path || ((nr == SYS_symlink || nr == SYS_symlinkat) && i == 0)) return; /* a link's text */
    struct cv_vctx c = n->ctx;
    c.nr = -1; /* a refusal is the handler's to report, once */
    struct cv_vnode v;
    int dirfd = at_call(nr) && i > 0 ? (int)a[i - 1] : AT_FDCWD;
    if (cv_vresolve(&c, dirfd, path, CV_RES_PARENT | (follows(n, a, i) ? CV_RES_FOLLOW : 0), &v) < 0) return;
    put_str(m, nstr, CV_HOOK_RESOLVED, i, v.vpath, strlen(v.vpath));
    cv_vnode_release(&v);
}

/* The strings the call's arguments point to, read once (peeks, then one validity check). */
static int describe_strings(struct cv_notif *n, struct msg *m, uint32_t *nstr, int resolve) {
    uint64_t a[6];
    memcpy(a, n->req->data.args, sizeof a);
    const struct cv_hook_strings *s = cv_hook_strings_of(n->req->data.nr);
    if (!s) return 0;
    char buf[PATH_MAX];
    for (int i = 0; i < 6; i++) {
        if (!(s->paths & (1u << i)) || !a[i]) continue;
        ssize_t len = cv_guest_peek_str(&n->g, a[i], buf, sizeof buf);
        if (len < 0) continue;
        put_str(m, nstr, CV_HOOK_PATH, i, buf, (size_t)len);
        if (resolve) put_resolved(n, m, nstr, a, i, buf);
    }
    if (s->argv >= 0 && a[s->argv]) {
        for (int k = 0; k < ARGV_MAX; k++) {
            uint64_t p = 0;
            if (cv_guest_peek(&n->g, a[s->argv] + 8 * (uint64_t)k, &p, sizeof p) < 0 || !p) break;
            ssize_t len = cv_guest_peek_str(&n->g, p, buf, sizeof buf);
            if (len < 0) break;
            put_str(m, nstr, CV_HOOK_ARGV, s->argv, buf, (size_t)len);
        }
    }
    if (s->addr >= 0 && a[s->addr]) {
        size_t len = (size_t)(uint32_t)a[s->addrlen];
        if (len > sizeof buf) len = sizeof buf;
        if (len && cv_guest_peek(&n->g, a[s->addr], buf, len) == 0)
            put_str(m, nstr, CV_HOOK_SOCKADDR, s->addr, buf, len);
    }
    return cv_guest_valid(&n->g) ? 0 : -ESRCH;
}

_Static_assert(CV_MAX_NR == CV_FILTER_NR_MAX, "the run's syscall sets are the filter's");
_Static_assert(sizeof(((struct cv_run *)0)->hook_rbuf) == sizeof(struct cv_hook_reply), "a reply's size");

int cv_hook_wants(const struct cv_run *r, int nr) {
    return (r->hook_fd >= 0 && cv_nr_in(r->hooked, nr)) || (r->trace_fd >= 0 && cv_nr_in(r->traced, nr));
}

/* A hooked call waiting for the embedder's answer, with everything it was decided on: its own
 * copy of the notification (the receiver's buffer is reused), the guest's memo, the description. */
struct cv_hook_parked {
    struct cv_hook_parked *next;
    uint64_t seq;
    uint32_t policy;
    struct seccomp_notif req;
    struct cv_notif n;
    struct msg m;
};

/* The answer to a described call: the row applied as the filter would have, the hook's answer
 * (CV_REPLY_CONTINUE for allow) within it; then the trace line, and the memo ends. */
static struct cv_reply decide(struct cv_notif *n, uint32_t policy, struct cv_reply answer, struct msg *m) {
    struct cv_run *r = n->run;
    const struct seccomp_data *d = &n->req->data;
    uint32_t action = policy & SECCOMP_RET_ACTION_FULL;
    int hooked = r->hook_fd >= 0 && cv_nr_in(r->hooked, d->nr);
    struct cv_reply rep;
    if (hooked && r->hook_dead) {
        const char *name = cv_syscall_name(d->nr);
        cv_run_deny(r, d->nr, (pid_t)n->req->pid, name ? name : "", "the onSyscall hook is gone: the call fails closed");
        rep = cv_err(EPERM);
    } else if (action == SECCOMP_RET_ERRNO) {
        rep = cv_err((int)(policy & SECCOMP_RET_DATA)); /* cvisor's refusal stands, whatever the hook says */
    } else if (answer.kind != CV_REPLY_CONTINUE) {
        rep = answer; /* the hook's errno, or its value: the call is not made */
    } else if (action == SECCOMP_RET_ALLOW) {
        rep = cv_continue(); /* the filter's own ALLOW */
    } else if (action == SECCOMP_RET_USER_NOTIF) {
        n->decided = hooked;
        rep = cv_dispatch(n);
    } else {
        rep = cv_err(ENOSYS);
    }
    if (r->trace_fd >= 0 && cv_nr_in(r->traced, d->nr) && m->buf)
        cv_trace_line(r, (const struct cv_hook_req *)(void *)m->buf, m->buf + sizeof(struct cv_hook_req),
                      m->len - sizeof(struct cv_hook_req), rep.kind, rep.err, rep.val);
    cv_guest_memo_end(&n->g);
    free(m->buf);
    m->buf = NULL;
    return rep;
}

static void hook_gone(struct cv_run *r);

/* Send the description; on success the call waits, parked, for its answer (cv_hook_replies).
 * 0 when parked, -1 when the hook is gone (the caller decides at once, closed). */
static int park(struct cv_notif *n, uint32_t policy, struct msg *m, uint64_t seq) {
    struct cv_run *r = n->run;
    struct cv_hook_parked *p = calloc(1, sizeof *p);
    if (!p) return -1;
    if (cv_write_full(r->hook_fd, m->buf, m->len) != (ssize_t)m->len) {
        free(p);
        hook_gone(r);
        return -1;
    }
    p->seq = seq;
    p->policy = policy;
    p->req = *n->req;
    p->n = *n;
    p->n.req = &p->req;
    p->n.ctx.guest = &p->n.g;
    p->m = *m;
    p->next = r->hook_parked;
    r->hook_parked = p;
    return 0;
}

static void finish_parked(struct cv_hook_parked *p, struct cv_reply answer) {
    struct cv_reply rep = decide(&p->n, p->policy, answer, &p->m);
    if (rep.kind != CV_REPLY_DONE) cv_receiver_reply(p->n.run, p->req.id, rep);
    free(p);
}

/* The hook stopped answering: every call waiting for it fails closed now, and every one to come. */
static void hook_gone(struct cv_run *r) {
    r->hook_dead = 1;
    while (r->hook_parked) {
        struct cv_hook_parked *p = r->hook_parked;
        r->hook_parked = p->next;
        finish_parked(p, cv_err(EPERM));
    }
}

static struct cv_hook_parked *unpark(struct cv_run *r, uint64_t seq) {
    for (struct cv_hook_parked **pp = &r->hook_parked; *pp; pp = &(*pp)->next) {
        if ((*pp)->seq != seq) continue;
        struct cv_hook_parked *p = *pp;
        *pp = p->next;
        return p;
    }
    return NULL;
}

/* The answer a reply gives: continue (allow), an errno or a value; EPERM and a dead hook for a
 * reply that is none of these. */
static struct cv_reply answer_of(struct cv_run *r, const struct cv_hook_reply *rep) {
    if (rep->action == CV_HOOK_ALLOW) return cv_continue();
    if (rep->action == CV_HOOK_RESULT) return cv_val(rep->value);
    if (rep->action != CV_HOOK_DENY || rep->err < 0 || rep->err >= 4096) {
        r->hook_dead = 1;
        return cv_err(EPERM);
    }
    return cv_err(rep->err ? rep->err : EPERM);
}

int cv_hook_readable(const struct cv_run *r) { return r->hook_fd >= 0 && !r->hook_dead; }

void cv_hook_replies(struct cv_run *r) {
    for (;;) {
        ssize_t got = recv(r->hook_fd, r->hook_rbuf + r->hook_rlen, sizeof r->hook_rbuf - r->hook_rlen, MSG_DONTWAIT);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (got <= 0) {
            hook_gone(r); /* closed or broken */
            return;
        }
        r->hook_rlen += (size_t)got;
        if (r->hook_rlen < sizeof r->hook_rbuf) continue;
        r->hook_rlen = 0;
        struct cv_hook_reply rep;
        memcpy(&rep, r->hook_rbuf, sizeof rep);
        struct cv_hook_parked *p = unpark(r, rep.seq);
        if (!p) continue; /* not a call we asked about: its guest is gone */
        struct cv_reply answer = answer_of(r, &rep);
        finish_parked(p, answer);
        if (r->hook_dead) {
            hook_gone(r); /* a broken answer: nothing it says after can be trusted */
            return;
        }
    }
}

void cv_hook_drop_parked(struct cv_run *r) {
    while (r->hook_parked) {
        struct cv_hook_parked *p = r->hook_parked;
        r->hook_parked = p->next;
        cv_guest_memo_end(&p->n.g);
        free(p->m.buf);
        free(p);
    }
}

uint32_t cv_run_row_policy(const struct cv_run *r, const struct seccomp_data *d) {
    struct cv_filter_opts o = {.deny_network = r->network == CV_NET_DENY,
                               .signals_scoped = r->signals_scoped};
    uint64_t args[6];
    memcpy(args, d->args, sizeof args);
    return cv_policy_eval(&o, d->arch, d->nr, args);
}

struct cv_reply cv_hook_answer(struct cv_notif *n) {
    struct cv_run *r = n->run;
    const struct seccomp_data *d = &n->req->data;
    /* What the filter would have done without the hook: decided on the same registers. */
    uint32_t policy = cv_run_row_policy(r, d);
    uint32_t action = policy & SECCOMP_RET_ACTION_FULL;
    int hooked = r->hook_fd >= 0 && cv_nr_in(r->hooked, d->nr);
    struct msg m = {0};
    struct cv_hook_req h = {
        .nr = (uint32_t)d->nr,
        .seq = ++r->hook_seq,
        .tid = (int32_t)n->req->pid,
        .pid = (int32_t)cv_guest_tgid(&n->g),
        .policy = action == SECCOMP_RET_ALLOW ? CV_HOOK_NATIVE
                  : action == SECCOMP_RET_USER_NOTIF ? CV_HOOK_HANDLED : CV_HOOK_DENIED,
        .policy_errno = action == SECCOMP_RET_ERRNO ? (int32_t)(policy & SECCOMP_RET_DATA) : 0,
    };
    memcpy(h.args, d->args, sizeof h.args);
    put(&m, &h, sizeof h);
    uint32_t nstr = 0;
    cv_guest_memo_begin(&n->g); /* what the hook is shown is what the handler acts on */
    if (describe_strings(n, &m, &nstr, hooked) < 0) {
        cv_guest_memo_end(&n->g);
        free(m.buf);
        return cv_err(ESRCH); /* the caller is gone: nobody reads the answer */
    }
    if (m.buf) {
        struct cv_hook_req *hp = (struct cv_hook_req *)(void *)m.buf;
        hp->len = (uint32_t)m.len;
        hp->nstr = nstr;
    }
    if (!hooked) return decide(n, policy, cv_continue(), &m);
    if (!r->hook_dead && m.buf && !m.full && park(n, policy, &m, h.seq) == 0)
        return (struct cv_reply){CV_REPLY_DONE, 0, 0};
    return decide(n, policy, cv_err(EPERM), &m); /* no hook to ask, or nothing it could be told */
}
