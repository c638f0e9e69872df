#include "vfs.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
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
    struct cv_lpath vp; /* its virtual path (vp.s) */
    int up;  /* upper directory (O_PATH) or -1 */
    int low; /* host directory whose entries show here, or -1 */
    int opq; /* the upper directory is opaque: its lower entries are hidden */
    uint64_t lmask; /* the read-only layers holding this directory where it shows (bit i: r->lower[i]) */
    unsigned char up_borrowed, low_borrowed; /* the root's fds belong to the run / the process */
};

/* An empty directory of the walk ("", nothing open). */
static void wdir_init(struct wdir *d) {
    cv_lpath_init(&d->vp);
    d->up = d->low = -1;
    d->opq = 0;
    d->lmask = 0;
    d->up_borrowed = d->low_borrowed = 0;
}

/* Its fds closed (the path kept: see wdir_free). */
static void wdir_close(struct wdir *d) {
    if (d->up >= 0 && !d->up_borrowed) close(d->up);
    if (d->low >= 0 && !d->low_borrowed) close(d->low);
    d->up = d->low = -1;
    d->lmask = 0;
    d->up_borrowed = d->low_borrowed = 0;
}

static void wdir_free(struct wdir *d) {
    wdir_close(d);
    cv_lpath_free(&d->vp);
}

static void wdir_path_free(struct wdir *d) { cv_lpath_free(&d->vp); }
/* A walk directory whose path is freed when it goes out of scope (its fds are not). */
#define cv_wdir_path_scoped __attribute__((cleanup(wdir_path_free)))

