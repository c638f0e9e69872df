/* Opens made ahead of a walk (common/prefetch_proto.h): after a notified read-only open of a
 * host directory or file whose view is the host's, asked by a shim whose process listed the
 * directory holding it (find, tar, git status: a walk), the supervisor opens what the walk will
 * open next, in the kernel's listing order (or in name order, which ls -R follows, once a batch
 * in the other went unused): the object's subtree (a directory), then its
 * following siblings and their subtrees, then those of the directories above it that an open
 * listed; directories, and files once the guest opened one (tar). Each directory is published as
 * an open of it would publish it (statpub.c), so the shim can answer its listing and the stat and
 * open of its entries; it sends them all in one message when done.
 *
 * What goes to the guest is what a read-only open the filter continues would give it: an object
 * of a host directory with no twin in the upper or a read-only layer, no hidden name in it, not
 * under /dev, /proc or /sys; a directory holding a hidden name is neither placed nor walked into.
 * The supervisor may read more than the guest's uid may, so only what the mode lets any user
 * open (read, and search on the directory above) is placed. How many follows what the shim used
 * of the last batch (the window below). The walk then goes on, on the run's walk-ahead thread,
 * to the next batch, which the next ask takes when it comes from where that batch begins and
 * nothing changed since the walk's first ask; its publications are made only while no host
 * directory began to change (cv_answers_publish_begin). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/answers_fmt.h"
#include "common/prefetch_proto.h"
#include "common/util.h"
#include "handlers.h"
#include "handlers/statpub.h"
#include "overlay/vfs.h"
#include "supervisor/answers.h"

#define DEPTH 24       /* directories open at once on the way down */
#define OPENS_MAX 160 /* opens of one walk ahead, placed or not */

struct frame {
    int fd;
    int level; /* what its publication holds: which of its entries the shim can find */
    mode_t mode;
    uint64_t dev;
    size_t plen; /* its path's length in the walk's buffer */
    struct cv_listing l;
    size_t off;      /* the next record of l */
    uint32_t *order; /* a walk in name order: the records' offsets in that order, next the next */
    uint32_t norder, next;
};

/* An object the walk opened ahead (our fd), for the next free slot. */
struct found {
    int fd;
    uint64_t dev, ino;
};

struct walk {
    struct cv_run *r;
    pid_t pid;        /* the process walking */
    struct cv_pf_ask ask;
    uint64_t tree_gen, changes; /* at its first ask: its publications hold while they do */
    int files;   /* files too, not only directories */
    int sorted;  /* in name order (ls -R opens so), not the listing's */
    int level;   /* what a publication must hold for the shim to find them */
    int want;    /* how many more to find */
    int opens;   /* budget left */
    int ahead;   /* on the thread ahead: its publications checked against changes */
    int dead;    /* a change began: what it found may not hold */
    int ups;     /* directories above the first it went on into */
    int depth;
    struct frame f[DEPTH];
    char path[PATH_MAX];
    struct found found[CV_PF_SLOTS + 1];
    int nfound;
};

static int held(const struct cv_pf_ask *ask, uint64_t dev, uint64_t ino) {
    for (int i = 0; i < CV_PF_SLOTS; i++)
        if ((ask->slot[i].state == CV_PF_HELD || ask->slot[i].state == CV_PF_SENT) && ask->slot[i].dev == dev &&
            ask->slot[i].ino == ino)
            return 1;
    return 0;
}

/* fd kept among what the walk found: a copy of it (the walk goes on into a directory with its
 * own), or fd itself (given: a file), closed when it cannot be kept. */
static void keep(struct walk *w, int fd, const struct statx *st, int given) {
    uint64_t dev = makedev(st->stx_dev_major, st->stx_dev_minor);
    int had = 0;
    for (int i = 0; i < w->nfound && !had; i++) had = w->found[i].dev == dev && w->found[i].ino == st->stx_ino;
    int copy = had || w->nfound == CV_PF_SLOTS + 1 ? -1 : given ? fd : fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy >= 0) {
        w->found[w->nfound++] = (struct found){copy, dev, st->stx_ino};
        w->want--;
    } else if (!had) {
        w->want = 0; /* no room, or no fd */
    }
    if (given && copy < 0) close(fd);
}

static void drop_found(struct walk *w) {
    for (int i = 0; i < w->nfound; i++) close(w->found[i].fd);
    w->nfound = 0;
}

