/* libcvisor-shim.so: the in-guest tier's first step, preloaded into dynamically linked guests
 * (LD_PRELOAD, src/sandbox/shim.ts).
 *
 * glibc's fstat is fstatat(fd, "", buf, AT_EMPTY_PATH). The filter cannot read a path, and a
 * path there instead of "" names any file, a hidden one too, so it sends every AT_EMPTY_PATH
 * stat with a path to the supervisor. One with a NULL path it lets through: since Linux 6.11
 * the kernel then answers about the fd alone. This shim turns glibc's "" into NULL, in the only
 * places glibc makes these calls (fstatat, statx, and syscall() for libuv's raw statx), so
 * fstat stays a native call. It redirects their entry to its own code: an LD_PRELOAD symbol
 * would miss glibc's calls from inside itself (fdopendir, stdio, setlocale: most of them).
 *
 * It also answers readlink, and opens of names that do not exist, from the run's answer table
 * (common/answers_fmt.h) when the supervisor answered the same path before: glibc's realpath
 * and a compiler's search of its include directories then cost no notification; and stat, statx
 * and ls -l's getxattr calls of the entries of host directories the supervisor published
 * (handlers/statpub.c): ls -l, find, tar and git status then cost one notification a
 * directory, not one a name. It receives
 * the real fd of an O_PATH open, which the supervisor cannot inject (common/opath_proto.h), and
 * the opens the supervisor made ahead of a walk (prefetch.c, common/prefetch_proto.h). And
 * before read, readv, pread, lseek and fstat it checks the table's count of copy-ups, so that its
 * fds of files another process copied up follow the copies, as overlayfs fds do.
 *
 * Nothing here is trusted. The filter decides, and the table holds only what the supervisor
 * told this run's guests; a guest without the shim, or one that undoes it, only makes its own
 * calls slower. Whatever the shim does not recognise (another C library, other code at those
 * entries, a kernel without NULL paths) it leaves alone. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "common/answers_fmt.h"
#include "common/opath_proto.h"
#include "shim/patch.h"
#include "shim/shim.h"

static int same(const char *a, const char *b);
static void forget_cwd(void);
static const char *in_cwd(const char *rel, char out[CV_ANS_KEY_MAX + 2]);
static int served_enoent(int fd, const char *path);
static void follow_copies(int fd);

/* The filter's test, made here first: an fd (not AT_FDCWD), AT_EMPTY_PATH and the path "". */
static const char *fd_only(long fd, const char *path, long flags) {
    return ((flags & AT_EMPTY_PATH) && (int)fd >= 0 && path && !path[0]) ? NULL : path;
}

/* A stat of a path the table says is missing (served_enoent), with flags the kernel takes (it
 * checks them before the path): ENOENT without a call. */
#define STAT_FLAGS (AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH)
static int stat_missing(int fd, const char *path, long flags) {
    return path && !(flags & ~(long)STAT_FLAGS) && served_enoent(fd, path);
}

static int statx_missing(int fd, const char *path, long flags, long mask) {
    return path && !(flags & ~(long)(STAT_FLAGS | AT_STATX_SYNC_TYPE)) &&
           (flags & AT_STATX_SYNC_TYPE) != AT_STATX_SYNC_TYPE && !(mask & STATX__RESERVED) && served_enoent(fd, path);
}

/* A stat the table holds the entry's lstat for (the directory's view is the host's): a link is
 * the kernel's to follow. */
static int served_stat(int fd, const char *path, long flags, struct statx *stx, uint32_t *bits) {
    return !(flags & ~(long)STAT_FLAGS) && cv_shim_entry(fd, path, stx, bits, NULL) &&
           ((flags & AT_SYMLINK_NOFOLLOW) || !S_ISLNK(stx->stx_mode));
}

static void stat_of(const struct statx *x, struct stat *st) {
    volatile unsigned char *b = (volatile unsigned char *)st; /* no memset: the shim calls none */
    for (size_t i = 0; i < sizeof *st; i++) b[i] = 0;
    st->st_dev = makedev(x->stx_dev_major, x->stx_dev_minor);
    st->st_ino = x->stx_ino;
    st->st_nlink = x->stx_nlink;
    st->st_mode = x->stx_mode;
    st->st_uid = x->stx_uid;
    st->st_gid = x->stx_gid;
    st->st_rdev = makedev(x->stx_rdev_major, x->stx_rdev_minor);
    st->st_size = (off_t)x->stx_size;
    st->st_blksize = (blksize_t)x->stx_blksize;
    st->st_blocks = (blkcnt_t)x->stx_blocks;
    st->st_atim = (struct timespec){x->stx_atime.tv_sec, x->stx_atime.tv_nsec};
    st->st_mtim = (struct timespec){x->stx_mtime.tv_sec, x->stx_mtime.tv_nsec};
    st->st_ctim = (struct timespec){x->stx_ctime.tv_sec, x->stx_ctime.tv_nsec};
}

/* statx as the kernel answers the mask: it states the basic fields and the mount id whatever is
 * asked, the birth time only when asked, and (Linux 6.13+) the change and modification times
 * only when one of them is. Other fields (and a forced sync) are its to answer. */
static int served_statx(int fd, const char *path, long flags, unsigned mask, struct statx *out) {
    if ((flags & AT_STATX_SYNC_TYPE) != AT_STATX_SYNC_AS_STAT && (flags & AT_STATX_SYNC_TYPE) != AT_STATX_DONT_SYNC)
        return 0;
    uint32_t bits;
    if (mask & ~(unsigned)(STATX_BASIC_STATS | STATX_BTIME | STATX_MNT_ID)) return 0;
    if (!served_stat(fd, path, flags & ~(long)AT_STATX_SYNC_TYPE, out, &bits)) return 0;
    if (!(mask & STATX_BTIME)) {
        out->stx_mask &= ~(unsigned)STATX_BTIME;
        out->stx_btime = (struct statx_timestamp){0};
    }
    if ((bits & CV_ANS_TIMES_ASKED) && !(mask & (STATX_MTIME | STATX_CTIME))) {
        out->stx_mask &= ~(unsigned)(STATX_MTIME | STATX_CTIME);
        out->stx_mtime = out->stx_ctime = (struct statx_timestamp){0};
    }
    return 1;
}

