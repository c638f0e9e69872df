#include "walkmemo.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

/* Entries: enough for the checkpoints of a tree thousands of levels deep (the walk leaves one
 * every few levels, overlay/vfs.c) and the directories a build works in. A full memo makes room
 * by dropping the least recently used entry (a list, most recent first). */
#define CAP 2048
#define NBUCKETS 4096

struct entry {
    char *vpath; /* NULL: free */
    size_t len;
    uint64_t hash;
    int newer, older; /* neighbours in the recency list, or -1 */
    struct cv_wmemo_dir dir;
    int chain;   /* the next entry in its bucket, or -1 */
    int idchain; /* the next entry with an upper directory in its identity bucket, or -1 */
    int pin;     /* the upper directory held open (O_PATH), or -1 */
};

struct cv_wmemo {
    pthread_mutex_t lock;
    struct entry e[CAP];
    int bucket[NBUCKETS];
    int idbucket[NBUCKETS]; /* entries with an upper directory, by its dev/ino */
    size_t n, npins;
    int head, tail; /* most and least recently used, or -1 */
    int free_at;    /* where to look for a free entry first */
};

static uint64_t step(uint64_t h, unsigned char c) { return (h ^ c) * 1099511628211ull; }
#define SEED 1469598103934665603ull

static struct cv_wmemo *memo(struct cv_run *r, int make) {
    if (r->wmemo || !make) return r->wmemo;
    struct cv_wmemo *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->lock, NULL);
    for (int i = 0; i < NBUCKETS; i++) m->bucket[i] = m->idbucket[i] = -1;
    m->head = m->tail = -1;
    r->wmemo = m;
    return m;
}

static size_t id_slot(dev_t dev, ino_t ino) {
    return (size_t)((((uint64_t)dev * 0x9e3779b97f4a7c15ull) ^ (uint64_t)ino) % NBUCKETS);
}

static int lookup(struct cv_wmemo *m, const char *p, size_t len, uint64_t h) {
    for (int i = m->bucket[h % NBUCKETS]; i >= 0; i = m->e[i].chain)
        if (m->e[i].hash == h && m->e[i].len == len && !memcmp(m->e[i].vpath, p, len)) return i;
    return -1;
}

static void unlink_used(struct cv_wmemo *m, int i) {
    struct entry *x = &m->e[i];
    if (x->newer >= 0) m->e[x->newer].older = x->older;
    else m->head = x->older;
    if (x->older >= 0) m->e[x->older].newer = x->newer;
    else m->tail = x->newer;
}

static void push_used(struct cv_wmemo *m, int i) {
    struct entry *x = &m->e[i];
    x->newer = -1;
    x->older = m->head;
    if (m->head >= 0) m->e[m->head].newer = i;
    m->head = i;
    if (m->tail < 0) m->tail = i;
}

static void drop(struct cv_wmemo *m, int i) {
    struct entry *x = &m->e[i];
    unlink_used(m, i);
    int *link = &m->bucket[x->hash % NBUCKETS];
    while (*link != i) link = &m->e[*link].chain;
    *link = x->chain;
    if (x->dir.has_up) {
        link = &m->idbucket[id_slot(x->dir.dev, x->dir.ino)];
        while (*link != i) link = &m->e[*link].idchain;
        *link = x->idchain;
    }
    free(x->vpath);
    x->vpath = NULL;
    if (x->pin >= 0) {
        close(x->pin);
        x->pin = -1;
        m->npins--;
    }
    m->n--;
}

int cv_wmemo_find(struct cv_run *r, const char *vpath, size_t *len, struct cv_wmemo_dir *dir) {
    struct cv_wmemo *m = memo(r, 0);
    if (!m || vpath[0] != '/') return 0;
    /* The hashes of the last CV_WMEMO_REACH prefixes that end a component, in one pass. */
    struct {
        uint64_t h;
        size_t len;
    } ends[CV_WMEMO_REACH];
    size_t nends = 0;
    uint64_t h = SEED;
    for (size_t i = 0;; i++) {
        if ((vpath[i] == '/' || !vpath[i]) && i > 1) {
            ends[nends % CV_WMEMO_REACH].h = h;
            ends[nends % CV_WMEMO_REACH].len = i;
            nends++;
        }
        if (!vpath[i]) break;
        h = step(h, (unsigned char)vpath[i]);
    }
    int found = 0;
    pthread_mutex_lock(&m->lock);
    for (size_t k = 0; k < nends && k < CV_WMEMO_REACH && !found; k++) {
        size_t at = (nends - 1 - k) % CV_WMEMO_REACH;
        int i = lookup(m, vpath, ends[at].len, ends[at].h);
        if (i < 0) continue;
        if (m->head != i) {
            unlink_used(m, i);
            push_used(m, i);
        }
        *len = ends[at].len;
        *dir = m->e[i].dir;
        found = 1;
    }
    pthread_mutex_unlock(&m->lock);
    return found;
}

