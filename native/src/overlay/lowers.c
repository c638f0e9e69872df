#include "lowers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/sysnr.h"
#include "overlay/layers.h"

/* Past these the cache starts over: a guest walking a huge layer costs memory only up to here. */
#define MAX_DIRS 16384
#define MAX_NAMES (2u << 20)

struct lname {
    uint32_t off; /* in the directory's arena */
    uint16_t len;
    unsigned char type;
    unsigned char wh; /* a whiteout: the layer deletes this name */
};

/* One directory of one layer, listed. */
struct ldir {
    struct ldir *next;
    uint64_t hash;
    int layer;
    int opaque;
    char *vdir;
    size_t n;
    struct lname *names; /* sorted by name, entries before whiteouts */
    char *arena;
};

struct cv_lcache {
    pthread_mutex_t lock;
    struct ldir **buckets;
    size_t nbuckets, ndirs, nnames;
};

static uint64_t hash_of(int layer, const char *vdir) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(unsigned)layer;
    for (const unsigned char *p = (const unsigned char *)vdir; *p; p++) h = (h ^ *p) * 1099511628211ull;
    return h;
}

static void ldir_free(struct ldir *d) {
    free(d->vdir);
    free(d->names);
    free(d->arena);
    free(d);
}

static void clear(struct cv_lcache *c) {
    for (size_t b = 0; b < c->nbuckets; b++) {
        for (struct ldir *d = c->buckets[b], *next; d; d = next) {
            next = d->next;
            ldir_free(d);
        }
        c->buckets[b] = NULL;
    }
    c->ndirs = c->nnames = 0;
}

