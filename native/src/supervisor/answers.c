/* The run's answer table (common/answers_fmt.h, supervisor/answers.h). The receiver thread
 * writes it, and the walk-ahead thread publishes directories (handlers/prefetch.c); a mutex
 * keeps two threads from writing the same slot. */
#include "supervisor/answers.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/answers_fmt.h"
#include "common/util.h"
#include "handlers/handlers.h"

_Static_assert(sizeof(struct cv_ans_ent) == 304, "docs/ARCHITECTURE.md gives an entry's size");

/* A ring of records and its index (answers_fmt.h): how many were written so far, and at which
 * count each index way was set (`at`, ours: a way set n records ago or more names a record the
 * ring wrote over since). */
struct ring {
    uint64_t index, records; /* where in the table */
    uint32_t sets, n, size;  /* index sets, records, a record's bytes */
    uint32_t written;
    uint32_t *at;
};

struct cv_answers {
    pthread_mutex_t lock;
    int fd; /* the memfd, read-write: the guests get read-only opens of it */
    struct cv_ans_head *head;
    uint64_t serial; /* the last directory publication's */
    /* A publication made off the receiver thread (the walk ahead, handlers/prefetch.c) holds this
     * from its check of the count to its last record; a directory about to change counts, with
     * it held, first. */
    pthread_mutex_t publishing;
    uint64_t dir_changes;
    struct ring dirs, ents;
    uint32_t dirs_at[CV_ANS_DIR_SETS * CV_ANS_WAYS], ents_at[CV_ANS_ENT_SETS * CV_ANS_WAYS];
};

static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t cv_answers_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* An embedder's hook or a trace must see every call the shim could serve. */
static int wanted(const struct cv_run *r) {
    static const int served[] = {__NR_readlink, __NR_readlinkat, __NR_open,     __NR_openat,   __NR_newfstatat,
                                 __NR_statx,    __NR_access,     __NR_getxattr, __NR_lgetxattr, __NR_getdents64};
    for (size_t i = 0; i < sizeof served / sizeof *served; i++)
        if (cv_hook_wants(r, served[i])) return 0;
    return 1;
}

/* The run's copied-up old inodes not listed yet, then their count (receiver thread only). */
static void publish_copied(struct cv_run *r, struct cv_answers *a) {
    struct cv_ans_copied *list = cv_ans_copied_list(a->head);
    for (size_t i = a->head->ncopied; i < r->ncopied && i < CV_ANS_COPIED; i++)
        list[i] = (struct cv_ans_copied){r->copied[i].dev, r->copied[i].ino};
    __atomic_store_n(&a->head->ncopied, (uint64_t)r->ncopied, __ATOMIC_RELEASE);
}