/* found[from...] into the ask's free slots (not what it holds already), window at the most, in
 * one message over a socket put at the ask's number. How many went. What found holds after is
 * what did not fit, the walk's next in its order (nothing when the message did not go). */
static int send_found(struct cv_notif *n, struct cv_pf_ask *ask, struct walk *w, int from, int window) {
    int sent[CV_PF_SLOTS], nsent = 0, sv[2] = {-1, -1}, went = 0, i = from;
    for (int s = 0; i < w->nfound && nsent < window; i++) {
        if (held(ask, w->found[i].dev, w->found[i].ino)) continue;
        while (s < CV_PF_SLOTS && (ask->slot[s].state != CV_PF_FREE || ask->slot[s].fd < 0)) s++;
        if (s == CV_PF_SLOTS) break;
        ask->slot[s].state = CV_PF_SENT, ask->slot[s].flags = O_NONBLOCK;
        ask->slot[s].dev = w->found[i].dev, ask->slot[s].ino = w->found[i].ino;
        sent[nsent++] = w->found[i].fd;
    }
    union {
        char buf[CMSG_SPACE(sizeof(int) * CV_PF_SLOTS)];
        struct cmsghdr align;
    } u;
    char tag = 'F';
    struct iovec iov = {&tag, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nsent)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nsent);
    memcpy(CMSG_DATA(c), sent, sizeof(int) * (size_t)nsent);
    if (nsent && ask->sock >= 0 && socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0 &&
        sendmsg(sv[0], &m, MSG_DONTWAIT) == 1 && cv_guest_setfd(&n->g, sv[1], ask->sock, 1) == 0)
        went = nsent;
    for (int k = 0; k < 2; k++)
        if (sv[k] >= 0) close(sv[k]);
    int left = went ? w->nfound - i : 0;
    for (int k = 0; k < w->nfound - left; k++) close(w->found[k].fd);
    memmove(w->found, w->found + (w->nfound - left), sizeof *w->found * (size_t)left);
    w->nfound = left;
    for (int k = 0; k < CV_PF_SLOTS && !went; k++)
        if (ask->slot[k].state == CV_PF_SENT) ask->slot[k].state = CV_PF_FREE;
    return went;
}

static void pop(struct walk *w) {
    struct frame *f = &w->f[--w->depth];
    close(f->fd);
    free(f->l.buf);
    free(f->order);
    if (w->depth) w->path[w->f[w->depth - 1].plen] = 0;
}

static int by_name(const void *x, const void *y, void *buf) {
    const struct dirent64 *a = (const void *)((const char *)buf + *(const uint32_t *)x),
                          *b = (const void *)((const char *)buf + *(const uint32_t *)y);
    return strcmp(a->d_name, b->d_name);
}

/* f's records in name order, . and .. left out. 0, or -1 without memory. */
static int sort_names(struct frame *f) {
    uint32_t n = 0;
    for (size_t off = 0; off < f->l.len; off += ((const struct dirent64 *)(const void *)(f->l.buf + off))->d_reclen)
        n++;
    if (!(f->order = malloc(sizeof *f->order * (n ? n : 1)))) return -1;
    for (size_t off = 0; off < f->l.len;) {
        const struct dirent64 *d = (const void *)(f->l.buf + off);
        if (!cv_dots(d->d_name)) f->order[f->norder++] = (uint32_t)off;
        off += d->d_reclen;
    }
    qsort_r(f->order, f->norder, sizeof *f->order, by_name, f->l.buf);
    return 0;
}

/* The next record of f, in the walk's order; NULL at the end. */
static const struct dirent64 *next_record(struct frame *f) {
    if (f->order) return f->next < f->norder ? (const void *)(f->l.buf + f->order[f->next++]) : NULL;
    if (f->off >= f->l.len) return NULL;
    const struct dirent64 *d = (const void *)(f->l.buf + f->off);
    f->off += d->d_reclen;
    return d;
}

/* Push the directory open as fd (ours, closed on failure), named by w->path, to be walked: its
 * publication holding at least level (what the walk opens: files need every entry), its listing
 * the table's copy. One not published yet is published (its view is the kernel's when the
 * directory above it has that view), unless unknown says the walk cannot tell. */
