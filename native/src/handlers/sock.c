/* bind, listen, connect, sendto (with an address), sendmsg, sendmmsg. Each is done by the
 * supervisor itself, on its copy of the guest's socket (pidfd_getfd) with its own copy of the
 * address and data, so a thread that flips the address, the message or the fd after the check
 * changes nothing; none is ever continued (a continued call reads them again).
 *  - unix socket paths are resolved in the merged view: a socket made in the sandbox is reached
 *    through /proc/self/fd/<its inode>; a host one only when the run allows it (--allow-unix),
 *    through our own fd of the very socket we checked; anything else is refused (EACCES);
 *  - abstract unix names: only those this run's guests bound (what Landlock's abstract-socket
 *    scope gives a guest that connects itself);
 *  - inet: the filter's network policy made the socket; a bind to a port (any address family
 *    the kernel takes on that socket, AF_UNSPEC included) and listen follow the run's listen
 *    policy: by default only on a loopback address (listen looks at the address the socket is
 *    bound to; an unbound one would take the any-address);
 *  - inet destinations (connect, and the address of a send) in a cloud's metadata range are
 *    refused: 169.254.0.0/16 (link-local, where every major cloud serves instance credentials)
 *    and fd00:ec2::254, read as the kernel reads them on that socket (AF_UNSPEC on an AF_INET
 *    socket's send is AF_INET; an AF_INET6 socket also takes AF_INET addresses);
 *  - a call that would block runs on a thread of its own (handlers/async.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "handlers.h"
#include "overlay/layers.h"
#include "overlay/vfs.h"

#define MAX_DATA (4u << 20)    /* one message's data at most (a stream send may be partial) */
#define MAX_CONTROL (64u << 10)
#define MAX_IOV 1024           /* UIO_MAXIOV */
#define MAX_FDS 253            /* SCM_MAX_FD */

static int sock_domain(int s) {
    int d = 0;
    socklen_t l = sizeof d;
    return getsockopt(s, SOL_SOCKET, SO_DOMAIN, &d, &l) < 0 ? -errno : d;
}

static int sock_type(int s) {
    int t = 0;
    socklen_t l = sizeof t;
    return getsockopt(s, SOL_SOCKET, SO_TYPE, &t, &l) < 0 ? -errno : t;
}

/* Our copy of the guest's socket: -EBADF, -ENOTSOCK as the kernel would say. */
static int guest_socket(struct cv_notif *n, int gfd) {
    int s = cv_guest_fd(&n->g, gfd);
    if (s < 0) return s == -ESRCH ? s : -EBADF;
    if (sock_domain(s) < 0) {
        close(s);
        return -ENOTSOCK;
    }
    return s;
}

static int blocking(int s) { return !(fcntl(s, F_GETFL) & O_NONBLOCK); }

/* ---- abstract names ------------------------------------------------------------------------ */

/* An abstract address as text ("@name", NULs as "\0"), for the registry and for reports. */
static void abstract_text(const struct sockaddr_un *un, socklen_t len, char *out, size_t cap) {
    size_t nl = len - offsetof(struct sockaddr_un, sun_path) - 1, w = 0;
    if (cap < 2) return;
    out[w++] = '@';
    for (size_t i = 0; i < nl && w + 3 < cap; i++) {
        char c = un->sun_path[1 + i];
        if (c) out[w++] = c;
        else out[w++] = '\\', out[w++] = '0';
    }
    out[w] = 0;
}

static int abstract_known(struct cv_run *r, const char *name) {
    pthread_mutex_lock(&r->abstract_lock);
    int found = 0;
    for (size_t i = 0; i < r->nabstract && !found; i++) found = !strcmp(r->abstract[i], name);
    pthread_mutex_unlock(&r->abstract_lock);
    return found;
}

/* The abstract name the socket s has now (a bind, or the kernel's autobind on connect/send), if
 * any: a name made in this sandbox, which its guests may reach. */
static void note_abstract(struct cv_run *r, int s) {
    struct sockaddr_un un;
    socklen_t len = sizeof un;
    if (getsockname(s, (struct sockaddr *)&un, &len) < 0 || un.sun_family != AF_UNIX ||
        len <= offsetof(struct sockaddr_un, sun_path) + 1 || un.sun_path[0])
        return;
    char name[256];
    abstract_text(&un, len, name, sizeof name);
    if (abstract_known(r, name)) return;
    pthread_mutex_lock(&r->abstract_lock);
    if (r->nabstract == r->abstract_cap) {
        size_t cap = r->abstract_cap ? r->abstract_cap * 2 : 8;
        char **na = realloc(r->abstract, cap * sizeof *na);
        if (na) r->abstract = na, r->abstract_cap = cap;
    }
    if (r->nabstract < r->abstract_cap && (r->abstract[r->nabstract] = strdup(name))) r->nabstract++;
    pthread_mutex_unlock(&r->abstract_lock);
}

/* ---- names of unix sockets bound in the sandbox ------------------------------------------------
 * A path bind is made through /proc/self/fd/<dir>/<name>, and the kernel keeps that string as the
 * socket's name: getsockname, getpeername (and accept's, recvfrom's peer address) would show it.
 * Each such bind is recorded here (socket inode, the kernel's string, the guest's own sun_path),
 * so getsockname and getpeername give back the name the guest bound, and a connect or sendto to
 * the kernel's string (a datagram's sender, as recvfrom gives it) reaches that socket. The <dir> fd number rotates
 * (bind_dirfd), so two sockets of one name in two directories rarely share the kernel's string;
 * past CV_UNAMES_MAX binds the oldest record goes. */
