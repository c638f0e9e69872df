/* getdents64, getdents. A host directory with no changes in the upper layer and
 * no hidden entries is listed natively (CONTINUE). Any other directory — an
 * upper one, a host one the guest changed since it opened it, one holding a
 * hidden name, /proc (other processes are not listed) — is listed from a
 * merged snapshot (overlay/dirsnap.c): the guest's own file offset is the
 * cursor (slot << 32 | index), so dup, fork, rewinddir, telldir and seekdir
 * behave, and deleting entries while reading (rm -rf) skips nothing. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/sysnr.h"
#include "common/util.h"
#include "handlers.h"
#include "overlay/dirsnap.h"
#include "overlay/layers.h"
#include "overlay/vfs.h"

#define MAX_BATCH (1u << 20)

struct skip_ctx {
    struct cv_notif *n;
    const char *vdir;
    int proc; /* the directory is /proc: only this sandbox's pids */
};

static int skip_name(const char *name, void *arg) {
    struct skip_ctx *c = arg;
    if (c->proc) {
        if (!isdigit((unsigned char)name[0])) return 0;
        pid_t pid = (pid_t)atoi(name);
        return !(pid == cv_notif_tgid(c->n) || pid == c->n->run->init_pid || cv_tree_is_member(c->n->run, pid));
    }
    char vp[PATH_MAX + NAME_MAX + 2];
    snprintf(vp, sizeof vp, "%s/%s", strcmp(c->vdir, "/") ? c->vdir : "", name);
    return cv_vfs_hidden(c->n->run, vp);
}

/* Some hidden path lives directly in vdir. */
static int holds_hidden(const struct cv_run *r, const char *vdir) {
    size_t l = strlen(vdir);
    for (size_t i = 0; i < r->nhide; i++) {
        const char *h = r->hide[i];
        const char *slash = strrchr(h, '/');
        size_t pl = slash == h ? 1 : (size_t)(slash - h);
        if (pl == l && !strncmp(h, vdir, l)) return 1;
    }
    return 0;
}

/* A host directory listed by the kernel on a dup of the guest's fd (so the offset is the kernel's
 * own), with some names taken out: /proc's other processes, hidden entries. */
static struct cv_reply filtered(struct cv_notif *n, struct skip_ctx *ctx) {
    const __u64 *a = n->req->data.args;
    cv_autoclose int dup = cv_notif_dup_fd(n, (int)a[0]);
    if (dup < 0) return cv_err(EBADF);
    size_t count = (size_t)(unsigned)a[2];
    if (count > MAX_BATCH) count = MAX_BATCH;
    char *buf = malloc(count ? count : 1);
    if (!buf) return cv_err(ENOMEM);
    struct cv_reply out;
    for (;;) {
        long len = syscall(__NR_getdents64, dup, buf, count);
        if (len <= 0) {
            out = len < 0 ? cv_err(errno) : cv_val(0);
            break;
        }
        size_t w = 0;
        for (long off = 0; off < len;) {
            struct cv_dirent *d = (struct cv_dirent *)(buf + off);
            size_t rl = d->reclen;
            if (!skip_name(d->name, ctx)) {
                if (w != (size_t)off) memmove(buf + w, d, rl);
                w += rl;
            }
            off += (long)rl;
        }
        if (w == 0) continue; /* all taken out: read on, an empty answer would mean the end */
        out = cv_notif_write(n, a[1], buf, w) < 0 ? cv_err(EFAULT) : cv_val((int64_t)w);
        break;
    }
    free(buf);
    return out;
}

/* guest_host: the guest's fd is the host directory (it may be in a native listing: ext4 puts
 * hash cookies in the offset, which look like anything, so an offset that names none of our
 * snapshots of this directory is the kernel's). */
static struct cv_reply list(struct cv_notif *n, const int *fds, int nl, int guest_host, struct skip_ctx *ctx) {
    const __u64 *a = n->req->data.args;
    cv_autoclose int dup = cv_notif_dup_fd(n, (int)a[0]);
    if (dup < 0) return cv_err(EBADF);
    off_t pos = lseek(dup, 0, SEEK_CUR);
    if (pos < 0) return cv_err(errno);
    uint32_t slot = cv_dirsnap_off_slot((uint64_t)pos), idx = cv_dirsnap_off_idx((uint64_t)pos);
    struct cv_dirsnap *s = pos && slot ? cv_dirsnap_get(slot) : NULL;
    /* The offset is the guest's to set: a slot of another directory (or sandbox) is not shown. */
    if (s && !cv_dirsnap_matches_stack(s, fds, nl)) {
        cv_dirsnap_unref(s);
        s = NULL;
    }
    /* A native listing in progress (the directory changed since it began): finish it natively;
     * POSIX lets readdir miss changes made after opendir. */
    if (!s && pos && guest_host) return cv_continue();
    if (!s) {
        s = cv_dirsnap_build_stack(fds, nl, skip_name, ctx);
        if (!s) return cv_err(errno ? errno : ENOMEM);
        slot = cv_dirsnap_store(s);
        if (!pos) idx = 0;
    }
    size_t count = (size_t)(unsigned)a[2];
    if (count > MAX_BATCH) count = MAX_BATCH;
    char *buf = malloc(count ? count : 1);
    if (!buf) {
        cv_dirsnap_unref(s);
        return cv_err(ENOMEM);
    }
    uint32_t next = idx;
    ssize_t len = cv_dirsnap_fill(s, slot, idx, buf, count, &next);
    cv_dirsnap_unref(s);
    struct cv_reply out;
    if (len < 0) out = cv_err((int)-len);
    else if (len > 0 && cv_notif_write(n, a[1], buf, (size_t)len) < 0) out = cv_err(EFAULT);
    else {
        if (len == 0) cv_dirsnap_drop(slot); /* the end: a seekdir back rebuilds */
        lseek(dup, (off_t)cv_dirsnap_off(slot, next), SEEK_SET);
        out = cv_val(len);
    }
    free(buf);
    return out;
}

