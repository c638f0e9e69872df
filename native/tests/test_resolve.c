/* cv_resolve() must answer as the kernel would for the guest thread. Here the
 * test process itself plays the guest (struct cv_notif with our own tid/tgid,
 * no run, no listener), so the kernel is the oracle: for every case the answer
 * of openat(dirfd, path, O_PATH [| O_NOFOLLOW]) is compared with the
 * resolver's (error, existence, st_dev/st_ino/type), and then the procfs
 * details (in_proc, proc_pid, magic, magic_fd, path) are checked by hand.
 *
 * The tree lives in a private mkdtemp directory: files, dirs, relative and
 * absolute symlinks, a loop, a dangling link, a non-UTF-8 name, a deep path,
 * a 40-link chain. Relative cases run with the cwd inside it, *at cases with
 * a dirfd; a second thread with its own cwd (unshare(CLONE_FS)) checks that
 * the guest thread's cwd is used, not the supervisor's.
 *
 * Output: one line per failure, then "resolve: N passed, M failed".
 * Exit status 0 only when M == 0. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest/guest.h"
#include "overlay/resolve.h"
#include "check.h"

#define DEPTH 60  /* directories in the deep path */
#define CHAIN 40  /* symlinks in the chain (the kernel follows at most 40) */

static char tmp[PATH_MAX]; /* the temp tree, absolute */
static pid_t me;


static const char *flag_str(int flags) {
    static const char *names[] = {"0", "FOLLOW", "PARENT", "FOLLOW|PARENT"};
    return names[flags & 3];
}

static const char *dir_str(int dirfd) {
    static char b[32];
    if (dirfd == AT_FDCWD) return "AT_FDCWD";
    snprintf(b, sizeof b, "fd %d", dirfd);
    return b;
}

/* Printable form of a path (non-UTF-8 bytes and long paths). */
static const char *show(const char *p) {
    static char b[4][200];
    static int k;
    char *o = b[k++ & 3];
    size_t n = 0, len = strlen(p);
    for (size_t i = 0; p[i] && n + 8 < sizeof b[0]; i++) {
        unsigned char c = (unsigned char)p[i];
        if (i == 120 && len > 160) {
            n += (size_t)snprintf(o + n, sizeof b[0] - n, "...(%zu bytes)", len);
            break;
        }
        if (c < 0x20 || c >= 0x7f) n += (size_t)snprintf(o + n, sizeof b[0] - n, "\\x%02x", c);
        else o[n++] = (char)c;
    }
    o[n] = 0;
    return o;
}

static int do_resolve(pid_t tid, pid_t tgid, int dirfd, const char *path, int flags, struct cv_resolved *o) {
    struct cv_guest g;
    cv_guest_init(&g, CV_GUEST_UNNOTIFIED, 0, tid);
    g.tgid = tgid;
    struct cv_vctx n = {.run = NULL, .guest = &g, .nr = -1};
    /* Without CV_RES_STAT (the read-only open's hot path) st may stay unfilled, but the
     * answer and `exists` must be the same as with it. */
    struct cv_resolved lean;
    int r_lean = cv_resolve(&n, dirfd, path, flags & ~CV_RES_STAT, &lean);
    memset(o, 0x5a, sizeof *o); /* the resolver must fill everything */
    int r = cv_resolve(&n, dirfd, path, flags | CV_RES_STAT, o);
    check(r == r_lean && (r < 0 || (lean.exists == o->exists && lean.in_proc == o->in_proc)),
          "%s: without CV_RES_STAT: rc %d exists %d in_proc %d; with it: rc %d exists %d in_proc %d", path,
          r_lean, lean.exists, lean.in_proc, r, o->exists, o->in_proc);
    return r;
}

