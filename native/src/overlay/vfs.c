#include "vfs.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/sysnr.h"
#include "common/util.h"
#include "guest/guest.h"
#include "overlay/alias.h"
#include "overlay/layers.h"
#include "overlay/lowers.h"
#include "overlay/moved.h"
#include "overlay/walkmemo.h"

/* One directory of the walk: its virtual path and where it lives. */
struct wdir {
    char vpath[PATH_MAX];
    int up;  /* upper directory (O_PATH) or -1 */
    int low; /* host directory whose entries show here, or -1 */
    int opq; /* the upper directory is opaque: its lower entries are hidden */
    uint64_t lmask; /* the read-only layers holding this directory where it shows (bit i: r->lower[i]) */
    unsigned char up_borrowed, low_borrowed; /* the root's fds belong to the run / the process */
};

static void wdir_close(struct wdir *d) {
    if (d->up >= 0 && !d->up_borrowed) close(d->up);
    if (d->low >= 0 && !d->low_borrowed) close(d->low);
    d->up = d->low = -1;
    d->lmask = 0;
    d->up_borrowed = d->low_borrowed = 0;
}

/* An fd of the walk handed to the caller: its own copy when the walk only borrowed it. */
static int hand_over(int fd, int borrowed) { return fd >= 0 && borrowed ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : fd; }

/* The host's root directory, opened once per process. */
static int host_root(void) {
    static _Atomic int fd = -1;
    int cur = atomic_load(&fd);
    if (cur >= 0) return cur;
    int mine = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (mine < 0) return -1;
    int expected = -1;
    if (!atomic_compare_exchange_strong(&fd, &expected, mine)) {
        close(mine);
        return expected;
    }
    return mine;
}

int cv_vfs_hidden(const struct cv_run *r, const char *vpath) { return cv_vfs_hidden_root(r, vpath) != NULL; }

/* vpath lies in the directory that holds every hidden path (so one of them may hide it). */
static int near_hidden(const struct cv_run *r, const char *vpath) {
    size_t l = r->hide_common_len;
    if (!r->nhide) return 0;
    if (l <= 1) return 1; /* "/" (or ""): everything is near */
    return !strncmp(vpath, r->hide[0], l) && (vpath[l] == 0 || vpath[l] == '/');
}

/* Some hidden path is p, lies below it, or holds it (p and the directory holding them all are
 * one inside the other). */
int cv_vfs_may_touch_hidden(const struct cv_run *r, const char *p) {
    if (!r->nhide) return 0;
    size_t cl = r->hide_common_len, pl = strlen(p);
    if (cl <= 1 || pl <= 1) return 1;
    size_t m = cl < pl ? cl : pl;
    if (strncmp(p, r->hide[0], m)) return 0;
    if (cl == pl) return 1;
    return cl < pl ? p[cl] == '/' : r->hide[0][pl] == '/';
}

const char *cv_vfs_hidden_root(const struct cv_run *r, const char *vpath) {
    if (!near_hidden(r, vpath)) return NULL;
    for (size_t i = 0; i < r->nhide; i++)
        if (cv_path_under(vpath, r->hide[i])) return r->hide[i];
    return NULL;
}

/* A guest named a hidden path: it does not exist for it, and the run's report says why. */
static void note_hidden(const struct cv_vctx *c, const char *vp) {
    const char *root = c->nr >= 0 ? cv_vfs_hidden_root(c->run, vp) : NULL;
    if (root) cv_run_deny(c->run, c->nr, c->guest ? c->guest->tid : 0, root, "hidden from the sandbox (--expose gives a credential store back)");
}

/* The root of the upper or read-only layer a real path lies in, or NULL for a host path. */
static const char *store_root(const struct cv_run *r, const char *real) {
    if (r->upper && cv_path_under(real, r->upper)) return r->upper;
    for (int i = 0; i < r->nlower; i++)
        if (cv_path_under(real, r->lower[i])) return r->lower[i];
    return NULL;
}

int cv_vfs_in_store(const struct cv_run *r, const char *real) { return store_root(r, real) != NULL; }

int cv_vfs_in_upper(const struct cv_run *r, const char *real) { return r->upper && cv_path_under(real, r->upper); }

/* cv_virtual_of_real for a real path already taken through the moved directories. */
static int virtual_of(const struct cv_run *r, const char *real, char *out, size_t len) {
    if (real[0] != '/') return -ENOENT;
    const char *root = store_root(r, real);
    if (root) {
        const char *rest = real + strlen(root);
        return snprintf(out, len, "%s", *rest ? rest : "/") < (int)len ? 0 : -ENAMETOOLONG;
    }
    size_t l = strlen(real);
    if (l > 10 && !strcmp(real + l - 10, " (deleted)")) return -ENOENT;
    if (cv_vfs_hidden(r, real)) return -ENOENT;
    return snprintf(out, len, "%s", real) < (int)len ? 0 : -ENAMETOOLONG;
}