#define CV_UNAMES_MAX 4096

struct cv_unix_name {
    dev_t dev;
    ino_t ino;
    char kname[sizeof ((struct sockaddr_un *)0)->sun_path + 1];
    char gpath[sizeof ((struct sockaddr_un *)0)->sun_path];
    size_t glen;
    char *vpath; /* where it is in the view (NULL if no memory) */
};

void cv_unames_free(struct cv_run *r) {
    for (size_t i = 0; i < r->nunames; i++) free(r->unames[i].vpath);
    free(r->unames);
}

/* The newest record of a socket the kernel names `kname`, or NULL. abstract_lock held. */
static struct cv_unix_name *uname_named(const struct cv_run *r, const char *kname) {
    for (size_t i = r->nunames; i-- > 0;)
        if (!strcmp(r->unames[i].kname, kname)) return &r->unames[i];
    return NULL;
}

/* The record of the socket inode of st, or NULL. abstract_lock held. */
static struct cv_unix_name *uname_of(const struct cv_run *r, const struct stat *st) {
    for (size_t i = 0; i < r->nunames; i++)
        if (r->unames[i].dev == st->st_dev && r->unames[i].ino == st->st_ino) return &r->unames[i];
    return NULL;
}

/* The view's path of the socket the kernel names `kname` (for a unix address the guest got from
 * the kernel), or 0 when it is not one of ours. */
static int uname_vpath(struct cv_run *r, const char *kname, char *out, size_t len) {
    if (strncmp(kname, "/proc/self/fd/", 14)) return 0;
    pthread_mutex_lock(&r->abstract_lock);
    const struct cv_unix_name *u = uname_named(r, kname);
    int found = u && u->vpath && snprintf(out, len, "%s", u->vpath) < (int)len;
    pthread_mutex_unlock(&r->abstract_lock);
    return found;
}

static void uname_add(struct cv_run *r, int s, const char *kname, const char *gpath, size_t glen, const char *vpath) {
    struct stat st;
    if (fstat(s, &st) < 0) return;
    pthread_mutex_lock(&r->abstract_lock);
    struct cv_unix_name *u = uname_of(r, &st);
    if (!u && r->nunames == CV_UNAMES_MAX) {
        free(r->unames[0].vpath);
        memmove(r->unames, r->unames + 1, --r->nunames * sizeof *r->unames);
    }
    if (!u) {
        if (r->nunames == r->uname_cap) {
            size_t cap = r->uname_cap ? r->uname_cap * 2 : 8;
            struct cv_unix_name *nu = realloc(r->unames, cap * sizeof *nu);
            if (nu) r->unames = nu, r->uname_cap = cap;
        }
        if (r->nunames < r->uname_cap) {
            u = &r->unames[r->nunames++];
            u->vpath = NULL;
        }
    }
    if (u) {
        free(u->vpath);
        u->vpath = strdup(vpath);
        u->dev = st.st_dev, u->ino = st.st_ino, u->glen = glen;
        snprintf(u->kname, sizeof u->kname, "%s", kname);
        memcpy(u->gpath, gpath, glen);
    }
    pthread_mutex_unlock(&r->abstract_lock);
}

/* getsockname (the entry of this very socket, else, for a socket accept() made, the newest entry
 * with that kernel name) or getpeername (the newest entry with that kernel name): the kernel's
 * answer, with a recorded name put back as the guest bound it. */
static struct cv_reply do_sockname(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    int peer = n->req->data.nr == __NR_getpeername;
    cv_autoclose int s = guest_socket(n, (int)a[0]);
    if (s < 0) return cv_err(-s);
    socklen_t glen;
    int e = cv_guest_read(&n->g, a[2], &glen, sizeof glen);
    if (e < 0) return cv_err(EFAULT);
    if ((int)glen < 0) return cv_err(EINVAL);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if ((peer ? getpeername(s, (struct sockaddr *)&ss, &len) : getsockname(s, (struct sockaddr *)&ss, &len)) < 0)
        return cv_err(errno);
    struct sockaddr_un *un = (struct sockaddr_un *)&ss;
    size_t base = offsetof(struct sockaddr_un, sun_path);
    if (ss.ss_family == AF_UNIX && len > base && un->sun_path[0] == '/' &&
        !strncmp(un->sun_path, "/proc/self/fd/", 14)) {
        char k[sizeof un->sun_path + 1];
        memcpy(k, un->sun_path, len - base);
        k[len - base] = 0;
        struct stat st;
        int have = peer ? 0 : fstat(s, &st) == 0;
        pthread_mutex_lock(&n->run->abstract_lock);
        const struct cv_unix_name *u = have ? uname_of(n->run, &st) : NULL; /* this very socket */
        if (u && strcmp(u->kname, k)) u = NULL;
        if (!u) u = uname_named(n->run, k); /* a peer, or a socket accept() made */
        if (u) {
            memset(un->sun_path, 0, sizeof un->sun_path);
            memcpy(un->sun_path, u->gpath, u->glen);
            len = (socklen_t)(base + strnlen(un->sun_path, sizeof un->sun_path) + 1);
            if (len > sizeof *un) len = sizeof *un;
        }
        pthread_mutex_unlock(&n->run->abstract_lock);
    }
    if (cv_guest_write(&n->g, a[1], &ss, glen < len ? glen : len) < 0) return cv_err(EFAULT);
    if (cv_guest_write(&n->g, a[2], &len, sizeof len) < 0) return cv_err(EFAULT);
    return cv_val(0);
}

