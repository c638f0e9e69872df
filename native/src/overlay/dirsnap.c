#include "dirsnap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define WH ".wh."
#define WH_LEN 4
#define OPQ ".wh..wh..opq"
#define OPQ_LEN 12
#define HDR_BYTES offsetof(struct cv_dirent, name) /* 19 */

/* ---------- the snapshot ---------- */

struct cv_dirsnap {
    atomic_uint refs;
    uint32_t count;
    size_t size;                  /* bytes of this allocation */
    const unsigned char *recs;    /* the records, inside this allocation */
    int nl;                       /* layers it was built from */
    dev_t dev[CV_DIRSNAP_MAX_LAYERS]; /* their identities, top first */
    ino_t ino[CV_DIRSNAP_MAX_LAYERS];
    unsigned char has[CV_DIRSNAP_MAX_LAYERS];
    uint32_t at[];                /* count offsets into recs */
};

static size_t rec_len(size_t namelen) {
    return (HDR_BYTES + namelen + 1 + 7) & ~(size_t)7;
}

/* ---------- reading one layer ---------- */

struct ent {
    uint64_t ino;
    uint32_t name; /* offset in the layer's name arena */
    uint16_t len;
    unsigned char type;
    unsigned char keep;
};

struct list {
    struct ent *e;
    size_t n, cap;
};

struct layer {
    char *names; /* NUL-terminated names, back to back */
    size_t nbytes, ncap;
    struct list ents, wh; /* entries; whiteouts (upper only: the names they delete) */
    int opaque;
    uint64_t dot, dotdot; /* inos of the directory and of its ".." entry (0: none seen) */
    dev_t dev;
};

static int push(struct layer *L, struct list *l, const char *name, size_t len, uint64_t ino, unsigned char type) {
    if (len > 255) return 0; /* not a Linux name; cannot happen */
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        struct ent *e = realloc(l->e, cap * sizeof *e);
        if (!e) return -1;
        l->e = e;
        l->cap = cap;
    }
    if (L->ncap - L->nbytes < len + 1) {
        size_t cap = L->ncap ? L->ncap : 8192;
        while (cap - L->nbytes < len + 1) cap *= 2;
        if (cap > UINT32_MAX) {
            errno = EOVERFLOW;
            return -1;
        }
        char *p = realloc(L->names, cap);
        if (!p) return -1;
        L->names = p;
        L->ncap = cap;
    }
    memcpy(L->names + L->nbytes, name, len);
    L->names[L->nbytes + len] = 0;
    l->e[l->n++] = (struct ent){.ino = ino, .name = (uint32_t)L->nbytes, .len = (uint16_t)len, .type = type};
    L->nbytes += len + 1;
    return 0;
}

static int is_dots(const char *name, size_t len) {
    return (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.');
}

/* A reserved upper entry: the opaque marker, a whiteout, or neither. */
/* A reserved layer entry: the opaque marker (a regular file), a whiteout (any entry named
 * .wh.NAME), or neither. The same rule as layers.h's. */
static int reserved_upper(struct layer *L, int fd, const char *name, size_t len, unsigned char type) {
    if (len == OPQ_LEN && !memcmp(name, OPQ, OPQ_LEN)) {
        struct stat st;
        if (type == DT_REG || (type == DT_UNKNOWN && fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                               S_ISREG(st.st_mode)))
            L->opaque = 1;
        return 0;
    }
    const char *target = name + WH_LEN;
    size_t tlen = len - WH_LEN;
    if (tlen == 0 || is_dots(target, tlen)) return 0;
    return push(L, &L->wh, target, tlen, 0, DT_UNKNOWN);
}

static int read_layer(int fd0, int upper, struct layer *L) {
    int keep = fcntl(fd0, F_GETFL) & O_NOATIME; /* a look that is no read of the guest's */
    cv_autoclose int fd = cv_reopen_dir(fd0, O_RDONLY | O_DIRECTORY | (keep > 0 ? O_NOATIME : 0)); /* fd0's offset stays */
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) < 0) return -1;
    L->dot = st.st_ino;
    L->dev = st.st_dev;
    enum { BUF = 32768 };
    unsigned char *buf = aligned_alloc(8, BUF);
    if (!buf) return -1;
    int rc = 0;
    for (;;) {
        ssize_t n = getdents64(fd, buf, BUF);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            rc = n < 0 ? -1 : 0;
            break;
        }
        for (ssize_t pos = 0; pos < n;) {
            const struct cv_dirent *d = (const struct cv_dirent *)(buf + pos);
            pos += d->reclen;
            const char *name = d->name;
            size_t len = strlen(name);
            unsigned char type = d->type;
            if (is_dots(name, len)) {
                if (len == 2) L->dotdot = d->ino;
                continue;
            }
            if (len >= WH_LEN && !memcmp(name, WH, WH_LEN)) {
                if (upper && reserved_upper(L, fd, name, len, type) < 0) goto fail;
                continue;
            }
            if (type == DT_UNKNOWN && fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                type = (unsigned char)IFTODT(st.st_mode);
            if (push(L, &L->ents, name, len, d->ino, type) < 0) goto fail;
        }
    }
    free(buf);
    return rc;