/* The kernel's answer for us: 0 and st, or -errno. */
static int kernel(int dirfd, const char *path, int follow, struct stat *st) {
    int fd = openat(dirfd, path, O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
    if (fd < 0) return -errno;
    int r = fstat(fd, st) < 0 ? -errno : 0;
    close(fd);
    return r;
}

static const char *type_str(mode_t m) {
    return S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : S_ISREG(m) ? "file" : S_ISCHR(m) ? "chr"
         : S_ISFIFO(m) ? "fifo" : S_ISSOCK(m) ? "sock" : "other";
}

/* Resolve and compare with the kernel. Returns the resolver's return value;
 * *o holds its answer. */
static int oracle(int dirfd, const char *path, int flags, struct cv_resolved *o) {
    int r = do_resolve(gettid(), me, dirfd, path, flags, o);
    struct stat k;
    int kr = kernel(dirfd, path, flags & CV_RES_FOLLOW, &k);
    const char *ctx_d = dir_str(dirfd);
    if (kr == -ENOENT) {
        /* missing final: 0 with exists == 0; missing parent: either that
         * (without CV_RES_PARENT) or -ENOENT. Cases check which one. */
        check((r == 0 && o->exists == 0) || r == -ENOENT,
              "%s %s [%s]: kernel says ENOENT, resolver returned %d exists=%d", ctx_d, show(path),
              flag_str(flags), r, r == 0 ? o->exists : -1);
    } else if (kr < 0) {
        check(r == kr, "%s %s [%s]: kernel says %s, resolver returned %d (%s)", ctx_d, show(path),
              flag_str(flags), strerror(-kr), r, r < 0 ? strerror(-r) : "success");
    } else {
        check(r == 0 && o->exists == 1, "%s %s [%s]: kernel finds it, resolver returned %d exists=%d",
              ctx_d, show(path), flag_str(flags), r, r == 0 ? o->exists : -1);
        if (r == 0 && o->exists == 1)
            check(o->st.st_dev == k.st_dev && o->st.st_ino == k.st_ino &&
                      (o->st.st_mode & S_IFMT) == (k.st_mode & S_IFMT),
                  "%s %s [%s]: resolver's st is %s dev %lu ino %lu, kernel's is %s dev %lu ino %lu",
                  ctx_d, show(path), flag_str(flags), type_str(o->st.st_mode), (unsigned long)o->st.st_dev,
                  (unsigned long)o->st.st_ino, type_str(k.st_mode), (unsigned long)k.st_dev,
                  (unsigned long)k.st_ino);
    }
    return r;
}

/* Same object as the host path (stat or lstat). */
static int same(const struct stat *st, const char *host, int follow) {
    struct stat h;
    if ((follow ? stat(host, &h) : lstat(host, &h)) < 0) return 0;
    return st->st_dev == h.st_dev && st->st_ino == h.st_ino;
}

/* ---------- expectations ---------- */

/* Exists, outside procfs, the same object as host (stat/lstat per FOLLOW). */
static void host_obj(int dirfd, const char *path, int flags, const char *host) {
    struct cv_resolved o;
    int r = oracle(dirfd, path, flags, &o);
    if (r != 0 || !o.exists) {
        check(0, "%s %s [%s]: expected %s, got %d exists=%d", dir_str(dirfd), show(path), flag_str(flags),
              show(host), r, r == 0 ? o.exists : -1);
        return;
    }
    check(same(&o.st, host, flags & CV_RES_FOLLOW), "%s %s [%s]: st is not that of %s", dir_str(dirfd),
          show(path), flag_str(flags), show(host));
    check(!o.in_proc && !o.magic && o.magic_fd == -1 && o.proc_pid == 0,
          "%s %s [%s]: host object flagged in_proc=%d magic=%d magic_fd=%d proc_pid=%d", dir_str(dirfd),
          show(path), flag_str(flags), o.in_proc, o.magic, o.magic_fd, (int)o.proc_pid);
    if (o.have_path)
        check(!strcmp(o.path, host) || same(&o.st, o.path, flags & CV_RES_FOLLOW),
              "%s %s [%s]: path is %s, expected %s", dir_str(dirfd), show(path), flag_str(flags),
              show(o.path), show(host));
}

static void want_err(int dirfd, const char *path, int flags, int err) {
    struct cv_resolved o;
    int r = oracle(dirfd, path, flags, &o);
    check(r == -err, "%s %s [%s]: expected -%s, got %d (%s)", dir_str(dirfd), show(path), flag_str(flags),
          strerrorname_np(err), r, r < 0 ? strerror(-r) : "success");
}

/* Missing final: 0, exists == 0; with CV_RES_PARENT also the path (when given). */
static void want_missing(int dirfd, const char *path, int flags, const char *want_path) {
    struct cv_resolved o;
    int r = oracle(dirfd, path, flags, &o);
    check(r == 0 && o.exists == 0, "%s %s [%s]: expected missing final (0, exists=0), got %d exists=%d",
          dir_str(dirfd), show(path), flag_str(flags), r, r == 0 ? o.exists : -1);
    if (r == 0 && want_path && o.have_path)
        check(!strcmp(o.path, want_path), "%s %s [%s]: missing final path %s, expected %s", dir_str(dirfd),
              show(path), flag_str(flags), show(o.path), show(want_path));
}

/* In procfs: path exactly want_path, proc_pid, magic flags. */
static void proc_obj(int dirfd, const char *path, int flags, const char *want_path, pid_t pid, int magic,
                     int magic_fd) {
    struct cv_resolved o;
    int r = oracle(dirfd, path, flags, &o);
    if (r != 0 || !o.exists) {
        check(0, "%s %s [%s]: expected %s, got %d exists=%d", dir_str(dirfd), show(path), flag_str(flags),
              show(want_path), r, r == 0 ? o.exists : -1);
        return;
    }
    check(o.in_proc && o.have_path, "%s %s [%s]: in_proc=%d have_path=%d, expected both", dir_str(dirfd),
          show(path), flag_str(flags), o.in_proc, o.have_path);
    if (o.have_path)
        check(!strcmp(o.path, want_path), "%s %s [%s]: path %s, expected %s", dir_str(dirfd), show(path),
              flag_str(flags), show(o.path), show(want_path));
    check(o.proc_pid == pid, "%s %s [%s]: proc_pid %d, expected %d", dir_str(dirfd), show(path),
          flag_str(flags), (int)o.proc_pid, (int)pid);
    check(o.magic == magic && o.magic_fd == magic_fd, "%s %s [%s]: magic=%d magic_fd=%d, expected %d %d",
          dir_str(dirfd), show(path), flag_str(flags), o.magic, o.magic_fd, magic, magic_fd);
}

/* ---------- the tree ---------- */

static char deep_rel[DEPTH * 2 + 16]; /* "d/d/.../leaf" */

static void mk(const char *rel, int dir) {
    int ok = dir ? mkdir(rel, 0755) == 0 : close(open(rel, O_CREAT | O_WRONLY | O_CLOEXEC, 0644)) == 0;
    if (!ok) {
        printf("FAIL setup: creating %s: %s\n", show(rel), strerror(errno));
        exit(1);
    }
}

static void ln(const char *target, const char *rel) {
    if (symlink(target, rel) < 0) {
        printf("FAIL setup: symlink %s -> %s: %s\n", show(rel), show(target), strerror(errno));
        exit(1);
    }
}

static void make_tree(void) {
    const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmp, sizeof tmp, "%s/cvisor-resolve.XXXXXX", base);
    if (!mkdtemp(tmp) || chdir(tmp) < 0) {
        printf("FAIL setup: mkdtemp %s: %s\n", tmp, strerror(errno));
        exit(1);
    }
    /* mkdtemp may have been given a path through symlinks: use the real one. */
    char real[PATH_MAX];
    if (!realpath(tmp, real)) exit(1);
    snprintf(tmp, sizeof tmp, "%s", real);
    mk("file", 0);
    mk("dir", 1);
    mk("dir/sub", 1);
    mk("dir/sub/f", 0);
    char abs_target[PATH_MAX + 8];
    snprintf(abs_target, sizeof abs_target, "%s/dir", tmp);
    ln("dir/sub", "rel");            /* relative */
    ln(abs_target, "abs");           /* absolute */
    ln("rel", "chain2");             /* link to a link */
    ln("../../file", "dir/sub/up");  /* relative with .. */
    ln("loop2", "loop1");            /* loop */
    ln("loop1", "loop2");
    ln("self", "self");              /* self loop */
    ln("nowhere", "dangling");       /* dangling */
    ln("nodir/x", "dangling2");      /* dangling, missing parent */
    ln("file", "flink");             /* link to a file */
    ln("/", "rootlink");             /* link to / */
    mk("na\xff\xfe" "me", 0);        /* not UTF-8 */
    mk("\xc3\x28" "dir", 1);         /* invalid 2-byte sequence, a directory */
    mk("\xc3\x28" "dir/in", 0);
    /* deep path */
    char p[DEPTH * 2 + 16] = "";
    for (int i = 0; i < DEPTH; i++) {
        strcat(p, i ? "/d" : "d");
        mk(p, 1);
    }
    strcat(p, "/leaf");
    mk(p, 0);
    snprintf(deep_rel, sizeof deep_rel, "%s", p);
    /* a chain of CHAIN links: c1 -> c2 -> ... -> cCHAIN -> file */
    for (int i = 1; i <= CHAIN; i++) {
        char name[16], target[16];
        snprintf(name, sizeof name, "c%d", i);
        if (i == CHAIN) snprintf(target, sizeof target, "file");
        else snprintf(target, sizeof target, "c%d", i + 1);
        ln(target, name);
    }
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *f) {
    (void)st; (void)f;
    return type == FTW_DP ? rmdir(p) : unlink(p);
}

