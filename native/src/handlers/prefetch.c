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
 * of the last batch (the window below). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

struct walk {
    struct cv_notif *n;
    int sent[CV_PF_SLOTS]; /* our copies of what goes, in the order of the slots marked SENT */
    int nsent;
    struct cv_pf_ask ask;
    uint64_t tree_gen;
    int files;   /* files too, not only directories */
    int sorted;  /* in name order (ls -R opens so), not the listing's */
    int level;   /* what a publication must hold for the shim to find them */
    int window;  /* how many more to place */
    int opens;   /* budget left */
    int depth;
    struct frame f[DEPTH];
    char path[PATH_MAX];
};

static int held(const struct walk *w, uint64_t dev, uint64_t ino) {
    for (int i = 0; i < CV_PF_SLOTS; i++)
        if ((w->ask.slot[i].state == CV_PF_HELD || w->ask.slot[i].state == CV_PF_SENT) && w->ask.slot[i].dev == dev &&
            w->ask.slot[i].ino == ino)
            return 1;
    return 0;
}

/* A copy of fd goes to the next free slot of the shim's. */
static void place(struct walk *w, int fd, const struct statx *st) {
    for (int i = 0; i < CV_PF_SLOTS; i++) {
        struct cv_pf_slot *s = &w->ask.slot[i];
        if (s->state != CV_PF_FREE || s->fd < 0) continue;
        int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (copy < 0) break;
        w->sent[w->nsent++] = copy;
        s->state = CV_PF_SENT, s->flags = O_NONBLOCK;
        s->dev = makedev(st->stx_dev_major, st->stx_dev_minor), s->ino = st->stx_ino;
        w->window--;
        return;
    }
    w->window = 0;
}

/* The copies, in one message over a socket put at the ask's number. How many went. */
static int send_all(struct walk *w) {
    int sv[2] = {-1, -1}, went = 0;
    union {
        char buf[CMSG_SPACE(sizeof(int) * CV_PF_SLOTS)];
        struct cmsghdr align;
    } u;
    char tag = 'F';
    struct iovec iov = {&tag, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)w->nsent)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)w->nsent);
    memcpy(CMSG_DATA(c), w->sent, sizeof(int) * (size_t)w->nsent);
    if (w->nsent && w->ask.sock >= 0 && socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0 &&
        sendmsg(sv[0], &m, MSG_DONTWAIT) == 1 && cv_guest_setfd(&w->n->g, sv[1], w->ask.sock, 1) == 0)
        went = w->nsent;
    for (int i = 0; i < 2; i++)
        if (sv[i] >= 0) close(sv[i]);
    for (int i = 0; i < w->nsent; i++) close(w->sent[i]);
    for (int i = 0; i < CV_PF_SLOTS && !went; i++)
        if (w->ask.slot[i].state == CV_PF_SENT) w->ask.slot[i].state = CV_PF_FREE;
    return went;
}

static void pop(struct walk *w) {
    struct frame *f = &w->f[--w->depth];
    close(f->fd);
    free(f->l.buf);
    free(f->order);
    if (w->depth) w->path[w->f[w->depth - 1].plen] = 0;
}

