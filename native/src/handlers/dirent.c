/* getdents64, getdents. The directory is the guest's fd N, decided on once:
 *  - when the guest's fd table cannot change before the reply (one thread), N's /proc link
 *    names the directory the kernel would list, and a host directory with no upper twin and no
 *    hidden entry is listed by the kernel itself (CONTINUE);
 *  - otherwise the supervisor takes a copy of N (pidfd_getfd) and everything is decided on and
 *    done with that copy: a host directory is listed by the kernel on the copy (which shares
 *    the guest's offset), with hidden names and other processes' /proc entries taken out;
 *  - any other directory (an upper one, a host one the guest changed since it opened it) is
 *    listed from a merged snapshot (overlay/dirsnap.c) whose cursor is the guest's own file
 *    offset (slot << 32 | index), so dup, fork, rewinddir, telldir and seekdir behave, and
 *    deleting entries while reading (rm -rf) skips nothing.
 * The legacy getdents gets the same answers in its own record format. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
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
        return !cv_proc_visible(c->n, (pid_t)atoi(name));
    }
    cv_lpath_scoped struct cv_lpath vp;
    cv_lpath_init(&vp);
    return cv_lpath_join(&vp, c->vdir, name) < 0 || cv_vfs_hidden(c->n->run, vp.s); /* in doubt: hidden */
}

/* The legacy getdents record: the name after a 16-bit length, the type in the last byte. */
struct old_dirent {
    unsigned long ino;
    unsigned long off;
    unsigned short reclen;
    char name[];
};

static size_t old_reclen(size_t namelen) {
    return (offsetof(struct old_dirent, name) + namelen + 2 + sizeof(long) - 1) & ~(sizeof(long) - 1);
}

/* Rewrite linux_dirent64 records (len bytes of in) as legacy ones into out (at most cap bytes):
 * the bytes written; *last_off: the d_off of the last record converted (0 when none). */
static size_t to_old(const char *in, size_t len, char *out, size_t cap, int64_t *last_off) {
    size_t w = 0;
    *last_off = 0;
    for (size_t off = 0; off < len;) {
        const struct cv_dirent *d = (const struct cv_dirent *)(in + off);
        size_t nl = strlen(d->name), rl = old_reclen(nl);
        if (w + rl > cap) break;
        struct old_dirent *o = (struct old_dirent *)(out + w);
        memset(o, 0, rl);
        o->ino = d->ino;
        o->off = (unsigned long)d->off;
        o->reclen = (unsigned short)rl;
        memcpy(o->name, d->name, nl);
        ((char *)o)[rl - 1] = (char)d->type;
        w += rl;
        *last_off = d->off;
        off += d->reclen;
    }
    return w;
}

/* A host directory listed by the kernel on our copy s (so the offset is the kernel's own), with
 * some names taken out (none when ctx is NULL): /proc's other processes, hidden entries. */
static struct cv_reply filtered(struct cv_notif *n, int s, int old_abi, struct skip_ctx *ctx) {
    const __u64 *a = n->req->data.args;
    size_t count = (size_t)(unsigned)a[2];
    if (count > MAX_BATCH) count = MAX_BATCH;
    char *buf = malloc(count ? count : 1);
    if (!buf) return cv_err(ENOMEM);
    struct cv_reply out;
    size_t name_at = old_abi ? offsetof(struct old_dirent, name) : offsetof(struct cv_dirent, name);
    for (;;) {
        long len = syscall(old_abi ? SYS_getdents : __NR_getdents64, s, buf, count);
        if (len <= 0) {
            out = len < 0 ? cv_err(errno) : cv_val(0);
            break;
        }
        size_t w = 0;
        for (long off = 0; off < len;) {
            size_t rl = ((struct cv_dirent *)(buf + off))->reclen; /* both formats: at byte 16 */
            if (!ctx || !skip_name(buf + off + name_at, ctx)) {
                if (w != (size_t)off) memmove(buf + w, buf + off, rl);
                w += rl;
            }
            off += (long)rl;
        }
        if (w == 0) continue; /* all taken out: read on, an empty answer would mean the end */
        int e = cv_guest_write(&n->g, a[1], buf, w);
        out = e < 0 ? cv_err(-e) : cv_val((int64_t)w);
        break;
    }
    free(buf);
    return out;
}