/* ---- where a unix address leads -------------------------------------------------------------- */

struct target {
    struct sockaddr_storage ss; /* what the supervisor connects or sends to */
    socklen_t len;
    int obj;                    /* our O_PATH fd of the socket inode, named by ss (or -1) */
};

static int allowed_host_socket(const struct cv_run *r, const char *real) {
    for (size_t i = 0; i < r->nallow_unix; i++)
        if (!strcmp(r->allow_unix[i], real)) return 1;
    return 0;
}

/* The guest's address (our copy, len bytes) as the supervisor must use it: 0 and t filled, or
 * -errno (EACCES, recorded as a denial, for what the guest may not reach). */
static int unix_target(struct cv_notif *n, const struct sockaddr_storage *ss, socklen_t len, struct target *t) {
    const struct sockaddr_un *un = (const struct sockaddr_un *)ss;
    size_t base = offsetof(struct sockaddr_un, sun_path);
    t->obj = -1;
    memcpy(&t->ss, ss, len);
    t->len = len;
    if (un->sun_family != AF_UNIX || len <= base) return 0; /* unnamed, or not unix: the kernel says */
    int nr = n->req->data.nr;
    if (!un->sun_path[0]) {
        char name[256];
        abstract_text(un, len, name, sizeof name);
        if (abstract_known(n->run, name)) return 0;
        cv_run_deny(n->run, nr, (pid_t)n->req->pid, name, "abstract unix socket made outside the sandbox");
        return -ECONNREFUSED; /* what connecting to a name nobody bound says */
    }
    char given[sizeof un->sun_path + 1], path[PATH_MAX];
    memcpy(given, un->sun_path, len - base);
    given[len - base] = 0;
    if (!uname_vpath(n->run, given, path, sizeof path)) /* a name the kernel gave of one bound here */
        snprintf(path, sizeof path, "%s", given);
    struct cv_vnode v;
    int e = cv_vresolve(&n->ctx, AT_FDCWD, path, CV_RES_FOLLOW, &v);
    if (e < 0) return e;
    if (!v.exists) e = -ENOENT;
    else if (v.in_proc) e = -ECONNREFUSED;
    else if (!S_ISSOCK(v.st.st_mode)) e = -ECONNREFUSED;
    else if (!cv_vnode_stored(&v) && !allowed_host_socket(n->run, v.vpath)) {
        char why[PATH_MAX + 64];
        snprintf(why, sizeof why, "host unix socket (--allow-unix %s lets it through)", v.vpath);
        cv_run_deny(n->run, nr, (pid_t)n->req->pid, v.vpath, why);
        e = -EACCES;
    } else {
        t->obj = cv_vnode_open(&v, 0);
        if (t->obj < 0) e = t->obj;
    }
    cv_vnode_release(&v);
    if (e < 0) return e;
    struct sockaddr_un *real = (struct sockaddr_un *)&t->ss;
    memset(real, 0, sizeof *real);
    real->sun_family = AF_UNIX;
    snprintf(real->sun_path, sizeof real->sun_path, "/proc/self/fd/%d", t->obj);
    t->len = sizeof *real;
    return 0;
}

/* ---- bind, listen ------------------------------------------------------------------------- */

/* The upper directory a socket is bound in, at an fd number that changes from bind to bind (its
 * number becomes part of the socket's name in the kernel: see uname_add). */
static int bind_dirfd(struct cv_run *r, int dir) {
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur > 2048) {
        unsigned span = lim.rlim_cur - 1024 < 16384 ? (unsigned)(lim.rlim_cur - 1024) : 16384;
        int k = fcntl(dir, F_DUPFD_CLOEXEC, 1024 + (int)(r->bind_turn++ % span));
        if (k >= 0) return k;
    }
    return fcntl(dir, F_DUPFD_CLOEXEC, 3);
}

static struct cv_reply bind_path(struct cv_notif *n, int s, const struct sockaddr_un *un, socklen_t len) {
    char path[sizeof un->sun_path + 1];
    size_t pl = len - offsetof(struct sockaddr_un, sun_path);
    memcpy(path, un->sun_path, pl);
    path[pl] = 0;
    struct cv_vnode v;
    int e = cv_vresolve(&n->ctx, AT_FDCWD, path, CV_RES_PARENT, &v);
    if (e < 0) return cv_err(-e);
    if (v.exists) e = -EADDRINUSE;
    else if (v.in_proc || !cv_ov_writable(n->run)) e = -EROFS;
    else if (cv_ov_reserved(v.name)) e = -EINVAL;
    struct cv_reply out;
    if (e < 0) {
        out = cv_err(-e);
    } else {
        cv_autoclose int updir = cv_vnode_upper_parent(n->run, &v);
        cv_autoclose int dir = updir < 0 ? updir : bind_dirfd(n->run, updir);
        cv_notif_naming(n, v.vpath);
        if (updir >= 0 && dir < 0) dir = -errno;
        struct sockaddr_un real = {.sun_family = AF_UNIX};
        int w = snprintf(real.sun_path, sizeof real.sun_path, "/proc/self/fd/%d/%s", dir, v.name);
        if (dir < 0) out = cv_err(-dir);
        else if (w >= (int)sizeof real.sun_path) out = cv_err(ENAMETOOLONG);
        else if (bind(s, (struct sockaddr *)&real, sizeof real) < 0) out = cv_err(errno);
        else {
            uname_add(n->run, s, real.sun_path, un->sun_path, pl, v.vpath);
            cv_ov_unwhiteout(dir, v.name);
            out = cv_val(0);
        }
    }
    cv_vnode_release(&v);
    return out;
}

