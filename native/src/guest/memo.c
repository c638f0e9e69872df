#include "memo.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Past this many answers nothing more is remembered: a hook describes far fewer (six paths, 64
 * argv strings and their pointers, an address), and only what two readers share needs it. */
#define MEMO_MAX 512

struct entry {
    int kind;
    uint64_t key;
    char what[32];
    size_t len;  /* MEM: bytes held; STR, LINK: the buffer's size they were read with */
    ssize_t rc;
    char *data;
    int fd;
};

struct cv_guest_memo {
    size_t n, cap;
    struct entry *e;
};

struct cv_guest_memo *cv_memo_new(void) { return calloc(1, sizeof(struct cv_guest_memo)); }

static void drop(struct cv_guest_memo *m, size_t i) {
    free(m->e[i].data);
    if (m->e[i].fd >= 0) close(m->e[i].fd);
    m->e[i] = m->e[--m->n];
}

void cv_memo_free(struct cv_guest_memo *m) {
    if (!m) return;
    while (m->n) drop(m, 0);
    free(m->e);
    free(m);
}

static int same(const struct entry *e, int kind, uint64_t key, const char *what) {
    return e->kind == kind && e->key == key && (!what || !strcmp(e->what, what));
}

/* A string answer (STR, LINK) for a buffer of len: what the first read gave, as a read into this
 * buffer would have given it. 0 when only a read into the larger buffer can tell. */
static int serve_string(const struct entry *e, char *buf, size_t len, ssize_t *rc) {
    size_t need = e->rc < 0 ? 0 : (size_t)e->rc + (e->kind == CV_MEMO_LINK ? 2 : 1);
    if (e->rc >= 0 && need <= len) {
        memcpy(buf, e->data, (size_t)e->rc + 1);
        *rc = e->rc;
    } else if (e->rc >= 0 || len <= e->len) {
        *rc = e->rc >= 0 ? -ENAMETOOLONG : e->rc; /* too long for this buffer, or unreadable */
    } else {
        return 0;
    }
    return 1;
}

int cv_memo_get(struct cv_guest_memo *m, int kind, uint64_t key, const char *what, void *buf, size_t len,
                ssize_t *rc, int *fd) {
    for (size_t i = 0; m && i < m->n; i++) {
        const struct entry *e = &m->e[i];
        if (kind == CV_MEMO_MEM) {
            if (e->kind != CV_MEMO_MEM) continue;
            if (e->rc == 0 && key >= e->key && key - e->key <= e->len && len <= e->len - (key - e->key)) {
                memcpy(buf, e->data + (key - e->key), len);
                *rc = 0;
                return 1;
            }
            if (e->rc < 0 && e->key == key && e->len == len) {
                *rc = e->rc;
                return 1;
            }
            continue;
        }
        if (!same(e, kind, key, what)) continue;
        if (kind == CV_MEMO_STR || kind == CV_MEMO_LINK) return serve_string(e, buf, len, rc);
        *rc = e->rc;
        if (e->rc >= 0) {
            *fd = fcntl(e->fd, F_DUPFD_CLOEXEC, 3);
            if (*fd < 0) *rc = -errno;
        }
        return 1;
    }
    return 0;
}

void cv_memo_put(struct cv_guest_memo *m, int kind, uint64_t key, const char *what, const void *data, size_t len,
                 ssize_t rc, int fd) {
    if (!m) return;
    if (kind != CV_MEMO_MEM)
        for (size_t i = 0; i < m->n; i++)
            if (same(&m->e[i], kind, key, what)) drop(m, i--);
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        struct entry *grown = cap <= MEMO_MAX ? realloc(m->e, cap * sizeof *grown) : NULL;
        if (!grown) return;
        m->e = grown;
        m->cap = cap;
    }
    struct entry e = {.kind = kind, .key = key, .len = len, .rc = rc, .fd = -1};
    if (what) snprintf(e.what, sizeof e.what, "%s", what);
    if (kind == CV_MEMO_MEM && rc == 0) {
        if (!(e.data = malloc(len ? len : 1))) return;
        memcpy(e.data, data, len);
    } else if ((kind == CV_MEMO_STR || kind == CV_MEMO_LINK) && rc >= 0) {
        if (!(e.data = malloc((size_t)rc + 1))) return;
        memcpy(e.data, data, (size_t)rc);
        e.data[rc] = 0;
    } else if ((kind == CV_MEMO_FD || kind == CV_MEMO_OPEN) && rc >= 0) {
        if ((e.fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) return;
    }
    m->e[m->n++] = e;
}

void cv_memo_forget(struct cv_guest_memo *m, uint64_t addr, size_t len, int gfd) {
    char fdname[32];
    snprintf(fdname, sizeof fdname, "fd/%d", gfd);
    for (size_t i = 0; m && i < m->n; i++) {
        const struct entry *e = &m->e[i];
        size_t span = e->kind == CV_MEMO_MEM ? e->len : e->rc >= 0 ? (size_t)e->rc + 1 : 1;
        int stale = (e->kind == CV_MEMO_MEM || e->kind == CV_MEMO_STR)
                        ? len && addr < e->key + span && e->key < addr + len
                        : gfd >= 0 && (e->kind == CV_MEMO_FD ? e->key == (uint64_t)gfd : !strcmp(e->what, fdname));
        if (stale) drop(m, i--);
    }
}
