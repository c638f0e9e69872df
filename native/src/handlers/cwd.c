/* chdir, fchdir, getcwd, exit_group. The kernel's cwd is always a real directory, host or
 * upper, and the virtual cwd is read back from it (/proc/<tid>/cwd with the
 * upper root stripped), so fork, exec and threads need no bookkeeping. When
 * the kernel cannot reach the target by the guest's own path (a directory that
 * exists only in the upper layer, named from the host side), the supervisor
 * remembers the virtual cwd for that process instead ("override"), and every
 * path handler starts relative paths there; a child inherits it through its
 * parents, or, once its parent left, from the entry made at the parent's
 * exit_group. fchdir and a chdir the kernel can follow drop the override. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/sysnr.h"
#include "common/util.h"
#include "handlers.h"
#include "overlay/layers.h"
#include "overlay/vfs.h"

/* Fields of /proc/<pid>/stat: ppid and start time. */
int cv_proc_stat(pid_t pid, pid_t *ppid, unsigned long long *start) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (cv_read_small(path, buf, sizeof buf) <= 0) return -1;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    int pp = 0;
    unsigned long long st = 0;
    /* ") S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime prio nice threads itreal start" */
    if (sscanf(p + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &pp, &st) != 2)
        return -1;
    *ppid = pp;
    *start = st;
    return 0;
}

static unsigned long long now_ticks(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    long hz = sysconf(_SC_CLK_TCK);
    return (unsigned long long)ts.tv_sec * (unsigned long long)hz +
           (unsigned long long)ts.tv_nsec / (1000000000ull / (unsigned long long)hz);
}

static struct cv_cwd *find(struct cv_run *r, pid_t tgid) {
    for (size_t i = 0; i < r->ncwd; i++)
        if (r->cwds[i].tgid == tgid) return &r->cwds[i];
    return NULL;
}

static void drop(struct cv_run *r, pid_t tgid) {
    struct cv_cwd *c = find(r, tgid);
    if (!c) return;
    free(c->vpath);
    if (c->fd >= 0) close(c->fd);
    *c = r->cwds[--r->ncwd];
}

/* Entries of processes that are gone (each holds an fd of the supervisor's: a long build that
 * runs thousands of `cd newdir && ...` shells must not pile them up). */
static void prune(struct cv_run *r) {
    for (size_t i = 0; i < r->ncwd;) {
        pid_t pp;
        unsigned long long st;
        if (cv_proc_stat(r->cwds[i].tgid, &pp, &st) == 0 && st == r->cwds[i].start) {
            i++;
            continue;
        }
        free(r->cwds[i].vpath);
        if (r->cwds[i].fd >= 0) close(r->cwds[i].fd);
        r->cwds[i] = r->cwds[--r->ncwd];
    }
}

/* since: when it moved there (0: now); an inherited directory keeps its ancestor's, so that the
 * children forked before it was asked for inherit it too. */
static int set(struct cv_run *r, pid_t tgid, unsigned long long start, const char *vpath, int fd,
               unsigned long long since) {
    fd = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1; /* before a prune may close the one it came from */
    if (r->ncwd >= 32 && (r->ncwd & (r->ncwd - 1)) == 0) prune(r); /* at 32, 64, 128...: amortized */
    struct cv_cwd *c = find(r, tgid);
    if (!c) {
        if (r->ncwd == r->cwd_cap) {
            size_t cap = r->cwd_cap ? r->cwd_cap * 2 : 8;
            struct cv_cwd *nc = realloc(r->cwds, cap * sizeof *nc);
            if (!nc) {
                if (fd >= 0) close(fd);
                return -ENOMEM;
            }
            r->cwds = nc;
            r->cwd_cap = cap;
        }
        c = &r->cwds[r->ncwd++];
        c->vpath = NULL;
        c->fd = -1;
    }
    char *v = vpath ? strdup(vpath) : NULL;
    if (vpath && !v) {
        if (!c->vpath) *c = r->cwds[--r->ncwd];
        if (fd >= 0) close(fd);
        return -ENOMEM;
    }
    free(c->vpath);
    if (c->fd >= 0) close(c->fd);
    c->fd = fd;
    c->tgid = tgid;
    c->start = start;
    c->since = since ? since : now_ticks();
    c->vpath = v;
    c->renames = r->dir_renames;
    return 0;
}