/* A merged listing from a snapshot, the cursor in our copy s's offset (the guest's own).
 * guest_host: s is the host directory (it may be in a native listing: ext4 puts hash cookies in
 * the offset, which look like anything, so an offset that names none of our snapshots of this
 * directory is the kernel's). */
static struct cv_reply list(struct cv_notif *n, int s, const int *fds, int nl, int guest_host, int old_abi,
                            struct skip_ctx *ctx) {
    const __u64 *a = n->req->data.args;
    off_t pos = lseek(s, 0, SEEK_CUR);
    if (pos < 0) return cv_err(errno);
    uint32_t slot = cv_dirsnap_off_slot((uint64_t)pos), idx = cv_dirsnap_off_idx((uint64_t)pos);
    struct cv_dirsnap *snap = pos && slot ? cv_dirsnap_get(slot) : NULL;
    /* The offset is the guest's to set: a slot of another directory (or sandbox) is not shown. */
    if (snap && !cv_dirsnap_matches_stack(snap, fds, nl)) {
        cv_dirsnap_unref(snap);
        snap = NULL;
    }
    /* A native listing in progress (the directory changed since it began): finish it natively;
     * POSIX lets readdir miss changes made after opendir. */
    if (!snap && pos && guest_host) return filtered(n, s, old_abi, ctx);
    if (!snap) {
        snap = cv_dirsnap_build_stack(fds, nl, skip_name, ctx);
        if (!snap) return cv_err(errno ? errno : ENOMEM);
        slot = cv_dirsnap_store(snap);
        if (!pos) idx = 0;
    }
    size_t count = (size_t)(unsigned)a[2];
    if (count > MAX_BATCH) count = MAX_BATCH;
    char *buf = malloc(count ? count : 1), *old = old_abi ? malloc(count ? count : 1) : NULL;
    if (!buf || (old_abi && !old)) {
        free(buf);
        free(old);
        cv_dirsnap_unref(snap);
        return cv_err(ENOMEM);
    }
    uint32_t next = idx;
    ssize_t len = cv_dirsnap_fill(snap, slot, idx, buf, count, &next);
    cv_dirsnap_unref(snap);
    const char *reply = buf;
    if (len > 0 && old_abi) {
        int64_t last;
        len = (ssize_t)to_old(buf, (size_t)len, old, count, &last);
        if (len == 0) len = -EINVAL; /* not even one record fits */
        else next = cv_dirsnap_off_idx((uint64_t)last);
        reply = old;
    }
    struct cv_reply out;
    int e = len > 0 ? cv_guest_write(&n->g, a[1], reply, (size_t)len) : 0;
    if (len < 0) out = cv_err((int)-len);
    else if (e < 0) out = cv_err(-e);
    else {
        /* The end: a seekdir back rebuilds; but on a host directory an offset that names no
         * snapshot is the kernel's, so there the snapshot stays until the table needs room. */
        if (len == 0 && !guest_host) cv_dirsnap_drop(slot);
        lseek(s, (off_t)cv_dirsnap_off(slot, next), SEEK_SET);
        out = cv_val(len);
    }
    free(buf);
    free(old);
    return out;
}

/* What the guest's fd is: decided once, on the copy we act with. */
struct dir {
    int s;          /* our copy of the guest's fd, or -1 until one is needed */
    int stable;     /* the guest's fd table cannot change before the reply */
    int stored;     /* it lies in cvisor's storage (the upper or a read-only layer) */
    char real[PATH_MAX];
};