/* Under read-only layers: the directory's layers as the view stacks them. */
static struct cv_reply layered(struct cv_notif *n, const char *vdir, const char *real, int old_abi,
                               struct skip_ctx *ctx) {
    struct cv_run *r = n->run;
    int guest_host = !cv_vfs_in_store(r, real);
    struct cv_vstack st;
    if (cv_vdir_stack(r, vdir, &st) < 0) /* gone from the view: the kernel lists what the guest holds */
        return guest_host ? cv_continue() : cv_val(0);
    int only_host = st.fd[st.n - 1] >= 0;
    for (int i = 0; i < st.n - 1; i++) only_host &= st.fd[i] < 0;
    struct cv_reply out;
    if (only_host && guest_host) /* a host directory with no changes: native, hidden names taken out */
        out = holds_hidden(r, vdir) && !old_abi ? filtered(n, ctx) : cv_continue();
    else if (old_abi)
        out = cv_err(EINVAL); /* legacy getdents: native only */
    else
        out = list(n, st.fd, st.n, guest_host, ctx);
    cv_vstack_close(&st);
    return out;
}

struct cv_reply cv_h_dirent(struct cv_notif *n) {
    const struct cv_run *r = n->run;
    int gfd = (int)n->req->data.args[0];
    char link[64], real[PATH_MAX], vdir[PATH_MAX];
    snprintf(link, sizeof link, "/proc/%d/fd/%d", (int)n->tid, gfd);
    if (cv_readlink(link, real, sizeof real) < 0) return cv_err(EBADF);
    if (real[0] != '/') return cv_continue(); /* not a directory: the kernel says ENOTDIR */
    size_t rl = strlen(real);
    if (rl > 10 && !strcmp(real + rl - 10, " (deleted)")) return cv_continue(); /* removed: empty */
    int old_abi = n->req->data.nr == __NR_getdents;
    struct skip_ctx ctx = {.n = n, .vdir = vdir};
    if (!strcmp(real, "/proc")) {
        if (old_abi) return cv_err(EINVAL);
        strcpy(vdir, "/proc");
        ctx.proc = 1;
        return filtered(n, &ctx);
    }
    if (!strncmp(real, "/proc/", 6)) return cv_continue(); /* a process of the sandbox (opens are checked) */
    if (cv_virtual_of_real(r, real, vdir, sizeof vdir) < 0) return cv_err(ENOENT);
    if (r->nlower) return layered(n, vdir, real, old_abi, &ctx);
    int in_upper = cv_vfs_in_store(r, real); /* no read-only layers: the upper */
    cv_autoclose int up = -1;
    cv_autoclose int low = -1;
    if (in_upper) {
        up = open(link, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (up < 0) return cv_err(EBADF);
        /* The host twin shows through unless the directory is opaque or replaced a host one. */
        struct cv_vnode v;
        if (cv_vresolve(n, AT_FDCWD, vdir, 0, &v) == 0) {
            if (v.exists && v.lower_dir && !v.opaque) low = open(vdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            cv_vnode_release(&v);
        }
    } else {
        up = cv_ov_open_upper(r, vdir, O_RDONLY | O_DIRECTORY, 0);
        if (up < 0) /* a host directory with no changes: native, hidden names taken out */
            return holds_hidden(r, vdir) && !old_abi ? filtered(n, &ctx) : cv_continue();
        /* An opaque twin: the host directory the guest holds was deleted and made again. */
        if (!cv_ov_is_opaque(up)) {
            low = open(link, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (low < 0) return cv_err(EBADF);
        }
    }
    if (old_abi) return up >= 0 && low < 0 ? cv_continue() : cv_err(EINVAL); /* legacy getdents: native only */
    int fds[2] = {up, low};
    return list(n, fds, 2, !in_upper, &ctx);
}
