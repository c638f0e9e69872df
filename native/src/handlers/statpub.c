/* The stat of a directory's entries, stated at once for the guest's shim (common/answers_fmt.h).
 * ls -l, find, tar and git status look up every entry of the directories they walk, one
 * notification each; when one such look-up lands in a host directory whose view is the
 * kernel's (no upper twin, no read-only layer's, no hidden entry, not "/" nor under /proc, /dev
 * or /sys), the supervisor records every entry's lstat, and the shim answers the next ones.
 *
 * What is recorded is what the stat handlers would answer there: the real entry's statx, since
 * nothing of the sandbox's covers it. The records are keyed by the directory's identity and go
 * when the sandbox is about to change the directory (cv_answers_dir_changing: its upper twin is
 * being made) and after CV_ANS_TTL_NS (the host's own changes); the path naming the directory
 * goes with a rename or a symlink anywhere. */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "common/answers_fmt.h"
#include "common/util.h"
#include "handlers.h"
#include "handlers/statpub.h"
#include "overlay/vfs.h"
#include "supervisor/answers.h"

int cv_kernel_view(const struct cv_vnode *v) {
    return v->exists && !v->in_proc && v->layer == CV_LOWER && v->lidx == 0 && !v->touched && !v->aino &&
           v->pup < 0 && !v->plmask && v->psrc >= 0 && v->psrc == v->plow && v->vpath;
}

#ifndef SYS_listxattrat
#define SYS_listxattrat 465 /* Linux 6.13 */
#endif

/* Of path, or of the fd when path is NULL. */
static uint32_t probe_names(const char *path, int fd) {
    static const struct {
        const char *name;
        uint32_t bit;
    } names[] = {{"security.selinux", CV_ANS_NO_SELINUX},
                 {"system.posix_acl_access", CV_ANS_NO_ACL},
                 {"system.posix_acl_default", CV_ANS_NO_DEFAULT}};
    uint32_t x = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if ((path ? lgetxattr(path, names[i].name, NULL, 0) : fgetxattr(fd, names[i].name, NULL, 0)) < 0 &&
            errno == ENODATA)
            x |= names[i].bit;
    return x;
}

/* Which of the names ls -l asks of an entry say ENODATA. An entry with no xattr at all, on the
 * directory's own mount, answers as the directory does (an ACL's ENODATA or EOPNOTSUPP is the
 * filesystem's); any other is asked name by name. */
static uint32_t xattr_bits(int dirfd, const char *name, const struct statx *st, uint64_t dir_mnt, uint32_t dir_bits) {
    char p[64 + CV_ANS_KEY_MAX];
    if (snprintf(p, sizeof p, "/proc/self/fd/%d/%s", dirfd, name) >= (int)sizeof p) return 0;
    if (!S_ISLNK(st->stx_mode) && st->stx_mnt_id == dir_mnt) {
        long n = syscall(SYS_listxattrat, dirfd, name, AT_SYMLINK_NOFOLLOW, NULL, 0);
        if (n < 0 && errno == ENOSYS) n = llistxattr(p, NULL, 0);
        if (n == 0) return dir_bits;
    }
    return probe_names(p, -1);
}

/* Publishing costs a listing, and a statx (and for ls -l a listxattrat) per entry; a look-up
 * the shim answers saves a notification. So a directory is published once the guest has missed
 * in it twice and at least once for every eight entries (a walk: ls -l, git status), not for the
 * few names a compiler or an interpreter looks up in a large one; when the miss was a
 * subdirectory's (find, tar), its subdirectories alone, counted by its link count. The xattr
 * bits only once ls -l asks for one. */
#define MISS_SLOTS 512
#define MISS_WINDOW_NS 200000000ull
#define WALK_SMALL 32 /* entries */
#define WALK_NS 1000000000ull /* a publication this recent makes a walk */

struct misses {
    uint32_t hash, count, entries; /* entries: counted once it was listed, else 0 */
    uint64_t since;
};

#define WALKED 64 /* directories a walk (git status' threads: one each) is in at once */
struct walked {
    uint32_t parent, child; /* hashes of a directory and of the name of its subdirectory */
};