static void remove_tree(void) {
    if (chdir("/") < 0) return;
    if (nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0) printf("FAIL cleanup of %s: %s\n", tmp, strerror(errno));
}

static char *at(const char *rel) { /* tmp/rel, one of a few static buffers */
    static char b[8][PATH_MAX];
    static int k;
    char *o = b[k++ & 7];
    if (snprintf(o, PATH_MAX, "%s%s%s", tmp, *rel ? "/" : "", rel) >= PATH_MAX) exit(1);
    return o;
}

/* ---------- cases ---------- */

static void test_host_paths(void) {
    /* absolute and relative */
    host_obj(AT_FDCWD, "/etc/hostname", CV_RES_FOLLOW, "/etc/hostname");
    host_obj(AT_FDCWD, "/etc/hostname", 0, "/etc/hostname");
    host_obj(AT_FDCWD, "/", CV_RES_FOLLOW, "/");
    host_obj(AT_FDCWD, at("file"), CV_RES_FOLLOW, at("file"));
    host_obj(AT_FDCWD, "file", CV_RES_FOLLOW, at("file"));
    host_obj(AT_FDCWD, "file", 0, at("file"));
    host_obj(AT_FDCWD, "dir/sub/f", CV_RES_FOLLOW, at("dir/sub/f"));
    host_obj(AT_FDCWD, "dir//sub///f", CV_RES_FOLLOW, at("dir/sub/f"));
    host_obj(AT_FDCWD, "dir/sub/", 0, at("dir/sub"));
    host_obj(AT_FDCWD, "dir/sub/.", 0, at("dir/sub"));
    /* . and .. */
    host_obj(AT_FDCWD, ".", CV_RES_FOLLOW, tmp);
    host_obj(AT_FDCWD, "./dir/./sub/../sub/f", CV_RES_FOLLOW, at("dir/sub/f"));
    host_obj(AT_FDCWD, "dir/..", CV_RES_FOLLOW, tmp);
    host_obj(AT_FDCWD, "..", CV_RES_FOLLOW, at(".."));
    host_obj(AT_FDCWD, "/..", CV_RES_FOLLOW, "/");
    host_obj(AT_FDCWD, "/../../etc/hostname", CV_RES_FOLLOW, "/etc/hostname");
    host_obj(AT_FDCWD, "/./etc/../etc/./hostname", 0, "/etc/hostname");
    char up[PATH_MAX * 2] = "";
    for (char *s = tmp; *s; s++)
        if (*s == '/') strcat(up, "../");
    strcat(up, "../../etc/hostname"); /* more .. than the cwd is deep */
    host_obj(AT_FDCWD, up, CV_RES_FOLLOW, "/etc/hostname");
    /* non-UTF-8 names, deep path */
    host_obj(AT_FDCWD, "na\xff\xfe" "me", CV_RES_FOLLOW, at("na\xff\xfe" "me"));
    host_obj(AT_FDCWD, "\xc3\x28" "dir/in", CV_RES_FOLLOW, at("\xc3\x28" "dir/in"));
    host_obj(AT_FDCWD, deep_rel, CV_RES_FOLLOW, at(deep_rel));
    host_obj(AT_FDCWD, at(deep_rel), 0, at(deep_rel));
}