static int shim_fstatat(int fd, const char *path, struct stat *buf, int flags) {
    struct statx stx;
    uint32_t bits;
    if (buf && served_stat(fd, path, flags, &stx, &bits)) {
        stat_of(&stx, buf);
        return 0;
    }
    if (stat_missing(fd, path, flags)) return -1;
    const char *p = fd_only(fd, path, flags);
    if (!p) follow_copies(fd); /* fstat: the fd's file may have been copied up */
    return (int)set_errno(raw6(SYS_newfstatat, fd, (long)p, (long)buf, flags, 0, 0));
}

static int shim_statx(int fd, const char *path, int flags, unsigned mask, void *buf) {
    if (buf && served_statx(fd, path, flags, mask, buf)) return 0;
    if (statx_missing(fd, path, flags, mask)) return -1;
    const char *p = fd_only(fd, path, flags);
    if (!p) follow_copies(fd);
    return (int)set_errno(raw6(SYS_statx, fd, (long)p, flags, mask, (long)buf, 0));
}

static long shim_syscall(long nr, long a, long b, long c, long d, long e, long f) {
    if (nr == SYS_chdir || nr == SYS_fchdir) {
        forget_cwd();
        long r = raw6(nr, a, b, c, d, e, f);
        forget_cwd();
        return set_errno(r);
    }
    if (nr == SYS_newfstatat) {
        if (stat_missing((int)a, (const char *)b, d)) return -1;
        b = (long)fd_only(a, (const char *)b, d);
    } else if (nr == SYS_statx) {
        if (statx_missing((int)a, (const char *)b, c, d)) return -1;
        b = (long)fd_only(a, (const char *)b, c);
    }
    return set_errno(raw6(nr, a, b, c, d, e, f));
}

/* ---------- answers the supervisor gave before (common/answers_fmt.h) ---------- */

static int (*vdso_clock_gettime)(clockid_t, struct timespec *);