fail:
    free(buf);
    return -1;
}

static void layer_free(struct layer *L) {
    free(L->names);
    free(L->ents.e);
    free(L->wh.e);
}

static int cmp_names(const char *a, size_t alen, const char *b, size_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c) return c;
    return alen < blen ? -1 : alen > blen;
}

static int cmp_ent(const void *x, const void *y, void *arena) {
    const struct ent *a = x, *b = y;
    const char *names = arena;
    return cmp_names(names + a->name, a->len, names + b->name, b->len);
}

static void sort_list(struct list *l, char *names) {
    if (l->n > 1) qsort_r(l->e, l->n, sizeof *l->e, cmp_ent, names);
}

/* Is name (from another arena) in the sorted list l? *pos walks forward, so a
 * sorted run of queries costs one pass. */
static int walk_find(const struct list *l, const char *names, size_t *pos, const char *name, size_t len) {
    while (*pos < l->n) {
        const struct ent *e = &l->e[*pos];
        int c = cmp_names(names + e->name, e->len, name, len);
        if (c == 0) return 1;
        if (c > 0) return 0;
        (*pos)++;
    }
    return 0;
}

static unsigned char *put(unsigned char *p, uint64_t ino, unsigned char type, const char *name, size_t len) {
    size_t rl = rec_len(len);
    memset(p, 0, rl); /* padding reaches the guest: no stale bytes */
    struct cv_dirent *d = (struct cv_dirent *)p;
    d->ino = ino;
    d->reclen = (uint16_t)rl;
    d->type = type;
    memcpy(d->name, name, len);
    return p + rl;
}