static int push(struct walk *w, int fd, const struct statx *ds, int level, int unknown) {
    struct cv_run *r = w->r;
    struct cv_ans_id id = cv_ans_id_of(ds);
    struct frame *f = &w->f[w->depth];
    int had = cv_answers_level(r, &id);
    if (had > level) level = had;
    if (w->depth == DEPTH || (had < 0 && unknown) || !S_ISDIR(ds->stx_mode) || cv_answers_kernel_made(w->path) ||
        cv_vfs_holds_hidden(r, w->path)) {
        close(fd);
        return -1;
    }
    *f = (struct frame){fd, level, ds->stx_mode, makedev(ds->stx_dev_major, ds->stx_dev_minor), strlen(w->path),
                        {NULL, 0, 1, 0}, 0, NULL, 0, 0};
    if (had < level || cv_answers_listing_copy(r, &id, &f->l.buf, &f->l.len) < 0) {
        if (cv_read_listing(fd, &f->l) == 0 && f->l.whole && lseek(fd, 0, SEEK_SET) == 0) {
            /* ahead: only while no directory began to change since the walk's first ask */
            if (!w->ahead) cv_publish_listed(r, fd, ds, level, &f->l, w->tree_gen, w->path);
            else if (cv_answers_publish_begin(r, w->changes)) {
                cv_publish_listed(r, fd, ds, level, &f->l, w->tree_gen, w->path);
                cv_answers_publish_end(r);
            } else
                w->dead = 1;
        }
    }
    if (!f->l.buf || cv_answers_level(r, &id) < level || (w->sorted && sort_names(f) < 0)) {
        free(f->l.buf); /* else the shim could find none of it */
        close(fd);
        return -1;
    }
    w->depth++;
    return 0;
}

#define STAT_MASK (CV_PUB_ID_MASK | STATX_TYPE | STATX_MODE)