static void test_symlinks(void) {
    /* followed with CV_RES_FOLLOW, else the link itself */
    host_obj(AT_FDCWD, "rel", CV_RES_FOLLOW, at("dir/sub"));
    host_obj(AT_FDCWD, "rel", 0, at("rel"));
    host_obj(AT_FDCWD, "abs", CV_RES_FOLLOW, at("dir"));
    host_obj(AT_FDCWD, "abs", 0, at("abs"));
    host_obj(AT_FDCWD, "chain2", CV_RES_FOLLOW, at("dir/sub"));
    host_obj(AT_FDCWD, "chain2", 0, at("chain2"));
    host_obj(AT_FDCWD, "flink", 0, at("flink"));
    host_obj(AT_FDCWD, "flink", CV_RES_FOLLOW, at("file"));
    /* links in the middle are always followed; so is a final one with a trailing slash */
    host_obj(AT_FDCWD, "rel/f", 0, at("dir/sub/f"));
    host_obj(AT_FDCWD, "abs/sub/f", 0, at("dir/sub/f"));
    host_obj(AT_FDCWD, "abs/", 0, at("dir"));
    host_obj(AT_FDCWD, "abs/sub/up", CV_RES_FOLLOW, at("file"));
    host_obj(AT_FDCWD, "abs/sub/up", 0, at("dir/sub/up"));
    host_obj(AT_FDCWD, "abs/..", CV_RES_FOLLOW, tmp); /* .. of the target, not of the link */
    {
        struct cv_resolved o;
        int r = oracle(AT_FDCWD, "rel", 0, &o);
        check(r == 0 && S_ISLNK(o.st.st_mode), "rel [0]: expected the symlink itself (lstat), got %d %s", r,
              r == 0 ? type_str(o.st.st_mode) : "-");
    }
    /* loops */
    want_err(AT_FDCWD, "loop1", CV_RES_FOLLOW, ELOOP);
    want_err(AT_FDCWD, "self", CV_RES_FOLLOW, ELOOP);
    want_err(AT_FDCWD, "loop1/x", 0, ELOOP);
    want_err(AT_FDCWD, "loop1/", 0, ELOOP);
    want_err(AT_FDCWD, "loop1", CV_RES_FOLLOW | CV_RES_PARENT, ELOOP);
    host_obj(AT_FDCWD, "loop1", 0, at("loop1")); /* not followed: the link exists */
    /* 40 links are fine, 41 are not */
    host_obj(AT_FDCWD, "c1", CV_RES_FOLLOW, at("file"));
    want_err(AT_FDCWD, "c1/", 0, ENOTDIR);
    {
        char p[64];
        snprintf(p, sizeof p, "rel/../c1"); /* rel/.. is dir: dir/c1 does not exist */
        want_missing(AT_FDCWD, p, CV_RES_FOLLOW | CV_RES_PARENT, NULL);
    }
    /* dangling */
    want_missing(AT_FDCWD, "dangling", CV_RES_FOLLOW, NULL);
    want_missing(AT_FDCWD, "dangling", CV_RES_FOLLOW | CV_RES_PARENT, at("nowhere"));
    host_obj(AT_FDCWD, "dangling", 0, at("dangling"));
    host_obj(AT_FDCWD, "dangling", CV_RES_PARENT, at("dangling"));
    want_err(AT_FDCWD, "dangling2", CV_RES_FOLLOW | CV_RES_PARENT, ENOENT);
}

