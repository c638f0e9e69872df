#include "overlay/alias.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

/* Sorted by the copy's (dev, ino). */
struct cv_alias {
    dev_t dev;
    ino_t ino;
    struct timespec ctime; /* the copy's, after this run last changed its names */
    dev_t sdev;            /* the source */
    ino_t sino;
    char *src;             /* its real path */
};

static int cmp(dev_t dev, ino_t ino, const struct cv_alias *a) {
    if (dev != a->dev) return dev < a->dev ? -1 : 1;
    return ino < a->ino ? -1 : ino > a->ino;
}

/* The index of dev/ino, or where it would go (then *found is 0). */
static size_t seek(const struct cv_run *r, dev_t dev, ino_t ino, int *found) {
    size_t lo = 0, hi = r->nalias;
    *found = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp(dev, ino, &r->aliases[mid]);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

static struct cv_alias *find(const struct cv_run *r, dev_t dev, ino_t ino) {
    int found;
    size_t at = r->nalias ? seek(r, dev, ino, &found) : 0;
    return r->nalias && found ? &r->aliases[at] : NULL;
}

static void remove_at(struct cv_run *r, struct cv_alias *a) {
    free(a->src);
    memmove(a, a + 1, (size_t)(r->aliases + r->nalias - (a + 1)) * sizeof *a);
    r->nalias--;
}

int cv_alias_note(struct cv_run *r, int srcfd, const struct stat *copy) {
    char self[64], real[PATH_MAX];
    struct stat s;
    snprintf(self, sizeof self, "/proc/self/fd/%d", srcfd);
    if (fstat(srcfd, &s) < 0 || cv_readlink(self, real, sizeof real) < 0) return -errno;
    if (real[0] != '/') return -EINVAL;
    int found;
    size_t at = seek(r, copy->st_dev, copy->st_ino, &found);
    if (found) remove_at(r, &r->aliases[at]); /* a stale entry of a reused inode number */
    if (r->nalias == r->alias_cap) {
        size_t cap = r->alias_cap ? r->alias_cap * 2 : 16;
        struct cv_alias *a = realloc(r->aliases, cap * sizeof *a);
        if (!a) return -ENOMEM;
        r->aliases = a;
        r->alias_cap = cap;
    }
    char *src = strdup(real);
    if (!src) return -ENOMEM;
    memmove(r->aliases + at + 1, r->aliases + at, (r->nalias - at) * sizeof *r->aliases);
    r->aliases[at] = (struct cv_alias){copy->st_dev, copy->st_ino, copy->st_ctim, s.st_dev, s.st_ino, src};
    r->nalias++;
    return 0;
}

void cv_alias_relinked(struct cv_run *r, dev_t dev, ino_t ino, const struct stat *now) {
    struct cv_alias *a = find(r, dev, ino);
    if (!a) return;
    if (now->st_nlink == 0 || now->st_dev != dev || now->st_ino != ino) remove_at(r, a);
    else a->ctime = now->st_ctim;
}

/* The source's stat, if it is still the file the alias was made from. */
static int source(const struct cv_alias *a, struct stat *s) {
    return fstatat(AT_FDCWD, a->src, s, AT_SYMLINK_NOFOLLOW) == 0 && s->st_dev == a->sdev && s->st_ino == a->sino;
}

int cv_alias_stat(const struct cv_run *r, struct stat *st) {
    if (!S_ISREG(st->st_mode)) return 0;
    const struct cv_alias *a = find(r, st->st_dev, st->st_ino);
    struct stat s;
    if (!a || a->ctime.tv_sec != st->st_ctim.tv_sec || a->ctime.tv_nsec != st->st_ctim.tv_nsec || !source(a, &s))
        return 0;
    s.st_nlink = st->st_nlink;
    *st = s;
    return 1;
}

int cv_alias_open(const struct cv_run *r, dev_t dev, ino_t ino, int flags) {
    const struct cv_alias *a = find(r, dev, ino);
    if (!a) return -ENOENT;
    int fd = open(a->src, flags | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat s;
    if (fstat(fd, &s) < 0 || s.st_dev != a->sdev || s.st_ino != a->sino) {
        close(fd);
        return -ENOENT; /* replaced on the host since */
    }
    return fd;
}

int cv_alias_drop(struct cv_run *r, dev_t dev, ino_t ino, struct stat *was) {
    struct cv_alias *a = find(r, dev, ino);
    if (!a) return 0;
    int ok = source(a, was);
    remove_at(r, a);
    return ok;
}

void cv_alias_free(struct cv_run *r) {
    for (size_t i = 0; i < r->nalias; i++) free(r->aliases[i].src);
    free(r->aliases);
    r->aliases = NULL;
    r->nalias = r->alias_cap = 0;
}