/* Some process has a remembered directory (entries may also be markers, see kernel_cwd). */
static int any_remembered(const struct cv_run *r) {
    for (size_t i = 0; i < r->ncwd; i++)
        if (r->cwds[i].vpath) return 1;
    return 0;
}

/* Where a remembered directory is now: after a directory rename (by any process), its fd says;
 * removed, the path it had. */
static int where(const struct cv_run *r, struct cv_cwd *c, struct cv_lpath *out) {
    if (c->fd >= 0 && c->renames != r->dir_renames) {
        char self[64], real[PATH_MAX], v[PATH_MAX];
        snprintf(self, sizeof self, "/proc/self/fd/%d", c->fd);
        if (cv_readlink(self, real, sizeof real) > 0 && cv_virtual_of_real(r, real, v, sizeof v) == 0) {
            char *nv = strdup(v);
            if (nv) {
                free(c->vpath);
                c->vpath = nv;
            }
        }
        c->renames = r->dir_renames;
    }
    return cv_lpath_set(out, c->vpath) == 0;
}

/* The entry a process forked at child_start under ppid inherits: its nearest ancestor's with
 * an entry, if that one moved to a remembered directory before the fork; else NULL. */
static struct cv_cwd *inherited(struct cv_run *r, pid_t ppid, unsigned long long child_start) {
    for (int depth = 0; depth < 64 && ppid > 1; depth++) {
        pid_t pp2;
        unsigned long long pstart;
        if (cv_proc_stat(ppid, &pp2, &pstart) < 0) return NULL;
        struct cv_cwd *pc = find(r, ppid);
        if (pc && pc->start == pstart) return pc->since > child_start || !pc->vpath ? NULL : pc;
        child_start = pstart;
        ppid = pp2;
    }
    return NULL;
}

/* A process with no entry of its own takes what it inherits (or a marker: nothing), so that it
 * is asked once, not at every relative path. 1 and out set, or 0. */
static int take_inherited(struct cv_run *r, pid_t tgid, unsigned long long start, pid_t ppid, struct cv_lpath *out,
                          int *fd) {
    struct cv_cwd *pc = inherited(r, ppid, start);
    if (!pc || !where(r, pc, out)) {
        set(r, tgid, start, NULL, -1, 0);
        return 0;
    }
    if (fd && pc->fd >= 0) *fd = fcntl(pc->fd, F_DUPFD_CLOEXEC, 3);
    set(r, tgid, start, out->s, pc->fd, pc->since); /* pc may move: its fields are read first */
    return 1;
}

int cv_cwd_override(struct cv_run *r, struct cv_guest *g, struct cv_lpath *out, int *fd) {
    if (fd) *fd = -1;
    /* Every relative path asks: without a remembered directory anywhere, /proc is not read. */
    if (!any_remembered(r)) return 0;
    pid_t tgid = cv_guest_tgid(g), ppid;
    unsigned long long start;
    if (cv_proc_stat(tgid, &ppid, &start) < 0) return 0;
    struct cv_cwd *c = find(r, tgid);
    if (c && c->start == start) {
        if (!c->vpath) return 0; /* it moved to where the kernel can follow */
        if (fd && c->fd >= 0) *fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 3);
        return where(r, c, out);
    }
    if (c) drop(r, tgid); /* a dead process's pid, reused */
    /* A child forked after an ancestor's override inherits it (fork copies the cwd). */
    return take_inherited(r, tgid, start, ppid, out, fd);
}

/* A process leaves: its children go to the init, which cuts the chain of parents they inherit
 * a remembered directory by. Each one without an entry gets its own now, while the chain holds;
 * the leaving process's own entry goes. (A process killed by a signal makes no exit_group: its
 * orphans that have not asked yet start relative paths at the kernel's cwd.) */