static void test_errors(int dirfd_dir, int dirfd_file) {
    /* a file used as a directory */
    want_err(AT_FDCWD, "file/x", 0, ENOTDIR);
    want_err(AT_FDCWD, "file/x", CV_RES_FOLLOW | CV_RES_PARENT, ENOTDIR);
    want_err(AT_FDCWD, "file/", 0, ENOTDIR);
    want_err(AT_FDCWD, "flink/", 0, ENOTDIR);
    want_err(AT_FDCWD, "/etc/hostname/x", CV_RES_FOLLOW, ENOTDIR);
    /* missing final */
    want_missing(AT_FDCWD, "nofile", CV_RES_FOLLOW, NULL);
    want_missing(AT_FDCWD, "nofile", 0, NULL);
    want_missing(AT_FDCWD, "nofile", CV_RES_PARENT, at("nofile"));
    want_missing(AT_FDCWD, "dir/sub/nofile", CV_RES_FOLLOW | CV_RES_PARENT, at("dir/sub/nofile"));
    want_missing(AT_FDCWD, "rel/nofile", CV_RES_PARENT, at("dir/sub/nofile"));
    want_missing(AT_FDCWD, at("nofile"), CV_RES_PARENT, at("nofile"));
    /* missing intermediate: without PARENT it may pass for a missing final */
    want_missing(AT_FDCWD, "nodir/x", 0, NULL);
    want_err(AT_FDCWD, "nodir/x", CV_RES_PARENT, ENOENT);
    want_err(AT_FDCWD, "nodir/x/y", CV_RES_PARENT | CV_RES_FOLLOW, ENOENT);
    want_err(AT_FDCWD, "/nonexistent-cvisor/x", CV_RES_PARENT, ENOENT);
    /* empty path */
    {
        struct cv_resolved o;
        int r = do_resolve(gettid(), me, AT_FDCWD, "", CV_RES_FOLLOW, &o);
        check(r == -ENOENT, "\"\": expected -ENOENT, got %d", r);
    }
    /* dirfds */
    host_obj(dirfd_dir, "sub/f", CV_RES_FOLLOW, at("dir/sub/f"));
    host_obj(dirfd_dir, ".", 0, at("dir"));
    host_obj(dirfd_dir, "..", 0, tmp);
    host_obj(dirfd_dir, "../rel", 0, at("rel"));
    host_obj(dirfd_dir, "sub/up", CV_RES_FOLLOW, at("file"));
    host_obj(dirfd_dir, "/etc/hostname", CV_RES_FOLLOW, "/etc/hostname");
    want_missing(dirfd_dir, "sub/nofile", CV_RES_PARENT, at("dir/sub/nofile"));
    want_err(dirfd_dir, "nodir/x", CV_RES_PARENT, ENOENT);
    want_err(9999, "x", CV_RES_FOLLOW, EBADF);
    want_err(9999, "x", CV_RES_PARENT, EBADF);
    want_err(-5, "x", 0, EBADF);
    want_err(dirfd_file, "x", 0, ENOTDIR);
    host_obj(9999, "/etc/hostname", CV_RES_FOLLOW, "/etc/hostname"); /* ignored when absolute */
    /* too long */
    char *lng = malloc(PATH_MAX + 64);
    if (!lng) exit(1);
    memset(lng, 'a', PATH_MAX + 63);
    lng[0] = '/';
    lng[PATH_MAX + 63] = 0;
    want_err(AT_FDCWD, lng, CV_RES_FOLLOW, ENAMETOOLONG);
    want_err(AT_FDCWD, lng + 1, CV_RES_PARENT, ENAMETOOLONG);
    for (int i = 1; i < PATH_MAX + 60; i += 2) lng[i] = '/'; /* "/a/a/a...": many short components */
    want_err(AT_FDCWD, lng, 0, ENAMETOOLONG);
    memset(lng, 'n', NAME_MAX + 1); /* one component over NAME_MAX */
    lng[NAME_MAX + 1] = 0;
    want_err(AT_FDCWD, lng, CV_RES_PARENT, ENAMETOOLONG);
    want_err(dirfd_dir, lng, 0, ENAMETOOLONG);
    free(lng);
}

