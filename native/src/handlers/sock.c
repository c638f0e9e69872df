/* bind and listen. Done by the supervisor on a dup of the guest's socket with
 * its own copy of the address, so a racing thread cannot swap the address
 * after the check. Inet ports need --allow-listen (port 0, the client's
 * ephemeral bind, is always fine); a unix socket path is made in the upper
 * layer, bound through /proc/self/fd/<upper dir>/<name> (the real path would not
 * fit in sun_path). connect to a unix path in the upper layer is done the same
 * way on a dup; every other connect is CONTINUEd. */
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "guest/mem.h"
#include "handlers.h"
#include "overlay/layers.h"
#include "overlay/vfs.h"

static struct cv_reply bind_path(struct cv_notif *n, const struct sockaddr_un *un, socklen_t len) {
    char path[sizeof un->sun_path + 1];
    size_t pl = len - offsetof(struct sockaddr_un, sun_path);
    memcpy(path, un->sun_path, pl);
    path[pl] = 0;
    struct cv_vnode v;
    int e = cv_vresolve(n, AT_FDCWD, path, CV_RES_PARENT, &v);
    if (e < 0) return cv_err(-e);
    if (v.exists) e = -EADDRINUSE;
    else if (v.in_proc || !cv_ov_writable(n->run)) e = -EROFS;
    else if (cv_ov_reserved(v.name)) e = -EINVAL;
    struct cv_reply out;
    if (e < 0) {
        out = cv_err(-e);
    } else {
        cv_autoclose int dir = cv_ov_upper_parent(n->run, v.vpath);
        cv_autoclose int dup = dir < 0 ? -1 : cv_notif_dup_fd(n, (int)n->req->data.args[0]);
        struct sockaddr_un real = {.sun_family = AF_UNIX};
        int w = snprintf(real.sun_path, sizeof real.sun_path, "/proc/self/fd/%d/%s", dir, v.name);
        if (dir < 0) out = cv_err(-dir);
        else if (dup < 0) out = cv_err(EBADF);
        else if (w >= (int)sizeof real.sun_path) out = cv_err(ENAMETOOLONG);
        else if (bind(dup, (struct sockaddr *)&real, sizeof real) < 0) out = cv_err(errno);
        else {
            cv_ov_unwhiteout(dir, v.name);
            out = cv_val(0);
        }
    }
    cv_vnode_release(&v);
    return out;
}

static struct cv_reply do_bind(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    struct sockaddr_storage ss;
    socklen_t len = (socklen_t)a[2];
    if (len > sizeof ss || len < sizeof(sa_family_t)) return cv_err(EINVAL);
    memset(&ss, 0, sizeof ss);
    if (cv_guest_read(n->tid, a[1], &ss, len) < 0) return cv_err(EFAULT);
    if (!cv_notif_valid(n)) return cv_err(ESRCH);
    if (ss.ss_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;
        if (len > offsetof(struct sockaddr_un, sun_path) && un->sun_path[0]) return bind_path(n, un, len);
    } else if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
        in_port_t port = ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                 : ((struct sockaddr_in6 *)&ss)->sin6_port;
        if (port && !n->run->allow_listen) return cv_err(EACCES);
    }
    cv_autoclose int dup = cv_notif_dup_fd(n, (int)a[0]);
    if (dup < 0) return cv_err(dup == -EBADF ? EBADF : -dup);
    return bind(dup, (struct sockaddr *)&ss, len) < 0 ? cv_err(errno) : cv_val(0);
}

static struct cv_reply do_listen(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    cv_autoclose int dup = cv_notif_dup_fd(n, (int)a[0]);
    if (dup < 0) return cv_err(-dup);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(dup, (struct sockaddr *)&ss, &len) < 0) return cv_err(errno);
    if ((ss.ss_family == AF_INET || ss.ss_family == AF_INET6) && !n->run->allow_listen)
        return cv_err(EACCES);
    return listen(dup, (int)a[1]) < 0 ? cv_err(errno) : cv_val(0);
}

static struct cv_reply do_connect(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    struct sockaddr_un un;
    socklen_t len = (socklen_t)a[2];
    size_t base = offsetof(struct sockaddr_un, sun_path);
    if (len <= base || len > sizeof un) return cv_continue();
    memset(&un, 0, sizeof un);
    if (cv_guest_read(n->tid, a[1], &un, len) < 0 || un.sun_family != AF_UNIX || !un.sun_path[0])
        return cv_continue(); /* inet, abstract unix: the kernel decides (the filter set the network policy) */
    char path[sizeof un.sun_path + 1];
    memcpy(path, un.sun_path, len - base);
    path[len - base] = 0;
    struct cv_vnode v;
    int e = cv_vresolve(n, AT_FDCWD, path, CV_RES_FOLLOW, &v);
    if (e < 0) return cv_err(-e);
    struct cv_reply out;
    if (!v.exists) out = cv_err(ENOENT);
    else if (v.in_proc || (!v.touched && v.layer == CV_LOWER)) out = cv_continue(); /* a host socket */
    else if (!S_ISSOCK(v.st.st_mode)) out = cv_err(ECONNREFUSED);
    else {
        cv_autoclose int obj = cv_vnode_open(&v, 0);
        cv_autoclose int dup = obj < 0 ? -1 : cv_notif_dup_fd(n, (int)a[0]);
        struct sockaddr_un real = {.sun_family = AF_UNIX};
        snprintf(real.sun_path, sizeof real.sun_path, "/proc/self/fd/%d", obj);
        if (obj < 0) out = cv_err(-obj);
        else if (dup < 0) out = cv_err(EBADF);
        else if (!cv_notif_valid(n)) out = cv_err(ESRCH);
        else out = connect(dup, (struct sockaddr *)&real, sizeof real) < 0 ? cv_err(errno) : cv_val(0);
    }
    cv_vnode_release(&v);
    return out;
}

struct cv_reply cv_h_sock(struct cv_notif *n) {
    switch (n->req->data.nr) {
    case __NR_bind: return do_bind(n);
    case __NR_connect: return do_connect(n);
    default: return do_listen(n);
    }
}