/* An inet address as the kernel reads it on a socket of `domain`: 4 (*v4 set), 6 (*v6 set), or 0
 * (none it would use). A v4-mapped IPv6 address is its IPv4 one; an AF_INET6 socket also takes
 * AF_INET addresses. `unspec`: AF_UNSPEC reads as AF_INET on an AF_INET socket (bind and send; a
 * connect with it dissolves the association instead). */
static int inet_read(int domain, const struct sockaddr_storage *ss, socklen_t len, int unspec, struct in_addr *v4,
                     struct in6_addr *v6) {
    int fam = ss->ss_family;
    if (domain == AF_INET && fam == AF_UNSPEC && unspec) fam = AF_INET;
    if ((domain == AF_INET || domain == AF_INET6) && fam == AF_INET && len >= sizeof(struct sockaddr_in)) {
        *v4 = ((const struct sockaddr_in *)ss)->sin_addr;
        return 4;
    }
    if (domain != AF_INET6 || fam != AF_INET6 || len < sizeof(struct sockaddr_in6)) return 0;
    *v6 = ((const struct sockaddr_in6 *)ss)->sin6_addr;
    if (!IN6_IS_ADDR_V4MAPPED(v6)) return 6;
    memcpy(v4, &v6->s6_addr[12], sizeof *v4);
    return 4;
}

/* An inet address the listen policy lets a guest bind a port on or listen at. */
static int listen_allowed(const struct cv_run *r, int domain, const struct sockaddr_storage *ss, socklen_t len) {
    if (r->listen == CV_LISTEN_ANY) return 1;
    if (r->listen != CV_LISTEN_LOOPBACK) return 0;
    struct in_addr v4;
    struct in6_addr v6;
    int k = inet_read(domain, ss, len, 1, &v4, &v6);
    return k == 4 ? (ntohl(v4.s_addr) >> 24) == 127 : k == 6 && IN6_IS_ADDR_LOOPBACK(&v6);
}

static const char *listen_rule(const struct cv_run *r) {
    return r->listen == CV_LISTEN_NONE ? "inet listening is off (--no-listen)"
                                       : "only loopback addresses without --allow-listen";
}

static struct cv_reply do_bind(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    struct sockaddr_storage ss;
    socklen_t len = (socklen_t)a[2];
    if (len > sizeof ss) return cv_err(EINVAL);
    memset(&ss, 0, sizeof ss);
    int e = len ? cv_guest_read(&n->g, a[1], &ss, len) : 0;
    if (e < 0) return cv_err(-e);
    cv_autoclose int s = guest_socket(n, (int)a[0]);
    if (s < 0) return cv_err(-s);
    int domain = sock_domain(s);
    if (domain == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;
        if (ss.ss_family == AF_UNIX && len > offsetof(struct sockaddr_un, sun_path) && un->sun_path[0])
            return bind_path(n, s, un, len);
        cv_notif_naming(n, NULL); /* an abstract name, or the kernel's autobind: none in the view */
        if (bind(s, (struct sockaddr *)&ss, len) < 0) return cv_err(errno);
        note_abstract(n->run, s); /* an abstract name, or the kernel's autobind */
        return cv_val(0);
    }
    cv_notif_naming(n, NULL); /* other families name nothing in the view */
    if ((domain == AF_INET || domain == AF_INET6) && len >= 4) {
        /* The port sits at the same place in every address the kernel takes on an inet socket
         * (AF_INET, AF_INET6, and AF_UNSPEC, which it reads as AF_INET): decide by the socket. */
        in_port_t port;
        memcpy(&port, (const char *)&ss + 2, sizeof port);
        if (port && !listen_allowed(n->run, domain, &ss, len)) {
            char what[32];
            snprintf(what, sizeof what, "port %u", (unsigned)ntohs(port));
            cv_run_deny(n->run, n->req->data.nr, (pid_t)n->req->pid, what, listen_rule(n->run));
            return cv_err(EACCES);
        }
    }
    return bind(s, (struct sockaddr *)&ss, len) < 0 ? cv_err(errno) : cv_val(0);
}

static struct cv_reply do_listen(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    cv_autoclose int s = guest_socket(n, (int)a[0]);
    if (s < 0) return cv_err(-s);
    int domain = sock_domain(s);
    if (domain == AF_INET || domain == AF_INET6) {
        /* Where it is bound (port 0: not bound yet, and listen would take the any-address). An
         * address only a connect gave it is reset by a disconnect (connect with AF_UNSPEC), but
         * that connect is notified and answered by this same thread: not between here and the
         * listen below. */
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        memset(&ss, 0, sizeof ss);
        int bound = getsockname(s, (struct sockaddr *)&ss, &len) == 0 && ((struct sockaddr_in *)&ss)->sin_port;
        if (!bound ? n->run->listen != CV_LISTEN_ANY : !listen_allowed(n->run, domain, &ss, len)) {
            cv_run_deny(n->run, n->req->data.nr, (pid_t)n->req->pid, "inet socket", listen_rule(n->run));
            return cv_err(EACCES);
        }
    }
    return listen(s, (int)a[1]) < 0 ? cv_err(errno) : cv_val(0);
}