struct cv_dirsnap *cv_dirsnap_build_stack(const int *fds, int nl, int (*skip)(const char *name, void *arg),
                                          void *arg) {
    int any = 0;
    for (int l = 0; l < nl; l++) any |= fds[l] >= 0;
    if (nl < 1 || nl > CV_DIRSNAP_MAX_LAYERS || !any) {
        errno = EINVAL;
        return NULL;
    }
    struct layer L[CV_DIRSNAP_MAX_LAYERS];
    memset(L, 0, sizeof L);
    struct cv_dirsnap *s = NULL;
    int top = -1, last = nl - 1;
    for (int l = 0; l < nl; l++) {
        if (fds[l] < 0) continue;
        if (read_layer(fds[l], l < nl - 1, &L[l]) < 0) goto out;
        if (top < 0) top = l;
        sort_list(&L[l].ents, L[l].names);
        sort_list(&L[l].wh, L[l].names);
    }
    for (int l = 0; l < nl - 1; l++) /* an opaque directory: nothing below it shows */
        if (fds[l] >= 0 && L[l].opaque) {
            last = l;
            break;
        }

    /* choose, and size the result: an entry shows unless a layer above has the name or deletes it */
    size_t count = 2, bytes = rec_len(1) + rec_len(2);
    for (int l = 0; l <= last; l++) {
        size_t pe[CV_DIRSNAP_MAX_LAYERS] = {0}, pw[CV_DIRSNAP_MAX_LAYERS] = {0};
        for (size_t k = 0; k < L[l].ents.n; k++) {
            struct ent *e = &L[l].ents.e[k];
            const char *name = L[l].names + e->name;
            int keep = 1;
            for (int a = 0; a < l && keep; a++)
                if (fds[a] >= 0 && (walk_find(&L[a].ents, L[a].names, &pe[a], name, e->len) ||
                                    walk_find(&L[a].wh, L[a].names, &pw[a], name, e->len)))
                    keep = 0;
            e->keep = keep && (l != nl - 1 || !skip || !skip(name, arg));
            if (e->keep) count++, bytes += rec_len(e->len);
        }
    }
    if (count > UINT32_MAX - 1 || bytes > UINT32_MAX) {
        errno = EOVERFLOW;
        goto out;
    }

    size_t head = (offsetof(struct cv_dirsnap, at) + count * sizeof(uint32_t) + 7) & ~(size_t)7;
    s = malloc(head + bytes);
    if (!s) goto out;
    atomic_init(&s->refs, 1);
    s->count = (uint32_t)count;
    s->size = head + bytes;
    unsigned char *recs = (unsigned char *)s + head, *p = recs;
    s->recs = recs;
    s->nl = nl;
    for (int l = 0; l < nl; l++) {
        s->has[l] = (unsigned char)(fds[l] >= 0);
        s->dev[l] = L[l].dev;
        s->ino[l] = (ino_t)L[l].dot;
    }

    const struct layer *T = &L[top];
    uint32_t n = 0;
    s->at[n++] = (uint32_t)(p - recs);
    p = put(p, T->dot, DT_DIR, ".", 1);
    s->at[n++] = (uint32_t)(p - recs);
    p = put(p, T->dotdot ? T->dotdot : T->dot, DT_DIR, "..", 2);
    for (int l = 0; l <= last; l++) {
        for (size_t k = 0; k < L[l].ents.n; k++) {
            const struct ent *e = &L[l].ents.e[k];
            if (!e->keep) continue;
            s->at[n++] = (uint32_t)(p - recs);
            p = put(p, e->ino, e->type, L[l].names + e->name, e->len);
        }
    }
out:;
    int saved = errno;
    for (int l = 0; l < nl; l++) layer_free(&L[l]);
    errno = saved;
    return s;
}

struct cv_dirsnap *cv_dirsnap_build(int upper_fd, int lower_fd, int (*skip)(const char *name, void *arg),
                                    void *arg) {
    int fds[2] = {upper_fd, lower_fd};
    return cv_dirsnap_build_stack(fds, 2, skip, arg);
}

size_t cv_dirsnap_count(const struct cv_dirsnap *s) { return s->count; }

size_t cv_dirsnap_size(const struct cv_dirsnap *s) { return s->size; }

const struct cv_dirent *cv_dirsnap_entry(const struct cv_dirsnap *s, uint32_t i) {
    if (i >= s->count) return NULL;
    return (const struct cv_dirent *)(s->recs + s->at[i]);
}

static int same_dir(const struct cv_dirsnap *s, int l, int fd) {
    if (fd < 0) return !s->has[l];
    struct stat st;
    return s->has[l] && fstat(fd, &st) == 0 && st.st_dev == s->dev[l] && st.st_ino == s->ino[l];
}

int cv_dirsnap_matches_stack(const struct cv_dirsnap *s, const int *fds, int nl) {
    if (nl != s->nl) return 0;
    /* Every layer it was built from is still the same directory; a layer that appeared since
     * (the upper twin made by a deletion during the listing) does not make it another one. */
    for (int l = 0; l < nl; l++)
        if (s->has[l] && !same_dir(s, l, fds[l])) return 0;
    return 1;
}

int cv_dirsnap_matches(const struct cv_dirsnap *s, int upper_fd, int lower_fd) {
    int fds[2] = {upper_fd, lower_fd};
    return cv_dirsnap_matches_stack(s, fds, 2);
}

void cv_dirsnap_ref(struct cv_dirsnap *s) {
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void cv_dirsnap_unref(struct cv_dirsnap *s) {
    if (!s) return;
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_release) == 1) {
        atomic_thread_fence(memory_order_acquire);
        free(s);
    }
}