static uint64_t now_ns(void) {
    struct timespec ts;
    if (!vdso_clock_gettime || vdso_clock_gettime(CLOCK_MONOTONIC, &ts) < 0)
        raw6(SYS_clock_gettime, CLOCK_MONOTONIC, (long)&ts, 0, 0, 0, 0);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define NO_TABLE ((const struct cv_ans_head *)1)
static const struct cv_ans_head *answers; /* NULL: not asked yet */

/* The run's table, mapped read-only on the first call that could use it (a notified open:
 * processes that never ask pay nothing), or NULL. */
static const struct cv_ans_head *table(void) {
    const struct cv_ans_head *t = __atomic_load_n(&answers, __ATOMIC_ACQUIRE);
    if (t) return t == NO_TABLE ? NULL : t;
    t = NO_TABLE;
    long fd = raw6(SYS_openat, AT_FDCWD, (long)CV_ANS_MAGIC, O_RDONLY | O_CLOEXEC, 0, 0, 0);
    struct stat st;
    if (fd >= 0 && raw6(SYS_newfstatat, fd, 0, (long)&st, AT_EMPTY_PATH, 0, 0) == 0 &&
        (uint64_t)st.st_size >= CV_ANS_BYTES) {
        long m = raw6(SYS_mmap, 0, (long)CV_ANS_BYTES, PROT_READ, MAP_SHARED, fd, 0);
        const struct cv_ans_head *h = (const void *)m;
        int mapped = !(m < 0 && m > -4096);
        if (mapped && h->stamp == CV_ANS_STAMP && h->sets == CV_ANS_SETS && h->ways == CV_ANS_WAYS &&
            h->slot_size == sizeof(struct cv_ans_slot) && h->key_max == CV_ANS_KEY_MAX)
            t = h;
        else if (mapped)
            raw6(SYS_munmap, m, (long)CV_ANS_BYTES, 0, 0, 0, 0);
    }
    if (fd >= 0) raw6(SYS_close, fd, 0, 0, 0, 0, 0);
    const struct cv_ans_head *none = NULL;
    if (!__atomic_compare_exchange_n(&answers, &none, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (t != NO_TABLE) raw6(SYS_munmap, (long)t, (long)CV_ANS_BYTES, 0, 0, 0, 0); /* another thread's won */
        t = none;
    }
    return t == NO_TABLE ? NULL : t;
}

/* An fd opened on a host file before another process copied it up would go on reading the old
 * bytes: the table counts copy-ups, and a process that sees the count move asks the supervisor
 * (a notified open of CV_FOLLOW_MAGIC) to make its fds of those files opens of their copies,
 * as overlayfs fds follow a copy-up. Checked before the calls that read an fd's data or size.
 * With other threads, which may close and reuse fd numbers meanwhile, it asks for the fd about
 * to be read alone, and only when the table lists the fd's file as copied up. */
static const volatile unsigned char *single_threaded; /* __libc_single_threaded */
static uint64_t copies_seen;                          /* every fd followed up to this count */
#define FDS_SEEN 4096
static uint64_t fd_seen[FDS_SEEN]; /* that fd followed up to this count (with other threads) */

static void ask_follow(int fd) {
    char path[sizeof CV_FOLLOW_MAGIC + 12] = CV_FOLLOW_MAGIC;
    if (fd >= 0) {
        char digits[11];
        int k = 0;
        for (unsigned v = (unsigned)fd; k == 0 || v; v /= 10) digits[k++] = (char)('0' + v % 10);
        char *p = path + sizeof CV_FOLLOW_MAGIC - 1;
        *p++ = '/';
        while (k) *p++ = digits[--k];
        *p = 0;
    }
    raw6(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC, 0, 0, 0); /* answers ENOENT */
}

static void follow_copies(int fd) {
    const struct cv_ans_head *t = table();
    if (!t) return;
    uint64_t now = __atomic_load_n(&t->copies, __ATOMIC_ACQUIRE);
    if (now == __atomic_load_n(&copies_seen, __ATOMIC_RELAXED)) return;
    if (single_threaded && *single_threaded) {
        __atomic_store_n(&copies_seen, now, __ATOMIC_RELAXED);
        ask_follow(-1);
        return;
    }
    if (fd < 0) return;
    if (fd < FDS_SEEN) {
        if (__atomic_exchange_n(&fd_seen[fd], now, __ATOMIC_RELAXED) == now) return;
    }
    struct stat st;
    if (raw6(SYS_newfstatat, fd, 0, (long)&st, AT_EMPTY_PATH, 0, 0) == 0 &&
        (!S_ISREG(st.st_mode) || !cv_ans_was_copied(t, st.st_dev, st.st_ino)))
        return;
    ask_follow(fd);
}

/* read, readv and pread64 keep libc's multi-threaded path (a cancellation point, a function of
 * its own); a single-threaded caller gets the syscall, as libc's own fast path makes it. */
static ssize_t (*libc_read_mt)(int, void *, size_t);
static ssize_t (*libc_readv_mt)(int, const void *, int);
static ssize_t (*libc_pread_mt)(int, void *, size_t, off_t);

static ssize_t shim_read(int fd, void *buf, size_t n) {
    follow_copies(fd);
    if (*single_threaded) return set_errno(raw6(SYS_read, fd, (long)buf, (long)n, 0, 0, 0));
    return libc_read_mt(fd, buf, n);
}

static ssize_t shim_readv(int fd, const void *iov, int count) {
    follow_copies(fd);
    if (*single_threaded) return set_errno(raw6(SYS_readv, fd, (long)iov, count, 0, 0, 0));
    return libc_readv_mt(fd, iov, count);
}

static ssize_t shim_pread(int fd, void *buf, size_t n, off_t off) {
    follow_copies(fd);
    if (*single_threaded) return set_errno(raw6(SYS_pread64, fd, (long)buf, (long)n, (long)off, 0, 0));
    return libc_pread_mt(fd, buf, n, off);
}

static off_t shim_lseek(int fd, off_t off, int whence) {
    follow_copies(fd);
    return set_errno(raw6(SYS_lseek, fd, (long)off, whence, 0, 0, 0));
}

/* readlink's answer from the table: 1 and *out (errno set when -1), or 0 to ask the kernel.
 * A size the kernel refuses (0, or over INT_MAX) is its to refuse. */
static int served_readlink(const char *path, char *buf, size_t size, long *out) {
    if (!path || !size || size > 0x7fffffff || path[0] != '/') return 0;
    uint32_t len = cv_ans_key_ok(path);
    const struct cv_ans_head *t = len ? table() : NULL;
    char val[CV_ANS_VAL_MAX + 1];
    int32_t err;
    uint32_t vlen;
    if (!t || !cv_ans_get(t, path, len, now_ns(), &err, val, &vlen)) return 0;
    if (err) {
        errno = err;
        *out = -1;
        return 1;
    }
    size_t n = vlen < size ? vlen : size;
    for (size_t i = 0; i < n; i++) buf[i] = val[i];
    *out = (long)n;
    return 1;
}

static long shim_readlink(const char *path, char *buf, size_t size) {
    long r;
    if (served_readlink(path, buf, size, &r)) return r;
    return set_errno(raw6(SYS_readlink, (long)path, (long)buf, (long)size, 0, 0, 0));
}

/* An absolute path names the same file whatever fd comes with it. */
static long shim_readlinkat(int fd, const char *path, char *buf, size_t size) {
    long r;
    if (served_readlink(path, buf, size, &r)) return r;
    return set_errno(raw6(SYS_readlinkat, fd, (long)path, (long)buf, (long)size, 0, 0));
}

/* A name the table says is missing, or one below a directory it says is, or one the published
 * listing of its directory does not hold (the directory's view is the host's:
 * handlers/statpub.c; the listing goes when it is about to change), or one below such a name:
 * 1, errno ENOENT. A relative path is the cwd's (fd AT_FDCWD). */
static int served_enoent(int fd, const char *path) {
    char full[CV_ANS_KEY_MAX + 2];
    if (path[0] != '/' && (fd != AT_FDCWD || !(path = in_cwd(path, full)))) return 0;
    uint32_t len = cv_ans_key_ok(path);
    const struct cv_ans_head *t = len ? table() : NULL;
    if (!t) return 0;
    char val[CV_ANS_VAL_MAX + 1];
    int32_t err;
    uint32_t vlen;
    uint64_t now = now_ns();
    /* Each directory above it, then the name itself: a key's prefix ending before a '/' is a
     * key too (no "." or ".." in it), its hash the key's hash so far, and no name below a
     * missing one exists. A directory with no listing in the table says nothing, nor one whose
     * listing holds the next name. */
    uint32_t h = CV_ANS_HASH_SEED;
    for (uint32_t l = 0; l <= len; l++) {
        if (l > 1 && (l == len || path[l] == '/')) {
            if (cv_ans_get_hashed(t, path, l, h, now, &err, val, &vlen) && err == ENOENT) break;
            uint32_t n = 0;
            while (l + 1 + n < len && path[l + 1 + n] != '/') n++;
            struct cv_ans_id id;
            if (l < len && n <= CV_ANS_NAME_MAX && cv_ans_dir_get_hashed(t, path, l, h, now, &id) &&
                !cv_ans_listing_holds(t, &id, path + l + 1, n, now))
                break;
        }
        if (l == len) return 0;
        h = cv_ans_hash_step(h, path[l]);
    }
    errno = ENOENT;
    return 1;
}

/* The cwd as the supervisor last said it (getcwd), while no rename or removal in the view and
 * no chdir of this process's (through libc) happened since: a rename may move it. Kept with the
 * pid that asked: a vfork child shares this memory, not its cwd. */
static char cwd_text[CV_ANS_KEY_MAX + 1];
static uint32_t cwd_len; /* 0: not known */
static uint64_t cwd_gen;
static long cwd_pid;

static void forget_cwd(void) { __atomic_store_n(&cwd_len, 0, __ATOMIC_RELEASE); }

/* rel, relative to the cwd, as an absolute path in out; NULL when it cannot be told. */
static const char *in_cwd(const char *rel, char out[CV_ANS_KEY_MAX + 2]) {
    while (rel[0] == '.' && rel[1] == '/') /* ls -R and find name "./x" */
        for (rel += 2; *rel == '/';) rel++;
    const struct cv_ans_head *t = *rel ? table() : NULL;
    if (!t) return NULL;
    uint64_t gone = __atomic_load_n(&t->gone_gen, __ATOMIC_ACQUIRE);
    uint32_t n = __atomic_load_n(&cwd_len, __ATOMIC_ACQUIRE);
    long pid = raw6(SYS_getpid, 0, 0, 0, 0, 0, 0);
    if (!n || __atomic_load_n(&cwd_gen, __ATOMIC_RELAXED) != gone ||
        __atomic_load_n(&cwd_pid, __ATOMIC_RELAXED) != pid) {
        __atomic_store_n(&cwd_len, 0, __ATOMIC_RELEASE);
        long r = raw6(SYS_getcwd, (long)cwd_text, sizeof cwd_text, 0, 0, 0, 0); /* the length with its NUL */
        if (r < 2 || cwd_text[0] != '/') return NULL;
        n = (uint32_t)r - 1;
        __atomic_store_n(&cwd_gen, gone, __ATOMIC_RELAXED);
        __atomic_store_n(&cwd_pid, pid, __ATOMIC_RELAXED);
        __atomic_store_n(&cwd_len, n, __ATOMIC_RELEASE);
    }
    uint32_t at = n == 1 ? 0 : n;
    for (uint32_t i = 0; i < at; i++) out[i] = cwd_text[i];
    out[at++] = '/';
    for (uint32_t i = 0; rel[i]; i++) {
        if (at > CV_ANS_KEY_MAX) return NULL;
        out[at++] = rel[i];
    }
    out[at] = 0;
    return out;
}


static long shim_chdir(const char *path) {
    forget_cwd();
    long r = raw6(SYS_chdir, (long)path, 0, 0, 0, 0, 0);
    forget_cwd();
    return set_errno(r);
}

static long shim_fchdir(int fd) {
    forget_cwd();
    long r = raw6(SYS_fchdir, fd, 0, 0, 0, 0, 0);
    forget_cwd();
    return set_errno(r);
}

int cv_shim_entry(int fd, const char *path, struct statx *stx, uint32_t *bits, struct cv_ans_id *dir_id) {
    if (!path || !path[0]) return 0;
    char full[CV_ANS_KEY_MAX + 2];
    if (path[0] != '/' && fd == AT_FDCWD && !(path = in_cwd(path, full))) return 0;
    const char *name = path, *last = NULL;
    uint32_t len = 0;
    for (; path[len]; len++) {
        if (len > CV_ANS_KEY_MAX) return 0;
        if (path[len] == '/') last = path + len;
    }
    const struct cv_ans_head *t = NULL;
    struct cv_ans_id id;
    if (last) {
        uint32_t dlen = (uint32_t)(last - path);
        if (path[0] != '/' || !dlen || !last[1]) return 0; /* relative, in "/", or ending in '/' */
        char dir[CV_ANS_KEY_MAX + 1];
        for (uint32_t i = 0; i < dlen; i++) dir[i] = path[i];
        dir[dlen] = 0;
        if (cv_ans_key_ok(dir) != dlen || !(t = table()) || !cv_ans_dir_get(t, dir, dlen, now_ns(), &id)) return 0;
        name = last + 1;
    } else {
        struct statx d;
        if (fd < 0 || !(t = table()) ||
            raw6(SYS_statx, fd, 0, AT_EMPTY_PATH, STATX_TYPE | STATX_INO | STATX_MNT_ID, (long)&d, 0) != 0 ||
            !(d.stx_mask & STATX_MNT_ID) || !S_ISDIR(d.stx_mode))
            return 0;
        id = cv_ans_id_of(&d);
    }
    uint32_t nlen = (uint32_t)(path + len - name);
    if (name[0] == '.' && (nlen == 1 || (nlen == 2 && name[1] == '.'))) return 0;
    if (dir_id) *dir_id = id;
    return cv_ans_ent_get(t, &id, name, nlen, now_ns(), stx, bits);
}

/* getxattr of the names ls -l asks of every file, where the table says there is none. */
static int served_no_xattr(const char *path, const char *name, int follow) {
    static const char selinux[] = "security.selinux", acl[] = "system.posix_acl_access",
                      dflt[] = "system.posix_acl_default";
    uint32_t bit = !name                ? 0
                   : same(name, selinux) ? CV_ANS_NO_SELINUX
                   : same(name, acl)     ? CV_ANS_NO_ACL
                   : same(name, dflt)    ? CV_ANS_NO_DEFAULT
                                         : 0;
    struct statx stx;
    uint32_t xattr;
    if (!bit || !cv_shim_entry(AT_FDCWD, path, &stx, &xattr, NULL) || !(xattr & bit) || (follow && S_ISLNK(stx.stx_mode)))
        return 0;
    errno = ENODATA;
    return 1;
}

static long shim_getxattr(const char *path, const char *name, void *value, size_t size) {
    if (served_no_xattr(path, name, 1)) return -1;
    return set_errno(raw6(SYS_getxattr, (long)path, (long)name, (long)value, (long)size, 0, 0));
}

static long shim_lgetxattr(const char *path, const char *name, void *value, size_t size) {
    if (served_no_xattr(path, name, 0)) return -1;
    return set_errno(raw6(SYS_lgetxattr, (long)path, (long)name, (long)value, (long)size, 0, 0));
}

/* getdents64 of a directory whose listing the supervisor published (handlers/statpub.c): the
 * records after the fd's offset, from the table, and the offset moved past them as the kernel
 * would. An fd that cannot seek (O_PATH: the kernel's EBADF) is the kernel's. */
static int served_listing(int fd, void *buf, size_t n, long *out) {
    const struct cv_ans_head *t = fd >= 0 && buf ? table() : NULL;
    struct statx d;
    if (!t || raw6(SYS_statx, fd, 0, AT_EMPTY_PATH, STATX_TYPE | STATX_INO | STATX_MNT_ID, (long)&d, 0) != 0 ||
        !(d.stx_mask & STATX_MNT_ID) || !S_ISDIR(d.stx_mode))
        return 0;
    struct cv_ans_id id = cv_ans_id_of(&d);
    long pos = raw6(SYS_lseek, fd, 0, SEEK_CUR, 0, 0, 0);
    int64_t last = 0;
    long got = pos < 0 ? -1 : cv_ans_listing(t, &id, pos, now_ns(), buf, n, &last);
    if (got < 0 || (got > 0 && raw6(SYS_lseek, fd, last, SEEK_SET, 0, 0, 0) != last)) return 0;
    cv_pf_listed(&id);
    *out = got;
    return 1;
}

static long shim_getdents64(int fd, void *buf, size_t n) {
    long r;
    if (n > 0x7fffffff) n = 0x7fffffff;
    if (served_listing(fd, buf, n, &r)) return r;
    return set_errno(raw6(SYS_getdents64, fd, (long)buf, (long)n, 0, 0, 0));
}

/* libc's own open and openat (cancellation points and all), through their trampolines. */
static int (*libc_open)(const char *, int, ...);
static int (*libc_openat)(int, const char *, int, ...);
static int (*libc_open_nocancel)(const char *, int, ...);

/* An open the table says fails with ENOENT (served_enoent). Not one that may create (O_TMPFILE is
 * two bits, one of them O_DIRECTORY's: opendir's opens are served). */
static int served_missing(int fd, const char *path, int flags) {
    return path && !(flags & O_CREAT) && (flags & __O_TMPFILE) != __O_TMPFILE && served_enoent(fd, path);
}

static long shim_access(const char *path, int mode) {
    if (path && !(mode & ~(R_OK | W_OK | X_OK)) && served_enoent(AT_FDCWD, path)) return -1;
    return set_errno(raw6(SYS_access, (long)path, mode, 0, 0, 0, 0));
}

/* An O_PATH open: the supervisor sends the real fd over a socket it gives in its place
 * (common/opath_proto.h). Anything else that comes back is the answer itself. */
static int open_path(int dirfd, const char *path, int flags) {
    long s = raw6(SYS_openat, dirfd, (long)path, flags | CV_O_FD_BY_SOCKET, 0, 0, 0);
    if (s < 0) return (int)set_errno(s);
    char tag = 0;
    struct iovec iov = {&tag, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u = {0};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    long got = raw6(SYS_recvmsg, s, (long)&m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, 0, 0, 0);
    struct cmsghdr *c = got == 1 && tag == CV_OPATH_TAG ? CMSG_FIRSTHDR(&m) : NULL;
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
        return (int)s;
    int fd;
    __builtin_memcpy(&fd, CMSG_DATA(c), sizeof fd);
    long r = raw6(SYS_dup3, fd, s, flags & O_CLOEXEC, 0, 0, 0); /* the number a native open gives */
    raw6(SYS_close, fd, 0, 0, 0, 0, 0);
    if (r < 0) raw6(SYS_close, s, 0, 0, 0, 0, 0);
    return r < 0 ? (int)set_errno(r) : (int)s;
}

/* The slots a walk keeps fds in count against the process's limit: an open that found none
 * left gives them up and is made again. */
#define AGAIN_IF_EMFILE(call)                                                                                      \
    __extension__({                                                                                                \
        int got_ = (call);                                                                                         \
        if (got_ < 0 && errno == EMFILE && cv_pf_release()) got_ = (call);                                         \
        got_;                                                                                                      \
    })

static int shim_open(const char *path, int flags, mode_t mode) {
    long r;
    if (served_missing(AT_FDCWD, path, flags)) return -1;
    if (cv_pf_open(AT_FDCWD, path, flags, &r)) return (int)r;
    return AGAIN_IF_EMFILE((flags & O_PATH) ? open_path(AT_FDCWD, path, flags) : libc_open(path, flags, mode));
}

static int shim_openat(int fd, const char *path, int flags, mode_t mode) {
    long r;
    if (served_missing(fd, path, flags)) return -1;
    if (cv_pf_open(fd, path, flags, &r)) return (int)r;
    return AGAIN_IF_EMFILE((flags & O_PATH) ? open_path(fd, path, flags) : libc_openat(fd, path, flags, mode));
}

/* glibc's own opens (opendir's, a locale's files, gconv's cache): what is missing, and a walk's. */
static int shim_open_nocancel(const char *path, int flags, mode_t mode) {
    long r;
    if (served_missing(AT_FDCWD, path, flags)) return -1;
    if (cv_pf_open(AT_FDCWD, path, flags, &r)) return (int)r;
    return AGAIN_IF_EMFILE(libc_open_nocancel(path, flags, mode));
}

/* The entries as glibc 2.33+ has them on x86-64: the instructions up to and including the
 * syscall and the test of its result, which the jump to ours overwrites. */
static const unsigned char FSTATAT[] = {0x41, 0x89, 0xca,                   /* mov %ecx,%r10d */
                                        0xb8, 0x06, 0x01, 0x00, 0x00,       /* mov $SYS_newfstatat,%eax */
                                        0x0f, 0x05,                         /* syscall */
                                        0x3d, 0x00, 0xf0, 0xff, 0xff};      /* cmp $-4096,%eax */
static const unsigned char STATX[] = {0x41, 0x89, 0xca,                     /* mov %ecx,%r10d */
                                      0xb8, 0x4c, 0x01, 0x00, 0x00,         /* mov $SYS_statx,%eax */
                                      0x0f, 0x05,                           /* syscall */
                                      0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff};  /* cmp $-4096,%rax */
static const unsigned char SYSCALL[] = {0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, /* nr, a, b */
                                        0x48, 0x89, 0xca, 0x4d, 0x89, 0xc2, 0x4d, 0x89, 0xc8, /* c, d, e */
                                        0x4c, 0x8b, 0x4c, 0x24, 0x08,                         /* f */
                                        0x0f, 0x05};                                          /* syscall */

/* A plain syscall wrapper: mov $nr,%eax; syscall; cmp $-4096 (or $-4095, as glibc builds each),%rax.
 * With a fourth argument it first moves %rcx to %r10. */
#define WRAPPER(nr, cmp) 0xb8, (nr) & 0xff, (nr) >> 8, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x3d, (cmp), 0xf0, 0xff, 0xff
#define WRAPPER_R10(nr, cmp) 0x49, 0x89, 0xca, WRAPPER(nr, cmp)
static const unsigned char READLINK[] = {WRAPPER(SYS_readlink, 0x01)};
static const unsigned char READLINKAT[] = {WRAPPER_R10(SYS_readlinkat, 0x01)};
static const unsigned char GETXATTR[] = {WRAPPER_R10(SYS_getxattr, 0x01)};
static const unsigned char LGETXATTR[] = {WRAPPER_R10(SYS_lgetxattr, 0x01)};
static const unsigned char CHDIR[] = {WRAPPER(SYS_chdir, 0x01)};
static const unsigned char FCHDIR[] = {WRAPPER(SYS_fchdir, 0x01)};
static const unsigned char ACCESS[] = {WRAPPER(SYS_access, 0x00)};
static const unsigned char LSEEK[] = {WRAPPER(SYS_lseek, 0x00)};
static const unsigned char GETDENTS64[] = {0xb8, 0xff, 0xff, 0xff, 0x7f, /* mov $INT_MAX,%eax */
                                           0x48, 0x39, 0xc2,             /* cmp %rax,%rdx */
                                           0x48, 0x0f, 0x47, 0xd0,       /* cmova %rax,%rdx */
                                           WRAPPER(SYS_getdents64, 0x00)};

/* read, readv and pread64 (glibc 2.34+) begin `cmpb $0,__libc_single_threaded(%rip)`, then MID,
 * `je MT` (the multi-threaded path), then TAIL: the single-threaded syscall. */
static const unsigned char READ_TAIL[] = {0x31, 0xc0, 0x0f, 0x05};                      /* xor %eax,%eax; syscall */
static const unsigned char READV_TAIL[] = {0xb8, 0x13, 0x00, 0x00, 0x00, 0x0f, 0x05};    /* mov $SYS_readv; syscall */
static const unsigned char PREAD_MID[] = {0x49, 0x89, 0xca};                            /* mov %rcx,%r10 */
static const unsigned char PREAD_TAIL[] = {0xb8, 0x11, 0x00, 0x00, 0x00, 0x0f, 0x05};    /* mov $SYS_pread64; syscall */

/* open and openat begin with their frame's set-up: whole instructions, none relative to where
 * it runs, so a trampoline can run them and jump back to the rest. */
static const unsigned char OPEN[] = {0x55,                   /* push %rbp */
                                     0x41, 0x89, 0xf2,       /* mov %esi,%r10d */
                                     0x48, 0x89, 0xfd,       /* mov %rdi,%rbp */
                                     0x53,                   /* push %rbx */
                                     0x89, 0xf3,             /* mov %esi,%ebx */
                                     0x48, 0x83, 0xec, 0x68}; /* sub $0x68,%rsp */
static const unsigned char OPENAT[] = {0x48, 0x83, 0xec, 0x78,                               /* sub $0x78,%rsp */
                                       0x48, 0x89, 0x4c, 0x24, 0x58,                         /* mov %rcx,0x58(%rsp) */
                                       0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00}; /* mov %fs:0x28,%rax */
static const unsigned char OPEN_NOCANCEL[] = {0x48, 0x83, 0xec, 0x58,        /* sub $0x58,%rsp */
                                              0x41, 0x89, 0xf2,              /* mov %esi,%r10d */
                                              0x48, 0x89, 0x54, 0x24, 0x30}; /* mov %rdx,0x30(%rsp) */

/* libc's own definition of name (its default version), found in its dynamic symbol table: the
 * shim links against nothing newer than glibc 2.14 (dl_iterate_phdr, __errno_location, memcpy),
 * so it loads into any glibc guest, and a symbol another preload defines is not the one patched. */
struct lookup {
    const char *object; /* the file name of the object to look in */
    const char *name;
    unsigned char *addr;
};

static uint32_t gnu_hash(const char *s) {
    uint32_t h = 5381;
    for (; *s; s++) h = h * 33 + (unsigned char)*s;
    return h;
}

static int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static int named(const char *path, const char *object) {
    const char *base = path;
    for (const char *p = path; *p; p++)
        if (*p == '/') base = p + 1;
    return same(base, object);
}

static int find_in(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct lookup *l = arg;
    if (!info->dlpi_name || !named(info->dlpi_name, l->object)) return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const void *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 1;
    uintptr_t symtab = 0, strtab = 0, gnuhash = 0, versym = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        uintptr_t v = dyn->d_un.d_ptr;
        if (v && v < info->dlpi_addr) v += info->dlpi_addr; /* ld.so may have relocated it already */
        if (dyn->d_tag == DT_SYMTAB) symtab = v;
        else if (dyn->d_tag == DT_STRTAB) strtab = v;
        else if (dyn->d_tag == DT_GNU_HASH) gnuhash = v;
        else if (dyn->d_tag == DT_VERSYM) versym = v;
    }
    if (!symtab || !strtab || !gnuhash) return 1;
    const uint32_t *h = (const uint32_t *)gnuhash;
    uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(h + 4) + bloom_size);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t hash = gnu_hash(l->name);
    uint32_t i = nbuckets ? buckets[hash % nbuckets] : 0;
    if (i < symoffset) return 1;
    for (;; i++) {
        uint32_t ch = chain[i - symoffset];
        const ElfW(Sym) *sym = (const ElfW(Sym) *)symtab + i;
        if ((ch | 1) == (hash | 1) && same(l->name, (const char *)strtab + sym->st_name) &&
            sym->st_shndx != SHN_UNDEF && ELF64_ST_TYPE(sym->st_info) == STT_FUNC &&
            !(versym && (((const uint16_t *)versym)[i] & 0x8000))) {
            l->addr = (unsigned char *)(info->dlpi_addr + sym->st_value);
            return 1;
        }
        if (ch & 1) return 1;
    }
}

/* libc's entry of name, past a CET landing pad, if its code is exactly expect; else NULL. */
static unsigned char *entry(const char *name, const unsigned char *expect, size_t len) {
    struct lookup l = {"libc.so.6", name, NULL};
    dl_iterate_phdr(find_in, &l);
    unsigned char *fn = l.addr;
    if (!fn) return NULL;
    fn += cv_shim_endbr(fn); /* a CET build's landing pad stays where it is */
    return cv_shim_matches(fn, expect, len) ? fn : NULL;
}

/* The entry of name when it is the split above: *single and *mt set; else NULL. The MT path must
 * begin with its own frame (sub $N,%rsp): it is then called as a function with our arguments. */
static unsigned char *split_entry(const char *name, const unsigned char *mid, size_t midlen,
                                  const unsigned char *tail, size_t taillen,
                                  const volatile unsigned char **single, void **mt) {
    struct lookup l = {"libc.so.6", name, NULL};
    dl_iterate_phdr(find_in, &l);
    unsigned char *fn = l.addr;
    if (!fn) return NULL;
    fn += cv_shim_endbr(fn);
    if (fn[0] != 0x80 || fn[1] != 0x3d || fn[6] != 0x00) return NULL; /* cmpb $0,disp32(%rip) */
    int32_t disp = (int32_t)((uint32_t)fn[2] | (uint32_t)fn[3] << 8 | (uint32_t)fn[4] << 16 | (uint32_t)fn[5] << 24);
    size_t at = 7;
    if (!cv_shim_same(fn + at, mid, midlen)) return NULL;
    at += midlen;
    if (fn[at] != 0x74 || (signed char)fn[at + 1] <= 0) return NULL; /* je MT, forward */
    unsigned char *slow = fn + at + 2 + (signed char)fn[at + 1];
    at += 2;
    if (!cv_shim_same(fn + at, tail, taillen) || at + taillen < CV_SHIM_JUMP_LEN) return NULL;
    if (slow[0] != 0x48 || slow[1] != 0x83 || slow[2] != 0xec) return NULL;
    const volatile unsigned char *flag = fn + 7 + disp;
    if (*single && *single != flag) return NULL; /* one flag for all of them */
    *single = flag;
    *mt = slow;
    return fn;
}

static int patch(unsigned char *fn, void *to) {
    unsigned char jump[CV_SHIM_JUMP_LEN];
    cv_shim_jump(jump, (uintptr_t)to);
    uintptr_t lo = (uintptr_t)fn & ~(uintptr_t)4095;
    size_t span = (size_t)((uintptr_t)fn + sizeof jump - lo);
    /* Executable while written: a thread a constructor started may be running there. */
    if (raw6(SYS_mprotect, (long)lo, (long)span, PROT_READ | PROT_WRITE | PROT_EXEC, 0, 0, 0) < 0) return -1;
    for (size_t i = 0; i < sizeof jump; i++) ((volatile unsigned char *)fn)[i] = jump[i];
    raw6(SYS_mprotect, (long)lo, (long)span, PROT_READ | PROT_EXEC, 0, 0, 0);
    return 0;
}

/* The jumps to write, written together: one writable window over the pages they lie on (two
 * mprotects in all, not two a jump: they are an exec's cost), each page executable throughout. */
struct batch {
    unsigned char *fn[24];
    void *to[24];
    size_t n;
};

static void add(struct batch *b, unsigned char *fn, void *to) {
    if (fn && b->n < sizeof b->fn / sizeof *b->fn) b->fn[b->n] = fn, b->to[b->n++] = to;
}

static void apply(const struct batch *b) {
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (size_t i = 0; i < b->n; i++) {
        uintptr_t at = (uintptr_t)b->fn[i];
        if ((at & ~(uintptr_t)4095) < lo) lo = at & ~(uintptr_t)4095;
        if (at + CV_SHIM_JUMP_LEN > hi) hi = at + CV_SHIM_JUMP_LEN;
    }
    if (!b->n || raw6(SYS_mprotect, (long)lo, (long)(hi - lo), PROT_READ | PROT_WRITE | PROT_EXEC, 0, 0, 0) < 0) {
        for (size_t i = 0; i < b->n; i++) patch(b->fn[i], b->to[i]); /* not one mapping: page by page */
        return;
    }
    for (size_t i = 0; i < b->n; i++) {
        unsigned char jump[CV_SHIM_JUMP_LEN];
        cv_shim_jump(jump, (uintptr_t)b->to[i]);
        for (size_t k = 0; k < sizeof jump; k++) ((volatile unsigned char *)b->fn[i])[k] = jump[k];
    }
    raw6(SYS_mprotect, (long)lo, (long)(hi - lo), PROT_READ | PROT_EXEC, 0, 0, 0);
}

static void redirect(struct batch *b, const char *name, const unsigned char *expect, size_t len, void *to) {
    add(b, entry(name, expect, len), to);
}

/* Redirect name to `to`, keeping its own code callable through *orig: a trampoline on a page
 * of the shim's own, written for every detour first, then made executable (never writable
 * again) before any entry jumps to `to`. */
struct detour {
    unsigned char *fn;
    void *to;
    void **orig;
    unsigned char *tramp;
};

static int detour_plan(struct detour *d, unsigned char *page, size_t *used, const char *name,
                       const unsigned char *expect, size_t len, void *to, void **orig) {
    unsigned char *fn = entry(name, expect, len);
    if (!fn || *used + len + CV_SHIM_BACK_LEN > 4096) return 0;
    *d = (struct detour){fn, to, orig, page + *used};
    cv_shim_tramp(d->tramp, expect, len, (uintptr_t)fn + len);
    *used += (len + CV_SHIM_BACK_LEN + 15) & ~(size_t)15;
    return 1;
}

__attribute__((constructor)) static void cv_shim_init(void) {
    /* Linux 6.11+ answers a NULL path about the fd (EBADF here); before, EFAULT. */
    struct stat st;
    if (raw6(SYS_newfstatat, 0x7fffffff, 0, (long)&st, AT_EMPTY_PATH, 0, 0) != -EBADF) return;
    struct batch b = {.n = 0};
    redirect(&b, "fstatat", FSTATAT, sizeof FSTATAT, (void *)shim_fstatat);
    redirect(&b, "statx", STATX, sizeof STATX, (void *)shim_statx);
    redirect(&b, "syscall", SYSCALL, sizeof SYSCALL, (void *)shim_syscall);
    /* The table's records are stamped with the monotonic clock: read it as libc does. */
    struct lookup vdso = {"linux-vdso.so.1", "__vdso_clock_gettime", NULL};
    dl_iterate_phdr(find_in, &vdso);
    vdso_clock_gettime = (int (*)(clockid_t, struct timespec *))(void *)vdso.addr;
    redirect(&b, "readlink", READLINK, sizeof READLINK, (void *)shim_readlink);
    redirect(&b, "readlinkat", READLINKAT, sizeof READLINKAT, (void *)shim_readlinkat);
    redirect(&b, "access", ACCESS, sizeof ACCESS, (void *)shim_access);
    redirect(&b, "getxattr", GETXATTR, sizeof GETXATTR, (void *)shim_getxattr);
    redirect(&b, "lgetxattr", LGETXATTR, sizeof LGETXATTR, (void *)shim_lgetxattr);
    redirect(&b, "chdir", CHDIR, sizeof CHDIR, (void *)shim_chdir);
    redirect(&b, "fchdir", FCHDIR, sizeof FCHDIR, (void *)shim_fchdir);
    redirect(&b, "lseek64", LSEEK, sizeof LSEEK, (void *)shim_lseek);
    redirect(&b, "getdents64", GETDENTS64, sizeof GETDENTS64, (void *)shim_getdents64);
    add(&b, split_entry("read", NULL, 0, READ_TAIL, sizeof READ_TAIL, &single_threaded, (void **)&libc_read_mt),
        (void *)shim_read);
    add(&b, split_entry("readv", NULL, 0, READV_TAIL, sizeof READV_TAIL, &single_threaded, (void **)&libc_readv_mt),
        (void *)shim_readv);
    add(&b,
        split_entry("pread64", PREAD_MID, sizeof PREAD_MID, PREAD_TAIL, sizeof PREAD_TAIL, &single_threaded,
                    (void **)&libc_pread_mt),
        (void *)shim_pread);

    long page = raw6(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page < 0 && page > -4096) {
        apply(&b);
        return;
    }
    struct detour d[3];
    size_t n = 0, used = 0;
    n += detour_plan(&d[n], (unsigned char *)page, &used, "open64", OPEN, sizeof OPEN, (void *)shim_open,
                     (void **)&libc_open);
    n += detour_plan(&d[n], (unsigned char *)page, &used, "openat64", OPENAT, sizeof OPENAT, (void *)shim_openat,
                     (void **)&libc_openat);
    n += detour_plan(&d[n], (unsigned char *)page, &used, "__open_nocancel", OPEN_NOCANCEL, sizeof OPEN_NOCANCEL,
                     (void *)shim_open_nocancel, (void **)&libc_open_nocancel);
    if (!n || raw6(SYS_mprotect, page, 4096, PROT_READ | PROT_EXEC, 0, 0, 0) < 0) {
        raw6(SYS_munmap, page, 4096, 0, 0, 0, 0);
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        *d[i].orig = d[i].tramp; /* before the entry jumps to ours: a thread may call it at once */
        add(&b, d[i].fn, d[i].to);
    }
    apply(&b);
}
