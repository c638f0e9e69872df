/* The shim's half of the walk ahead (common/prefetch_proto.h): a read-only open of a published
 * directory's entry that the supervisor placed in one of this process's slots is served from
 * it; any other such open of a directory this process listed asks for the walk's next ones.
 *
 * The slots are CV_PF_SLOTS fd numbers just below min(RLIMIT_NOFILE, 1024) - 16, where nothing
 * lands while a process holds fewer fds than that: every number a native open would give stays
 * free for the guest's own opens. A slot is taken only while its fd is the object placed there
 * (a guest that closed or reused the number gets its open the usual way); one the guest put
 * something at is never used again. The slots belong to the process that asked (a vfork child
 * shares this memory, not the fds; a fork child's copies are left alone until its exec closes
 * them). One thread at a time: another one meanwhile opens as ever. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/answers_fmt.h"
#include "common/prefetch_proto.h"
#include "shim/shim.h"

static struct cv_pf_ask ask;
static long owner; /* the process the slots are numbers of; -1: no slots here */
static int busy;
static uint32_t hits;
#define LISTED 8 /* the directories this process listed last: a walk's sign */
static struct cv_ans_id listed[LISTED];
static uint32_t listed_at;

void cv_pf_listed(const struct cv_ans_id *id) {
    for (int i = 0; i < LISTED; i++)
        if (cv_ans_same_id(&listed[i], id)) return;
    uint32_t i = __atomic_fetch_add(&listed_at, 1, __ATOMIC_RELAXED) % LISTED;
    listed[i] = *id; /* a torn one is a walk not seen */
}

static int was_listed(const struct cv_ans_id *id) {
    for (int i = 0; i < LISTED; i++)
        if (cv_ans_same_id(&listed[i], id)) return 1;
    return 0;
}

/* The slot's fd is still the object placed there, and that one still has a name. */
static int still_ours(const struct cv_pf_slot *s) {
    struct stat st;
    return raw6(SYS_newfstatat, s->fd, 0, (long)&st, AT_EMPTY_PATH, 0, 0) == 0 && st.st_dev == s->dev &&
           st.st_ino == s->ino && st.st_nlink > 0;
}

static void set_up(long pid) {
    struct rlimit lim;
    if (raw6(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, (long)&lim, 0, 0) != 0 || lim.rlim_cur < 256) {
        owner = -1;
        return;
    }
    long top = lim.rlim_cur < 1024 ? (long)lim.rlim_cur : 1024;
    for (int i = 0; i < CV_PF_SLOTS; i++)
        ask.slot[i] = (struct cv_pf_slot){.fd = (int32_t)(top - 16 - CV_PF_SLOTS + i)};
    ask.sock = (int32_t)(top - 17 - CV_PF_SLOTS);
    ask.magic = CV_PF_MAGIC;
    owner = pid;
}

/* Which slots the supervisor may fill: those free. With none, the held ones go (what they hold
 * the walk passed by). Whether the guest took a free number meanwhile is seen when one is filled. */
static int find_free(void) {
    int n = 0;
    for (int round = 0; round < 2 && !n; round++) {
        for (int i = 0; i < CV_PF_SLOTS; i++) {
            struct cv_pf_slot *s = &ask.slot[i];
            if (s->state == CV_PF_SENT) s->state = CV_PF_FREE; /* a forged ask's */
            if (round && s->state == CV_PF_HELD) {
                int ours = still_ours(s);
                if (ours) raw6(SYS_close, s->fd, 0, 0, 0, 0, 0);
                s->state = ours || raw6(SYS_fcntl, s->fd, F_GETFD, 0, 0, 0, 0) == -EBADF ? CV_PF_FREE : CV_PF_OFF;
            }
            n += s->state == CV_PF_FREE;
        }
    }
    if (n && raw6(SYS_fcntl, ask.sock, F_GETFD, 0, 0, 0, 0) != -EBADF) return 0; /* the guest's number now */
    return n;
}

int cv_pf_release(void) {
    int n = 0;
    if (__atomic_exchange_n(&busy, 1, __ATOMIC_ACQUIRE)) return 0;
    if (owner == raw6(SYS_getpid, 0, 0, 0, 0, 0, 0))
        for (int i = 0; i < CV_PF_SLOTS; i++) {
            struct cv_pf_slot *s = &ask.slot[i];
            if (s->state != CV_PF_HELD) continue;
            if (still_ours(s)) raw6(SYS_close, s->fd, 0, 0, 0, 0, 0), n++;
            s->state = CV_PF_OFF; /* not filled again: the process is short of fds */
        }
    __atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
    return n;
}