static int dots(const char *name) { return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])); }

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
        if (!dots(d->d_name)) f->order[f->norder++] = (uint32_t)off;
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
    struct cv_run *r = w->n->run;
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
        if (cv_read_listing(fd, &f->l) == 0 && f->l.whole && lseek(fd, 0, SEEK_SET) == 0)
            cv_publish_listed(r, fd, ds, level, &f->l, w->tree_gen, w->path);
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
    if (dots(name) || !(f->mode & S_IXOTH)) return;
    if (!dir && (d->d_type != DT_REG || !w->files || f->level < CV_ANS_ENTRIES || held(w, f->dev, d->d_ino))) return;
    size_t nlen = strlen(name);
    if (f->plen + 1 + nlen >= sizeof w->path) return;
    w->path[f->plen] = '/';
    memcpy(w->path + f->plen + 1, name, nlen + 1);
    struct statx st;
    int fd = -1;
    if (!cv_answers_kernel_made(w->path) && !(dir && cv_vfs_holds_hidden(w->n->run, w->path))) {
        w->opens--;
        fd = open_in(f->fd, name, dir, &st);
    }
    /* what any user may open (a directory: and walk into) */
    if (fd >= 0 && (st.stx_mode & (S_IROTH | (dir ? S_IXOTH : 0))) != (S_IROTH | (dir ? S_IXOTH : 0))) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0 && !held(w, makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino)) place(w, fd, &st);
    /* a directory is published even when the last one placed: the shim serves its listing */
    if (fd >= 0 && dir && push(w, fd, &st, f->level, 0) == 0) return;
    if (fd >= 0 && !dir) close(fd);
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
    if (!cv_answers_listed(w->n->run, &id)) {
        close(fd);
        return -1;
    }
    if (push(w, fd, &st, w->level, 1) < 0) return -1;
    skip_past(&w->f[w->depth - 1], name);
    return 0;
}

void cv_notif_prefetch(struct cv_notif *n, const struct cv_vnode *v, uint64_t ask_addr, uint64_t tree_gen) {
    int dir = S_ISDIR(v->st.st_mode);
    size_t plen = v->vpath && *v->name ? (size_t)(v->name - v->vpath) - 1 : 0;
    if (!ask_addr || !tree_gen || !cv_kernel_view(v) || (!dir && !S_ISREG(v->st.st_mode)) || !plen ||
        plen + 1 + strlen(v->name) >= PATH_MAX)
        return;
    struct walk *w = malloc(sizeof *w);
    if (!w) return;
    w->window = 0;
    w->n = n, w->tree_gen = tree_gen, w->depth = 0, w->opens = OPENS_MAX, w->nsent = 0;
    if (cv_guest_read(&n->g, ask_addr, &w->ask, sizeof w->ask) < 0 || w->ask.magic != CV_PF_MAGIC) {
        free(w);
        return;
    }
    /* twice the last, from 2. When the shim used less than half of what was placed, the other
     * order (ls -R opens in name order, not the listing's) at once, as many; when that was not
     * followed either, a quarter of it, down to none: the shim then asks only once in 32 opens
     * it could, fewer after each such ask not followed (shim/prefetch.c), and such an ask gets 2 */
    uint32_t last = w->ask.window;
    if (w->ask.placed && w->ask.hits * 2 < w->ask.placed) {
        w->ask.sorted = !w->ask.sorted;
        w->ask.turned = !w->ask.turned;
        w->window = w->ask.turned ? (int)(last < 2 ? 2 : last) : (int)(last / 4);
    } else {
        w->ask.turned = 0;
        w->window = last >= CV_PF_SLOTS / 2 ? CV_PF_SLOTS : last < 2 ? 2 : (int)(last * 2);
    }
    w->ask.window = (uint32_t)w->window;
    w->ask.taken = 1;
    w->files = !dir || w->ask.files;
    w->sorted = w->ask.sorted == 1;
    w->level = w->files ? CV_ANS_ENTRIES : CV_ANS_DIRS_ONLY;
    w->ask.placed = 0;
    if (!w->window) {
        cv_guest_write(&n->g, ask_addr, &w->ask, offsetof(struct cv_pf_ask, slot));
        free(w);
        return;
    }
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
    for (int up = 0; w->window > 0 && w->opens > 0 && (w->depth || (up++ < DEPTH && ascend(w) == 0));)
        step(w);
    while (w->depth) pop(w);
    w->ask.placed = (uint32_t)send_all(w);
    w->ask.files |= (uint32_t)w->files;
    cv_guest_write(&n->g, ask_addr, &w->ask, sizeof w->ask);
    free(w);
}