static void test_proc(void) {
    char want[PATH_MAX], p[PATH_MAX];
    pid_t tid = gettid();
    snprintf(want, sizeof want, "/proc/%d/status", (int)me);
    proc_obj(AT_FDCWD, "/proc/self/status", CV_RES_FOLLOW, want, me, 0, -1);
    proc_obj(AT_FDCWD, "/proc/self/status", 0, want, me, 0, -1);
    proc_obj(AT_FDCWD, "/proc/self/./status", 0, want, me, 0, -1);
    proc_obj(AT_FDCWD, "/proc/../proc/self/status", 0, want, me, 0, -1);
    snprintf(p, sizeof p, "/proc/%d/status", (int)me);
    proc_obj(AT_FDCWD, p, 0, want, me, 0, -1);
    snprintf(want, sizeof want, "/proc/%d/task/%d/status", (int)me, (int)tid);
    proc_obj(AT_FDCWD, "/proc/thread-self/status", CV_RES_FOLLOW, want, me, 0, -1);
    snprintf(want, sizeof want, "/proc/%d/mounts", (int)me);
    proc_obj(AT_FDCWD, "/proc/mounts", CV_RES_FOLLOW, want, me, 0, -1); /* -> self/mounts */
    proc_obj(AT_FDCWD, "/proc/1/status", 0, "/proc/1/status", 1, 0, -1);
    proc_obj(AT_FDCWD, "/proc/self/..", 0, "/proc", 0, 0, -1);
    proc_obj(AT_FDCWD, "/proc/self/../cpuinfo", 0, "/proc/cpuinfo", 0, 0, -1);
    proc_obj(AT_FDCWD, "/proc", 0, "/proc", 0, 0, -1);
    snprintf(want, sizeof want, "/proc/%d", (int)me);
    proc_obj(AT_FDCWD, "/proc/self", CV_RES_FOLLOW, want, me, 0, -1);
    proc_obj(AT_FDCWD, "/proc/self/", 0, want, me, 0, -1);
    /* Not followed, /proc/self is the symlink itself (as lstat says). */
    {
        struct cv_resolved o;
        int r = oracle(AT_FDCWD, "/proc/self", 0, &o);
        check(r == 0 && o.exists && S_ISLNK(o.st.st_mode),
              "/proc/self [0]: expected the symlink itself (lstat), got %d %s path %s", r,
              r == 0 ? type_str(o.st.st_mode) : "-", r == 0 && o.have_path ? o.path : "-");
        r = oracle(AT_FDCWD, "/proc/thread-self", 0, &o);
        check(r == 0 && o.exists && S_ISLNK(o.st.st_mode),
              "/proc/thread-self [0]: expected the symlink itself (lstat), got %d %s path %s", r,
              r == 0 ? type_str(o.st.st_mode) : "-", r == 0 && o.have_path ? o.path : "-");
    }
    want_err(AT_FDCWD, "/proc/self/status/", 0, ENOTDIR);
    want_err(AT_FDCWD, "/proc/self/status/x", CV_RES_PARENT, ENOTDIR);
    want_err(AT_FDCWD, "/proc/self/nodir/x", CV_RES_PARENT, ENOENT);
    snprintf(want, sizeof want, "/proc/%d/nofile", (int)me);
    want_missing(AT_FDCWD, "/proc/self/nofile", 0, NULL);
    want_missing(AT_FDCWD, "/proc/self/nofile", CV_RES_PARENT, want);
    {
        struct cv_resolved o;
        int r = do_resolve(tid, me, AT_FDCWD, "/proc/self/nofile", CV_RES_PARENT, &o);
        check(r == 0 && o.in_proc && o.proc_pid == me,
              "/proc/self/nofile [PARENT]: expected in_proc, proc_pid %d; got %d in_proc=%d proc_pid=%d",
              (int)me, r, o.in_proc, (int)o.proc_pid);
    }

    /* magic links: /dev/stdout, /dev/fd/1, /proc/self/fd/1 */
    snprintf(want, sizeof want, "/proc/%d/fd/1", (int)me);
    proc_obj(AT_FDCWD, "/dev/stdout", CV_RES_FOLLOW, want, me, 1, 1);
    proc_obj(AT_FDCWD, "/dev/fd/1", CV_RES_FOLLOW, want, me, 1, 1);
    proc_obj(AT_FDCWD, "/proc/self/fd/1", CV_RES_FOLLOW, want, me, 1, 1);
    proc_obj(AT_FDCWD, "/proc/self/fd/1", CV_RES_FOLLOW | CV_RES_PARENT, want, me, 1, 1);
    snprintf(p, sizeof p, "/proc/%d/fd/1", (int)me);
    proc_obj(AT_FDCWD, p, CV_RES_FOLLOW, want, me, 1, 1);
    snprintf(want, sizeof want, "/proc/%d/task/%d/fd/1", (int)me, (int)tid);
    proc_obj(AT_FDCWD, "/proc/thread-self/fd/1", CV_RES_FOLLOW, want, me, 1, 1);
    {
        struct cv_resolved o;
        struct stat one;
        int r = do_resolve(tid, me, AT_FDCWD, "/dev/stdout", CV_RES_FOLLOW, &o);
        check(r == 0 && fstat(1, &one) == 0 && o.st.st_dev == one.st_dev && o.st.st_ino == one.st_ino,
              "/dev/stdout [FOLLOW]: st is not that of our fd 1");
        /* not followed: /dev/stdout is a host symlink; /proc/self/fd/1 the link itself */
        host_obj(AT_FDCWD, "/dev/stdout", 0, "/dev/stdout");
        r = oracle(AT_FDCWD, "/proc/self/fd/1", 0, &o);
        check(r == 0 && o.exists && S_ISLNK(o.st.st_mode) && o.in_proc && !o.magic && o.proc_pid == me,
              "/proc/self/fd/1 [0]: expected the link, in_proc, not magic; got %d %s in_proc=%d magic=%d "
              "proc_pid=%d", r, type_str(o.st.st_mode), o.in_proc, o.magic, (int)o.proc_pid);
    }
    /* a magic link to a pipe in the middle of a path */
    {
        int pfd[2];
        if (pipe2(pfd, O_CLOEXEC) == 0) {
            snprintf(p, sizeof p, "/proc/self/fd/%d/x", pfd[0]);
            want_err(AT_FDCWD, p, 0, ENOTDIR);
            snprintf(p, sizeof p, "/dev/fd/%d", pfd[1]);
            snprintf(want, sizeof want, "/proc/%d/fd/%d", (int)me, pfd[1]);
            proc_obj(AT_FDCWD, p, CV_RES_FOLLOW, want, me, 1, pfd[1]);
            close(pfd[0]);
            close(pfd[1]);
        }
        snprintf(p, sizeof p, "/proc/self/fd/%d", 777);
        want_missing(AT_FDCWD, p, CV_RES_FOLLOW, NULL);
    }

    /* /proc/self/cwd: the final magic link is opened as is (in procfs, its st the
     * directory's); in the middle of a path, or with a trailing slash, the walk
     * goes on in the directory it names. */
    snprintf(want, sizeof want, "/proc/%d/cwd", (int)me);
    proc_obj(AT_FDCWD, "/proc/self/cwd", CV_RES_FOLLOW, want, me, 1, -1);
    {
        struct cv_resolved o;
        int r = do_resolve(tid, me, AT_FDCWD, "/proc/self/cwd", CV_RES_FOLLOW, &o);
        check(r == 0 && same(&o.st, tmp, 1), "/proc/self/cwd [FOLLOW]: st is not the temp dir");
    }
    host_obj(AT_FDCWD, "/proc/self/cwd/", 0, tmp);
    host_obj(AT_FDCWD, "/proc/self/cwd/.", CV_RES_FOLLOW, tmp);
    host_obj(AT_FDCWD, "/proc/self/cwd/..", CV_RES_FOLLOW, at(".."));
    host_obj(AT_FDCWD, "/proc/self/cwd/file", CV_RES_FOLLOW, at("file"));
    host_obj(AT_FDCWD, "/proc/self/cwd/rel", CV_RES_FOLLOW, at("dir/sub"));
    host_obj(AT_FDCWD, "/proc/self/cwd/rel", 0, at("rel"));
    host_obj(AT_FDCWD, "/proc/self/cwd/abs/sub/up", CV_RES_FOLLOW, at("file"));
    host_obj(AT_FDCWD, "/proc/self/cwd/abs/..", CV_RES_FOLLOW, tmp);
    host_obj(AT_FDCWD, "/proc/self/cwd/na\xff\xfe" "me", CV_RES_FOLLOW, at("na\xff\xfe" "me"));
    snprintf(p, sizeof p, "/proc/self/cwd/%s", deep_rel);
    host_obj(AT_FDCWD, p, CV_RES_FOLLOW, at(deep_rel));
    want_err(AT_FDCWD, "/proc/self/cwd/loop1", CV_RES_FOLLOW, ELOOP);
    want_err(AT_FDCWD, "/proc/self/cwd/file/x", 0, ENOTDIR);
    want_err(AT_FDCWD, "/proc/self/cwd/nodir/x", CV_RES_PARENT, ENOENT);
    want_missing(AT_FDCWD, "/proc/self/cwd/dangling", CV_RES_FOLLOW | CV_RES_PARENT, at("nowhere"));
    want_missing(AT_FDCWD, "/proc/self/cwd/nofile", CV_RES_PARENT, at("nofile"));
    /* symlink budget (40): /proc/self and the cwd link count, so c3 (38 links + 2)
     * is fine, c2 and c1 are not */
    host_obj(AT_FDCWD, "/proc/self/cwd/c3", CV_RES_FOLLOW, at("file"));
    want_err(AT_FDCWD, "/proc/self/cwd/c2", CV_RES_FOLLOW, ELOOP);
    want_err(AT_FDCWD, "/proc/self/cwd/c1", CV_RES_FOLLOW, ELOOP);
    /* a trailing slash makes the links it ends in followed, however many */
    host_obj(AT_FDCWD, "/proc/self/cwd/rel/", 0, at("dir/sub"));
    host_obj(AT_FDCWD, "/proc/self/cwd/chain2/", 0, at("dir/sub"));
    want_err(AT_FDCWD, "/proc/self/cwd/loop1/", 0, ELOOP);
    want_err(AT_FDCWD, "/proc/self/cwd/c1/", 0, ELOOP);
    /* a link to / */
    host_obj(AT_FDCWD, "rootlink", CV_RES_FOLLOW, "/");
    host_obj(AT_FDCWD, "rootlink/etc/hostname", 0, "/etc/hostname");
    host_obj(AT_FDCWD, "/proc/self/cwd/rootlink", CV_RES_FOLLOW, "/");
    host_obj(AT_FDCWD, "/proc/self/cwd/rootlink/", 0, "/");
    host_obj(AT_FDCWD, "/proc/self/cwd/rootlink/etc/hostname", 0, "/etc/hostname");
    /* /proc/self/root: not in procfs once past it */
    host_obj(AT_FDCWD, "/proc/self/root/etc/hostname", CV_RES_FOLLOW, "/etc/hostname");
    host_obj(AT_FDCWD, "/proc/thread-self/root/etc/hostname", 0, "/etc/hostname");
    host_obj(AT_FDCWD, "/proc/self/root/", 0, "/");
    host_obj(AT_FDCWD, "/dev/fd/../cwd/file", CV_RES_FOLLOW, at("file")); /* /proc/<pid>/fd/.. */
}