/* Opened by name in the directory at, and what it is. -1 unless a directory (dir) or a file. */
static int open_in(int at, const char *name, int dir, struct statx *st) {
    int fd = openat(at, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
    if (fd >= 0 && (statx(fd, "", AT_EMPTY_PATH, STAT_MASK, st) < 0 || !(st->stx_mask & STATX_MNT_ID) ||
                    (dir ? !S_ISDIR(st->stx_mode) : !S_ISREG(st->stx_mode)))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* On from just after name: in name order, from the first that sorts after it. */
static void skip_past(struct frame *f, const char *name) {
    if (f->order) {
        while (f->next < f->norder &&
               strcmp(((const struct dirent64 *)(const void *)(f->l.buf + f->order[f->next]))->d_name, name) <= 0)
            f->next++;
        return;
    }
    for (const struct dirent64 *d; (d = next_record(f)) && strcmp(d->d_name, name);) {
    }
}

/* The next entry of the deepest directory: placed, and walked into when a directory. */
static void step(struct walk *w) {
    struct frame *f = &w->f[w->depth - 1];
    const struct dirent64 *d = w->opens > 0 ? next_record(f) : NULL;
    if (!d) {
        pop(w);
        return;
    }
    const char *name = d->d_name;
    int dir = d->d_type == DT_DIR;
    if (cv_dots(name) || !(f->mode & S_IXOTH)) return;
    if (!dir && (d->d_type != DT_REG || !w->files || f->level < CV_ANS_ENTRIES || held(&w->ask, f->dev, d->d_ino)))
        return;
    size_t nlen = strlen(name);
    if (f->plen + 1 + nlen >= sizeof w->path) return;
    w->path[f->plen] = '/';
    memcpy(w->path + f->plen + 1, name, nlen + 1);
    struct statx st;
    int fd = -1;
    if (!cv_answers_kernel_made(w->path) && !(dir && cv_vfs_holds_hidden(w->r, w->path))) {
        w->opens--;
        fd = open_in(f->fd, name, dir, &st);
    }
    /* what any user may open (a directory: and walk into) */
    if (fd >= 0 && (st.stx_mode & (S_IROTH | (dir ? S_IXOTH : 0))) != (S_IROTH | (dir ? S_IXOTH : 0))) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0) keep(w, fd, &st, !dir);
    /* a directory is published even when the last one placed: the shim serves its listing */
    if (fd >= 0 && dir && push(w, fd, &st, f->level, 0) == 0) return;
    w->path[f->plen] = 0;
}

/* The directory holding the last one walked, from just after that one's name, when an open
 * listed it (a walk from higher up): 0, or -1. */
static int ascend(struct walk *w) {
    char *slash = strrchr(w->path, '/');
    if (!slash || slash == w->path) return -1;
    char name[NAME_MAX + 1];
    size_t nlen = strlen(slash + 1);
    if (nlen > NAME_MAX) return -1;
    memcpy(name, slash + 1, nlen + 1);
    *slash = 0;
    struct statx st;
    int fd = open(w->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || statx(fd, "", AT_EMPTY_PATH, STAT_MASK, &st) < 0 || !(st.stx_mask & STATX_MNT_ID)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    struct cv_ans_id id = cv_ans_id_of(&st);
    if (!cv_answers_listed(w->r, &id)) {
        close(fd);
        return -1;
    }
    if (push(w, fd, &st, w->level, 1) < 0) return -1;
    skip_past(&w->f[w->depth - 1], name);
    return 0;
}

/* On until want are found, the walk ends or a change began. */
static void walk_on(struct walk *w) {
    w->opens = OPENS_MAX;
    while (w->want > 0 && w->opens > 0 && !w->dead && (w->depth || (w->ups < DEPTH && (w->ups++, ascend(w) == 0))))
        step(w);
}

static void walk_free(struct walk *w) {
    if (!w) return;
    while (w->depth) pop(w);
    drop_found(w);
    free(w);
}

/* The run's thread ahead: the walk the receiver handed over after answering an ask, walked on
 * to the next batch while the guest uses this one. */
struct cv_prefetcher {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t more, done;
    struct walk *w; /* the walk it holds, NULL: none */
    int busy, stopping;
};

static void *ahead_main(void *arg) {
    struct cv_prefetcher *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->busy && !p->stopping) pthread_cond_wait(&p->more, &p->lock);
        if (p->stopping) break;
        struct walk *w = p->w;
        pthread_mutex_unlock(&p->lock);
        walk_on(w);
        pthread_mutex_lock(&p->lock);
        p->busy = 0;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* The walk ahead, done (NULL: none), taken from the thread. */
static struct walk *take(struct cv_run *r) {
    struct cv_prefetcher *p = r->prefetcher;
    if (!p) return NULL;
    pthread_mutex_lock(&p->lock);
    while (p->busy) pthread_cond_wait(&p->done, &p->lock);
    struct walk *w = p->w;
    p->w = NULL;
    pthread_mutex_unlock(&p->lock);
    return w;
}

static void hand_over(struct cv_run *r, struct walk *w) {
    struct cv_prefetcher *p = r->prefetcher;
    if (!p && (p = calloc(1, sizeof *p))) {
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->more, NULL);
        pthread_cond_init(&p->done, NULL);
        if (pthread_create(&p->thread, NULL, ahead_main, p) != 0) {
            pthread_cond_destroy(&p->done);
            pthread_cond_destroy(&p->more);
            pthread_mutex_destroy(&p->lock);
            free(p);
            p = NULL;
        }
        r->prefetcher = p;
    }
    if (!p) {
        walk_free(w);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->w = w, p->busy = 1;
    pthread_cond_signal(&p->more);
    pthread_mutex_unlock(&p->lock);
}

void cv_prefetch_stop(struct cv_run *r) {
    struct cv_prefetcher *p = r->prefetcher;
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_signal(&p->more);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    walk_free(p->w);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->more);
    pthread_mutex_destroy(&p->lock);
    free(p);
    r->prefetcher = NULL;
}

/* Where the walk ahead found v (the guest opened those before it without asking: tar, once the
 * directory holding one is no longer among the last it listed), -1: not there. */
static int found_at(const struct walk *w, const struct cv_vnode *v) {
    for (int i = 0; i < w->nfound; i++)
        if (w->found[i].dev == (uint64_t)v->st.st_dev && w->found[i].ino == (uint64_t)v->st.st_ino) return i;
    return -1;
}

/* How many the shim takes at its next ask when it used this batch. */
static int next_window(int window) { return window >= CV_PF_SLOTS / 2 ? CV_PF_SLOTS : window < 2 ? 2 : window * 2; }

void cv_notif_prefetch(struct cv_notif *n, const struct cv_vnode *v, uint64_t ask_addr, uint64_t tree_gen) {
    struct cv_run *r = n->run;
    int dir = S_ISDIR(v->st.st_mode);
    size_t plen = v->vpath && *v->name ? (size_t)(v->name - v->vpath) - 1 : 0;
    struct cv_pf_ask ask;
    if (!ask_addr || !tree_gen || !cv_kernel_view(v) || (!dir && !S_ISREG(v->st.st_mode)) || !plen ||
        plen + 1 + strlen(v->name) >= PATH_MAX || cv_guest_read(&n->g, ask_addr, &ask, sizeof ask) < 0 ||
        ask.magic != CV_PF_MAGIC)
        return;
    /* twice the last, from 2. When the shim used less than half of what was placed, the other
     * order (ls -R opens in name order, not the listing's) at once, as many; when that was not
     * followed either, a quarter of it, down to none: the shim then asks only once in 32 opens
     * it could, fewer after each such ask not followed (shim/prefetch.c), and such an ask gets 2 */
    int window;
    uint32_t last = ask.window;
    if (ask.placed && ask.hits * 2 < ask.placed) {
        ask.sorted = !ask.sorted;
        ask.turned = !ask.turned;
        window = ask.turned ? (int)(last < 2 ? 2 : last) : (int)(last / 4);
    } else {
        ask.turned = 0;
        window = next_window((int)(last > CV_PF_SLOTS ? CV_PF_SLOTS : last));
    }
    ask.window = (uint32_t)window;
    ask.taken = 1;
    ask.placed = 0;
    int files = !dir || ask.files, sorted = ask.sorted == 1;
    /* the walk ahead, when what it found holds the object the guest opens now, for this
     * process, in this order, with nothing changed since it began */
    struct walk *w = take(r);
    int from = w ? found_at(w, v) + 1 : 0; /* after what the guest opens now */
    if (w && (w->pid != (pid_t)n->req->pid || w->dead || !from || w->files != files || w->sorted != sorted ||
              cv_answers_dir_changes(r) != w->changes || cv_answers_tree_gen(r) != w->tree_gen)) {
        walk_free(w);
        w = NULL;
        from = 0;
    }
    if (!window) {
        walk_free(w);
        cv_guest_write(&n->g, ask_addr, &ask, offsetof(struct cv_pf_ask, slot));
        return;
    }
    if (!w) {
        if (!(w = calloc(1, sizeof *w))) return;
        w->r = r, w->pid = (pid_t)n->req->pid, w->ask = ask, w->tree_gen = tree_gen;
        w->changes = cv_answers_dir_changes(r), w->files = files, w->sorted = sorted;
        w->level = files ? CV_ANS_ENTRIES : CV_ANS_DIRS_ONLY, w->want = window;
        /* the directory holding it, from just after its name; before that, a directory's entries */
        memcpy(w->path, v->vpath, plen);
        w->path[plen] = 0;
        struct statx st;
        int fd = cv_reopen_dir(v->psrc, O_RDONLY | O_DIRECTORY);
        if (fd >= 0 && (statx(fd, "", AT_EMPTY_PATH, STAT_MASK, &st) < 0 || !(st.stx_mask & STATX_MNT_ID))) {
            close(fd);
            fd = -1;
        }
        if (fd >= 0 && push(w, fd, &st, w->level, 0) == 0) skip_past(&w->f[0], v->name);
        if (dir) { /* as its open just published it (handlers/open.c) */
            w->path[plen] = '/';
            memcpy(w->path + plen + 1, v->name, strlen(v->name) + 1);
            fd = open_in(w->depth ? w->f[0].fd : v->psrc, v->name, 1, &st);
            if (fd < 0 || push(w, fd, &st, w->level, 0) < 0) w->path[plen] = 0;
        }
        walk_on(w);
    }
    ask.placed = (uint32_t)send_found(n, &ask, w, from, window);
    ask.files |= (uint32_t)files;
    cv_guest_write(&n->g, ask_addr, &ask, sizeof ask);
    /* on, ahead: the object the guest will ask from next, then its next batch */
    if (!w->depth && w->ups >= DEPTH) {
        walk_free(w);
        return;
    }
    int slots = 0; /* the ask's own, which its next batch fills at the most */
    for (int i = 0; i < CV_PF_SLOTS; i++) slots += ask.slot[i].fd >= 0 && ask.slot[i].state != CV_PF_OFF;
    int next = next_window(window);
    w->ask = ask, w->ahead = 1, w->want = 1 + (next < slots ? next : slots) - w->nfound;
    hand_over(r, w);
}
