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
#include "overlay/vfs.h"
#include "supervisor/answers.h"

/* The view of v's directory is the host's, entry for entry. */
static int kernel_view(const struct cv_vnode *v) {
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

struct misses {
    uint32_t hash, count, entries; /* entries: counted once it was listed, else 0 */
    uint64_t since;
};

static struct misses *miss(const char *dir) {
    static struct misses seen[MISS_SLOTS]; /* receiver thread only */
    uint32_t h = cv_ans_hash(dir, (uint32_t)strlen(dir)) | 1;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    struct misses *m = &seen[h % MISS_SLOTS];
    if (m->hash != h || now - m->since >= MISS_WINDOW_NS) *m = (struct misses){h, 0, 0, now};
    m->count++;
    return m;
}

static int dots(const char *name) { return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])); }

/* Entries in a getdents64 batch, . and .. left out; *last: the offset after the batch. */
static uint32_t names_in(const char *buf, long len, int64_t *last) {
    uint32_t n = 0;
    for (long off = 0; off < len;) {
        const struct dirent64 *d = (const void *)(buf + off); /* the kernel's layout */
        off += d->d_reclen;
        n += !dots(d->d_name);
        *last = d->d_off;
    }
    return n;
}

struct publication {
    struct cv_run *r;
    int fd, level, count;
    uint64_t serial;
    struct cv_ans_id id;
    uint32_t dir_bits, times;
};

static void publish_batch(struct publication *p, const char *buf, long len) {
    for (long off = 0; off < len && p->count < CV_ANS_DIR_ENTRIES;) {
        const struct dirent64 *d = (const void *)(buf + off);
        off += d->d_reclen;
        const char *name = d->d_name;
        if (dots(name) || (p->level == CV_ANS_DIRS_ONLY && d->d_type != DT_DIR && d->d_type != DT_UNKNOWN)) continue;
        struct statx st;
        if (statx(p->fd, name, AT_SYMLINK_NOFOLLOW | AT_STATX_SYNC_AS_STAT, STATX_BASIC_STATS | STATX_BTIME, &st) < 0)
            continue;
        uint32_t x = p->level == CV_ANS_XATTRS ? xattr_bits(p->fd, name, &st, p->id.mnt, p->dir_bits) : 0;
        cv_answers_put_entry(p->r, p->serial, &p->id, name, &st, x | p->times);
        p->count++;
    }
}

void cv_notif_publish_dir(struct cv_notif *n, const struct cv_vnode *v, uint64_t tree_gen, int xattrs) {
    struct cv_run *r = n->run;
    if (!tree_gen || !kernel_view(v)) return;
    const char *slash = strrchr(v->vpath, '/');
    size_t plen = slash ? (size_t)(slash - v->vpath) : 0;
    if (!plen || plen > CV_ANS_KEY_MAX) return; /* "/" holds /proc, /dev and /sys: asked each time */
    char dir[CV_ANS_KEY_MAX + 1];
    memcpy(dir, v->vpath, plen);
    dir[plen] = 0;
    if (cv_answers_kernel_made(dir)) return;
    int level = xattrs ? CV_ANS_XATTRS : S_ISDIR(v->st.st_mode) ? CV_ANS_DIRS_ONLY : CV_ANS_ENTRIES;
    if (cv_vfs_holds_hidden(r, dir) || cv_answers_dir_fresh(r, dir, level)) return;
    struct misses *m = miss(dir);
    if (m->count < 2 || (level != CV_ANS_DIRS_ONLY && m->entries && (uint64_t)m->count * 8 < m->entries - 1)) return;
    /* Asks no time: whether the filesystem fills them unasked tells how statx answers such masks. */
    struct statx ds;
    if (statx(v->psrc, "", AT_EMPTY_PATH, STATX_NLINK | STATX_INO | STATX_MNT_ID, &ds) < 0 ||
        !(ds.stx_mask & STATX_MNT_ID))
        return;
    /* subdirectories: counted by the link count (1: the filesystem does not count them) */
    if (level == CV_ANS_DIRS_ONLY && ds.stx_nlink != 1 && (uint64_t)m->count * 8 < ds.stx_nlink - 2) return;
    cv_autoclose int fd = cv_reopen_dir_quietly(v->psrc, O_RDONLY | O_DIRECTORY);
    char buf[32768] __attribute__((aligned(8))), more[4096] __attribute__((aligned(8)));
    long first = fd < 0 ? -1 : syscall(SYS_getdents64, fd, buf, sizeof buf), got;
    if (first < 0) return;
    /* The whole listing counted; most directories fit in the first batch, read once. */
    int64_t after = 0, end = 0;
    uint32_t total = names_in(buf, first, &after);
    int whole = 1;
    while (first > 0 && (got = syscall(SYS_getdents64, fd, more, sizeof more)) > 0)
        whole = 0, total += names_in(more, got, &end);
    m->entries = total + 1;
    if (level != CV_ANS_DIRS_ONLY && (uint64_t)m->count * 8 < total) return;
    struct publication p = {r, fd, level, 0, cv_answers_serial(r),
                            {ds.stx_mnt_id, makedev(ds.stx_dev_major, ds.stx_dev_minor), ds.stx_ino},
                            level == CV_ANS_XATTRS ? probe_names(NULL, fd) : 0,
                            ds.stx_mask & STATX_MTIME ? 0 : CV_ANS_TIMES_ASKED};
    if (!p.serial) return;
    publish_batch(&p, buf, first);
    if (!whole && lseek(fd, after, SEEK_SET) == after)
        while (p.count < CV_ANS_DIR_ENTRIES && (got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
            publish_batch(&p, buf, got);
    cv_answers_put_did(r, &p.id, p.serial, level);
    cv_answers_put_dir(r, tree_gen, dir, &p.id);
}