static struct cv_answers *table(struct cv_run *r, int make) {
    struct cv_answers *a = __atomic_load_n(&r->answers, __ATOMIC_ACQUIRE);
    if (a || !make || !wanted(r)) return a;
    pthread_mutex_lock(&make_lock);
    a = r->answers;
    if (!a && (a = calloc(1, sizeof *a))) {
        pthread_mutex_init(&a->lock, NULL);
        pthread_mutex_init(&a->publishing, NULL);
        a->fd = memfd_create("cvisor-answers", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        void *m = MAP_FAILED;
        if (a->fd >= 0 && ftruncate(a->fd, (off_t)CV_ANS_BYTES) == 0)
            m = mmap(NULL, CV_ANS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
        /* Our mapping stays writable; no other can be made (a guest's reopen included). */
        if (m == MAP_FAILED ||
            fcntl(a->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0) {
            if (m != MAP_FAILED) munmap(m, CV_ANS_BYTES);
            if (a->fd >= 0) close(a->fd);
            pthread_mutex_destroy(&a->lock);
            pthread_mutex_destroy(&a->publishing);
            free(a);
            a = NULL;
        } else {
            a->head = m;
            a->dirs = (struct ring){CV_ANS_DIR_INDEX_AT, CV_ANS_DIRS_AT, CV_ANS_DIR_SETS, CV_ANS_DIRS_RING,
                                    sizeof(struct cv_ans_dir), 0, a->dirs_at};
            a->ents = (struct ring){CV_ANS_ENT_INDEX_AT, CV_ANS_ENTS_AT, CV_ANS_ENT_SETS, CV_ANS_ENTS,
                                    sizeof(struct cv_ans_ent), 0, a->ents_at};
            *a->head = (struct cv_ans_head){.stamp = CV_ANS_STAMP,
                                            .sets = CV_ANS_SETS,
                                            .ways = CV_ANS_WAYS,
                                            .slot_size = sizeof(struct cv_ans_slot),
                                            .key_max = CV_ANS_KEY_MAX,
                                            .gone_gen = 1,
                                            .made_gen = 1,
                                            .tree_gen = 1,
                                            .copies = __atomic_load_n(&r->copies, __ATOMIC_ACQUIRE)};
            publish_copied(r, a);
            __atomic_store_n(&r->answers, a, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&make_lock);
    return a;
}

int cv_answers_fd(struct cv_run *r) {
    struct cv_answers *a = table(r, 1);
    if (!a) return -ENOENT;
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", a->fd);
    int fd = open(self, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

void cv_answers_copied(struct cv_run *r) {
    uint64_t n = __atomic_add_fetch(&r->copies, 1, __ATOMIC_ACQ_REL);
    struct cv_answers *a = table(r, 0);
    if (!a) return;
    publish_copied(r, a);
    __atomic_store_n(&a->head->copies, n, __ATOMIC_RELEASE);
}

struct cv_ans_gens cv_answers_gens(struct cv_run *r) {
    struct cv_answers *a = table(r, 0);
    if (!a) return (struct cv_ans_gens){0, 0};
    return (struct cv_ans_gens){__atomic_load_n(&a->head->gone_gen, __ATOMIC_ACQUIRE),
                                __atomic_load_n(&a->head->made_gen, __ATOMIC_ACQUIRE)};
}

/* Begin and end a seqlock write of a slot whose seq is at *seq. */
static void slot_open(uint32_t *seq) {
    __atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void slot_close(uint32_t *seq) {
    __atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
}

/* The way of a set a new record goes in: the one written longest ago (never: born 0), so a set
 * fills before anything is given up, and a record still asked for (a walk's top directory, the
 * parent of every directory below) goes after the ones written since. A way taken at random
 * gave up a full record while others stood empty. `born` is the field at first_born in the
 * first of the set's records, stride bytes apart. */
static uint32_t oldest_way(const void *first_born, size_t stride) {
    uint32_t way = 0;
    uint64_t oldest = UINT64_MAX;
    for (uint32_t w = 0; w < CV_ANS_WAYS; w++) {
        uint64_t born;
        memcpy(&born, (const char *)first_born + w * stride, sizeof born);
        if (born < oldest) oldest = born, way = w;
    }
    return way;
}

/* A record's hint (answers_fmt.h), once the record is whole: a reader that meets the old one
 * still checks the record, and one that meets none asks the supervisor. */
static void hint(volatile uint32_t *set_hints, uint32_t way, uint32_t hash) {
    __atomic_store_n(&set_hints[way], hash, __ATOMIC_RELEASE);
}

/* The record of the ring for a key of this hash: *way gets the index way to set after (the
 * key's own, which same() recognises, else the one set longest ago), the record is the ring's
 * next, opened for writing. */
static void *ring_open(struct cv_answers *a, struct ring *g, uint32_t hash, int (*same)(const void *, const void *),
                       const void *key, uint32_t *way) {
    volatile uint32_t *ways = cv_ans_ring_ways(a->head, g->index, g->sets, hash);
    const uint32_t *at = &g->at[(hash & (g->sets - 1)) * CV_ANS_WAYS];
    uint32_t oldest = 0;
    *way = 0;
    for (uint32_t w = 0; w < CV_ANS_WAYS; w++) {
        uint32_t age = ways[w] ? g->written - at[w] : UINT32_MAX;
        const void *old = age < g->n ? cv_ans_ring_at(a->head, g->records, g->size, g->n, ways[w], hash) : NULL;
        if (old && same(old, key)) {
            *way = w;
            break;
        }
        if (age > oldest) oldest = age, *way = w;
    }
    uint32_t num = g->written++ % g->n;
    uint32_t *rec = (uint32_t *)(void *)((char *)a->head + g->records + (uint64_t)num * g->size);
    slot_open(rec); /* every record starts with its seq */
    return rec;
}

/* The record ring_open gave, whole: closed, and the index way set to it. */
static void ring_close(struct cv_answers *a, struct ring *g, uint32_t hash, uint32_t way, void *rec) {
    slot_close(rec);
    uint32_t num = (uint32_t)(((char *)rec - ((char *)a->head + g->records)) / g->size);
    g->at[(hash & (g->sets - 1)) * CV_ANS_WAYS + way] = g->written;
    __atomic_store_n(&cv_ans_ring_ways(a->head, g->index, g->sets, hash)[way],
                     (hash & ~CV_ANS_RING_NUM_MASK) | (num + 1), __ATOMIC_RELEASE);
}

/* Names the kernel makes and removes by itself, with no call the supervisor sees: a pty's
 * slave appears in /dev/pts when /dev/ptmx is opened; /proc and /sys follow processes and
 * devices. */
int cv_answers_kernel_made(const char *path) {
    return cv_path_under(path, "/dev") || cv_path_under(path, "/proc") || cv_path_under(path, "/sys");
}

void cv_answers_put(struct cv_run *r, struct cv_ans_gens g, const char *key, int err, const char *target, size_t len) {
    struct cv_answers *a = table(r, 0);
    uint64_t gen = err == ENOENT ? g.made : g.gone;
    uint32_t klen = a && gen ? cv_ans_key_ok(key) : 0;
    if (!klen || len > CV_ANS_VAL_MAX || cv_answers_kernel_made(key)) return;
    uint32_t hash = cv_ans_hash(key, klen);
    pthread_mutex_lock(&a->lock);
    struct cv_ans_slot *set = cv_ans_set(a->head, hash), *s = NULL;
    for (uint32_t w = 0; w < CV_ANS_WAYS && !s; w++)
        if (set[w].hash == hash && set[w].klen == klen && !memcmp(set[w].key, key, klen)) s = &set[w];
    if (!s) s = &set[oldest_way(&set->born, sizeof *set)];
    slot_open(&s->seq);
    s->hash = hash, s->gen = gen, s->born = cv_answers_now(), s->err = err;
    s->klen = (uint16_t)klen, s->vlen = (uint16_t)(err ? 0 : len);
    memcpy(s->key, key, klen);
    if (!err) memcpy(s->val, target, len);
    slot_close(&s->seq);
    hint(cv_ans_hints(a->head, CV_ANS_HINT_SLOTS, CV_ANS_SETS, hash), (uint32_t)(s - set), hash);
    pthread_mutex_unlock(&a->lock);
}

void cv_answers_named(struct cv_run *r, const char *vpath) {
    struct cv_answers *a = table(r, 0);
    uint32_t klen = a && vpath ? cv_ans_key_ok(vpath) : 0;
    if (!klen) return;
    uint32_t hash = cv_ans_hash(vpath, klen);
    pthread_mutex_lock(&a->lock);
    struct cv_ans_slot *s = cv_ans_set(a->head, hash);
    for (uint32_t w = 0; w < CV_ANS_WAYS; w++, s++) {
        if (s->hash != hash || s->klen != klen || memcmp(s->key, vpath, klen)) continue;
        slot_open(&s->seq);
        s->gen = 0; /* no generation is 0 */
        slot_close(&s->seq);
    }
    pthread_mutex_unlock(&a->lock);
}

void cv_answers_changing(struct cv_run *r, int what) {
    struct cv_answers *a = table(r, 0);
    if (!a) return;
    if (what & CV_ANS_GONE) __atomic_fetch_add(&a->head->gone_gen, 1, __ATOMIC_SEQ_CST);
    if (what & CV_ANS_MADE) __atomic_fetch_add(&a->head->made_gen, 1, __ATOMIC_SEQ_CST);
    if (what & CV_ANS_TREE) __atomic_fetch_add(&a->head->tree_gen, 1, __ATOMIC_SEQ_CST);
}

uint64_t cv_answers_tree_gen(struct cv_run *r) {
    struct cv_answers *a = table(r, 0);
    return a ? __atomic_load_n(&a->head->tree_gen, __ATOMIC_ACQUIRE) : 0;
}

int cv_answers_dir_fresh(struct cv_run *r, const char *vpath, int level) {
    struct cv_answers *a = table(r, 0);
    uint32_t klen = a ? cv_ans_key_ok(vpath) : 0;
    struct cv_ans_id id;
    uint32_t has = 0;
    uint64_t later = cv_answers_now() + CV_ANS_TTL_NS / 2; /* good for half a record's life more */
    return klen && cv_ans_dir_get(a->head, vpath, klen, later, &id) && cv_ans_did_get(a->head, &id, later, &has, NULL, NULL) &&
           has >= (uint32_t)level;
}

int cv_answers_listed(struct cv_run *r, const struct cv_ans_id *id) {
    struct cv_answers *a = table(r, 0);
    uint64_t at;
    uint32_t len;
    return a && cv_ans_did_list(a->head, id, cv_answers_now() + CV_ANS_TTL_NS / 2, &at, &len);
}

int cv_answers_level(struct cv_run *r, const struct cv_ans_id *id) {
    struct cv_answers *a = table(r, 0);
    uint32_t level = 0;
    return a && cv_ans_did_get(a->head, id, cv_answers_now(), &level, NULL, NULL) ? (int)level : -1;
}

uint64_t cv_answers_serial(struct cv_run *r) {
    struct cv_answers *a = table(r, 0);
    return a ? __atomic_add_fetch(&a->serial, 1, __ATOMIC_RELAXED) : 0;
}

uint64_t cv_answers_dir_changes(struct cv_run *r) {
    struct cv_answers *a = table(r, 0);
    return a ? __atomic_load_n(&a->dir_changes, __ATOMIC_ACQUIRE) : 0;
}

int cv_answers_publish_begin(struct cv_run *r, uint64_t changes) {
    struct cv_answers *a = table(r, 0);
    if (!a) return 0;
    pthread_mutex_lock(&a->publishing);
    if (__atomic_load_n(&a->dir_changes, __ATOMIC_ACQUIRE) == changes) return 1;
    pthread_mutex_unlock(&a->publishing);
    return 0;
}

void cv_answers_publish_end(struct cv_run *r) {
    struct cv_answers *a = table(r, 0);
    if (a) pthread_mutex_unlock(&a->publishing);
}

static int same_entry(const void *rec, const void *key) {
    const struct cv_ans_ent *e = rec, *k = key;
    return e->hash == k->hash && e->nlen == k->nlen && cv_ans_same_id(&e->dir, &k->dir) &&
           !memcmp(e->name, k->name, k->nlen);
}

void cv_answers_put_entry(struct cv_run *r, uint64_t serial, const struct cv_ans_id *dir, const char *name,
                          const struct statx *stx, uint32_t bits) {
    struct cv_answers *a = table(r, 0);
    size_t nlen = strlen(name);
    if (!a || !serial || !nlen || nlen > CV_ANS_NAME_MAX) return;
    struct cv_ans_ent key = {.hash = cv_ans_ent_hash(dir, name, (uint32_t)nlen), .dir = *dir, .nlen = (uint16_t)nlen};
    memcpy(key.name, name, nlen);
    uint32_t hash = key.hash, way;
    pthread_mutex_lock(&a->lock);
    struct cv_ans_ent *e = ring_open(a, &a->ents, hash, same_entry, &key, &way);
    e->hash = hash, e->serial = serial, e->born = cv_answers_now(), e->dir = *dir, e->nlen = (uint16_t)nlen;
    e->bits = (uint16_t)bits;
    memcpy(e->name, name, nlen);
    memcpy(e->stx, stx, CV_ANS_STX_BYTES);
    ring_close(a, &a->ents, hash, way, e);
    pthread_mutex_unlock(&a->lock);
}

uint64_t cv_answers_put_listing(struct cv_run *r, const void *records, size_t len) {
    struct cv_answers *a = table(r, 0);
    if (!a || !len || len > CV_ANS_LIST_MAX || len % 8) return UINT64_MAX;
    pthread_mutex_lock(&a->lock);
    uint64_t at = a->head->list_end, off = at & (CV_ANS_LIST_BYTES - 1);
    if (off + len > CV_ANS_LIST_BYTES) at += CV_ANS_LIST_BYTES - off, off = 0; /* never wraps */
    /* claimed before written: a reader of what this overwrites sees it moved, after its copy */
    __atomic_store_n(&a->head->list_end, at + len, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy((char *)a->head + CV_ANS_ENTS_END + off, records, len);
    pthread_mutex_unlock(&a->lock);
    return at;
}

int cv_answers_listing_copy(struct cv_run *r, const struct cv_ans_id *id, char **buf, size_t *len) {
    struct cv_answers *a = table(r, 0);
    uint64_t at;
    uint32_t l;
    if (!a || !cv_ans_did_list(a->head, id, cv_answers_now(), &at, &l) || !(*buf = malloc(l))) return -1;
    pthread_mutex_lock(&a->lock);
    int gone = a->head->list_end > at + CV_ANS_LIST_BYTES; /* written over since */
    if (!gone) memcpy(*buf, (char *)a->head + CV_ANS_ENTS_END + (at & (CV_ANS_LIST_BYTES - 1)), l);
    pthread_mutex_unlock(&a->lock);
    if (gone) {
        free(*buf);
        return -1;
    }
    *len = l;
    return 0;
}

void cv_answers_put_did(struct cv_run *r, const struct cv_ans_id *id, uint64_t serial, int level, uint64_t list_at,
                        size_t list_len) {
    struct cv_answers *a = table(r, 0);
    if (!a || !serial) return;
    if (list_at == UINT64_MAX) list_len = 0;
    uint32_t hash = cv_ans_did_hash(id);
    pthread_mutex_lock(&a->lock);
    struct cv_ans_did *set = cv_ans_did_set(a->head, hash), *d = NULL;
    for (uint32_t w = 0; w < CV_ANS_WAYS && !d; w++)
        if (set[w].hash == hash && cv_ans_same_id(&set[w].id, id)) d = &set[w];
    if (!d) d = &set[oldest_way(&set->born, sizeof *set)];
    slot_open(&d->seq);
    d->hash = hash, d->serial = serial, d->born = cv_answers_now(), d->id = *id, d->level = (uint32_t)level;
    d->list_at = list_at, d->list_len = (uint32_t)list_len;
    slot_close(&d->seq);
    hint(cv_ans_hints(a->head, CV_ANS_HINT_DIDS, CV_ANS_DIR_SETS, hash), (uint32_t)(d - set), hash);
    pthread_mutex_unlock(&a->lock);
}

static int same_dir(const void *rec, const void *key) {
    const struct cv_ans_dir *d = rec, *k = key;
    return d->hash == k->hash && d->klen == k->klen && !memcmp(d->key, k->key, k->klen);
}

void cv_answers_put_dir(struct cv_run *r, uint64_t tree_gen, const char *vpath, const struct cv_ans_id *id) {
    struct cv_answers *a = table(r, 0);
    uint32_t klen = a && tree_gen ? cv_ans_key_ok(vpath) : 0;
    if (!klen || cv_answers_kernel_made(vpath)) return;
    struct cv_ans_dir key = {.hash = cv_ans_hash(vpath, klen), .klen = klen};
    memcpy(key.key, vpath, klen);
    uint32_t hash = key.hash, way;
    pthread_mutex_lock(&a->lock);
    struct cv_ans_dir *d = ring_open(a, &a->dirs, hash, same_dir, &key, &way);
    d->hash = hash, d->gen = tree_gen, d->born = cv_answers_now(), d->id = *id, d->klen = klen;
    memcpy(d->key, vpath, klen);
    ring_close(a, &a->dirs, hash, way, d);
    pthread_mutex_unlock(&a->lock);
}

void cv_answers_dir_changing(struct cv_run *r, dev_t dev, ino_t ino) {
    struct cv_answers *a = table(r, 0);
    if (!a) return;
    struct cv_ans_id key = {0, (uint64_t)dev, (uint64_t)ino};
    uint32_t hash = cv_ans_did_hash(&key);
    pthread_mutex_lock(&a->publishing);
    __atomic_add_fetch(&a->dir_changes, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&a->publishing);
    pthread_mutex_lock(&a->lock);
    struct cv_ans_did *d = cv_ans_did_set(a->head, hash);
    for (uint32_t w = 0; w < CV_ANS_WAYS; w++, d++) {
        if (d->hash != hash || d->id.dev != key.dev || d->id.ino != key.ino || !d->serial) continue;
        slot_open(&d->seq);
        d->serial = 0;
        slot_close(&d->seq);
    }
    pthread_mutex_unlock(&a->lock);
}

void cv_answers_free(struct cv_run *r) {
    struct cv_answers *a = r->answers;
    if (!a) return;
    munmap(a->head, CV_ANS_BYTES);
    close(a->fd);
    pthread_mutex_destroy(&a->lock);
    pthread_mutex_destroy(&a->publishing);
    free(a);
    r->answers = NULL;
}