char *cv_wmemo_find_id(struct cv_run *r, dev_t dev, ino_t ino, struct cv_wmemo_dir *dir, int *pinned) {
    struct cv_wmemo *m = memo(r, 0);
    if (!m) return NULL;
    char *out = NULL;
    pthread_mutex_lock(&m->lock);
    for (int i = m->idbucket[id_slot(dev, ino)]; i >= 0 && !out; i = m->e[i].idchain) {
        const struct entry *x = &m->e[i];
        if (x->dir.dev == dev && x->dir.ino == ino) {
            out = strdup(x->vpath);
            *dir = x->dir;
            *pinned = x->pin >= 0;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return out;
}

int cv_wmemo_holds(struct cv_run *r, const char *vpath, dev_t dev, ino_t ino, struct cv_wmemo_dir *dir) {
    struct cv_wmemo *m = memo(r, 0);
    if (!m) return 0;
    int found = 0;
    pthread_mutex_lock(&m->lock);
    for (int i = m->idbucket[id_slot(dev, ino)]; i >= 0 && !found; i = m->e[i].idchain) {
        const struct entry *x = &m->e[i];
        if (x->dir.dev == dev && x->dir.ino == ino && !strcmp(x->vpath, vpath)) {
            *dir = x->dir;
            found = 1;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return found;
}

void cv_wmemo_put(struct cv_run *r, const char *vpath, size_t len, const struct cv_wmemo_dir *dir, int fd) {
    struct cv_wmemo *m = memo(r, 1);
    if (!m || len < 2 || vpath[0] != '/') return;
    uint64_t h = SEED;
    for (size_t i = 0; i < len; i++) h = step(h, (unsigned char)vpath[i]);
    pthread_mutex_lock(&m->lock);
    int i = lookup(m, vpath, len, h);
    if (i >= 0) drop(m, i); /* made again: the newest answer */
    char *copy = malloc(len + 1);
    if (!copy) {
        pthread_mutex_unlock(&m->lock);
        return;
    }
    memcpy(copy, vpath, len);
    copy[len] = 0;
    int slot = -1;
    if (m->n < CAP) {
        while (m->e[m->free_at].vpath) m->free_at = (m->free_at + 1) % CAP;
        slot = m->free_at;
    } else {
        slot = m->tail;
        drop(m, slot);
    }
    struct entry *x = &m->e[slot];
    *x = (struct entry){.vpath = copy, .len = len, .hash = h, .dir = *dir, .pin = -1};
    struct stat st;
    if (fd >= 0 && dir->has_up && !dir->lmask && len >= CV_WMEMO_PIN_FROM && m->npins >= CV_WMEMO_PINS)
        for (int k = m->tail; k >= 0; k = m->e[k].newer) /* the least recently used one gives its up */
            if (m->e[k].pin >= 0) {
                close(m->e[k].pin);
                m->e[k].pin = -1;
                m->npins--;
                break;
            }
    if (fd >= 0 && dir->has_up && !dir->lmask && len >= CV_WMEMO_PIN_FROM && m->npins < CV_WMEMO_PINS &&
        fstat(fd, &st) == 0 && st.st_dev == dir->dev && st.st_ino == dir->ino) {
        x->pin = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (x->pin >= 0) m->npins++;
    }
    x->chain = m->bucket[h % NBUCKETS];
    m->bucket[h % NBUCKETS] = slot;
    x->idchain = -1;
    if (dir->has_up) {
        size_t b = id_slot(dir->dev, dir->ino);
        x->idchain = m->idbucket[b];
        m->idbucket[b] = slot;
    }
    push_used(m, slot);
    m->n++;
    pthread_mutex_unlock(&m->lock);
}

void cv_wmemo_forget(struct cv_run *r, const char *vpath) {
    struct cv_wmemo *m = memo(r, 0);
    if (!m) return;
    size_t l = strlen(vpath);
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < CAP && m->n; i++) /* (shorter ones are not below it: no compare) */
        if (m->e[i].vpath && m->e[i].len >= l && cv_path_under(m->e[i].vpath, vpath)) drop(m, i);
    pthread_mutex_unlock(&m->lock);
}

void cv_wmemo_clear(struct cv_run *r) {
    struct cv_wmemo *m = memo(r, 0);
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < CAP && m->n; i++)
        if (m->e[i].vpath) drop(m, i);
    pthread_mutex_unlock(&m->lock);
}

void cv_wmemo_free(struct cv_run *r) {
    struct cv_wmemo *m = r->wmemo;
    if (!m) return;
    cv_wmemo_clear(r);
    pthread_mutex_destroy(&m->lock);
    free(m);
    r->wmemo = NULL;
}