ssize_t cv_dirsnap_fill(const struct cv_dirsnap *s, uint32_t slot, uint32_t i, void *buf, size_t len,
                        uint32_t *next) {
    unsigned char *out = buf;
    size_t used = 0;
    uint32_t k = i;
    for (; k < s->count; k++) {
        const unsigned char *rec = s->recs + s->at[k];
        size_t rl = ((const struct cv_dirent *)rec)->reclen;
        if (rl > len - used) break;
        memcpy(out + used, rec, rl);
        int64_t off = (int64_t)cv_dirsnap_off(slot, k + 1);
        memcpy(out + used + offsetof(struct cv_dirent, off), &off, sizeof off);
        used += rl;
    }
    if (next) *next = k;
    if (used == 0 && k < s->count) return -EINVAL;
    return (ssize_t)used;
}

/* ---------- the slot table ---------- */

#define NSLOT CV_DIRSNAP_SLOTS
#define GEN_MAX (CV_DIRSNAP_SLOT_MAX >> CV_DIRSNAP_SLOT_BITS)

struct tab_ent {
    uint32_t slot; /* 0: free */
    uint32_t gen;  /* the last generation handed out for this entry */
    struct cv_dirsnap *s;
    int prev, next; /* the LRU list (head: most recent) */
};

static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tab_ent tab[NSLOT];
static int free_idx[NSLOT], nfree = -1; /* -1: not yet initialised */
static int lru_head = -1, lru_tail = -1;
static size_t tab_bytes;

static void lru_unlink(int i) {
    struct tab_ent *t = &tab[i];
    if (t->prev >= 0) tab[t->prev].next = t->next;
    else lru_head = t->next;
    if (t->next >= 0) tab[t->next].prev = t->prev;
    else lru_tail = t->prev;
}

static void lru_push(int i) {
    tab[i].prev = -1;
    tab[i].next = lru_head;
    if (lru_head >= 0) tab[lru_head].prev = i;
    lru_head = i;
    if (lru_tail < 0) lru_tail = i;
}

/* Under tab_mu: empty entry i; returns the snapshot whose reference the caller drops. */
static struct cv_dirsnap *tab_remove(int i) {
    struct cv_dirsnap *s = tab[i].s;
    lru_unlink(i);
    tab_bytes -= s->size;
    tab[i].slot = 0;
    tab[i].s = NULL;
    free_idx[nfree++] = i;
    return s;
}

uint32_t cv_dirsnap_store(struct cv_dirsnap *s) {
    cv_dirsnap_ref(s);
    pthread_mutex_lock(&tab_mu);
    if (nfree < 0) {
        nfree = 0;
        for (int i = NSLOT - 1; i >= 0; i--) free_idx[nfree++] = i;
    }
    /* evicted snapshots are freed under the lock: rare, and at most the whole table */
    while (lru_tail >= 0 && (nfree == 0 || tab_bytes + s->size > CV_DIRSNAP_MEM_CAP))
        cv_dirsnap_unref(tab_remove(lru_tail));
    int i = free_idx[--nfree];
    struct tab_ent *t = &tab[i];
    t->gen = t->gen >= GEN_MAX ? 1 : t->gen + 1;
    t->slot = t->gen << CV_DIRSNAP_SLOT_BITS | (uint32_t)i;
    t->s = s;
    tab_bytes += s->size;
    lru_push(i);
    uint32_t slot = t->slot;
    pthread_mutex_unlock(&tab_mu);
    return slot;
}

struct cv_dirsnap *cv_dirsnap_get(uint32_t slot) {
    if (slot == 0 || slot > CV_DIRSNAP_SLOT_MAX) return NULL;
    int i = (int)(slot & (NSLOT - 1));
    struct cv_dirsnap *s = NULL;
    pthread_mutex_lock(&tab_mu);
    if (tab[i].slot == slot) {
        s = tab[i].s;
        cv_dirsnap_ref(s);
        if (lru_head != i) {
            lru_unlink(i);
            lru_push(i);
        }
    }
    pthread_mutex_unlock(&tab_mu);
    return s;
}

void cv_dirsnap_drop(uint32_t slot) {
    if (slot == 0 || slot > CV_DIRSNAP_SLOT_MAX) return;
    int i = (int)(slot & (NSLOT - 1));
    struct cv_dirsnap *s = NULL;
    pthread_mutex_lock(&tab_mu);
    if (tab[i].slot == slot) s = tab_remove(i);
    pthread_mutex_unlock(&tab_mu);
    cv_dirsnap_unref(s);
}