/* ---- inet destinations -------------------------------------------------------------------- */

static int metadata_v4(const struct in_addr *a) { return (ntohl(a->s_addr) >> 16) == 0xa9fe; /* 169.254/16 */ }

static const char *const METADATA = "a cloud metadata address (169.254.0.0/16, fd00:ec2::254) not named by --allow-net";

/* Why the run refuses this destination, or NULL (*divert: the rule that diverts it): in allow-list
 * mode anything no rule allows; else the metadata range, unless a rule names it. A send with an
 * address on a stream socket (TCP Fast Open) would connect: not where a rule diverts connects. */
static const char *inet_why(const struct cv_run *r, int k, const struct in_addr *v4, const struct in6_addr *v6,
                            uint16_t port, int stream, int send, const struct cv_net_rule **divert) {
    static const unsigned char ec2[16] = {0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54};
    const struct cv_net_rule *rule = cv_net_rules_find(r->net_rules, r->nnet_rules, k, v4, v6, port, stream);
    if (rule && rule->divert) {
        if (send) return "a diverted destination takes connects only (no TCP Fast Open)";
        *divert = rule;
        return NULL;
    }
    if (rule) return NULL;
    if (r->network == CV_NET_LIST) return "no --allow-net rule allows it";
    return (k == 4 ? metadata_v4(v4) : !memcmp(v6->s6_addr, ec2, sizeof ec2)) ? METADATA : NULL;
}

/* A destination the run refuses: -EACCES (and the denial noted), else 0 (*divert set when a rule
 * diverts it). `send`: the address of a send (see inet_read for AF_UNSPEC). */
static int inet_refused(struct cv_notif *n, int s, const struct sockaddr_storage *ss, socklen_t len, int send,
                        const struct cv_net_rule **divert) {
    struct in_addr v4;
    struct in6_addr v6;
    *divert = NULL;
    int k = inet_read(sock_domain(s), ss, len, send, &v4, &v6);
    if (!k) return 0;
    in_port_t port; /* at the same place in both */
    memcpy(&port, (const char *)ss + 2, sizeof port);
    /* Only divert rules care whether it is TCP: no second getsockopt on a send's path without them. */
    int stream = n->run->divert_fd >= 0 && sock_type(s) == SOCK_STREAM;
    const char *why = inet_why(n->run, k, &v4, &v6, ntohs(port), stream, send, divert);
    if (!why) return 0;
    char host[INET6_ADDRSTRLEN] = "";
    inet_ntop(k == 4 ? AF_INET : AF_INET6, k == 4 ? (const void *)&v4 : (const void *)&v6, host, sizeof host);
    char what[INET6_ADDRSTRLEN + 16];
    snprintf(what, sizeof what, "%s port %u", host, (unsigned)ntohs(port));
    cv_run_deny(n->run, n->req->data.nr, (pid_t)n->req->pid, what, why);
    return -EACCES;
}

/* ---- connect ------------------------------------------------------------------------------ */

/* Where a divert rule sends this socket's connect: its target, v4-mapped on an AF_INET6 socket. */
static void divert_target(int s, const struct cv_net_rule *rule, struct target *t) {
    const struct sockaddr_in *to4 = (const struct sockaddr_in *)&rule->to;
    memset(&t->ss, 0, sizeof t->ss);
    if (rule->to.ss_family == AF_INET && sock_domain(s) == AF_INET6) {
        struct sockaddr_in6 *m = (struct sockaddr_in6 *)&t->ss;
        m->sin6_family = AF_INET6;
        m->sin6_port = to4->sin_port;
        m->sin6_addr.s6_addr[10] = m->sin6_addr.s6_addr[11] = 0xff;
        memcpy(&m->sin6_addr.s6_addr[12], &to4->sin_addr, 4);
        t->len = sizeof *m;
        return;
    }
    t->len = rule->to.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    memcpy(&t->ss, &rule->to, t->len);
}

/* An inet address as text (a v4-mapped one as IPv4) and its port, as inet_read reads it. */
static uint16_t inet_text(const struct sockaddr_storage *ss, char *out, size_t len) {
    struct in_addr v4;
    struct in6_addr v6;
    int k = inet_read(ss->ss_family, ss, sizeof *ss, 0, &v4, &v6);
    out[0] = 0;
    if (k) inet_ntop(k == 4 ? AF_INET : AF_INET6, k == 4 ? (const void *)&v4 : (const void *)&v6, out, (socklen_t)len);
    in_port_t port; /* at the same place in both families */
    memcpy(&port, (const char *)ss + 2, sizeof port);
    return ntohs(port);
}

/* "LOCALADDR LOCALPORT ADDR PORT TID": a diverted connect, from where, where the guest asked it
 * to go, and which thread asked: for the service it reached instead (cv_run_add_net_divert). */
static void announce(struct cv_run *r, pid_t tid, int s, const struct sockaddr_storage *asked) {
    struct sockaddr_storage me;
    socklen_t ml = sizeof me;
    memset(&me, 0, sizeof me);
    if (r->divert_fd < 0 || getsockname(s, (struct sockaddr *)&me, &ml) < 0) return;
    char local[INET6_ADDRSTRLEN], host[INET6_ADDRSTRLEN], line[2 * INET6_ADDRSTRLEN + 48];
    unsigned mine = inet_text(&me, local, sizeof local), port = inet_text(asked, host, sizeof host);
    int l = snprintf(line, sizeof line, "%s %u %s %u %d\n", local, mine, host, port, (int)tid);
    if (write(r->divert_fd, line, (size_t)l) < 0) return; /* the service then refuses it */
}