/* Our copy (fetched now if the classification came from the /proc link). */
static int copy_of(struct cv_notif *n, struct dir *d) {
    if (d->s < 0) d->s = cv_guest_fd(&n->g, (int)n->req->data.args[0]);
    return d->s;
}

/* A host directory with nothing to merge: the kernel lists it, on the guest's fd when that is
 * the one we looked at, else on our copy; hidden names taken out either way. */
static struct cv_reply host_listing(struct cv_notif *n, struct dir *d, const char *vdir, int old_abi,
                                    struct skip_ctx *ctx) {
    int hidden = cv_vfs_holds_hidden(n->run, vdir);
    if (d->stable && !hidden) return cv_continue();
    if (copy_of(n, d) < 0) return cv_err(EBADF);
    return filtered(n, d->s, old_abi, hidden ? ctx : NULL);
}

/* Under read-only layers: the directory's layers as the view stacks them. */
static struct cv_reply layered(struct cv_notif *n, struct dir *d, const char *vdir, int old_abi,
                               struct skip_ctx *ctx) {
    struct cv_run *r = n->run;
    int guest_host = !d->stored;
    struct cv_vstack st;
    if (cv_vdir_stack(r, vdir, &st) < 0) { /* gone from the view: the kernel lists what the guest holds */
        if (!guest_host) return cv_val(0);
        return host_listing(n, d, vdir, old_abi, ctx);
    }
    int only_host = st.fd[st.n - 1] >= 0;
    for (int i = 0; i < st.n - 1; i++) only_host &= st.fd[i] < 0;
    struct cv_reply out;
    if (only_host && guest_host) out = host_listing(n, d, vdir, old_abi, ctx);
    else if (copy_of(n, d) < 0) out = cv_err(EBADF);
    else out = list(n, d->s, st.fd, st.n, guest_host, old_abi, ctx);
    cv_vstack_close(&st);
    return out;
}

/* A directory of the sandbox's own through which nothing below the upper shows: its entries
 * alone, in the shape of the directory's layers (the snapshot matches them on the next call). */
static struct cv_reply own_listing(struct cv_notif *n, struct dir *d, int old_abi, struct skip_ctx *ctx) {
    int fds[CV_MAX_LOWERS + 2], nl = n->run->nlower + 2;
    for (int i = 0; i < nl; i++) fds[i] = -1;
    fds[0] = cv_reopen_dir(d->s, O_RDONLY | O_DIRECTORY);
    struct cv_reply out = fds[0] < 0 ? cv_err(EBADF) : list(n, d->s, fds, nl, 0, old_abi, ctx);
    if (fds[0] >= 0) close(fds[0]);
    return out;
}