/* Relative paths while the cwd (and a dirfd) is inside procfs. */
static void test_proc_cwd(void) {
    char want[PATH_MAX], p[PATH_MAX];
    if (chdir("/proc/self") < 0) {
        check(0, "chdir /proc/self: %s", strerror(errno));
        return;
    }
    snprintf(want, sizeof want, "/proc/%d/status", (int)me);
    proc_obj(AT_FDCWD, "status", CV_RES_FOLLOW, want, me, 0, -1);
    proc_obj(AT_FDCWD, "./status", 0, want, me, 0, -1);
    proc_obj(AT_FDCWD, "../self/status", 0, want, me, 0, -1);
    snprintf(want, sizeof want, "/proc/%d/fd/1", (int)me);
    proc_obj(AT_FDCWD, "fd/1", CV_RES_FOLLOW, want, me, 1, 1);
    proc_obj(AT_FDCWD, "..", 0, "/proc", 0, 0, -1);
    host_obj(AT_FDCWD, "../../etc/hostname", CV_RES_FOLLOW, "/etc/hostname");
    host_obj(AT_FDCWD, "../../../../../etc/hostname", CV_RES_FOLLOW, "/etc/hostname"); /* .. at / */
    snprintf(want, sizeof want, "/proc/%d", (int)me);
    proc_obj(AT_FDCWD, "cwd/", 0, want, me, 0, -1); /* the cwd link names /proc/<pid> itself */
    host_obj(AT_FDCWD, "root/etc/hostname", 0, "/etc/hostname");
    snprintf(want, sizeof want, "/proc/%d/nofile", (int)me);
    want_missing(AT_FDCWD, "nofile", CV_RES_PARENT, want);
    want_err(AT_FDCWD, "nodir/x", CV_RES_PARENT, ENOENT);
    want_err(AT_FDCWD, "status/x", 0, ENOTDIR);
    /* procfs has no NAME_MAX check of its own: the kernel says ENOENT */
    char name[NAME_MAX + 8];
    memset(name, 'x', NAME_MAX + 1);
    name[NAME_MAX + 1] = 0;
    want_missing(AT_FDCWD, name, 0, NULL);
    want_missing(AT_FDCWD, name, CV_RES_PARENT, NULL);
    if (chdir(tmp) < 0) exit(1);

    /* dirfds in procfs */
    int d = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int s = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0 || s < 0) {
        check(0, "open /proc dirfds: %s", strerror(errno));
        return;
    }
    snprintf(want, sizeof want, "/proc/%d/status", (int)me);
    proc_obj(d, "self/status", CV_RES_FOLLOW, want, me, 0, -1);
    proc_obj(s, "status", CV_RES_FOLLOW, want, me, 0, -1);
    snprintf(want, sizeof want, "/proc/%d/task/%d/status", (int)me, (int)gettid());
    proc_obj(d, "thread-self/status", 0, want, me, 0, -1);
    proc_obj(d, "1/status", 0, "/proc/1/status", 1, 0, -1);
    snprintf(p, sizeof p, "cwd/file");
    host_obj(s, p, CV_RES_FOLLOW, at("file"));
    host_obj(d, "../etc/hostname", 0, "/etc/hostname");
    close(d);
    close(s);
}