/* What the supervisor sent, moved to the slots it is for. */
static void receive(void) {
    long sock = ask.sock;
    union {
        char buf[CMSG_SPACE(sizeof(int) * CV_PF_SLOTS)];
        struct cmsghdr align;
    } u;
    char tag = 0;
    struct iovec iov = {&tag, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    long got = ask.placed ? raw6(SYS_recvmsg, sock, (long)&m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, 0, 0, 0) : -1;
    struct cmsghdr *c = got == 1 && tag == 'F' ? CMSG_FIRSTHDR(&m) : NULL;
    int n = 0, fds[CV_PF_SLOTS];
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(0)) {
        n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        if (n > CV_PF_SLOTS) n = CV_PF_SLOTS;
        __builtin_memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)n);
    }
    if (ask.placed) raw6(SYS_close, sock, 0, 0, 0, 0, 0);
    int k = 0;
    for (int i = 0; i < CV_PF_SLOTS; i++) {
        struct cv_pf_slot *s = &ask.slot[i];
        if (s->state != CV_PF_SENT) continue;
        s->state = CV_PF_FREE;
        if (k < n) {
            /* the lowest free number from the slot's on: the slot itself, unless the guest's now */
            long at = raw6(SYS_fcntl, fds[k], F_DUPFD_CLOEXEC, s->fd, 0, 0, 0);
            s->state = at == s->fd ? CV_PF_HELD : CV_PF_OFF;
            if (at >= 0 && at != s->fd) raw6(SYS_close, at, 0, 0, 0, 0, 0);
            raw6(SYS_close, fds[k++], 0, 0, 0, 0, 0);
        }
    }
    while (k < n) raw6(SYS_close, fds[k++], 0, 0, 0, 0, 0);
}

/* The held slot of the object (dev, ino): its fd moved to the number a native open gives. */
static int take(const struct statx *e, int flags, long *out) {
    uint64_t dev = makedev(e->stx_dev_major, e->stx_dev_minor);
    for (int i = 0; i < CV_PF_SLOTS; i++) {
        struct cv_pf_slot *s = &ask.slot[i];
        if (s->state != CV_PF_HELD || s->ino != e->stx_ino || s->dev != dev) continue;
        if (!still_ours(s)) {
            s->state = CV_PF_OFF;
            return 0;
        }
        long fd = raw6(SYS_fcntl, s->fd, (flags & O_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 0, 0, 0, 0);
        if (fd < 0) return 0; /* EMFILE: the open as ever says so */
        raw6(SYS_close, s->fd, 0, 0, 0, 0, 0);
        s->state = CV_PF_FREE;
        if ((uint32_t)(flags & O_NONBLOCK) != (s->flags & O_NONBLOCK))
            raw6(SYS_fcntl, fd, F_SETFL, flags & O_NONBLOCK, 0, 0, 0);
        hits++;
        *out = fd;
        return 1;
    }
    return 0;
}

/* Opens a closed window lets go by before it asks (and takes 2): more than a process that lists
 * a directory and opens a few names in it makes (Python's imports: a walk of 2 cost it 0.2 ms),
 * few against a walk's thousands; twice as many each time that walk was not followed either
 * (ls -R: it opens in its own sorted order). */
#define IDLE_ASK 32
#define IDLE_ASK_MAX 1024
static uint32_t idle_ask = IDLE_ASK;

#define OPEN_FLAGS (O_DIRECTORY | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_LARGEFILE)

int cv_pf_open(int dirfd, const char *path, int flags, long *out) {
    struct statx e;
    struct cv_ans_id dir;
    uint32_t bits, len = 0;
    if (!path || (flags & O_ACCMODE) != O_RDONLY || (flags & ~(O_ACCMODE | OPEN_FLAGS))) return 0;
    while (path[len] && len <= CV_ANS_KEY_MAX) len++;
    if (len > CV_ANS_KEY_MAX) return 0;
    /* "dir/" (git's opendir): the directory itself */
    char name[CV_ANS_KEY_MAX + 2];
    const char *entry = path;
    int want_dir = flags & O_DIRECTORY;
    if (len > 1 && path[len - 1] == '/') {
        while (len > 1 && path[len - 1] == '/') len--;
        for (uint32_t i = 0; i < len; i++) name[i] = path[i];
        name[len] = 0;
        entry = name, want_dir = 1;
    }
    /* an entry the table holds, or one of a directory whose entries it does not hold yet (a
     * file in a directory published for its subdirectories alone: the ask publishes them all) */
    dir.ino = 0;
    int found = cv_shim_entry(dirfd, entry, &e, &bits, &dir);
    if ((found && !(S_ISDIR(e.stx_mode) || (S_ISREG(e.stx_mode) && !want_dir))) || !dir.ino) return 0;
    long pid = raw6(SYS_getpid, 0, 0, 0, 0, 0, 0);
    if (__atomic_exchange_n(&busy, 1, __ATOMIC_ACQUIRE)) return 0;
    int done = 0;
    if (!owner) set_up(pid);
    if (owner == pid) {
        done = found && take(&e, flags, out);
        /* a closed window (none yet, or the last walk not followed): one open in idle_ask asks */
        if (!done && was_listed(&dir) && (ask.window || ++ask.idle >= idle_ask) && find_free()) {
            uint32_t before = ask.window;
            ask.hits = hits;
            ask.taken = 0;
            long r = raw6(SYS_openat, dirfd, (long)path, flags | CV_O_PREFETCH, (long)&ask, 0, 0);
            if (ask.taken) { /* else the open was not one to walk on from (a name missing) */
                hits = 0, ask.idle = 0;
                if (before && !ask.window && idle_ask < IDLE_ASK_MAX) idle_ask *= 2; /* closed again */
                if (ask.window > 2) idle_ask = IDLE_ASK;                            /* followed */
            }
            receive();
            *out = set_errno(r);
            done = 1;
        }
    }
    __atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
    return done;
}
