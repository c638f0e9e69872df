#include "longpath.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/sysnr.h"

void cv_lpath_init(struct cv_lpath *p) {
    p->s = p->in;
    p->in[0] = 0;
}

void cv_lpath_free(struct cv_lpath *p) {
    if (p->s != p->in) free(p->s);
    cv_lpath_init(p);
}

/* Room for n bytes and a NUL, keeping the first `keep` bytes of the path. */
static int reserve(struct cv_lpath *p, size_t n, size_t keep) {
    if (n >= CV_LPATH_MAX) return -ENAMETOOLONG;
    if (n < PATH_MAX) {
        if (p->s != p->in) { /* back inline */
            memcpy(p->in, p->s, keep);
            free(p->s);
            p->s = p->in;
        }
        return 0;
    }
    char *h = p->s == p->in ? malloc(n + 1) : realloc(p->s, n + 1);
    if (!h) return -ENOMEM;
    if (p->s == p->in) memcpy(h, p->in, keep);
    p->s = h;
    return 0;
}

int cv_lpath_setn(struct cv_lpath *p, const char *s, size_t n) {
    if (s >= p->s && s < p->s + strlen(p->s) + 1) { /* a part of p itself */
        if (s != p->s) memmove(p->s, s, n);
        int e = reserve(p, n, n);
        if (e < 0) return e;
        p->s[n] = 0;
        return 0;
    }
    int e = reserve(p, n, 0);
    if (e < 0) return e;
    memcpy(p->s, s, n);
    p->s[n] = 0;
    return 0;
}

int cv_lpath_set(struct cv_lpath *p, const char *s) { return cv_lpath_setn(p, s, strlen(s)); }

int cv_lpath_join(struct cv_lpath *p, const char *dir, const char *name) {
    size_t dl = strlen(dir), nl = strlen(name);
    if (dl == 1 && dir[0] == '/') dl = 0;
    if (dir != p->s) {
        int e = reserve(p, dl + 1 + nl, 0);
        if (e < 0) return e;
        memcpy(p->s, dir, dl);
    } else {
        int e = reserve(p, dl + 1 + nl, dl);
        if (e < 0) return e;
    }
    p->s[dl] = '/';
    memcpy(p->s + dl + 1, name, nl);
    p->s[dl + 1 + nl] = 0;
    return 0;
}

int cv_lpath_parent(struct cv_lpath *p, const char *vpath) {
    const char *slash = strrchr(vpath, '/');
    size_t n = !slash ? strlen(vpath) : slash == vpath ? 1 : (size_t)(slash - vpath);
    return cv_lpath_setn(p, vpath, n);
}

void cv_lpath_move(struct cv_lpath *to, struct cv_lpath *from) {
    if (to == from) return;
    cv_lpath_free(to);
    if (from->s == from->in) {
        memcpy(to->in, from->in, strlen(from->in) + 1);
    } else {
        to->s = from->s;
        from->s = from->in;
    }
    cv_lpath_init(from);
}

/* The directory holding the last PATH_MAX-bounded part of rel, opened piece by piece from
 * dirfd (no piece longer than PATH_MAX - 1, each cut at a '/'): 0 with *dir (ours to close
 * when it is not dirfd) and *rest, what is left of rel; or -errno. */
static int walk_pieces(int dirfd, const char *rel, uint64_t resolve, const char **rest, int *dir) {
    int cur = dirfd;
    while (strlen(rel) >= PATH_MAX) {
        const char *cut = NULL;
        for (const char *c = rel + PATH_MAX - 2; c > rel; c--)
            if (*c == '/') {
                cut = c;
                break;
            }
        if (!cut) {
            if (cur != dirfd) close(cur);
            return -ENAMETOOLONG; /* one name longer than a path: not a path at all */
        }
        char piece[PATH_MAX];
        memcpy(piece, rel, (size_t)(cut - rel));
        piece[cut - rel] = 0;
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = resolve};
        int next = (int)syscall(__NR_openat2, cur, piece, &how, sizeof how);
        int err = errno;
        if (cur != dirfd) close(cur);
        if (next < 0) return -err;
        cur = next;
        rel = cut;
        while (*rel == '/') rel++;
    }
    *rest = *rel ? rel : ".";
    *dir = cur;
    return 0;
}

int cv_openat2_long(int dirfd, const char *rel, const struct open_how *how) {
    const char *rest;
    int dir;
    int e = walk_pieces(dirfd, rel, how->resolve, &rest, &dir);
    if (e < 0) return e;
    int fd = (int)syscall(__NR_openat2, dir, rest, how, sizeof *how);
    int err = errno;
    if (dir != dirfd) close(dir);
    return fd < 0 ? -err : fd;
}

int cv_fstatat_long(int dirfd, const char *path, struct stat *st, int flags) {
    size_t l = strlen(path);
    if (l < PATH_MAX) return fstatat(dirfd, path, st, flags) < 0 ? -errno : 0;
    /* Its directories opened with no symlink followed (from "/" for an absolute one), then the
     * last name looked up there as the caller asked. */
    while (l > 1 && path[l - 1] == '/') l--;
    const char *slash = path + l;
    while (slash > path && slash[-1] != '/') slash--;
    char name[NAME_MAX + 2];
    if ((size_t)(path + l - slash) > NAME_MAX) return -ENAMETOOLONG;
    memcpy(name, slash, (size_t)(path + l - slash));
    name[path + l - slash] = 0;
    char *dir = strndup(path, (size_t)(slash - path));
    if (!dir) return -ENOMEM;
    int root = -1, from = dirfd;
    const char *rel = dir;
    if (rel[0] == '/') {
        root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0) {
            int e = -errno;
            free(dir);
            return e;
        }
        from = root;
        while (*rel == '/') rel++;
    }
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int d = cv_openat2_long(from, *rel ? rel : ".", &how);
    free(dir);
    if (root >= 0) close(root);
    if (d < 0) return d;
    int e = fstatat(d, name, st, flags) < 0 ? -errno : 0;
    close(d);
    return e;
}