int cv_virtual_of_real(const struct cv_run *r, const char *real, char *out, size_t len) {
    char moved[PATH_MAX];
    int m = cv_moved_real(r, real, moved, sizeof moved);
    if (m < 0) return m;
    return virtual_of(r, m ? moved : real, out, len);
}

static int open_dir_at(int dirfd, const char *name) {
    return openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}


/* "/": the run's upper root and the host root, borrowed (no open per look-up). The root is
 * never opaque: it cannot be removed, renamed or made again. */
static int root_dir(const struct cv_run *r, struct wdir *d) {
    strcpy(d->vpath, "/");
    d->up = r->upper_fd;
    d->low = host_root();
    d->up_borrowed = d->low_borrowed = 1;
    d->opq = 0;
    d->lmask = r->nlower ? (~0ull >> (64 - r->nlower)) : 0;
    return d->low < 0 ? -EIO : 0;
}

/* dir + "/" + name into out (PATH_MAX); callers checked the length. */
static void join(char *out, const char *dir, const char *name) {
    size_t dl = strlen(dir), nl = strlen(name);
    if (dl == 1) dl = 0; /* "/" */
    if (dl + 1 + nl + 1 > PATH_MAX) nl = PATH_MAX - dl - 2;
    memcpy(out, dir, dl);
    out[dl] = '/';
    memcpy(out + dl + 1, name, nl);
    out[dl + 1 + nl] = 0;
}

/* name of the directory vdir below the upper: in the read-only layers lmask, then in the host
 * directory low (-1: none). vp is vdir + "/" + name. 0 and *lidx (0: the host) and *st, or
 * -ENOENT (also when a layer deletes it), or -errno. lnbuf: the layers' entries under name, read
 * when lmask is set (then *ln points to it; ln may be NULL). */