struct cv_misses {
    struct misses seen[MISS_SLOTS];
    uint32_t siblings_of; /* the directory whose subdirectories were published last (its hash) */
    struct walked walked[WALKED]; /* the subdirectory a walk published last, of each directory */
};

/* This run's count for dir (its receiver thread's alone: another run's guests do not make this
 * one's walk), or NULL without memory. */
static struct misses *miss(struct cv_run *r, const char *dir) {
    if (!r->misses && !(r->misses = calloc(1, sizeof *r->misses))) return NULL;
    uint32_t h = cv_ans_hash(dir, (uint32_t)strlen(dir)) | 1;
    uint64_t now = cv_answers_now();
    struct misses *m = &r->misses->seen[h % MISS_SLOTS];
    if (m->hash != h || now - m->since >= MISS_WINDOW_NS) *m = (struct misses){h, 0, 0, now};
    m->count++;
    return m;
}

/* Entries in a getdents64 batch, . and .. left out. */
static uint32_t names_in(const char *buf, long len) {
    uint32_t n = 0;
    for (long off = 0; off < len;) {
        const struct dirent64 *d = (const void *)(buf + off); /* the kernel's layout */
        off += d->d_reclen;
        n += !cv_dots(d->d_name);
    }
    return n;
}

int cv_read_listing(int fd, struct cv_listing *l) {
    char batch[32768] __attribute__((aligned(8)));
    size_t cap = 0;
    long got;
    *l = (struct cv_listing){NULL, 0, 1, 0};
    while ((got = syscall(SYS_getdents64, fd, batch, sizeof batch)) > 0) {
        l->names += names_in(batch, got);
        if (l->whole && l->len + (size_t)got > CV_ANS_LIST_MAX) l->whole = 0;
        if (!l->whole) continue;
        if (l->len + (size_t)got > cap) {
            size_t want = cap ? cap * 2 : sizeof batch;
            while (want < l->len + (size_t)got) want *= 2;
            char *more = realloc(l->buf, want);
            if (!more) {
                l->whole = 0; /* what it holds is the beginning */
                continue;
            }
            l->buf = more, cap = want;
        }
        memcpy(l->buf + l->len, batch, (size_t)got);
        l->len += (size_t)got;
    }
    if (got < 0 || !l->len) {
        free(l->buf);
        return -1;
    }
    return 0;
}

struct publication {
    struct cv_run *r;
    int fd, level, count;
    uint64_t serial;
    struct cv_ans_id id;
    uint32_t dir_bits, times;
};

static void publish_batch(struct publication *p, const char *buf, size_t len) {
    for (size_t off = 0; off < len && p->count < CV_ANS_DIR_ENTRIES;) {
        const struct dirent64 *d = (const void *)(buf + off);
        off += d->d_reclen;
        const char *name = d->d_name;
        if (cv_dots(name) || (p->level == CV_ANS_DIRS_ONLY && d->d_type != DT_DIR && d->d_type != DT_UNKNOWN)) continue;
        struct statx st;
        if (statx(p->fd, name, AT_SYMLINK_NOFOLLOW | AT_STATX_SYNC_AS_STAT, STATX_BASIC_STATS | STATX_BTIME, &st) < 0)
            continue;
        uint32_t x = p->level == CV_ANS_XATTRS ? xattr_bits(p->fd, name, &st, p->id.mnt, p->dir_bits) : 0;
        cv_answers_put_entry(p->r, p->serial, &p->id, name, &st, x | p->times);
        p->count++;
    }
}

void cv_publish_listed(struct cv_run *r, int fd, const struct statx *ds, int level, const struct cv_listing *l,
                    uint64_t tree_gen, const char *vdir) {
    struct publication p = {r, fd, level, 0, cv_answers_serial(r),
                            cv_ans_id_of(ds),
                            level == CV_ANS_XATTRS ? probe_names(NULL, fd) : 0,
                            ds->stx_mask & STATX_MTIME ? 0 : CV_ANS_TIMES_ASKED};
    if (!p.serial) return;
    publish_batch(&p, l->buf, l->len);
    uint64_t at = l->whole ? cv_answers_put_listing(r, l->buf, l->len) : UINT64_MAX;
    cv_answers_put_did(r, &p.id, p.serial, level, at, l->len);
    if (vdir && cv_ans_key_ok(vdir)) cv_answers_put_dir(r, tree_gen, vdir, &p.id);
}


