/* The run's hide list, canonicalized: Landlock rules name inodes, so a path is hidden where it
 * really is (a symlinked ~/.aws: its target), and one that does not exist yet is kept under
 * its real parent, so that it stays hidden if it appears.
 *
 * The default list names some sixty paths in a handful of directories, and canonicalizing each
 * whole costs a system call per component, more than the rest of a sandbox's start. So the
 * directories are resolved once per process and kept (an O_PATH fd, the real path, the mtime;
 * the names asked of them), and each run only checks that nothing changed: a directory's entry
 * is still what it was while its parent's mtime is (a rename, a new symlink, a removal all
 * change it), which costs one fstat per existing directory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run.h"

#define MAX_DIRS 256

enum kind { K_UNKNOWN = 0, K_MISSING, K_OTHER, K_LINK };

struct name {
    char *name;
    enum kind kind;
};

struct dir {
    char *path;                 /* as the hide list spells it */
    char *real;                 /* where it is, NULL when it does not exist */
    int fd;                     /* O_PATH of it, -1 when missing */
    struct timespec mtime;      /* its own, when it exists: for the names below */
    struct timespec parent;     /* its parent's when it was resolved: for itself */
    uint64_t checked;           /* the serial of the last add that found it current */
    int linked;                 /* reached through a symlink: resolved again every round (the
                                 * directory it leads to may be replaced elsewhere) */
    struct name *names;         /* what the entries asked of it are */
    size_t nnames, names_cap;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct dir dirs[MAX_DIRS];
static size_t ndirs;
static atomic_uint_fast64_t serial;

static int same_time(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static void forget(struct dir *d) {
    free(d->real);
    d->real = NULL;
    if (d->fd >= 0) close(d->fd);
    d->fd = -1;
    for (size_t i = 0; i < d->nnames; i++) free(d->names[i].name);
    d->nnames = 0;
    d->checked = 0;
    d->linked = 0;
}

/* Resolve d->path now (its parent p, current this round, or NULL for "/"). */
static void resolve(struct dir *d, const struct dir *p) {
    forget(d);
    char real[PATH_MAX + 16], self[64];
    int fd = -1;
    if (p) {
        const char *name = strrchr(d->path, '/') + 1;
        d->parent = p->mtime;
        if (!p->real) return; /* no parent: no directory */
        fd = openat(p->fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && (size_t)snprintf(real, sizeof real, "%s/%s", strcmp(p->real, "/") ? p->real : "", name) < PATH_MAX) {
            d->fd = fd;
            d->real = strdup(real);
        } else if (fd < 0 && errno != ELOOP && errno != ENOTDIR) {
            return; /* missing */
        }
    }
    if (!d->real) { /* "/", or a symlink: the kernel says where it leads */
        d->linked = p != NULL;
        if (fd >= 0) close(fd);
        fd = open(d->path[0] ? d->path : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        ssize_t n = fd < 0 ? -1 : readlink(self, real, PATH_MAX);
        if (n > 0 && real[0] == '/') real[n] = 0;
        else if (fd < 0 || !realpath(d->path[0] ? d->path : "/", real)) n = -1;
        if (n < 0 && fd >= 0) close(fd), fd = -1;
        if (fd >= 0) {
            d->fd = fd;
            d->real = strdup(real);
        }
    }
    struct stat st;
    if (d->real && fstat(d->fd, &st) == 0) d->mtime = st.st_mtim;
    else forget(d);
}

/* The directory at path (absolute, no trailing slash; "" for "/"), current for this serial. */
static struct dir *dir_at(const char *path, uint64_t now) {
    struct dir *d = NULL;
    for (size_t i = 0; i < ndirs && !d; i++)
        if (!strcmp(dirs[i].path, path)) d = &dirs[i];
    if (d && d->checked == now) return d;
    struct dir *p = NULL;
    const char *slash = strrchr(path, '/');
    if (slash) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
        p = dir_at(parent, now);
        if (!p) return NULL;
    }
    if (!d) {
        if (ndirs == MAX_DIRS) return NULL; /* full: the caller takes the slow way */
        d = &dirs[ndirs];
        *d = (struct dir){.path = strdup(path), .fd = -1};
        if (!d->path) return NULL;
        ndirs++;
        resolve(d, p);
    } else {
        /* Still the entry it was while the parent did not change; still listing what it did
         * while its own mtime did not. */
        struct stat st;
        int entry_same = !d->linked && (!p || same_time(&d->parent, &p->mtime));
        if (!entry_same) resolve(d, p);
        else if (d->real && (fstat(d->fd, &st) < 0 || !same_time(&st.st_mtim, &d->mtime))) resolve(d, p);
    }
    d->checked = now;
    return d;
}

/* What name is in d (current): missing, a symlink, or something else. */
static enum kind kind_of(struct dir *d, const char *name) {
    for (size_t i = 0; i < d->nnames; i++)
        if (!strcmp(d->names[i].name, name)) return d->names[i].kind;
    struct stat st;
    enum kind k = fstatat(d->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ? K_MISSING
                  : S_ISLNK(st.st_mode)                              ? K_LINK
                                                                     : K_OTHER;
    if (d->nnames == d->names_cap) {
        size_t cap = d->names_cap ? d->names_cap * 2 : 8;
        struct name *nn = realloc(d->names, cap * sizeof *nn);
        if (!nn) return k;
        d->names = nn;
        d->names_cap = cap;
    }
    char *copy = strdup(name);
    if (copy) d->names[d->nnames++] = (struct name){copy, k};
    return k;
}

uint64_t cv_hide_round(void) { return atomic_fetch_add(&serial, 1) + 1; }

int cv_hide_canonical(const char *path, uint64_t round, char *out, size_t len) {
    char parent[PATH_MAX];
    if (snprintf(parent, sizeof parent, "%s", path) >= (int)sizeof parent) return -ENAMETOOLONG;
    size_t l = strlen(parent);
    while (l > 1 && parent[l - 1] == '/') parent[--l] = 0;
    char *slash = strrchr(parent, '/');
    const char *name = slash + 1;
    if (!*name || !strcmp(name, ".") || !strcmp(name, "..") || strstr(parent, "/./") || strstr(parent, "/../"))
        return realpath(path, out) ? 0 : -ENOENT; /* "/", or an odd spelling: the slow way */
    *slash = 0;
    pthread_mutex_lock(&mu);
    struct dir *d = dir_at(parent, round);
    int r = 0;
    if (!d) r = realpath(path, out) ? 0 : -ENOENT; /* the cache was full: the slow way */
    else if (!d->real) r = -ENOENT;               /* no parent: nothing to hide */
    else if ((size_t)snprintf(out, len, "%s/%s", strcmp(d->real, "/") ? d->real : "", name) >= len)
        r = -ENAMETOOLONG;
    else if (kind_of(d, name) == K_LINK) { /* hide where it leads (dangling: its name) */
        char target[PATH_MAX];
        if (realpath(out, target) && strlen(target) < len) strcpy(out, target);
    }
    pthread_mutex_unlock(&mu);
    return r;
}

size_t cv_hide_cached_fds(void) {
    pthread_mutex_lock(&mu);
    size_t n = 0;
    for (size_t i = 0; i < ndirs; i++) n += dirs[i].fd >= 0;
    pthread_mutex_unlock(&mu);
    return n;
}