struct connect_job {
    int s;
    struct target t;
};

static void connect_job_free(void *p) {
    struct connect_job *j = p;
    close(j->s);
    if (j->t.obj >= 0) close(j->t.obj);
    free(j);
}

/* Connect s without blocking the caller's thread: the file's own flags are shared with the
 * guest, so O_NONBLOCK is set only around the call. 0, -EINPROGRESS, -EAGAIN, or -errno. */
static int connect_now(int s, const struct target *t) {
    int fl = fcntl(s, F_GETFL);
    if (!(fl & O_NONBLOCK)) fcntl(s, F_SETFL, fl | O_NONBLOCK);
    int r = connect(s, (const struct sockaddr *)&t->ss, t->len) < 0 ? -errno : 0;
    if (!(fl & O_NONBLOCK)) fcntl(s, F_SETFL, fl);
    return r;
}

/* A blocking connect that did not complete at once: wait for it, or retry a unix connect whose
 * peer's backlog was full, until it is done or the run ends. */
static long connect_wait(void *p, int ending) {
    struct connect_job *j = p;
    for (int r = -EINPROGRESS;;) {
        struct pollfd pf[2] = {{j->s, POLLOUT, 0}, {ending, POLLIN, 0}};
        if (poll(pf, 2, r == -EAGAIN ? 10 : -1) < 0 && errno != EINTR) return -errno;
        if (pf[1].revents) return -EINTR;
        if (r == -EAGAIN) {
            if ((r = connect_now(j->s, &j->t)) != -EAGAIN) return r == -EINPROGRESS ? connect_wait(p, ending) : r;
            continue;
        }
        if (!pf[0].revents) continue;
        int err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(j->s, SOL_SOCKET, SO_ERROR, &err, &l) < 0) return -errno;
        return err ? -err : 0;
    }
}

static struct cv_reply do_connect(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    struct sockaddr_storage ss;
    socklen_t len = (socklen_t)a[2];
    if (len > sizeof ss) return cv_err(EINVAL);
    memset(&ss, 0, sizeof ss);
    int e = len ? cv_guest_read(&n->g, a[1], &ss, len) : 0;
    if (e < 0) return cv_err(-e);
    int s = guest_socket(n, (int)a[0]);
    if (s < 0) return cv_err(-s);
    struct target t = {.obj = -1};
    const struct cv_net_rule *divert = NULL;
    e = sock_domain(s) == AF_UNIX ? unix_target(n, &ss, len, &t) : inet_refused(n, s, &ss, len, 0, &divert);
    if (t.obj < 0 && e == 0) {
        memcpy(&t.ss, &ss, len);
        t.len = len;
        if (divert) divert_target(s, divert, &t);
    }
    if (e == 0) {
        int block = blocking(s);
        e = connect_now(s, &t);
        if (divert && (e == 0 || e == -EINPROGRESS)) announce(n->run, (pid_t)n->req->pid, s, &ss);
        if (block && (e == -EINPROGRESS || (e == -EAGAIN && sock_domain(s) == AF_UNIX))) {
            struct connect_job *j = malloc(sizeof *j);
            if (!j) e = -ENOMEM;
            else {
                *j = (struct connect_job){.s = s, .t = t};
                return cv_async(n, connect_wait, j, connect_job_free);
            }
        }
        if (e == 0 && sock_domain(s) == AF_UNIX) note_abstract(n->run, s);
    }
    close(s);
    if (t.obj >= 0) close(t.obj);
    return e < 0 ? cv_err(-e) : cv_val(0);
}

/* ---- sending ------------------------------------------------------------------------------ */

/* One message, read from the guest once: name, data, control (with the guest's fds fetched). */
struct message {
    struct target name;   /* name.len 0: none */
    char *data;
    size_t size;
    char *control;
    size_t controllen;
    int fds[MAX_FDS];     /* our copies of the fds an SCM_RIGHTS passes */
    int nfds;
};

static void message_free(struct message *m) {
    free(m->data);
    free(m->control);
    for (int i = 0; i < m->nfds; i++) close(m->fds[i]);
    if (m->name.obj >= 0) close(m->name.obj);
    m->data = m->control = NULL;
    m->nfds = 0;
    m->name.obj = -1;
}

/* Rebuild the control data: SCM_RIGHTS with our copies of the fds, SCM_CREDENTIALS as the
 * sender the kernel will see (the supervisor), everything else as it is. */
static int copy_control(struct cv_notif *n, struct message *m, const char *in, size_t len) {
    m->control = calloc(1, len ? len : 1);
    if (!m->control) return -ENOMEM;
    struct msghdr src = {.msg_control = (void *)in, .msg_controllen = len};
    size_t w = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&src); c; c = CMSG_NXTHDR(&src, c)) {
        if (c->cmsg_len < sizeof *c || (const char *)c + c->cmsg_len > in + len) return -EINVAL;
        size_t space = CMSG_ALIGN(c->cmsg_len);
        if (w + space > len) space = len - w;
        struct cmsghdr *o = (struct cmsghdr *)(m->control + w);
        memcpy(o, c, c->cmsg_len);
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            int *gfds = (int *)CMSG_DATA(c), *ofds = (int *)CMSG_DATA(o);
            for (size_t i = 0; i < count; i++) {
                if (m->nfds >= MAX_FDS) return -ETOOMANYREFS;
                int fd = cv_guest_fd(&n->g, gfds[i]);
                if (fd < 0) return fd == -ESRCH ? fd : -EBADF;
                ofds[i] = m->fds[m->nfds++] = fd;
            }
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
                   c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
            struct ucred me = {getpid(), geteuid(), getegid()};
            memcpy(CMSG_DATA(o), &me, sizeof me);
        }
        w += space;
    }
    m->controllen = w;
    return 0;
}