/* The guest is another thread with its own cwd: its cwd and its thread-self count. */
struct other {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready, quit, err;
    pid_t tid;
};

static void *other_main(void *arg) {
    struct other *t = arg;
    int err = 0;
    if (unshare(CLONE_FS) < 0 || chdir(at("dir")) < 0) err = errno;
    pthread_mutex_lock(&t->mu);
    t->tid = gettid();
    t->err = err;
    t->ready = 1;
    pthread_cond_broadcast(&t->cv);
    while (!t->quit) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void test_other_thread(void) {
    struct other t = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};
    pthread_t th;
    if (pthread_create(&th, NULL, other_main, &t)) {
        check(0, "pthread_create failed");
        return;
    }
    pthread_mutex_lock(&t.mu);
    while (!t.ready) pthread_cond_wait(&t.cv, &t.mu);
    pthread_mutex_unlock(&t.mu);
    check(!t.err, "thread setup: %s", strerror(t.err));
    if (!t.err) {
        struct cv_resolved o;
        char want[PATH_MAX];
        for (int k = 0; k < 2; k++) {
            pid_t tgid = k ? 0 : me; /* 0: the resolver finds the tgid itself */
            int r = do_resolve(t.tid, tgid, AT_FDCWD, "sub/f", CV_RES_FOLLOW, &o);
            check(r == 0 && o.exists && same(&o.st, at("dir/sub/f"), 1),
                  "thread %d (tgid %d): relative sub/f not resolved from the thread's cwd (%d exists=%d)",
                  (int)t.tid, (int)tgid, r, r == 0 ? o.exists : -1);
            r = do_resolve(t.tid, tgid, AT_FDCWD, "file", CV_RES_FOLLOW, &o);
            check(r == 0 && !o.exists, "thread %d: \"file\" exists only in the supervisor's cwd, got %d exists=%d",
                  (int)t.tid, r, r == 0 ? o.exists : -1);
            /* /proc/self/cwd is the thread group leader's cwd (the temp dir) */
            r = do_resolve(t.tid, tgid, AT_FDCWD, "/proc/self/cwd/dir/sub/f", CV_RES_FOLLOW, &o);
            check(r == 0 && o.exists && same(&o.st, at("dir/sub/f"), 1) && !o.in_proc,
                  "thread %d: /proc/self/cwd/dir/sub/f: %d exists=%d in_proc=%d", (int)t.tid, r,
                  r == 0 ? o.exists : -1, o.in_proc);
            r = do_resolve(t.tid, tgid, AT_FDCWD, "/proc/thread-self/cwd/sub/f", CV_RES_FOLLOW, &o);
            check(r == 0 && o.exists && same(&o.st, at("dir/sub/f"), 1) && !o.in_proc,
                  "thread %d: /proc/thread-self/cwd/sub/f: %d exists=%d in_proc=%d", (int)t.tid, r,
                  r == 0 ? o.exists : -1, o.in_proc);
            snprintf(want, sizeof want, "/proc/%d/task/%d/status", (int)me, (int)t.tid);
            r = do_resolve(t.tid, tgid, AT_FDCWD, "/proc/thread-self/status", 0, &o);
            check(r == 0 && o.exists && o.in_proc && o.have_path && !strcmp(o.path, want) && o.proc_pid == me,
                  "thread %d: /proc/thread-self/status -> %d %s proc_pid %d, expected %s proc_pid %d",
                  (int)t.tid, r, o.have_path ? o.path : "-", (int)o.proc_pid, want, (int)me);
            snprintf(want, sizeof want, "/proc/%d/status", (int)me);
            r = do_resolve(t.tid, tgid, AT_FDCWD, "/proc/self/status", 0, &o);
            check(r == 0 && o.in_proc && o.have_path && !strcmp(o.path, want) && o.proc_pid == me,
                  "thread %d (tgid %d): /proc/self/status -> %d %s, expected %s", (int)t.tid, (int)tgid, r,
                  o.have_path ? o.path : "-", want);
        }
    }
    pthread_mutex_lock(&t.mu);
    t.quit = 1;
    pthread_cond_broadcast(&t.cv);
    pthread_mutex_unlock(&t.mu);
    pthread_join(th, NULL);
}

int main(void) {
    me = getpid();
    make_tree();
    int dirfd_dir = open("dir", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int dirfd_file = open("file", O_RDONLY | O_CLOEXEC);
    if (dirfd_dir < 0 || dirfd_file < 0) {
        printf("FAIL setup: open: %s\n", strerror(errno));
        return 1;
    }
    test_host_paths();
    test_symlinks();
    test_errors(dirfd_dir, dirfd_file);
    test_proc();
    test_proc_cwd();
    test_other_thread();
    close(dirfd_dir);
    close(dirfd_file);
    remove_tree();
    printf("resolve: %lu passed, %lu failed\n", passed, failed);
    return failed ? 1 : 0;
}