struct cv_reply cv_h_dirent(struct cv_notif *n) {
    struct cv_run *r = n->run;
    int gfd = (int)n->req->data.args[0];
    struct dir d = {.s = -1, .stable = cv_guest_fds_stable(&n->g)};
    char what[32];
    ssize_t l;
    if (d.stable) {
        snprintf(what, sizeof what, "fd/%d", gfd);
        l = cv_guest_link(&n->g, what, d.real, sizeof d.real);
        if (l < 0 && l != -ENAMETOOLONG) return cv_err(EBADF);
    } else {
        char self[64];
        d.s = cv_guest_fd(&n->g, gfd);
        if (d.s < 0) return cv_err(d.s == -ESRCH ? ESRCH : EBADF);
        snprintf(self, sizeof self, "/proc/self/fd/%d", d.s);
        l = cv_readlink(self, d.real, sizeof d.real);
        if (l < 0 && l != -ENAMETOOLONG) {
            close(d.s);
            return cv_err(EBADF);
        }
    }
    struct cv_reply out = cv_err(EBADF);
    int old_abi = n->req->data.nr == __NR_getdents;
    cv_lpath_scoped struct cv_lpath vdir;
    cv_lpath_init(&vdir);
    struct skip_ctx ctx = {.n = n, .vdir = vdir.s};
    size_t rl = l < 0 ? 0 : strlen(d.real);
    int e = 0, own = 0;
    if (l < 0) {
        /* Deeper than /proc can name (a directory of a tree deeper than PATH_MAX): climbed. */
        e = copy_of(n, &d) < 0 ? -EBADF : cv_vfs_long_dir_vpath(r, d.s, &vdir, &d.stored, &own);
        if (e == -ENOENT) out = filtered(n, d.s, old_abi, NULL); /* removed: its kernel listing is empty */
        else if (e < 0) out = cv_err(-e);
        else if (own) {
            ctx.vdir = vdir.s;
            out = own_listing(n, &d, old_abi, &ctx);
            e = 1;
        }
    } else if (d.real[0] != '/' || (rl > 10 && !strcmp(d.real + rl - 10, " (deleted)"))) {
        /* not a directory (the kernel says ENOTDIR), or a removed one (empty) */
        out = d.stable ? cv_continue() : filtered(n, d.s, old_abi, NULL);
        e = 1;
    } else if (!strcmp(d.real, "/proc")) {
        cv_lpath_set(&vdir, "/proc");
        ctx.proc = 1;
        out = copy_of(n, &d) < 0 ? cv_err(EBADF) : filtered(n, d.s, old_abi, &ctx);
        e = 1;
    } else if (!strncmp(d.real, "/proc/", 6)) {
        /* A process of the sandbox (opens are checked): its entries as they are. */
        out = d.stable ? cv_continue() : filtered(n, d.s, old_abi, NULL);
        e = 1;
    } else {
        char vp[PATH_MAX];
        e = cv_virtual_of_real(r, d.real, vp, sizeof vp);
        if (e == 0) e = cv_lpath_set(&vdir, vp);
        if (e < 0) out = cv_err(ENOENT);
        d.stored = cv_vfs_in_store(r, d.real);
    }
    ctx.vdir = vdir.s;
    if (e != 0) {
        /* answered above */
    } else if (d.stored && copy_of(n, &d) >= 0 && cv_vfs_own_dir(r, d.s, vdir.s)) {
        out = own_listing(n, &d, old_abi, &ctx);
    } else if (r->nlower) {
        out = layered(n, &d, vdir.s, old_abi, &ctx);
    } else if (d.stored) { /* no read-only layers: the upper */
        cv_autoclose int up = -1;
        cv_autoclose int low = -1;
        if (copy_of(n, &d) >= 0) up = cv_reopen_dir(d.s, O_RDONLY | O_DIRECTORY);
        /* The host twin shows through unless the directory is opaque or replaced a host one: the
         * directory's layers as the walk finds them (from the walk's memo, not from the root). */
        struct cv_vstack st;
        if (up >= 0 && cv_vdir_stack(n->run, vdir.s, &st) == 0) {
            low = st.fd[st.n - 1];
            st.fd[st.n - 1] = -1;
            cv_vstack_close(&st);
        }
        int fds[2] = {up, low};
        out = up < 0 ? cv_err(EBADF) : list(n, d.s, fds, 2, 0, old_abi, &ctx);
    } else {
        cv_autoclose int up = cv_ov_open_upper(r, vdir.s, O_RDONLY | O_DIRECTORY, 0);
        cv_autoclose int low = -1;
        if (up < 0) {
            up = -1;
            out = host_listing(n, &d, vdir.s, old_abi, &ctx); /* a host directory with no changes */
        } else if (copy_of(n, &d) < 0) {
            out = cv_err(EBADF);
        } else {
            /* An opaque twin: the host directory the guest holds was deleted and made again. */
            if (!cv_ov_is_opaque(up)) low = cv_reopen_dir(d.s, O_RDONLY | O_DIRECTORY);
            int fds[2] = {up, low};
            out = list(n, d.s, fds, 2, 1, old_abi, &ctx);
        }
    }
    if (d.s >= 0) close(d.s);
    return out;
}