/* What the guest asked to send, by address: for sendmsg and sendmmsg its msghdr, for sendto the
 * pieces (iov_local then holds the one buffer, already known). */
struct request {
    uint64_t name;
    socklen_t namelen;
    uint64_t iov;               /* the guest's iovec array, when iov_local is NULL */
    const struct iovec *iov_local;
    size_t iovlen;
    uint64_t control;
    size_t controllen;
};

static void request_of(const struct msghdr *h, struct request *q) {
    *q = (struct request){(uint64_t)(uintptr_t)h->msg_name, h->msg_namelen, (uint64_t)(uintptr_t)h->msg_iov, NULL,
                          h->msg_iovlen, (uint64_t)(uintptr_t)h->msg_control, h->msg_controllen};
}

/* Read the message once: 0 or -errno. */
static int read_message(struct cv_notif *n, int s, const struct request *q, struct message *m, int stream) {
    memset(m, 0, sizeof *m);
    m->name.obj = -1;
    if (q->name && q->namelen) {
        if (q->namelen > sizeof(struct sockaddr_storage)) return -EINVAL;
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        int e = cv_guest_read(&n->g, q->name, &ss, q->namelen);
        if (e < 0) return e;
        if (sock_domain(s) == AF_UNIX) {
            e = unix_target(n, &ss, q->namelen, &m->name);
            if (e < 0) return e;
        } else {
            const struct cv_net_rule *divert;
            if ((e = inet_refused(n, s, &ss, q->namelen, 1, &divert)) < 0) return e;
        }
        if (m->name.obj < 0) {
            memcpy(&m->name.ss, &ss, q->namelen);
            m->name.len = q->namelen;
        }
    }
    if (q->iovlen > MAX_IOV) return -EMSGSIZE;
    struct iovec iov[MAX_IOV];
    if (q->iov_local) memcpy(iov, q->iov_local, q->iovlen * sizeof *iov);
    else if (q->iovlen) {
        int e = cv_guest_read(&n->g, q->iov, iov, q->iovlen * sizeof *iov);
        if (e < 0) return e;
    }
    size_t total = 0;
    for (size_t i = 0; i < q->iovlen; i++) {
        if (iov[i].iov_len > SSIZE_MAX - total) return -EINVAL;
        total += iov[i].iov_len;
    }
    /* A stream takes part of it (the guest sends the rest); a datagram goes whole or not at all. */
    if (total > MAX_DATA) {
        if (!stream) return -EMSGSIZE;
        total = MAX_DATA;
    }
    m->data = malloc(total ? total : 1);
    if (!m->data) return -ENOMEM;
    for (size_t i = 0, at = 0; i < q->iovlen && at < total; i++) {
        size_t l = iov[i].iov_len < total - at ? iov[i].iov_len : total - at;
        if (l && cv_guest_peek(&n->g, (uint64_t)(uintptr_t)iov[i].iov_base, m->data + at, l) < 0) return -EFAULT;
        at += l;
    }
    m->size = total;
    if (q->control && q->controllen) {
        if (q->controllen > MAX_CONTROL) return -ENOBUFS;
        char *raw = malloc(q->controllen);
        if (!raw) return -ENOMEM;
        int e = cv_guest_read(&n->g, q->control, raw, q->controllen);
        if (e == 0) e = copy_control(n, m, raw, q->controllen);
        free(raw);
        if (e < 0) return e;
    }
    return cv_guest_valid(&n->g) ? 0 : -ESRCH;
}

static ssize_t send_message(int s, const struct message *m, int flags) {
    struct iovec iov = {m->data, m->size};
    struct msghdr h = {
        .msg_name = m->name.len ? (void *)&m->name.ss : NULL,
        .msg_namelen = m->name.len,
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = m->controllen ? m->control : NULL,
        .msg_controllen = m->controllen,
    };
    ssize_t r = sendmsg(s, &h, flags | MSG_NOSIGNAL);
    return r < 0 ? -errno : r;
}

/* A send the guest's socket would block on, finished on a thread of its own. */
struct send_job {
    int s, flags;
    pid_t tgid, tid;
    struct message m;
    struct cv_guest g;       /* for sendmmsg: where msg_len goes (msg_len != 0) */
    uint64_t msg_len;
};

static void send_job_free(void *p) {
    struct send_job *j = p;
    message_free(&j->m);
    close(j->s);
    close(j->g.listener);
    free(j);
}

static long send_wait(void *p, int ending) {
    struct send_job *j = p;
    for (;;) {
        struct pollfd pf[2] = {{j->s, POLLOUT, 0}, {ending, POLLIN, 0}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR) return -errno;
        if (pf[1].revents) return -EINTR;
        ssize_t r = send_message(j->s, &j->m, j->flags | MSG_DONTWAIT);
        if (r == -EAGAIN) continue;
        if (r == -EPIPE && !(j->flags & MSG_NOSIGNAL)) syscall(SYS_tgkill, j->tgid, j->tid, SIGPIPE);
        if (r >= 0 && j->msg_len) {
            unsigned len = (unsigned)r;
            int e = cv_guest_write(&j->g, j->msg_len, &len, sizeof len);
            return e < 0 ? e : 1;
        }
        return r;
    }
}