int cv_lower_open(const struct cv_run *r, int i, const char *vpath, int flags) {
    const char *rel = vpath[0] == '/' && vpath[1] ? vpath + 1 : ".";
    struct open_how how = {.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(__NR_openat2, r->lower_fd[i], rel, &how, sizeof how);
    return fd < 0 ? -errno : fd;
}

int cv_lower_lstat(const struct cv_run *r, int i, const char *vpath, struct stat *st) {
    /* Callers pass paths whose directories the listings proved real: no symlink on the way. */
    const char *rel = vpath[0] == '/' && vpath[1] ? vpath + 1 : ".";
    return fstatat(r->lower_fd[i], rel, st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static const char *name_of(const struct ldir *d, const struct lname *e) { return d->arena + e->off; }

static int by_name(const void *a, const void *b, void *arg) {
    const struct lname *x = a, *y = b;
    const struct ldir *d = arg;
    int c = strcmp(d->arena + x->off, d->arena + y->off);
    return c ? c : (int)x->wh - (int)y->wh;
}

/* List layer i's directory vdir; NULL on failure (errno set). */
static struct ldir *read_dir(struct cv_run *r, int i, const char *vdir) {
    struct ldir *d = calloc(1, sizeof *d);
    if (!d || !(d->vdir = strdup(vdir))) {
        free(d);
        return NULL;
    }
    d->layer = i;
    int fd = cv_lower_open(r, i, vdir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return d; /* not a directory there (cannot happen for a walked one): empty */
    DIR *dir = fdopendir(fd);
    if (!dir) {
        close(fd);
        ldir_free(d);
        return NULL;
    }
    size_t cap = 0, acap = 0, aused = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
        unsigned char type = de->d_type, wh = 0;
        if (type == DT_UNKNOWN) {
            struct stat st;
            if (fstatat(dirfd(dir), nm, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
            type = (unsigned char)IFTODT(st.st_mode);
        }
        if (cv_ov_reserved(nm)) {
            if (type != DT_REG) continue;
            if (!strcmp(nm, CV_OPAQUE_NAME)) {
                d->opaque = 1;
                continue;
            }
            nm += strlen(CV_WH_PREFIX);
            if (!*nm || !strcmp(nm, ".") || !strcmp(nm, "..")) continue;
            wh = 1;
        }
        size_t len = strlen(nm);
        if (d->n == cap) {
            cap = cap ? cap * 2 : 32;
            struct lname *p = realloc(d->names, cap * sizeof *p);
            if (!p) goto oom;
            d->names = p;
        }
        if (aused + len + 1 > acap) {
            acap = acap ? acap * 2 : 1024;
            while (aused + len + 1 > acap) acap *= 2;
            char *p = realloc(d->arena, acap);
            if (!p) goto oom;
            d->arena = p;
        }
        memcpy(d->arena + aused, nm, len + 1);
        d->names[d->n++] = (struct lname){.off = (uint32_t)aused, .len = (uint16_t)len, .type = type, .wh = wh};
        aused += len + 1;
    }
    closedir(dir);
    if (d->n) qsort_r(d->names, d->n, sizeof *d->names, by_name, d);
    return d;
oom:
    closedir(dir);
    ldir_free(d);
    errno = ENOMEM;
    return NULL;
}

/* The listing of layer i's vdir, read on first use. Called with the lock held. */
static const struct ldir *get(struct cv_run *r, int i, const char *vdir) {
    struct cv_lcache *c = r->lcache;
    uint64_t h = hash_of(i, vdir);
    size_t b = (size_t)(h % c->nbuckets);
    for (struct ldir *d = c->buckets[b]; d; d = d->next)
        if (d->hash == h && d->layer == i && !strcmp(d->vdir, vdir)) return d;
    struct ldir *d = read_dir(r, i, vdir);
    if (!d) return NULL;
    if (c->ndirs >= MAX_DIRS || c->nnames + d->n > MAX_NAMES) clear(c);
    d->hash = h;
    d->next = c->buckets[b];
    c->buckets[b] = d;
    c->ndirs++;
    c->nnames += d->n;
    return d;
}

static int ensure_cache(struct cv_run *r) {
    if (r->lcache) return 0;
    /* Made by cv_run_add_lower before the run starts; this is only the out-of-memory case. */
    return -ENOMEM;
}

int cv_lower_find(struct cv_run *r, int i, const char *vdir, const char *name, unsigned char *dtype) {
    if (ensure_cache(r) < 0) return CV_LMISS;
    struct cv_lcache *c = r->lcache;
    int out = CV_LMISS;
    pthread_mutex_lock(&c->lock);
    const struct ldir *d = get(r, i, vdir);
    if (d) {
        size_t lo = 0, hi = d->n;
        while (lo < hi) { /* the first record named name: the entry if there is one */
            size_t mid = (lo + hi) / 2;
            if (strcmp(name_of(d, &d->names[mid]), name) < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo < d->n && !strcmp(name_of(d, &d->names[lo]), name)) {
            out = d->names[lo].wh ? CV_LWHITEOUT : CV_LFOUND;
            if (dtype) *dtype = d->names[lo].type;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return out;
}

int cv_lower_opaque(struct cv_run *r, int i, const char *vdir) {
    if (ensure_cache(r) < 0) return 0;
    struct cv_lcache *c = r->lcache;
    pthread_mutex_lock(&c->lock);
    const struct ldir *d = get(r, i, vdir);
    int opq = d && d->opaque;
    pthread_mutex_unlock(&c->lock);
    return opq;
}

int cv_lower_cache_new(struct cv_run *r) {
    if (r->lcache) return 0;
    struct cv_lcache *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->nbuckets = 1024;
    c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
    if (!c->buckets) {
        free(c);
        return -ENOMEM;
    }
    pthread_mutex_init(&c->lock, NULL);
    r->lcache = c;
    return 0;
}

void cv_lower_cache_free(struct cv_run *r) {
    struct cv_lcache *c = r->lcache;
    if (!c) return;
    clear(c);
    free(c->buckets);
    pthread_mutex_destroy(&c->lock);
    free(c);
    r->lcache = NULL;
}