static int lookup_below(struct cv_run *r, const char *vdir, const char *vp, const char *name, uint64_t lmask, int low,
                        int *lidx, struct stat *st, struct cv_lnames *lnbuf, const struct cv_lnames **ln) {
    *lidx = 0;
    if (lmask) {
        cv_lower_names(r, vdir, name, lnbuf);
        if (ln) *ln = lnbuf;
        uint64_t m = (lnbuf->has | lnbuf->wh) & lmask;
        if (m) {
            int i = __builtin_ctzll(m);
            if (!(lnbuf->has >> i & 1)) return -ENOENT; /* that layer deletes it */
            int e = cv_lower_lstat(r, i, vp, st);
            if (e < 0) return e;
            *lidx = i + 1;
            return 0;
        }
    }
    if (low < 0) return -ENOENT;
    if (fstatat(low, name, st, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
    return cv_vfs_hidden(r, vp) ? -ENOENT : 0;
}

/* Look name up in d. 0 and *layer, *lidx, *st, or -ENOENT (also for a whiteout), or -errno.
 * *ln: the layers' entries under name when the look-up read them (for descend), else NULL. */
static int lookup(struct cv_run *r, const struct wdir *d, const char *name, int *layer, int *lidx, struct stat *st,
                  struct cv_lnames *lnbuf, const struct cv_lnames **ln) {
    *ln = NULL;
    if (cv_ov_reserved(name)) return -ENOENT;
    int lower_shows = !d->opq && (d->low >= 0 || d->lmask);
    *lidx = 0;
    if (d->up >= 0) {
        if (fstatat(d->up, name, st, AT_SYMLINK_NOFOLLOW) == 0) {
            *layer = CV_UPPER;
            return 0;
        }
        if (errno != ENOENT) return -errno;
        if (lower_shows && cv_ov_whited_out(d->up, name)) return -ENOENT;
    }
    if (!lower_shows) return -ENOENT;
    char vp[PATH_MAX];
    join(vp, d->vpath, name);
    int e = lookup_below(r, d->vpath, vp, name, d->lmask, d->low, lidx, st, lnbuf, ln);
    if (e == 0) *layer = CV_LOWER;
    return e;
}

/* The read-only layers from index `from` on whose directory name (a child of d) is a directory
 * that shows; *stop when one of them hides everything below it (a file, a whiteout, an opaque
 * directory), the host included. known: the layers' entries under name when lookup read them. */
static uint64_t layer_twins(struct cv_run *r, const struct wdir *d, const char *name, const char *vp, int from,
                            const struct cv_lnames *known, int *stop) {
    uint64_t mask = 0;
    *stop = 0;
    uint64_t below = from >= 64 ? 0 : d->lmask & (~0ull << from);
    if (!below) return 0;
    struct cv_lnames ln;
    if (known) ln = *known;
    else cv_lower_names(r, d->vpath, name, &ln);
    uint64_t m = (ln.has | ln.wh) & below, opaque = 0;
    int opaque_read = 0;
    while (m && !*stop) {
        int i = __builtin_ctzll(m);
        uint64_t bit = 1ull << i;
        m &= m - 1;
        if (!(ln.has & ln.dir & bit)) { /* a file or a whiteout hides what is below */
            *stop = 1;
            break;
        }
        mask |= bit;
        if (!opaque_read) {
            opaque = cv_lower_opaque(r, vp);
            opaque_read = 1;
        }
        /* an opaque twin, or a whiteout of the name beside it in its own layer, ends the merge */
        *stop = ((opaque | ln.wh) & bit) != 0;
    }
    return mask;
}

/* Step from d into its child directory name (found in layer, lidx; ln as lookup gave it). */
static int descend(struct cv_run *r, struct wdir *d, const char *name, int layer, int lidx,
                   const struct cv_lnames *ln) {
    char vp[PATH_MAX];
    if (strlen(d->vpath) + strlen(name) + 2 > PATH_MAX) return -ENAMETOOLONG;
    join(vp, d->vpath, name);
    int up = -1, low = -1, stop = 0;
    uint64_t mask = 0;
    if (layer == CV_UPPER) {
        up = open_dir_at(d->up, name);
        if (up < 0) return -errno;
    }
    if (layer != CV_UPPER || !d->opq) {
        int from = layer == CV_UPPER ? 0 : lidx > 0 ? lidx - 1 : r->nlower;
        mask = layer_twins(r, d, name, vp, from, ln, &stop);
        if (!stop && d->low >= 0) {
            low = open_dir_at(d->low, name); /* -1: the name is a file (or missing) in the host */
            if (low < 0 && layer == CV_LOWER && lidx == 0) return -errno;
        }
    }
    int opq = cv_ov_is_opaque(up);
    wdir_close(d);
    strcpy(d->vpath, vp);
    d->up = up;
    d->low = low;
    d->opq = opq;
    d->lmask = mask;
    return 0;
}

/* Below a host directory with no upper twin nothing of the upper can show, so the directories
 * of the rest of the path are plain host directories unless a symlink, "." or "..", or a hidden
 * path is on the way: one openat2 takes the walk to the last component's parent. On any doubt
 * (or failure) the walk goes on one component at a time, which gives the precise answer. */
static void skip_host_dirs(const struct cv_run *r, struct wdir *d, char **pp) {
    if (d->lmask) return;
    char *p = *pp;
    char *end = p + strlen(p);
    while (end > p && end[-1] == '/') end--;
    char *last = end;
    while (last > p && last[-1] != '/') last--;
    if (last == p) return; /* one component left */
    size_t dl = strlen(d->vpath), rl = (size_t)(last - p);
    char rest[PATH_MAX], full[PATH_MAX];
    if (rl >= sizeof rest || dl + 1 + rl >= sizeof full) return;
    memcpy(rest, p, rl);
    rest[rl] = 0;
    for (char *c = rest; *c;) { /* no "." or ".." components */
        while (*c == '/') c++;
        if (c[0] == '.' && (c[1] == '/' || !c[1] || (c[1] == '.' && (c[2] == '/' || !c[2])))) return;
        while (*c && *c != '/') c++;
    }
    if (dl == 1) dl = 0; /* "/" */
    memcpy(full, d->vpath, dl);
    full[dl] = '/';
    memcpy(full + dl + 1, rest, rl + 1);
    size_t fl = strlen(full);
    while (fl > 1 && full[fl - 1] == '/') full[--fl] = 0;
    if (cv_vfs_may_touch_hidden(r, full)) /* a hidden path on the way or below */
        for (size_t i = 0; i < r->nhide; i++)
            if (cv_path_under(full, r->hide[i]) || cv_path_under(r->hide[i], full)) return;
    if (!strncmp(full, "/proc", 5) && (!full[5] || full[5] == '/')) return;
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(__NR_openat2, d->low, rest, &how, sizeof how);
    if (fd < 0) return;
    if (!d->low_borrowed) close(d->low);
    d->low = fd;
    d->low_borrowed = 0;
    snprintf(d->vpath, sizeof d->vpath, "%s", full);
    *pp = last;
}

/* A walk leaves a directory without a host twin in the memo every this many levels, and where
 * it ends: a walk back up a deep tree ("..") or into its next level starts near it. */
#define WMEMO_STRIDE 16

static void remember(struct cv_run *r, const struct wdir *d) {
    struct cv_wmemo_dir m = {.lmask = d->lmask};
    struct stat st;
    if (d->low >= 0 || (d->up < 0 && !d->lmask)) return;
    if (d->up >= 0) {
        if (fstat(d->up, &st) < 0) return;
        m.has_up = 1;
        m.dev = st.st_dev;
        m.ino = st.st_ino;
    }
    cv_wmemo_put(r, d->vpath, strlen(d->vpath), &m);
}

/* The nearest directory of vpath (itself included) the memo holds, as a directory of the walk,
 * once its upper directory is found to be the one the memo saw (or still none); 0 when there is
 * none. *len: how much of vpath it stands for. */
static int from_memo(struct cv_run *r, const char *vpath, struct wdir *d, size_t *len) {
    struct cv_wmemo_dir m;
    if (!cv_wmemo_find(r, vpath, len, &m)) return 0;
    memcpy(d->vpath, vpath, *len);
    d->vpath[*len] = 0;
    int up = cv_ov_open_upper(r, d->vpath, O_PATH | O_DIRECTORY, 0);
    struct stat st;
    if (up >= 0 && (!m.has_up || fstat(up, &st) < 0 || st.st_dev != m.dev || st.st_ino != m.ino)) {
        close(up);
        return 0;
    }
    if (up < 0 && m.has_up) return 0;
    d->up = up < 0 ? -1 : up;
    d->low = -1;
    d->up_borrowed = d->low_borrowed = 0;
    d->lmask = m.lmask;
    d->opq = cv_ov_is_opaque(d->up);
    return 1;
}

/* An absolute path whose leading directories are plain names (no ".", "..", or "//") may start
 * at the nearest of them the memo holds, as dir_at does; the last component is always walked.
 * How much of path the walk may skip (0: none; d is then as it was). */
static size_t memo_jump(struct cv_run *r, char *path, struct wdir *d) {
    size_t clean = 0;
    for (size_t i = 1;;) { /* path[i-1] == '/': a component starts at i */
        size_t j = i;
        while (path[j] && path[j] != '/') j++;
        if (!path[j] || !path[j + 1] || path[j + 1] == '/') break; /* i..j is the last (or then "//") */
        if (j == i || (path[i] == '.' && (j == i + 1 || (path[i + 1] == '.' && j == i + 2)))) break;
        clean = j;
        i = j + 1;
    }
    if (clean < 2) return 0;
    char keep = path[clean];
    path[clean] = 0;
    struct wdir m;
    size_t len = 0;
    int found = from_memo(r, path, &m, &len);
    path[clean] = keep;
    if (!found) return 0;
    wdir_close(d);
    *d = m;
    return len;
}

/* The directory at a symlink-free virtual path, walked from the nearest directory the memo
 * holds, or from the root. */
static int dir_at(struct cv_run *r, const char *vpath, struct wdir *d) {
    size_t from = 0;
    if (!from_memo(r, vpath, d, &from)) {
        int e = root_dir(r, d);
        if (e < 0) return e;
    }
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", vpath + from);
    int e = 0, steps = 0;
    for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        int layer, lidx;
        struct stat st;
        struct cv_lnames lnbuf;
        const struct cv_lnames *ln;
        e = lookup(r, d, c, &layer, &lidx, &st, &lnbuf, &ln);
        if (e == 0 && !S_ISDIR(st.st_mode)) e = -ENOTDIR;
        if (e == 0) e = descend(r, d, c, layer, lidx, ln);
        if (e < 0) {
            wdir_close(d);
            return e;
        }
        if (++steps % WMEMO_STRIDE == 0) remember(r, d);
    }
    if (steps % WMEMO_STRIDE) remember(r, d);
    return 0;
}

/* Where a relative path starts: the guest's cwd or dirfd, as a directory of the walk. The
 * directory is fetched once (our O_PATH copy) and both its path and its fd come from that copy. */
static int start_dir(const struct cv_vctx *c, int dirfd, struct wdir *d, int *in_proc, int *touched) {
    char real[PATH_MAX], self[64], what[32];
    struct cv_run *r = c->run;
    if (dirfd == AT_FDCWD) {
        int held = -1;
        if (c->cwd && c->cwd(c, real, sizeof real, &held)) {
            *touched = 1; /* the kernel's cwd is elsewhere */
            int e = dir_at(r, real, d);
            if (e == -ENOENT || e == -ENOTDIR) {
                /* The remembered directory was removed: names in it are gone, "." is the removed
                 * directory itself, ".." still leads to its parent, as for a deleted kernel cwd. */
                snprintf(d->vpath, sizeof d->vpath, "%s", real);
                d->up = held;
                return -ESTALE;
            }
            if (held >= 0) close(held);
            return e;
        }
        snprintf(what, sizeof what, "cwd");
    } else {
        snprintf(what, sizeof what, "fd/%d", dirfd);
    }
    cv_autoclose int fd = cv_guest_open(c->guest, what, O_PATH | O_DIRECTORY);
    if (fd == -ESRCH || fd == -ENOTDIR) return fd;
    if (fd < 0) return dirfd == AT_FDCWD ? -ENOENT : -EBADF;
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    if (cv_readlink(self, real, sizeof real) < 0) return dirfd == AT_FDCWD ? -ENOENT : -EBADF;
    if (real[0] != '/') return -ENOTDIR;
    if (!strcmp(real, "/proc") || !strncmp(real, "/proc/", 6)) {
        *in_proc = 1;
        return 0;
    }
    char moved[PATH_MAX];
    int e = cv_moved_real(r, real, moved, sizeof moved); /* a directory renamed since: its copy */
    if (e < 0) return e;
    if (e) snprintf(real, sizeof real, "%s", moved);
    char vpath[PATH_MAX];
    e = virtual_of(r, real, vpath, sizeof vpath);
    if (e < 0) return e;
    if (store_root(r, real)) {
        *touched = 1;
        return dir_at(r, vpath, d);
    }
    /* Under read-only layers, a host directory may have twins in them: walk the view. */
    if (r->nlower) return dir_at(r, vpath, d);
    /* A host directory: it shows as itself; its upper twin, if any, holds the changes. */
    d->low = cv_steal_fd(&fd);
    strcpy(d->vpath, vpath);
    d->up = cv_ov_open_upper(r, vpath, O_PATH | O_DIRECTORY, 0);
    if (d->up < 0) d->up = -1;
    d->opq = cv_ov_is_opaque(d->up);
    return 0;
}

/* The parent directory of a virtual path (PATH_MAX), textually: "/" for "/" and "/x". */
static void parent_path(const char *vpath, char *out) {
    snprintf(out, PATH_MAX, "%s", vpath);
    char *slash = strrchr(out, '/');
    if (slash == out) out[1] = 0;
    else if (slash) *slash = 0;
}

/* The parent directory of v, vpath-wise. */
static void parent_of(const struct cv_vnode *v, char *out) { parent_path(v->vpath, out); }

static int first_layer(uint64_t mask) { return mask ? __builtin_ctzll(mask) : -1; }

/* psrc: where the final object lives (a read-only layer's parent is opened for it). */
static int set_src(struct cv_vnode *v) {
    if (!v->exists) return 0;
    if (v->layer == CV_UPPER) v->psrc = v->pup;
    else if (!v->lidx) v->psrc = v->plow;
    else {
        char parent[PATH_MAX];
        parent_of(v, parent);
        if (!*v->name) snprintf(parent, sizeof parent, "/");
        v->psrc = cv_lower_open(v->run, v->lidx - 1, parent, O_PATH | O_DIRECTORY);
        if (v->psrc < 0) {
            int e = v->psrc;
            cv_vnode_release(v);
            return e;
        }
        v->psrc_own = 1;
    }
    return 0;
}

static int proc_handoff(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_vnode *v) {
    if (cv_guest_settle(c->guest) < 0) return -ESRCH;
    v->in_proc = 1;
    int e = cv_resolve(c, dirfd, path, flags, &v->proc);
    if (e < 0) return e;
    if (v->proc.have_path && !v->proc.in_proc && !v->proc.magic) {
        /* Out of /proc again (/proc/self/root/..., /proc/self/cwd/...): the rest is the merged view's. */
        char vp[PATH_MAX];
        if (cv_virtual_of_real(c->run, v->proc.path, vp, sizeof vp) < 0) return -ENOENT;
        return cv_vresolve(c, AT_FDCWD, vp, flags, v);
    }
    v->exists = v->proc.exists;
    v->st = v->proc.st;
    v->touched = 1;
    snprintf(v->vpath, sizeof v->vpath, "%s", v->proc.have_path ? v->proc.path : path);
    const char *slash = strrchr(v->vpath, '/');
    v->name = slash ? slash + 1 : v->vpath;
    return 0;
}


int cv_vnode_may_change(const struct cv_vnode *v) {
    int dir = v->plow >= 0 ? v->plow : v->pup;
    cv_autoclose int own = -1;
    if (dir < 0 && v->plmask && *v->name) {
        /* A directory only the read-only layers hold: its topmost copy is the guest's own. */
        char parent[PATH_MAX];
        parent_of(v, parent);
        dir = own = cv_lower_open(v->run, first_layer(v->plmask), parent, O_PATH | O_DIRECTORY);
    }
    if (dir < 0) return -ENOENT;
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", dir);
    return access(self, W_OK | X_OK) < 0 && errno != EROFS ? -errno : 0;
}


int cv_vnode_merged_dir(const struct cv_vnode *v) {
    return v->exists && !v->in_proc && v->layer == CV_UPPER && S_ISDIR(v->st.st_mode) && v->lower_dir && !v->opaque;
}

/* What lies under v's name below the upper (for "/": the host root): *lidx (0: the host) and *st,
 * or -errno (-ENOENT also when a layer deletes it or it is hidden). */
static int lower_twin(const struct cv_vnode *v, int *lidx, struct stat *st) {
    if (!*v->name) { /* "/": its parent fds are the root's own */
        *lidx = 0;
        return v->plow < 0 ? -ENOENT : fstat(v->plow, st) < 0 ? -errno : 0;
    }
    char parent[PATH_MAX];
    parent_of(v, parent);
    struct cv_lnames ln;
    return lookup_below(v->run, parent, v->vpath, v->name, v->plmask, v->plow, lidx, st, &ln, NULL);
}

int cv_vnode_lower(const struct cv_vnode *v, struct stat *st) {
    int lidx;
    return *v->name && !v->popq && !v->in_proc && lower_twin(v, &lidx, st) == 0;
}

int cv_vnode_lower_id(const struct cv_vnode *v, struct stat *st) {
    int lidx;
    return cv_vnode_merged_dir(v) && lower_twin(v, &lidx, st) == 0 && S_ISDIR(st->st_mode);
}

int cv_vnode_open_lower(const struct cv_vnode *v, int flags) {
    int lidx;
    struct stat st;
    if (!cv_vnode_merged_dir(v)) return -EINVAL;
    int e = lower_twin(v, &lidx, &st);
    if (e < 0) return e;
    if (lidx > 0) return cv_lower_open(v->run, lidx - 1, v->vpath, flags | O_DIRECTORY);
    int fd = openat(v->plow, *v->name ? v->name : ".", flags | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int cv_vdir_stack(struct cv_run *r, const char *vdir, struct cv_vstack *s) {
    s->n = r->nlower + 2;
    for (int i = 0; i < s->n; i++) s->fd[i] = -1;
    struct wdir d = {.up = -1, .low = -1};
    int e = dir_at(r, vdir, &d);
    if (e < 0) return e;
    int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    if (d.up >= 0) s->fd[0] = cv_reopen_dir(d.up, flags);
    if (!d.opq) {
        for (int i = 0; i < r->nlower; i++)
            if (d.lmask >> i & 1) s->fd[1 + i] = cv_lower_open(r, i, vdir, flags);
        if (d.low >= 0) s->fd[s->n - 1] = cv_reopen_dir(d.low, flags);
    }
    for (int i = 0; i < s->n; i++)
        if (s->fd[i] < 0) s->fd[i] = -1;
    wdir_close(&d);
    return 0;
}

void cv_vstack_close(struct cv_vstack *s) {
    for (int i = 0; i < s->n; i++)
        if (s->fd[i] >= 0) close(s->fd[i]);
    s->n = 0;
}

void cv_vnode_release(struct cv_vnode *v) {
    if (v->psrc_own && v->psrc >= 0) close(v->psrc);
    if (v->pup >= 0) close(v->pup);
    if (v->plow >= 0) close(v->plow);
    v->pup = v->plow = v->psrc = -1;
    v->psrc_own = 0;
}

int cv_vresolve(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_vnode *v) {
    struct cv_run *r = c->run;
    memset(v, 0, sizeof *v);
    v->run = r;
    v->pup = v->plow = v->psrc = -1;
    if (!*path) return -ENOENT;
    if (path[0] == '/' && (!strcmp(path, "/proc") || !strncmp(path, "/proc/", 6)))
        return proc_handoff(c, dirfd, path, flags, v);
    struct wdir d = {.up = -1, .low = -1};
    int e, in_proc = 0;
    if (path[0] == '/') e = root_dir(r, &d);
    else e = start_dir(c, dirfd, &d, &in_proc, &v->touched);
    /* A path read on credit (cv_guest_path_owed) is paid for before anything acts on it; the
     * check after start_dir's look at a guest fd, when it made one, already paid. */
    if (cv_guest_settle(c->guest) < 0) {
        wdir_close(&d);
        return -ESRCH;
    }
    if (in_proc) return proc_handoff(c, dirfd, path, flags, v);
    if (e == -ESTALE) {
        int held = d.up;
        if (!strcmp(path, ".") || !strcmp(path, "./")) {
            /* The removed directory itself, through the fd kept for it. */
            if (held < 0 || fstat(held, &v->st) < 0) {
                if (held >= 0) close(held);
                return -ENOENT;
            }
            v->exists = 1;
            v->layer = CV_UPPER;
            v->touched = 1;
            snprintf(v->vpath, sizeof v->vpath, "%s", d.vpath);
            v->name = v->vpath + strlen(v->vpath); /* "": the fd itself */
            v->pup = v->psrc = held;
            return 0;
        }
        if (held >= 0) close(held);
        if (strncmp(path, "..", 2) || (path[2] && path[2] != '/')) return -ENOENT;
        char abs[PATH_MAX * 2], parent[PATH_MAX];
        parent_path(d.vpath, parent);
        snprintf(abs, sizeof abs, "%s/%s", parent, path + 2);
        return cv_vresolve(c, AT_FDCWD, abs, flags, v);
    }
    if (e < 0) return e;

    char rest[PATH_MAX * 2], target[PATH_MAX];
    if (snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest) {
        wdir_close(&d);
        return -ENAMETOOLONG;
    }
    int hops = 0, walked = 0, follow = flags & CV_RES_FOLLOW;
    char *p = rest;
    if (path[0] == '/') {
        size_t skip = memo_jump(r, rest, &d);
        p += skip;
        v->touched |= skip > 0; /* the sandbox's own directories on the way: never the kernel's */
    }
    size_t plen = strlen(path);
    v->trailing = plen > 0 && path[plen - 1] == '/';
    /* The final object, when the loop ends on a directory (path "/", "x/.", "x/.."). */
    int layer = d.up >= 0 ? CV_UPPER : CV_LOWER, lidx = 0;
    struct stat st;
    for (;;) {
        while (*p == '/') p++;
        if (d.up < 0 && !d.lmask && d.low >= 0 && !d.opq && *p) skip_host_dirs(r, &d, &p);
        int trailing, last;
        char *comp = cv_next_component(&p, &trailing, &last);
        if (!comp) break;
        const char *q = p;
        while (*q == '/') q++;
        if (strlen(comp) > NAME_MAX) {
            e = -ENAMETOOLONG;
            goto fail;
        }
        if (!strcmp(comp, ".")) {
            if (last) goto final_dir;
            continue;
        }
        if (!strcmp(comp, "..")) {
            char parent[PATH_MAX];
            parent_path(d.vpath, parent);
            wdir_close(&d);
            if (!strcmp(parent, "/proc") || !strncmp(parent, "/proc/", 6)) {
                char abs[PATH_MAX * 2];
                snprintf(abs, sizeof abs, "%s%s%s", parent, *q ? "/" : "", q);
                return proc_handoff(c, AT_FDCWD, abs, flags, v);
            }
            e = dir_at(r, parent, &d);
            if (e < 0) goto fail;
            if (last) goto final_dir;
            continue;
        }
        struct cv_lnames lnbuf;
        const struct cv_lnames *ln;
        e = lookup(r, &d, comp, &layer, &lidx, &st, &lnbuf, &ln);
        char vp[PATH_MAX];
        if (strlen(d.vpath) + strlen(comp) + 2 > PATH_MAX) {
            e = -ENAMETOOLONG;
            goto fail;
        }
        join(vp, d.vpath, comp);
        /* The kernel would answer differently: a whiteout or an upper-only object on the way. */
        if ((e == -ENOENT && (d.up >= 0 || d.lmask)) || (e == 0 && (layer == CV_UPPER || lidx > 0) && !S_ISDIR(st.st_mode)))
            v->touched = 1;
        if (e == 0 && layer == CV_LOWER && (!strcmp(vp, "/proc") || !strncmp(vp, "/proc/", 6))) {
            char abs[PATH_MAX * 2];
            snprintf(abs, sizeof abs, "%s%s%s", vp, *q ? "/" : "", q);
            if (trailing && !*q) strcat(abs, "/");
            wdir_close(&d);
            return proc_handoff(c, AT_FDCWD, abs, flags, v);
        }
        if (e == -ENOENT && d.low >= 0) note_hidden(c, vp);
        if (e == -ENOENT && last) {
            /* The final is missing: its parent is d. */
            v->exists = 0;
            snprintf(v->vpath, sizeof v->vpath, "%s", vp);
            goto parent_out;
        }
        if (e < 0) goto fail;
        if (S_ISLNK(st.st_mode) && (!last || follow || trailing)) {
            if (++hops > 40) {
                e = -ELOOP;
                goto fail;
            }
            ssize_t tl;
            if (lidx > 0) {
                cv_autoclose int pd = cv_lower_open(r, lidx - 1, d.vpath, O_PATH | O_DIRECTORY);
                tl = pd < 0 ? pd : cv_readlinkat(pd, comp, target, sizeof target);
            } else {
                tl = cv_readlinkat(layer == CV_UPPER ? d.up : d.low, comp, target, sizeof target);
            }
            if (tl < 0) {
                e = (int)tl;
                goto fail;
            }
            if (tl == 0) {
                e = -ENOENT;
                goto fail;
            }
            char merged[PATH_MAX * 2];
            if (snprintf(merged, sizeof merged, "%s%s%s", target, (*q || trailing) ? "/" : "", q) >=
                (int)sizeof merged) {
                e = -ENAMETOOLONG;
                goto fail;
            }
            snprintf(rest, sizeof rest, "%s", merged);
            p = rest;
            if (target[0] == '/') {
                if (!strcmp(target, "/proc") || !strncmp(target, "/proc/", 6)) {
                    wdir_close(&d);
                    return proc_handoff(c, AT_FDCWD, rest, flags, v);
                }
                wdir_close(&d);
                e = root_dir(r, &d);
                if (e < 0) goto fail;
            }
            continue;
        }
        if (last && !(S_ISDIR(st.st_mode) && trailing)) {
            if (trailing && !S_ISDIR(st.st_mode)) {
                e = -ENOTDIR;
                goto fail;
            }
            v->exists = 1;
            v->layer = layer;
            v->lidx = lidx;
            v->touched |= lidx > 0; /* a layer's copy: the kernel would answer with the host's */
            v->st = st;
            if (layer == CV_UPPER && r->nalias && cv_alias_stat(r, &v->st)) v->adev = st.st_dev, v->aino = st.st_ino;
            snprintf(v->vpath, sizeof v->vpath, "%s", vp);
            if (S_ISDIR(st.st_mode)) {
                /* A directory: whether it merges with lower twins, whether it is opaque. */
                if (layer == CV_UPPER) {
                    cv_autoclose int up = open_dir_at(d.up, comp);
                    v->opaque = cv_ov_is_opaque(up);
                    int stop = 0;
                    if (!d.opq) v->lower_dir = layer_twins(r, &d, comp, vp, 0, ln, &stop) != 0;
                    if (!d.opq && !stop && !v->lower_dir && d.low >= 0) {
                        struct stat ls;
                        v->lower_dir = fstatat(d.low, comp, &ls, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(ls.st_mode);
                    }
                    if (!v->lower_dir) v->touched = 1;
                } else {
                    v->lower_dir = 1;
                }
            }
            goto parent_out;
        }
        if (!S_ISDIR(st.st_mode)) {
            e = -ENOTDIR;
            goto fail;
        }
        e = descend(r, &d, comp, layer, lidx, ln);
        if (e < 0) goto fail;
        if (++walked % WMEMO_STRIDE == 0) remember(r, &d); /* a long walk: a checkpoint */
        if (d.low < 0) v->touched = 1;
        if (last) goto final_dir;
    }
final_dir:
    /* The path named the directory d itself ("/", "a/.", "a/..", "a/"). */
    v->exists = 1;
    snprintf(v->vpath, sizeof v->vpath, "%s", d.vpath);
    v->layer = d.up >= 0 ? CV_UPPER : CV_LOWER;
    v->lidx = d.up < 0 && d.lmask ? first_layer(d.lmask) + 1 : 0;
    e = v->lidx ? cv_lower_lstat(r, v->lidx - 1, d.vpath, &v->st) : fstat(d.up >= 0 ? d.up : d.low, &v->st) < 0 ? -errno : 0;
    if (e < 0) goto fail;
    v->lower_dir = d.up >= 0 ? d.lmask != 0 || d.low >= 0 : 1;
    v->opaque = d.opq;
    v->touched |= d.low < 0 || v->lidx > 0;
    if (!strcmp(d.vpath, "/")) {
        /* "/" has no parent: it is its own, as the kernel answers. */
        v->name = v->vpath + 1;
        v->pup = d.up >= 0 ? fcntl(d.up, F_DUPFD_CLOEXEC, 3) : -1;
        v->plow = d.low >= 0 ? fcntl(d.low, F_DUPFD_CLOEXEC, 3) : -1;
        v->popq = d.opq;
        v->plmask = d.lmask;
        wdir_close(&d);
        e = set_src(v);
        return e;
    }
    {
        /* Re-walk to the parent so handlers get the parent's fds too. */
        char parent[PATH_MAX];
        parent_path(d.vpath, parent);
        wdir_close(&d);
        e = dir_at(r, parent, &d);
        if (e < 0) goto fail;
    }
parent_out:
    v->name = strrchr(v->vpath, '/') + 1;
    v->pup = hand_over(d.up, d.up_borrowed);
    v->plow = d.low >= 0 && !d.opq ? hand_over(d.low, d.low_borrowed) : -1;
    if (v->plow < 0 && d.low >= 0 && !d.low_borrowed) close(d.low);
    v->popq = d.opq;
    v->plmask = d.opq ? 0 : d.lmask;
    return set_src(v);
fail:
    wdir_close(&d);
    return e;
}