/* Send one message; the reply, or CV_REPLY_DONE when a thread finishes it. msg_len: for
 * sendmmsg, where the guest wants the byte count (the answer is then the message count). */
static struct cv_reply send_one(struct cv_notif *n, int s, const struct request *q, int flags, uint64_t msg_len) {
    struct message m;
    int e = read_message(n, s, q, &m, sock_type(s) == SOCK_STREAM);
    if (e < 0) {
        message_free(&m);
        return cv_err(-e);
    }
    ssize_t r = send_message(s, &m, flags | MSG_DONTWAIT);
    if (r == -EAGAIN && !(flags & MSG_DONTWAIT) && blocking(s)) {
        struct send_job *j = calloc(1, sizeof *j);
        int s2 = fcntl(s, F_DUPFD_CLOEXEC, 3), l2 = fcntl(n->g.listener, F_DUPFD_CLOEXEC, 3);
        if (!j || s2 < 0 || l2 < 0) {
            free(j);
            if (s2 >= 0) close(s2);
            if (l2 >= 0) close(l2);
            message_free(&m);
            return cv_err(ENOMEM);
        }
        *j = (struct send_job){.s = s2, .flags = flags, .m = m, .g = n->g, .msg_len = msg_len};
        j->g.listener = l2;
        j->g.memo = NULL; /* the notification's memo ends with this handler; the job outlives it */
        j->tgid = cv_guest_tgid(&n->g);
        j->tid = n->g.tid;
        return cv_async(n, send_wait, j, send_job_free);
    }
    message_free(&m);
    if (r == -EPIPE && !(flags & MSG_NOSIGNAL)) syscall(SYS_tgkill, cv_guest_tgid(&n->g), n->g.tid, SIGPIPE);
    if (r >= 0 && sock_domain(s) == AF_UNIX) note_abstract(n->run, s);
    if (r >= 0 && msg_len) {
        unsigned len = (unsigned)r;
        e = cv_guest_write(&n->g, msg_len, &len, sizeof len);
        return e < 0 ? cv_err(-e) : cv_val(1);
    }
    return r < 0 ? cv_err((int)-r) : cv_val(r);
}

static struct cv_reply do_sendto(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    cv_autoclose int s = guest_socket(n, (int)a[0]);
    if (s < 0) return cv_err(-s);
    struct iovec iov = {(void *)(uintptr_t)a[1], (size_t)a[2]};
    struct request q = {.name = a[4], .namelen = (socklen_t)a[5], .iov_local = &iov, .iovlen = 1};
    return send_one(n, s, &q, (int)a[3], 0);
}

static struct cv_reply do_sendmsg(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    struct msghdr h;
    int e = cv_guest_read(&n->g, a[1], &h, sizeof h);
    if (e < 0) return cv_err(-e);
    cv_autoclose int s = guest_socket(n, (int)a[0]);
    if (s < 0) return cv_err(-s);
    struct request q;
    request_of(&h, &q);
    return send_one(n, s, &q, (int)a[2], 0);
}

/* Each message in turn, as the kernel does: one that would block waits when it is the first
 * (then the answer is 1), else ends the batch; the answer is the count sent. */
static struct cv_reply do_sendmmsg(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    unsigned vlen = (unsigned)a[2];
    if (vlen > MAX_IOV) vlen = MAX_IOV;
    if (!vlen) return cv_val(0);
    cv_autoclose int s = guest_socket(n, (int)a[0]);
    if (s < 0) return cv_err(-s);
    int flags = (int)a[3];
    unsigned sent = 0;
    for (; sent < vlen; sent++) {
        struct mmsghdr mh;
        uint64_t at = a[1] + (uint64_t)sent * sizeof mh;
        int e = cv_guest_read(&n->g, at, &mh, sizeof mh);
        if (e < 0) return sent ? cv_val(sent) : cv_err(-e);
        struct request q;
        request_of(&mh.msg_hdr, &q);
        uint64_t len_at = at + offsetof(struct mmsghdr, msg_len);
        if (!sent) {
            struct cv_reply first = send_one(n, s, &q, flags, len_at);
            if (first.kind != CV_REPLY_VALUE || vlen == 1) return first;
            continue;
        }
        struct message m;
        e = read_message(n, s, &q, &m, sock_type(s) == SOCK_STREAM);
        ssize_t r = e < 0 ? e : send_message(s, &m, flags | MSG_DONTWAIT);
        message_free(&m);
        if (r < 0) break;
        unsigned len = (unsigned)r;
        if (cv_guest_write(&n->g, len_at, &len, sizeof len) < 0) break;
    }
    return cv_val(sent);
}

struct cv_reply cv_h_sock(struct cv_notif *n) {
    switch (n->req->data.nr) {
    case __NR_bind: return do_bind(n);
    case __NR_connect: return do_connect(n);
    case __NR_sendto: return do_sendto(n);
    case __NR_sendmsg: return do_sendmsg(n);
    case __NR_sendmmsg: return do_sendmmsg(n);
    case __NR_getsockname:
    case __NR_getpeername: return do_sockname(n);
    default: return do_listen(n);
    }
}