static struct cv_reply do_exit(struct cv_notif *n) {
    struct cv_run *r = n->run;
    if (!any_remembered(r)) return cv_continue();
    cv_lpath_scoped struct cv_lpath v;
    cv_lpath_init(&v);
    pid_t tgid = cv_guest_tgid(&n->g);
    pid_t kids[256];
    int nk = cv_cwd_override(r, &n->g, &v, NULL) ? cv_tree_children(tgid, kids, 256) : 0;
    for (int i = 0; i < nk; i++) {
        pid_t pp;
        unsigned long long start;
        if (cv_proc_stat(kids[i], &pp, &start) < 0 || pp != tgid) continue;
        struct cv_cwd *c = find(r, kids[i]);
        if (c && c->start == start) continue;
        if (c) drop(r, kids[i]);
        take_inherited(r, kids[i], start, tgid, &v, NULL);
    }
    drop(r, tgid);
    return cv_continue();
}

/* The virtual path of the guest's cwd. 0 or -errno. */
static int cwd_vpath(struct cv_notif *n, struct cv_lpath *v) {
    if (cv_cwd_override(n->run, &n->g, v, NULL)) {
        struct cv_vnode vn; /* a remembered directory may have been removed since */
        int e = cv_vresolve(&n->ctx, AT_FDCWD, v->s, CV_RES_FOLLOW, &vn);
        int gone = e < 0 || !vn.exists || !S_ISDIR(vn.st.st_mode);
        cv_vnode_release(&vn);
        return gone ? -ENOENT : 0;
    }
    char real[PATH_MAX], vp[PATH_MAX];
    ssize_t l = cv_guest_link(&n->g, "cwd", real, sizeof real);
    if (l == -ENAMETOOLONG) { /* deeper than /proc can say: climbed */
        cv_autoclose int fd = cv_guest_open(&n->g, "cwd", O_PATH | O_DIRECTORY);
        int stored, own;
        return fd < 0 ? (fd == -ESRCH ? -ESRCH : -ENOENT) : cv_vfs_long_dir_vpath(n->run, fd, v, &stored, &own);
    }
    if (l < 0) return l == -ESRCH ? -ESRCH : -ENOENT;
    int e = cv_virtual_of_real(n->run, real, vp, sizeof vp);
    return e < 0 ? e : cv_lpath_set(v, vp);
}

static struct cv_reply do_getcwd(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    cv_lpath_scoped struct cv_lpath v;
    cv_lpath_init(&v);
    int e = cwd_vpath(n, &v);
    if (e < 0) return cv_err(-e);
    size_t need = strlen(v.s) + 1;
    if (need > PATH_MAX) return cv_err(ENAMETOOLONG); /* as the kernel: a page at most */
    if (a[1] < need) return cv_err(ERANGE);
    e = cv_guest_write(&n->g, a[0], v.s, need);
    if (e < 0) return cv_err(-e);
    return cv_val((int64_t)need);
}

/* A host directory by its path, of any length (no symlink followed below "/" when it is long). */
static int open_host_dir(const char *path) {
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_NO_MAGICLINKS};
    if (strlen(path) < PATH_MAX) return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    cv_autoclose int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    how.resolve |= RESOLVE_NO_SYMLINKS;
    return root < 0 ? -1 : cv_openat2_long(root, path + 1, &how);
}

/* The real directory the kernel's cwd should be for a virtual directory. */
static int same_dir(int fd, const struct stat *want) {
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == want->st_dev && st.st_ino == want->st_ino;
}

/* Does the kernel, following the guest's own string from its own cwd, land on the directory the
 * merged view names? 1, 0, or -errno when the guest may not enter it. */