/* v is a directory whose own view is the host's: no twin of it in the upper or a layer, no
 * hidden entry in it, not one the kernel fills by itself. */
static int own_view_host(const struct cv_run *r, const struct cv_vnode *v) {
    return v->exists && S_ISDIR(v->st.st_mode) && !v->in_proc && v->layer == CV_LOWER && !v->lidx && !v->touched &&
           !v->aino && v->psrc >= 0 && v->vpath && *v->name && !cv_answers_kernel_made(v->vpath) &&
           !cv_vfs_holds_hidden(r, v->vpath);
}

/* The subdirectory of parent a walk published last (hashes; 0: none); child takes its place. */
static uint32_t walked_before(struct cv_misses *m, uint32_t parent, uint32_t child) {
    struct walked *w = &m->walked[parent % WALKED];
    uint32_t before = w->parent == parent ? w->child : 0;
    *w = (struct walked){parent, child};
    return before;
}

/* The name just before name among the subdirectories a listing holds, in strcmp's order: its
 * hash, 0 when it is the first. */
static uint32_t subdir_before(const struct cv_listing *l, const char *name) {
    const char *best = NULL;
    for (size_t off = 0; off < l->len;) {
        const struct dirent64 *d = (const void *)(l->buf + off);
        off += d->d_reclen;
        if (d->d_type == DT_DIR && !cv_dots(d->d_name) && strcmp(d->d_name, name) < 0 &&
            (!best || strcmp(d->d_name, best) > 0))
            best = d->d_name;
    }
    return best ? cv_ans_hash(best, (uint32_t)strlen(best)) | 1 : 0;
}

/* A walk's next directories, once it went from one subdirectory of a directory to the next in
 * name order (git status: each small directory of a tree at its first miss, a notification
 * each, in the index's order): the subdirectories that follow, when the directory's own view is
 * the host's, it is not large (a few blocks) and none of them holds a hidden name: the small ones
 * (WALK_SMALL entries), SIBLINGS at the most; once for each directory in turn. A program that
 * looks into a few subdirectories (Python's imports) does not go from one to the next. Each
 * small directory published is recorded as its parent's last, walking or not. */
