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
#include "overlay/longpath.h"

/* Past these the cache starts over: a guest walking a huge layer costs memory only up to here. */
#define MAX_DIRS 16384
#define MAX_NAMES (2u << 20)

/* One name of a directory, over every layer that has the directory. */
struct lname {
    uint32_t off; /* in the directory's arena */
    uint64_t has, wh, dir; /* bit i: layer i has an entry / a whiteout / a directory by this name */
};

/* One directory (a virtual path), listed in every layer that has it. */
struct ldir {
    struct ldir *next;
    uint64_t hash;
    uint64_t opaque; /* bit i: layer i's directory holds the opaque marker */
    char *vdir;
    size_t n;
    struct lname *names; /* sorted by name, one record per name */
    char *arena;
};

struct cv_lcache {
    pthread_mutex_t lock;
    struct ldir **buckets;
    size_t nbuckets, ndirs, nnames;
};

static uint64_t hash_of(const char *vdir) {
    uint64_t h = 1469598103934665603ull;
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
    return cv_openat2_long(r->lower_fd[i], rel, &how);
}

int cv_lower_lstat(const struct cv_run *r, int i, const char *vpath, struct stat *st) {
    /* Callers pass paths whose directories the listings proved real: no symlink on the way. */
    const char *rel = vpath[0] == '/' && vpath[1] ? vpath + 1 : ".";
    return cv_fstatat_long(r->lower_fd[i], rel, st, AT_SYMLINK_NOFOLLOW);
}

static const char *name_of(const struct ldir *d, const struct lname *e) { return d->arena + e->off; }

/* While listing: one (name, layer) record. */
struct raw {
    uint32_t off;
    unsigned char layer, wh, dir;
};

static int raw_cmp(const void *a, const void *b, void *arena) {
    const struct raw *x = a, *y = b;
    int c = strcmp((const char *)arena + x->off, (const char *)arena + y->off);
    return c ? c : (int)x->layer - (int)y->layer;
}

struct lister {
    struct raw *raw;
    size_t n, cap;
    char *arena;
    size_t used, acap;
};

static int add(struct lister *L, const char *nm, int layer, int wh, int dir) {
    size_t len = strlen(nm);
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 64;
        struct raw *p = realloc(L->raw, cap * sizeof *p);
        if (!p) return -1;
        L->raw = p;
        L->cap = cap;
    }
    if (L->used + len + 1 > L->acap) {
        size_t cap = L->acap ? L->acap * 2 : 2048;
        while (L->used + len + 1 > cap) cap *= 2;
        if (cap > UINT32_MAX) return -1;
        char *p = realloc(L->arena, cap);
        if (!p) return -1;
        L->arena = p;
        L->acap = cap;
    }
    memcpy(L->arena + L->used, nm, len + 1);
    L->raw[L->n++] = (struct raw){.off = (uint32_t)L->used, .layer = (unsigned char)layer, .wh = (unsigned char)wh,
                                  .dir = (unsigned char)dir};
    L->used += len + 1;
    return 0;
}

/* Layer i's entries of vdir into L; 0, or -1 when out of memory (a layer without the directory
 * adds nothing). */
static int list_layer(struct cv_run *r, int i, const char *vdir, struct lister *L, uint64_t *opaque) {
    int fd = cv_lower_open(r, i, vdir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return 0;
    DIR *dir = fdopendir(fd);
    if (!dir) {
        close(fd);
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(dir))) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
        unsigned char type = de->d_type;
        if (type == DT_UNKNOWN) {
            struct stat st;
            if (fstatat(dirfd(dir), nm, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
            type = (unsigned char)IFTODT(st.st_mode);
        }
        if (!cv_ov_reserved(nm)) {
            rc = add(L, nm, i, 0, type == DT_DIR);
            continue;
        }
        if (!strcmp(nm, CV_OPAQUE_NAME)) { /* the rule of layers.h: a regular file */
            if (type == DT_REG) *opaque |= 1ull << i;
            continue;
        }
        nm += strlen(CV_WH_PREFIX);
        if (*nm && strcmp(nm, ".") && strcmp(nm, "..")) rc = add(L, nm, i, 1, 0);
    }
    closedir(dir);
    return rc;
}

/* List vdir in every layer and merge the names; NULL when out of memory. */
static struct ldir *read_dir(struct cv_run *r, const char *vdir) {
    struct ldir *d = calloc(1, sizeof *d);
    struct lister L = {0};
    if (!d || !(d->vdir = strdup(vdir))) goto oom;
    for (int i = 0; i < r->nlower; i++)
        if (list_layer(r, i, vdir, &L, &d->opaque) < 0) goto oom;
    if (L.n) qsort_r(L.raw, L.n, sizeof *L.raw, raw_cmp, L.arena);
    d->names = calloc(L.n ? L.n : 1, sizeof *d->names);
    if (!d->names) goto oom;
    for (size_t k = 0; k < L.n; k++) {
        const struct raw *x = &L.raw[k];
        struct lname *e = d->n ? &d->names[d->n - 1] : NULL;
        if (!e || strcmp(L.arena + e->off, L.arena + x->off)) {
            e = &d->names[d->n++];
            e->off = x->off;
        }
        uint64_t bit = 1ull << x->layer;
        if (x->wh) e->wh |= bit;
        else e->has |= bit;
        if (x->dir) e->dir |= bit;
    }
    d->arena = L.arena;
    free(L.raw);
    return d;
oom:
    free(L.raw);
    free(L.arena);
    if (d) ldir_free(d);
    errno = ENOMEM;
    return NULL;
}

/* The listing of vdir, read on first use. Called with the lock held. */
static const struct ldir *get(struct cv_run *r, const char *vdir) {
    struct cv_lcache *c = r->lcache;
    uint64_t h = hash_of(vdir);
    size_t b = (size_t)(h % c->nbuckets);
    for (struct ldir *d = c->buckets[b]; d; d = d->next)
        if (d->hash == h && !strcmp(d->vdir, vdir)) return d;
    struct ldir *d = read_dir(r, vdir);
    if (!d) return NULL;
    if (c->ndirs >= MAX_DIRS || c->nnames + d->n > MAX_NAMES) clear(c);
    d->hash = h;
    d->next = c->buckets[b];
    c->buckets[b] = d;
    c->ndirs++;
    c->nnames += d->n;
    return d;
}

void cv_lower_names(struct cv_run *r, const char *vdir, const char *name, struct cv_lnames *out) {
    memset(out, 0, sizeof *out);
    struct cv_lcache *c = r->lcache; /* made by cv_run_add_lower; NULL only when out of memory */
    if (!c) return;
    pthread_mutex_lock(&c->lock);
    const struct ldir *d = get(r, vdir);
    if (d) {
        size_t lo = 0, hi = d->n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            int cmp = strcmp(name_of(d, &d->names[mid]), name);
            if (cmp == 0) {
                out->has = d->names[mid].has;
                out->wh = d->names[mid].wh;
                out->dir = d->names[mid].dir;
                break;
            }
            if (cmp < 0) lo = mid + 1;
            else hi = mid;
        }
    }
    pthread_mutex_unlock(&c->lock);
}

uint64_t cv_lower_opaque(struct cv_run *r, const char *vdir) {
    struct cv_lcache *c = r->lcache;
    if (!c) return 0;
    pthread_mutex_lock(&c->lock);
    const struct ldir *d = get(r, vdir);
    uint64_t opq = d ? d->opaque : 0;
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