static int kernel_agrees(struct cv_notif *n, const char *path, const struct cv_vnode *v) {
    cv_autoclose int kcwd = cv_guest_open(&n->g, "cwd", O_PATH | O_DIRECTORY);
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_NO_MAGICLINKS};
    cv_autoclose int kfd = kcwd >= 0 ? (int)syscall(__NR_openat2, kcwd, path, &how, sizeof how) : -1;
    /* the upper directory from the walk's own parent fd (no walk by its path again) */
    cv_autoclose int up = v->layer != CV_UPPER ? -1
                          : v->pup >= 0 && *v->name ? openat(v->pup, v->name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                                                    : cv_ov_open_upper(n->run, v->vpath, O_PATH | O_DIRECTORY, 0);
    cv_autoclose int low = v->layer == CV_LOWER || v->lower_dir ? open_host_dir(v->vpath) : -1;
    struct stat ust, lst;
    int ok = 0;
    if (kfd >= 0 && up >= 0 && fstat(up, &ust) == 0 && same_dir(kfd, &ust)) ok = 1;
    if (kfd >= 0 && low >= 0 && fstat(low, &lst) == 0 && same_dir(kfd, &lst)) ok = 1;
    /* Search permission, as the kernel checks it (the supervisor has the guest's uid). */
    int check = up >= 0 ? up : low;
    if (check >= 0) {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", check);
        if (access(self, X_OK) < 0) return -errno;
    }
    return ok;
}

/* The process's cwd is the kernel's again. Kept as an entry (not dropped) while other entries
 * exist: without it the process would inherit its parent's remembered directory anew. */
static void kernel_cwd(struct cv_notif *n) {
    struct cv_run *r = n->run;
    if (!r->ncwd) return;
    pid_t tgid = cv_guest_tgid(&n->g), ppid;
    unsigned long long start;
    if (cv_proc_stat(tgid, &ppid, &start) == 0) set(r, tgid, start, NULL, -1, 0);
    else drop(r, tgid);
}

static struct cv_reply do_chdir(struct cv_notif *n) {
    struct cv_run *r = n->run;
    char path[PATH_MAX];
    int e = cv_guest_path(&n->g, n->req->data.args[0], path, sizeof path);
    if (e < 0) return cv_err(-e);
    struct cv_vnode v;
    e = cv_vresolve(&n->ctx, AT_FDCWD, path, CV_RES_FOLLOW, &v);
    if (e < 0) return cv_err(-e);
    struct cv_reply out;
    if (v.in_proc) {
        e = cv_proc_access(n, &v.proc, 0);
        if (e < 0) {
            out = cv_err(-e);
            goto done;
        }
        kernel_cwd(n);
        out = cv_continue(); /* procfs: the host's view (pids filtered on open) */
        goto done;
    }
    if (!v.exists) {
        out = cv_err(ENOENT);
        goto done;
    }
    if (!S_ISDIR(v.st.st_mode)) {
        out = cv_err(ENOTDIR);
        goto done;
    }
    int ok = kernel_agrees(n, path, &v);
    if (ok < 0) {
        out = cv_err(-ok);
        goto done;
    }
    if (ok) {
        kernel_cwd(n);
        out = cv_continue();
        goto done;
    }
    pid_t tgid = cv_guest_tgid(&n->g), ppid;
    unsigned long long start;
    if (cv_proc_stat(tgid, &ppid, &start) < 0) {
        out = cv_err(ESRCH);
        goto done;
    }
    int dfd = cv_vnode_open(&v, O_DIRECTORY);
    e = set(r, tgid, start, v.vpath, dfd, 0);
    if (dfd >= 0) close(dfd);
    out = e < 0 ? cv_err(-e) : cv_val(0);
done:
    cv_vnode_release(&v);
    return out;
}

/* Every directory fd is a real host or upper directory, so the kernel's cwd can be the guest's
 * again; the remembered one is dropped only for an fd the kernel will take (a failed fchdir
 * leaves the cwd as it was). */
static struct cv_reply do_fchdir(struct cv_notif *n) {
    cv_autoclose int fd = cv_guest_fd(&n->g, (int)n->req->data.args[0]);
    if (fd < 0) return cv_err(fd == -ESRCH ? ESRCH : EBADF);
    struct stat st;
    if (fstat(fd, &st) < 0) return cv_err(errno);
    if (!S_ISDIR(st.st_mode)) return cv_err(ENOTDIR);
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    if (access(self, X_OK) < 0) return cv_err(errno);
    kernel_cwd(n);
    return cv_continue();
}

struct cv_reply cv_h_cwd(struct cv_notif *n) {
    switch (n->req->data.nr) {
    case __NR_getcwd: return do_getcwd(n);
    case __NR_chdir: return do_chdir(n);
    case __NR_exit_group: return do_exit(n);
    default: return do_fchdir(n);
    }
}