#define SIBLINGS 32
static void publish_siblings(struct cv_notif *n, const char *dir, int level, uint64_t tree_gen, int walking) {
    struct cv_run *r = n->run;
    const char *slash = strrchr(dir, '/');
    size_t plen = slash ? (size_t)(slash - dir) : 0;
    char parent[CV_ANS_KEY_MAX + 1], sub[CV_ANS_KEY_MAX + 1];
    if (!plen || plen >= sizeof parent || !r->misses) return;
    memcpy(parent, dir, plen);
    parent[plen] = 0;
    const char *child = dir + plen + 1;
    uint32_t h = cv_ans_hash(parent, (uint32_t)plen) | 1;
    uint32_t before = walked_before(r->misses, h, cv_ans_hash(child, (uint32_t)strlen(child)) | 1);
    if (!walking || !before || r->misses->siblings_of == h) return;
    struct cv_vnode pv;
    if (cv_vresolve(&n->ctx, AT_FDCWD, parent, 0, &pv) < 0) return;
    /* no twin of it, so none of its entries has one */
    int host = own_view_host(r, &pv) && pv.st.st_size <= 16384;
    cv_autoclose int pfd = host ? cv_openat_quietly(pv.psrc, pv.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) : -1;
    cv_vnode_release(&pv);
    struct cv_listing pl;
    if (pfd < 0 || cv_read_listing(pfd, &pl) < 0) return;
    if (subdir_before(&pl, child) != before) {
        free(pl.buf);
        return;
    }
    r->misses->siblings_of = h;
    int done = 0;
    for (size_t off = 0; off < pl.len && done < SIBLINGS;) {
        const struct dirent64 *d = (const void *)(pl.buf + off);
        off += d->d_reclen;
        size_t nlen = strlen(d->d_name);
        if (d->d_type != DT_DIR || cv_dots(d->d_name) || strcmp(d->d_name, child) <= 0 || plen + 1 + nlen >= sizeof sub)
            continue;
        memcpy(sub, parent, plen);
        sub[plen] = '/';
        memcpy(sub + plen + 1, d->d_name, nlen + 1);
        if (cv_vfs_holds_hidden(r, sub) || cv_answers_dir_fresh(r, sub, level)) continue;
        cv_autoclose int fd = cv_openat_quietly(pfd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        struct statx ds;
        struct cv_listing l;
        if (fd < 0 || statx(fd, "", AT_EMPTY_PATH, CV_PUB_ID_MASK, &ds) < 0 || !(ds.stx_mask & STATX_MNT_ID) ||
            ds.stx_size > 4096 || cv_read_listing(fd, &l) < 0)
            continue;
        if (l.names <= WALK_SMALL) cv_publish_listed(r, fd, &ds, level, &l, tree_gen, sub), done++;
        free(l.buf);
    }
    free(pl.buf);
}

void cv_notif_publish_dir(struct cv_notif *n, const struct cv_vnode *v, uint64_t tree_gen, int xattrs) {
    struct cv_run *r = n->run;
    if (!tree_gen || !cv_kernel_view(v)) return;
    const char *slash = strrchr(v->vpath, '/');
    size_t plen = slash ? (size_t)(slash - v->vpath) : 0;
    if (!plen || plen > CV_ANS_KEY_MAX) return; /* "/" holds /proc, /dev and /sys: asked each time */
    char dir[CV_ANS_KEY_MAX + 1];
    memcpy(dir, v->vpath, plen);
    dir[plen] = 0;
    if (cv_answers_kernel_made(dir)) return;
    int level = xattrs ? CV_ANS_XATTRS : S_ISDIR(v->st.st_mode) ? CV_ANS_DIRS_ONLY : CV_ANS_ENTRIES;
    if (cv_vfs_holds_hidden(r, dir) || cv_answers_dir_fresh(r, dir, level)) return;
    struct misses *m = miss(r, dir);
    if (!m) return;
    /* a walk under way (git status: lstat of each tracked file, directory by directory): a small
     * directory at once (not a large one a program looks a name up in: Python's /etc/ssl/certs) */
    int walking = cv_answers_now() - r->walk_at < WALK_NS && r->walk_level >= level;
    if (!walking &&
        (m->count < 2 || (level != CV_ANS_DIRS_ONLY && m->entries && (uint64_t)m->count * 8 < m->entries - 1)))
        return;
    struct statx ds;
    if (statx(v->psrc, "", AT_EMPTY_PATH, CV_PUB_ID_MASK, &ds) < 0 || !(ds.stx_mask & STATX_MNT_ID)) return;
    /* subdirectories: counted by the link count (1: the filesystem does not count them) */
    if (!walking && level == CV_ANS_DIRS_ONLY && ds.stx_nlink != 1 && (uint64_t)m->count * 8 < ds.stx_nlink - 2)
        return;
    /* entries: not listed to learn that a large directory is too large for the misses so far
     * (bash's look-ups of itself in /usr/bin). Past its first block a directory holds at least
     * one entry for every 256 bytes (one takes at most 8 + 255, on ext4, tmpfs and btrfs), so the
     * listing is not put off past the miss that would publish; one emptied since says more. */
    if (!walking && level != CV_ANS_DIRS_ONLY && !m->entries && ds.stx_size > 4096 &&
        (uint64_t)m->count * 8 < (ds.stx_size - 4096) / 256)
        return;
    cv_autoclose int fd = cv_reopen_dir_quietly(v->psrc, O_RDONLY | O_DIRECTORY);
    struct cv_listing l;
    if (fd < 0 || cv_read_listing(fd, &l) < 0) return;
    m->entries = l.names + 1;
    if ((walking && l.names <= WALK_SMALL) || level == CV_ANS_DIRS_ONLY || (uint64_t)m->count * 8 >= l.names) {
        cv_publish_listed(r, fd, &ds, level, &l, tree_gen, dir);
        /* a walk of entries publishes the directories it passes through at a lesser level */
        if (!walking || level > r->walk_level) r->walk_level = level;
        r->walk_at = cv_answers_now();
        if (l.names <= WALK_SMALL && level == CV_ANS_ENTRIES) publish_siblings(n, dir, level, tree_gen, walking);
    }
    free(l.buf);
}

void cv_notif_publish_listing(struct cv_notif *n, const struct cv_vnode *v, uint64_t tree_gen) {
    struct cv_run *r = n->run;
    if (!tree_gen || !own_view_host(r, v)) return;
    /* opened again within half a record's life: its path names a publication (with its listing,
     * unless that was too long to keep) */
    if (cv_answers_dir_fresh(r, v->vpath, CV_ANS_DIRS_ONLY)) return;
    cv_autoclose int fd = cv_openat_quietly(v->psrc, v->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    struct statx ds;
    if (fd < 0 || statx(fd, "", AT_EMPTY_PATH, CV_PUB_ID_MASK, &ds) < 0 || !(ds.stx_mask & STATX_MNT_ID)) return;
    struct cv_ans_id id = cv_ans_id_of(&ds);
    struct cv_listing l;
    if (cv_answers_listed(r, &id) || cv_read_listing(fd, &l) < 0) return;
    /* a walk descending asks of it what it asked of its parent (ls -lR: every entry, and its
     * xattrs; tar: every entry); a listing alone (Python's of sys.path) asks for no entry; and
     * no less than it had */
    struct statx ps;
    int level = cv_answers_level(r, &id);
    if (statx(v->psrc, "", AT_EMPTY_PATH, CV_PUB_ID_MASK, &ps) == 0 && (ps.stx_mask & STATX_MNT_ID)) {
        struct cv_ans_id parent = cv_ans_id_of(&ps);
        int had = cv_answers_level(r, &parent);
        if (had > level) level = had;
    }
    /* too long to be kept: nothing the shim could serve a listing from */
    if (l.whole)
        cv_publish_listed(r, fd, &ds, level < CV_ANS_DIRS_ONLY ? CV_ANS_DIRS_ONLY : level, &l, tree_gen, v->vpath);
    free(l.buf);
}

/* A directory larger than this is not listed for a probe (/usr/include, 900 names: a header's
 * look-up finds it there anyway), nor one with more subdirectories (its publication states
 * each: /etc, where git looks for its config, has a hundred). */
#define PROBED_MAX 16384 /* bytes of the directory */
#define PROBED_SUBDIRS 32
#define PROBED_UP 4 /* directories looked at above a missing one */

static int probed_small(const struct stat *st) {
    return S_ISDIR(st->st_mode) && st->st_size <= PROBED_MAX &&
           (st->st_nlink == 1 ? st->st_size <= 4096 : st->st_nlink <= PROBED_SUBDIRS + 2);
}

/* path cut to its directory: 0 when that is "/" (never published) or there is none. */
static int to_parent(char *path) {
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) return 0;
    *slash = 0;
    return 1;
}

void cv_notif_probed(struct cv_notif *n, const char *missing) {
    uint64_t tree_gen = cv_answers_tree_gen(n->run);
    char p[CV_ANS_KEY_MAX + 1];
    size_t len = strlen(missing);
    if (!tree_gen || missing[0] != '/' || len >= sizeof p) return;
    memcpy(p, missing, len + 1);
    /* counted by its directory's path: resolved once a window, at the second */
    struct misses *m = to_parent(p) ? miss(n->run, p) : NULL;
    if (!m || m->count != 2) return;
    for (int up = 0; up < PROBED_UP; up++) {
        struct cv_vnode v; /* an absolute path: no guest fd or cwd is fetched */
        int e = cv_vresolve(&n->ctx, AT_FDCWD, p, 0, &v);
        if (e < 0 && e != -ENOENT) return;
        int exists = e == 0 && v.exists;
        if (exists && probed_small(&v.st)) cv_notif_publish_listing(n, &v, tree_gen);
        if (e == 0) cv_vnode_release(&v);
        if (exists || !to_parent(p)) return;
    }
}