/* d takes over m (m is empty after). */
static void wdir_move(struct wdir *d, struct wdir *m) {
    wdir_close(d);
    cv_lpath_move(&d->vp, &m->vp);
    d->up = m->up, d->low = m->low, d->opq = m->opq, d->lmask = m->lmask;
    d->up_borrowed = m->up_borrowed, d->low_borrowed = m->low_borrowed;
    m->up = m->low = -1;
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

int cv_vfs_holds_hidden(const struct cv_run *r, const char *vdir) {
    if (!cv_vfs_may_touch_hidden(r, vdir)) return 0;
    size_t l = strlen(vdir);
    for (size_t i = 0; i < r->nhide; i++) {
        const char *h = r->hide[i];
        const char *slash = strrchr(h, '/');
        size_t pl = slash == h ? 1 : (size_t)(slash - h);
        if (pl == l && !strncmp(h, vdir, l)) return 1;
    }
    return 0;
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
    cv_lpath_set(&d->vp, "/");
    d->up = r->upper_fd;
    d->low = host_root();
    d->up_borrowed = d->low_borrowed = 1;
    d->opq = 0;
    d->lmask = r->nlower ? (~0ull >> (64 - r->nlower)) : 0;
    return d->low < 0 ? -EIO : 0;
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
    struct cv_lpath vp;
    cv_lpath_init(&vp);
    int e = cv_lpath_join(&vp, d->vp.s, name);
    if (e == 0) e = lookup_below(r, d->vp.s, vp.s, name, d->lmask, d->low, lidx, st, lnbuf, ln);
    if (e == 0) *layer = CV_LOWER;
    cv_lpath_free(&vp);
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
    else cv_lower_names(r, d->vp.s, name, &ln);
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
    struct cv_lpath vp;
    cv_lpath_init(&vp);
    int e = cv_lpath_join(&vp, d->vp.s, name);
    if (e < 0) return e;
    int up = -1, low = -1, stop = 0;
    uint64_t mask = 0;
    if (layer == CV_UPPER) {
        up = open_dir_at(d->up, name);
        if (up < 0) e = -errno;
    }
    if (e == 0 && (layer != CV_UPPER || !d->opq)) {
        int from = layer == CV_UPPER ? 0 : lidx > 0 ? lidx - 1 : r->nlower;
        mask = layer_twins(r, d, name, vp.s, from, ln, &stop);
        if (!stop && d->low >= 0) {
            low = open_dir_at(d->low, name); /* -1: the name is a file (or missing) in the host */
            if (low < 0 && layer == CV_LOWER && lidx == 0) e = -errno;
        }
    }
    if (e < 0) {
        if (up >= 0) close(up);
        cv_lpath_free(&vp);
        return e;
    }
    int opq = cv_ov_is_opaque(up);
    wdir_close(d);
    cv_lpath_move(&d->vp, &vp);
    d->up = up;
    d->low = low;
    d->opq = opq;
    d->lmask = mask;
    return 0;
}

/* Below a host directory with no upper twin nothing of the upper can show, so the directories
 * of the rest of the path are plain host directories unless a symlink, "." or "..", or a hidden
 * path is on the way: one openat2 takes the walk to the last component's parent, and its ENOENT
 * (a directory on the way is missing) is the answer (0 or -ENOENT). On any other doubt (or
 * failure) the walk goes on one component at a time, which gives the precise answer. */
static int skip_host_dirs(const struct cv_run *r, struct wdir *d, char **pp) {
    if (d->lmask) return 0;
    char *p = *pp;
    char *end = p + strlen(p);
    while (end > p && end[-1] == '/') end--;
    char *last = end;
    while (last > p && last[-1] != '/') last--;
    if (last == p) return 0; /* one component left */
    size_t dl = strlen(d->vp.s), rl = (size_t)(last - p);
    char rest[PATH_MAX], full[PATH_MAX];
    if (rl >= sizeof rest || dl + 1 + rl >= sizeof full) return 0;
    memcpy(rest, p, rl);
    rest[rl] = 0;
    for (char *c = rest; *c;) { /* no "." or ".." components */
        while (*c == '/') c++;
        if (c[0] == '.' && (c[1] == '/' || !c[1] || (c[1] == '.' && (c[2] == '/' || !c[2])))) return 0;
        while (*c && *c != '/') c++;
    }
    if (dl == 1) dl = 0; /* "/" */
    memcpy(full, d->vp.s, dl);
    full[dl] = '/';
    memcpy(full + dl + 1, rest, rl + 1);
    size_t fl = strlen(full);
    while (fl > 1 && full[fl - 1] == '/') full[--fl] = 0;
    if (cv_vfs_may_touch_hidden(r, full)) /* a hidden path on the way or below */
        for (size_t i = 0; i < r->nhide; i++)
            if (cv_path_under(full, r->hide[i]) || cv_path_under(r->hide[i], full)) return 0;
    if (!strncmp(full, "/proc", 5) && (!full[5] || full[5] == '/')) return 0;
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(__NR_openat2, d->low, rest, &how, sizeof how);
    if (fd < 0) return errno == ENOENT ? -ENOENT : 0;
    if (!d->low_borrowed) close(d->low);
    d->low = fd;
    d->low_borrowed = 0;
    cv_lpath_set(&d->vp, full); /* < PATH_MAX: it cannot fail */
    *pp = last;
    return 0;
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
    cv_wmemo_put(r, d->vp.s, strlen(d->vp.s), &m, d->up);
}

/* The nearest directory of vpath (itself included) the memo holds, as a directory of the walk,
 * once its upper directory is found to be the one the memo saw (or still none); 0 when there is
 * none. *len: how much of vpath it stands for. */
static int from_memo(struct cv_run *r, const char *vpath, struct wdir *d, size_t *len) {
    struct cv_wmemo_dir m;
    if (!cv_wmemo_find(r, vpath, len, &m)) return 0;
    if (cv_lpath_setn(&d->vp, vpath, *len) < 0) return 0;
    int up = cv_ov_open_upper(r, d->vp.s, O_PATH | O_DIRECTORY, 0);
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
    wdir_init(&m);
    size_t len = 0;
    int found = from_memo(r, path, &m, &len);
    path[clean] = keep;
    if (found) wdir_move(d, &m);
    wdir_free(&m);
    return found ? len : 0;
}

/* The directory at a symlink-free virtual path, walked from the nearest directory the memo
 * holds, or from the root. */
static int dir_at(struct cv_run *r, const char *vpath, struct wdir *d) {
    size_t from = 0;
    if (!from_memo(r, vpath, d, &from)) {
        int e = root_dir(r, d);
        if (e < 0) return e;
    }
    struct cv_lpath buf;
    cv_lpath_init(&buf);
    int e = cv_lpath_set(&buf, vpath + from), steps = 0;
    for (char *save = NULL, *c = e < 0 ? NULL : strtok_r(buf.s, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        int layer, lidx;
        struct stat st;
        struct cv_lnames lnbuf;
        const struct cv_lnames *ln;
        e = lookup(r, d, c, &layer, &lidx, &st, &lnbuf, &ln);
        if (e == 0 && !S_ISDIR(st.st_mode)) e = -ENOTDIR;
        if (e == 0) e = descend(r, d, c, layer, lidx, ln);
        if (e < 0) break;
        if (++steps % WMEMO_STRIDE == 0) remember(r, d);
    }
    cv_lpath_free(&buf);
    if (e < 0) {
        wdir_close(d);
        return e;
    }
    if (steps % WMEMO_STRIDE) remember(r, d);
    return 0;
}

/* The upper directory at vpath is the one st describes. */
static int upper_is(const struct cv_run *r, const char *vpath, const struct stat *st) {
    cv_autoclose int up = cv_ov_open_upper(r, vpath, O_PATH | O_DIRECTORY, 0);
    struct stat ust;
    return up >= 0 && fstat(up, &ust) == 0 && ust.st_dev == st->st_dev && ust.st_ino == st->st_ino;
}

/* The name under which the directory `child` (st) lies in parent, or -errno (ENOENT: none, it
 * was removed). Found by inode number, each candidate checked with fstatat. */
static int name_in(int parent, const struct stat *st, struct cv_lpath *name) {
    int fd = cv_reopen_dir(parent, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return fd;
    DIR *dir = fdopendir(fd);
    if (!dir) {
        close(fd);
        return -ENOMEM;
    }
    int e = -ENOENT;
    for (int pass = 0; pass < 2 && e == -ENOENT; pass++) { /* by d_ino, then (a stacked fs) by stat */
        rewinddir(dir);
        for (struct dirent *de; e == -ENOENT && (de = readdir(dir));) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            if (pass == 0 ? de->d_ino != st->st_ino : de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) continue;
            struct stat cs;
            if (fstatat(dirfd(dir), de->d_name, &cs, AT_SYMLINK_NOFOLLOW) == 0 && cs.st_dev == st->st_dev &&
                cs.st_ino == st->st_ino)
                e = cv_lpath_set(name, de->d_name);
        }
    }
    closedir(dir);
    return e;
}

/* The virtual path of a real directory /proc cannot name (its path is longer than a page: a
 * tree deeper than PATH_MAX). Climbed from fd through "..", each level named by its identity in
 * the level above, up to a directory of the upper the walk memo holds (the upper at that path
 * still being it) or one /proc can name. *stored: it lies in cvisor's storage. 0 or -errno. */
int cv_vfs_long_dir_vpath(struct cv_run *r, int fd, struct cv_lpath *out, int *stored, int *own) {
    struct cv_lpath name;
    cv_lpath_init(&name);
    char *names = NULL; /* the names climbed, each NUL-terminated, the lowest first */
    size_t used = 0, cap = 0, levels = 0;
    struct stat *ids = NULL; /* the directories climbed, the lowest first */
    int cur = fcntl(fd, F_DUPFD_CLOEXEC, 3), e = cur < 0 ? -errno : 0;
    *own = 0;
    for (int level = 0; e == 0; level++) {
        struct stat st, pst;
        if (fstat(cur, &st) < 0) {
            e = -errno;
            break;
        }
        struct cv_wmemo_dir m;
        int pinned = 0;
        char *known = cv_wmemo_find_id(r, st.st_dev, st.st_ino, &m, &pinned);
        /* An entry holding its directory open is this very directory (its inode number cannot
         * have been reused; another run renaming it meanwhile gives a stale name of the
         * sandbox's own); any other only once the upper at that path is this directory (a stale
         * entry could name an inode number since reused, even by a host directory). */
        int hit = known && (pinned ? st.st_nlink > 0 : upper_is(r, known, &st));
        if (hit) {
            e = cv_lpath_set(out, known);
            *stored = 1;
            *own = !m.lmask; /* no host twin (the memo keeps none) and no layer's: nor below */
        }
        free(known);
        if (hit) break;
        if (level > 0 && !(level & (level - 1))) { /* at 1, 2, 4, 8...: each try costs the depth */
            char self[64], real[PATH_MAX], moved[PATH_MAX];
            snprintf(self, sizeof self, "/proc/self/fd/%d", cur);
            ssize_t l = cv_readlink(self, real, sizeof real);
            if (l >= 0) {
                int mv = cv_moved_real(r, real, moved, sizeof moved);
                const char *at = mv > 0 ? moved : real;
                char vp[PATH_MAX];
                e = mv < 0 ? mv : virtual_of(r, at, vp, sizeof vp);
                if (e == 0) e = cv_lpath_set(out, vp);
                *stored = store_root(r, at) != NULL;
                break;
            }
            if (l != -ENAMETOOLONG) {
                e = (int)l;
                break;
            }
        }
        int parent = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (parent < 0 || fstat(parent, &pst) < 0 || (pst.st_dev == st.st_dev && pst.st_ino == st.st_ino)) {
            e = parent < 0 ? -errno : -ENOENT; /* the root: /proc would have named it */
            if (parent >= 0) close(parent);
            break;
        }
        e = name_in(parent, &st, &name);
        if (e == 0 && levels % 64 == 0) {
            struct stat *grown = realloc(ids, (levels + 64) * sizeof *ids);
            if (grown) ids = grown;
            else e = -ENOMEM;
        }
        if (e == 0) ids[levels++] = st;
        size_t nl = strlen(name.s);
        if (e == 0 && used + nl + 1 >= CV_LPATH_MAX) e = -ENAMETOOLONG;
        if (e == 0 && used + nl + 1 > cap) {
            char *grown = realloc(names, cap = cap * 2 + nl + 1 + 256);
            if (grown) names = grown;
            else e = -ENOMEM;
        }
        if (e == 0) {
            memcpy(names + used, name.s, nl + 1);
            used += nl + 1;
        }
        close(cur);
        cur = parent;
    }
    if (cur >= 0) close(cur);
    /* out + the names, the highest first; below a directory of the sandbox's own, each level
     * climbed is remembered (the next call there, or at its parent, finds it at once). */
    for (size_t end = used, lv = levels; e == 0 && end > 0;) {
        size_t start = end - 1;
        while (start > 0 && names[start - 1]) start--;
        e = cv_lpath_join(out, out->s, names + start);
        end = start;
        lv--;
        if (e == 0 && *own) {
            struct cv_wmemo_dir m = {.has_up = 1, .dev = ids[lv].st_dev, .ino = ids[lv].st_ino};
            cv_wmemo_put(r, out->s, strlen(out->s), &m, lv == 0 ? fd : -1);
        }
    }
    free(names);
    free(ids);
    cv_lpath_free(&name);
    if (e == 0 && !*stored && cv_vfs_hidden(r, out->s)) e = -ENOENT; /* hidden: host paths */
    return e;
}

int cv_vfs_own_dir(struct cv_run *r, int fd, const char *vpath) {
    struct stat st, pst;
    struct cv_wmemo_dir m;
    if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || !st.st_nlink) return 0; /* not a removed one */
    if (cv_wmemo_holds(r, vpath, st.st_dev, st.st_ino, &m)) return !m.lmask;
    /* Or its parent is: nothing below the upper shows there, so none in it (remembered). */
    struct cv_lpath parent;
    cv_lpath_init(&parent);
    cv_autoclose int up = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int own = up >= 0 && fstat(up, &pst) == 0 && (pst.st_dev != st.st_dev || pst.st_ino != st.st_ino) &&
              cv_lpath_parent(&parent, vpath) == 0 && cv_wmemo_holds(r, parent.s, pst.st_dev, pst.st_ino, &m) &&
              !m.lmask && st.st_dev == pst.st_dev;
    cv_lpath_free(&parent);
    if (own) {
        struct cv_wmemo_dir mine = {.has_up = 1, .dev = st.st_dev, .ino = st.st_ino};
        cv_wmemo_put(r, vpath, strlen(vpath), &mine, fd);
    }
    return own;
}

/* d's parent (at the path parent) when it is the sandbox's own (nothing below the upper shows
 * through it): found by the identity of d's "..", which the memo must hold at exactly that path,
 * instead of a walk that opens it by its path again (the depth of the tree, in a deep one).
 * 1 (d is then the parent), 0 (walk to it instead), -errno. */
static int own_parent(struct cv_run *r, struct wdir *d, const char *parent) {
    if (d->up < 0 || d->low >= 0 || d->lmask || !strcmp(parent, d->vp.s)) return 0;
    int up = openat(d->up, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (up < 0 || fstat(up, &st) < 0) {
        if (up >= 0) close(up);
        return 0;
    }
    struct cv_wmemo_dir m;
    int ok = cv_wmemo_holds(r, parent, st.st_dev, st.st_ino, &m) && !m.lmask;
    if (!ok || cv_lpath_set(&d->vp, parent) < 0) {
        close(up);
        return 0;
    }
    wdir_close(d);
    d->up = up;
    d->opq = cv_ov_is_opaque(up);
    return 1;
}

/* Where a relative path starts: the guest's cwd or dirfd, as a directory of the walk. The
 * directory is fetched once (our O_PATH copy) and both its path and its fd come from that copy. */
static int start_dir(const struct cv_vctx *c, int dirfd, struct wdir *d, int *in_proc, int *touched) {
    char real[PATH_MAX], self[64], what[32];
    struct cv_run *r = c->run;
    struct cv_lpath vpath;
    cv_lpath_init(&vpath);
    if (dirfd == AT_FDCWD) {
        int held = -1;
        if (c->cwd && c->cwd(c, &vpath, &held)) {
            *touched = 1; /* the kernel's cwd is elsewhere */
            if (held >= 0 && cv_vfs_own_dir(r, held, vpath.s)) { /* no walk by its path again */
                cv_lpath_move(&d->vp, &vpath);
                d->up = held;
                d->opq = cv_ov_is_opaque(held);
                return 0;
            }
            int e = dir_at(r, vpath.s, d);
            if (e == -ENOENT || e == -ENOTDIR) {
                /* The remembered directory was removed: names in it are gone, "." is the removed
                 * directory itself, ".." still leads to its parent, as for a deleted kernel cwd. */
                cv_lpath_move(&d->vp, &vpath);
                d->up = held;
                return -ESTALE;
            }
            if (held >= 0) close(held);
            cv_lpath_free(&vpath);
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
    ssize_t l = cv_readlink(self, real, sizeof real);
    int e = 0, stored = 0, own = 0;
    if (l == -ENAMETOOLONG) {
        e = cv_vfs_long_dir_vpath(r, fd, &vpath, &stored, &own);
        if (e == 0 && own) {
            /* Its merged view is the directory itself: no walk from the memo, which would open
             * it again by its (long) path. Remembered, so the next call finds it at once. */
            *touched = 1;
            cv_lpath_move(&d->vp, &vpath);
            d->up = cv_steal_fd(&fd);
            d->opq = cv_ov_is_opaque(d->up);
            remember(r, d);
            return 0;
        }
    } else {
        if (l < 0) return dirfd == AT_FDCWD ? -ENOENT : -EBADF;
        if (real[0] != '/') return -ENOTDIR;
        if (!strcmp(real, "/proc") || !strncmp(real, "/proc/", 6)) {
            *in_proc = 1;
            return 0;
        }
        char moved[PATH_MAX], vp[PATH_MAX];
        e = cv_moved_real(r, real, moved, sizeof moved); /* a directory renamed since: its copy */
        if (e < 0) return e;
        if (e) snprintf(real, sizeof real, "%s", moved);
        e = virtual_of(r, real, vp, sizeof vp);
        if (e == 0) e = cv_lpath_set(&vpath, vp);
        stored = store_root(r, real) != NULL;
    }
    if (e < 0) {
        cv_lpath_free(&vpath);
        return e;
    }
    *touched |= stored;
    if (stored && cv_vfs_own_dir(r, fd, vpath.s)) { /* /proc named it: the memo's entry is its */
        cv_lpath_move(&d->vp, &vpath);
        d->up = cv_steal_fd(&fd);
        d->opq = cv_ov_is_opaque(d->up);
        return 0;
    }
    /* The sandbox's own directory, or under read-only layers a host directory that may have
     * twins in them: walk the view. */
    if (stored || r->nlower) {
        e = dir_at(r, vpath.s, d);
        cv_lpath_free(&vpath);
        return e;
    }
    /* A host directory: it shows as itself; its upper twin, if any, holds the changes. */
    d->low = cv_steal_fd(&fd);
    cv_lpath_move(&d->vp, &vpath);
    d->up = cv_ov_open_upper(r, d->vp.s, O_PATH | O_DIRECTORY, 0);
    if (d->up < 0) d->up = -1;
    d->opq = cv_ov_is_opaque(d->up);
    return 0;
}

/* The parent directory of v, vpath-wise ("/" for "/"), into p (initialized: a path). */
static int parent_of(const struct cv_vnode *v, struct cv_lpath *p) { return cv_lpath_parent(p, v->vpath); }

/* v's virtual path. 0, -ENAMETOOLONG or -ENOMEM. */
static int vnode_path(struct cv_vnode *v, const char *vpath) {
    int e = cv_lpath_set(&v->vbuf, vpath);
    v->vpath = v->vbuf.s;
    return e;
}

static int first_layer(uint64_t mask) { return mask ? __builtin_ctzll(mask) : -1; }

/* psrc: where the final object lives (a read-only layer's parent is opened for it). */
static int set_src(struct cv_vnode *v) {
    if (!v->exists) return 0;
    if (v->layer == CV_UPPER) v->psrc = v->pup;
    else if (!v->lidx) v->psrc = v->plow;
    else {
        struct cv_lpath parent;
        cv_lpath_init(&parent);
        int pe = *v->name ? parent_of(v, &parent) : cv_lpath_set(&parent, "/");
        v->psrc = pe < 0 ? pe : cv_lower_open(v->run, v->lidx - 1, parent.s, O_PATH | O_DIRECTORY);
        cv_lpath_free(&parent);
        if (v->psrc < 0) {
            int e = v->psrc;
            cv_vnode_release(v);
            return e;
        }
        v->psrc_own = 1;
    }
    return 0;
}

static int restart(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_vnode *v);
static int resolve(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_vnode *v);

static int proc_handoff(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_vnode *v) {
    if (cv_guest_settle(c->guest) < 0) return -ESRCH;
    v->in_proc = 1;
    int e = cv_resolve(c, dirfd, path, flags, &v->proc);
    if (e < 0) return e;
    if (v->proc.have_path && !v->proc.in_proc && !v->proc.magic) {
        /* Out of /proc again (/proc/self/root/..., /proc/self/cwd/...): the rest is the merged view's. */
        char vp[PATH_MAX];
        if (cv_virtual_of_real(c->run, v->proc.path, vp, sizeof vp) < 0) return -ENOENT;
        return restart(c, AT_FDCWD, vp, flags, v);
    }
    v->exists = v->proc.exists;
    v->st = v->proc.st;
    v->touched = 1;
    int e2 = vnode_path(v, v->proc.have_path ? v->proc.path : path);
    if (e2 < 0) return e2;
    const char *slash = strrchr(v->vpath, '/');
    v->name = slash ? slash + 1 : v->vpath;
    return 0;
}


int cv_vnode_may_change(const struct cv_vnode *v) {
    int dir = v->plow >= 0 ? v->plow : v->pup;
    cv_autoclose int own = -1;
    if (dir < 0 && v->plmask && *v->name) {
        /* A directory only the read-only layers hold: its topmost copy is the guest's own. */
        struct cv_lpath parent;
        cv_lpath_init(&parent);
        int e = parent_of(v, &parent);
        dir = own = e < 0 ? e : cv_lower_open(v->run, first_layer(v->plmask), parent.s, O_PATH | O_DIRECTORY);
        cv_lpath_free(&parent);
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
    struct cv_lpath parent;
    cv_lpath_init(&parent);
    struct cv_lnames ln;
    int e = parent_of(v, &parent);
    if (e == 0) e = lookup_below(v->run, parent.s, v->vpath, v->name, v->plmask, v->plow, lidx, st, &ln, NULL);
    cv_lpath_free(&parent);
    return e;
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

int cv_vnode_upper_parent(struct cv_run *r, const struct cv_vnode *v) {
    if (v->pup < 0 || !*v->name || v->in_proc) return cv_ov_upper_parent(r, v->vpath);
    int fd = cv_reopen_dir(v->pup, O_RDONLY | O_DIRECTORY);
    /* One its owner may write and search but not read (0311): its own O_PATH fd serves the *at
     * calls made in it (may_change checked the write and search permission). */
    if (fd < 0 && errno == EACCES) fd = fcntl(v->pup, F_DUPFD_CLOEXEC, 3);
    return fd < 0 ? -errno : fd;
}

int cv_vdir_stack(struct cv_run *r, const char *vdir, struct cv_vstack *s) {
    s->n = r->nlower + 2;
    for (int i = 0; i < s->n; i++) s->fd[i] = -1;
    struct wdir d;
    wdir_init(&d);
    int e = dir_at(r, vdir, &d);
    if (e < 0) {
        wdir_free(&d);
        return e;
    }
    int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    if (d.up >= 0) s->fd[0] = cv_reopen_dir(d.up, flags);
    if (!d.opq) {
        for (int i = 0; i < r->nlower; i++)
            if (d.lmask >> i & 1) s->fd[1 + i] = cv_lower_open(r, i, vdir, flags);
        if (d.low >= 0) s->fd[s->n - 1] = cv_reopen_dir(d.low, flags);
    }
    for (int i = 0; i < s->n; i++)
        if (s->fd[i] < 0) s->fd[i] = -1;
    wdir_free(&d);
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
    if (v->vbuf.s != v->vbuf.in) { /* a path longer than PATH_MAX (a short one stays readable) */
        cv_lpath_free(&v->vbuf);
        v->vpath = v->vbuf.s;
    }
}

int cv_vresolve(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_vnode *v) {
    memset(v, 0, offsetof(struct cv_vnode, vbuf.in)); /* not the inline path's 4 KiB */
    cv_lpath_init(&v->vbuf);
    v->vpath = v->vbuf.s;
    v->run = c->run;
    v->pup = v->plow = v->psrc = -1;
    int e = resolve(c, dirfd, path, flags, v);
    if (e < 0) cv_vnode_release(v); /* a long path's buffer: nothing is held after a failure */
    return e;
}

/* The same again on v (a path that led elsewhere: out of /proc, up from a removed directory). */
static int restart(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_vnode *v) {
    struct cv_lpath copy;
    cv_lpath_init(&copy);
    int e = cv_lpath_set(&copy, path); /* path may be v's own */
    cv_vnode_release(v);
    if (e == 0) e = cv_vresolve(c, dirfd, copy.s, flags, v);
    cv_lpath_free(&copy);
    return e;
}

static int resolve(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_vnode *v) {
    struct cv_run *r = c->run;
    if (!*path) return -ENOENT;
    if (path[0] == '/' && (!strcmp(path, "/proc") || !strncmp(path, "/proc/", 6)))
        return proc_handoff(c, dirfd, path, flags, v);
    cv_wdir_path_scoped struct wdir d;
    wdir_init(&d);
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
            e = vnode_path(v, d.vp.s);
            if (e < 0) {
                close(held);
                return e;
            }
            v->name = v->vpath + strlen(v->vpath); /* "": the fd itself */
            v->pup = v->psrc = held;
            return 0;
        }
        if (held >= 0) close(held);
        if (strncmp(path, "..", 2) || (path[2] && path[2] != '/')) return -ENOENT;
        struct cv_lpath abs;
        cv_lpath_init(&abs);
        e = cv_lpath_parent(&abs, d.vp.s);
        if (e == 0) e = cv_lpath_join(&abs, abs.s, path + 2);
        if (e == 0) e = restart(c, AT_FDCWD, abs.s, flags, v);
        cv_lpath_free(&abs);
        return e;
    }
    if (e < 0) return e;

    /* What is left to walk (a guest's path is at most PATH_MAX, the supervisor's own may be
     * longer: a cwd in a tree deeper than that). */
    char target[PATH_MAX];
    cv_lpath_scoped struct cv_lpath rest;
    cv_lpath_init(&rest);
    e = cv_lpath_set(&rest, path);
    if (e < 0) {
        wdir_close(&d);
        return e;
    }
    int hops = 0, walked = 0, follow = flags & CV_RES_FOLLOW;
    char *p = rest.s;
    if (path[0] == '/') {
        size_t skip = memo_jump(r, rest.s, &d);
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
        if (d.up < 0 && !d.lmask && d.low >= 0 && !d.opq && *p && (e = skip_host_dirs(r, &d, &p)) < 0) goto fail;
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
            struct cv_lpath parent;
            cv_lpath_init(&parent);
            e = cv_lpath_parent(&parent, d.vp.s);
            if (e == 0 && (!strcmp(parent.s, "/proc") || !strncmp(parent.s, "/proc/", 6))) {
                wdir_close(&d);
                char abs[PATH_MAX * 2];
                snprintf(abs, sizeof abs, "%s%s%s", parent.s, *q ? "/" : "", q);
                cv_lpath_free(&parent);
                return proc_handoff(c, AT_FDCWD, abs, flags, v);
            }
            if (e == 0) e = own_parent(r, &d, parent.s);
            if (e == 0) {
                wdir_close(&d);
                e = dir_at(r, parent.s, &d);
            } else if (e == 1) {
                e = 0;
            }
            cv_lpath_free(&parent);
            if (e < 0) goto fail;
            if (last) goto final_dir;
            continue;
        }
        struct cv_lnames lnbuf;
        const struct cv_lnames *ln;
        e = lookup(r, &d, comp, &layer, &lidx, &st, &lnbuf, &ln);
        cv_lpath_scoped struct cv_lpath vpb;
        cv_lpath_init(&vpb);
        int je = cv_lpath_join(&vpb, d.vp.s, comp);
        if (je < 0) {
            e = je;
            goto fail;
        }
        const char *vp = vpb.s;
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
            e = vnode_path(v, vp);
            if (e < 0) goto fail;
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
                cv_autoclose int pd = cv_lower_open(r, lidx - 1, d.vp.s, O_PATH | O_DIRECTORY);
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
            struct cv_lpath merged; /* the target, then what followed the link */
            cv_lpath_init(&merged);
            e = cv_lpath_set(&merged, target);
            if (e == 0 && (*q || trailing)) e = cv_lpath_join(&merged, strcmp(merged.s, "/") ? merged.s : "", q);
            if (e < 0) {
                cv_lpath_free(&merged);
                goto fail;
            }
            cv_lpath_move(&rest, &merged);
            p = rest.s;
            if (target[0] == '/') {
                if (!strcmp(target, "/proc") || !strncmp(target, "/proc/", 6)) {
                    wdir_close(&d);
                    return proc_handoff(c, AT_FDCWD, rest.s, flags, v);
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
            e = vnode_path(v, vp);
            if (e < 0) goto fail;
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
    e = vnode_path(v, d.vp.s);
    if (e < 0) goto fail;
    v->layer = d.up >= 0 ? CV_UPPER : CV_LOWER;
    v->lidx = d.up < 0 && d.lmask ? first_layer(d.lmask) + 1 : 0;
    e = v->lidx ? cv_lower_lstat(r, v->lidx - 1, d.vp.s, &v->st) : fstat(d.up >= 0 ? d.up : d.low, &v->st) < 0 ? -errno : 0;
    if (e < 0) goto fail;
    v->lower_dir = d.up >= 0 ? d.lmask != 0 || d.low >= 0 : 1;
    v->opaque = d.opq;
    v->touched |= d.low < 0 || v->lidx > 0;
    if (!strcmp(d.vp.s, "/")) {
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
        struct cv_lpath parent;
        cv_lpath_init(&parent);
        e = cv_lpath_parent(&parent, d.vp.s);
        if (e == 0) e = own_parent(r, &d, parent.s);
        if (e == 0) {
            wdir_close(&d);
            e = dir_at(r, parent.s, &d);
        } else if (e == 1) {
            e = 0;
        }
        cv_lpath_free(&parent);
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
