/* Resource limits. Where the host gives this user cgroups, the kernel enforces them: the caller
 * (src/sandbox/cgroups.ts) makes the run's cgroups and sets their limits; here the guest tree's
 * init joins them before it runs any guest code (the helper waits for its go byte, receiver.c),
 * so every guest process is born inside. A memory cgroup's OOM ends the whole run, as it ends a
 * container: the OOM killer picks one process, and a tree that lost one is not left running.
 *
 * Elsewhere the supervisor holds the tree to them itself ("watch" limits): memory by sampling
 * the tree's resident sets every WATCH_MS (a run over the limit ends, as on an OOM; an allocation
 * faster than a sample can overshoot until the next one), CPU by stopping the tree while it is
 * ahead of its share and continuing it when it is back (its parents may see the stops), and
 * processes by counting the tree's tasks at each fork, vfork and clone, which the filter then
 * notifies: one past the limit fails with EAGAIN, as the pids controller answers. Forks are
 * answered one at a time, so a count misses at most the forks the kernel is still making. */
#include "run.h"
#include "common/util.h"
#include "filter/table.h"
#include "handlers/handlers.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/seccomp.h>
#include <time.h>
#include <unistd.h>

#define WATCH_MS 20
#define RESERVE_MS 20
#define DISK_MIN_MS 20   /* between two walks of a small layer */
#define DISK_MAX_MS 1000 /* ... and of a large one: a walk takes at most a tenth of a core */
#define DISK_DEPTH 512

CV_API int cv_run_add_cgroup(cv_run *r, const char *procs_file) {
    if (!r || !procs_file || !*procs_file) return CV_ERR_INVALID;
    if (atomic_load(&r->started)) return CV_ERR_STATE;
    if (r->ncgroup >= CV_MAX_CGROUPS) return CV_ERR_INVALID;
    char *copy = strdup(procs_file);
    if (!copy) return CV_ERR_NOMEM;
    r->cgroup_procs[r->ncgroup++] = copy;
    return 0;
}

/* cgroup v1: an eventfd the memory controller signals on an OOM in memcg_dir (its
 * cgroup.event_control, with memory.oom_control). Made before the start, so an OOM at once is
 * not missed. */
CV_API int cv_run_watch_oom_v1(cv_run *r, const char *memcg_dir) {
    if (!r || !memcg_dir) return CV_ERR_INVALID;
    if (atomic_load(&r->started)) return CV_ERR_STATE;
    if (r->oom_efd >= 0) return CV_ERR_INVALID;
    int dir = open(memcg_dir, O_DIRECTORY | O_PATH | O_CLOEXEC);
    if (dir < 0) return -errno;
    int ctl = openat(dir, "memory.oom_control", O_RDONLY | O_CLOEXEC);
    int ev = ctl < 0 ? -1 : openat(dir, "cgroup.event_control", O_WRONLY | O_CLOEXEC);
    int efd = ev < 0 ? -1 : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int e = efd < 0 ? -errno : 0;
    if (!e) {
        char line[64];
        int n = snprintf(line, sizeof line, "%d %d", efd, ctl);
        if (write(ev, line, (size_t)n) != n) e = -errno;
    }
    close(dir);
    if (ev >= 0) close(ev);
    if (e) {
        if (efd >= 0) close(efd);
        if (ctl >= 0) close(ctl);
        return e;
    }
    r->oom_efd = efd;
    r->oom_ctl = ctl; /* the registration lasts while the file is open */
    return 0;
}

int cv_limits_join(struct cv_run *r, char *msg, size_t msglen) {
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)r->init_pid);
    for (int i = 0; i < r->ncgroup; i++) {
        int fd = open(r->cgroup_procs[i], O_WRONLY | O_CLOEXEC);
        int e = fd < 0 ? errno : 0;
        if (fd >= 0 && write(fd, pid, (size_t)n) != n) e = errno;
        if (fd >= 0) close(fd);
        if (e) {
            snprintf(msg, msglen, "cannot move the sandbox into its cgroup %s: %s", r->cgroup_procs[i],
                     strerror(e));
            return CV_ERR_SPAWN;
        }
    }
    return 0;
}

int cv_limits_oom(struct cv_run *r) {
    uint64_t v;
    if (r->oom_efd < 0 || read(r->oom_efd, &v, sizeof v) != (ssize_t)sizeof v) return 0;
    /* The cgroup going away signals too; only a real OOM ends the run. */
    char buf[256];
    ssize_t got = pread(r->oom_ctl, buf, sizeof buf - 1, 0);
    if (got <= 0) return 0;
    buf[got] = 0;
    const char *under = strstr(buf, "under_oom ");
    const char *kills = strstr(buf, "oom_kill ");
    return (under && under[10] == '1') || (kills && atoi(kills + 9) > 0);
}

void cv_limits_free(struct cv_run *r) {
    free(r->disk_path);
    r->disk_path = NULL;
    for (int i = 0; i < r->ncgroup; i++) free(r->cgroup_procs[i]);
    r->ncgroup = 0;
    if (r->oom_efd >= 0) close(r->oom_efd);
    if (r->oom_ctl >= 0) close(r->oom_ctl);
    r->oom_efd = r->oom_ctl = -1;
}

CV_API int cv_run_set_watch_limits(cv_run *r, uint64_t memory_bytes, uint32_t pids, uint32_t cpu_milli) {
    if (!r) return CV_ERR_INVALID;
    if (atomic_load(&r->started)) return CV_ERR_STATE;
    r->watch_mem = memory_bytes;
    r->watch_pids = pids;
    r->watch_cpu_milli = cpu_milli;
    return 0;
}

CV_API int cv_run_get_limits(cv_run *r, cv_run_limits *out) {
    if (!r || !out) return CV_ERR_INVALID;
    if (!atomic_load(&r->finished)) return CV_ERR_STATE;
    *out = r->limits;
    return 0;
}

int cv_limits_watching(const struct cv_run *r) { return r->watch_mem || r->watch_cpu_milli; }

int cv_limits_tick(struct cv_run *r) {
    if (r->watch_t.tv_sec && cv_ms_since(&r->watch_t) < WATCH_MS) return 0;
    clock_gettime(CLOCK_MONOTONIC, &r->watch_t);
    struct cv_tree_usage u;
    cv_tree_usage(r, &u);
    long page = sysconf(_SC_PAGESIZE), hz = sysconf(_SC_CLK_TCK);
    uint64_t bytes = u.rss_pages * (uint64_t)page;
    if (bytes > r->limits.memory_peak) r->limits.memory_peak = bytes;
    if (u.tasks > r->limits.pids_peak) r->limits.pids_peak = u.tasks;
    r->limits.cpu_ms = u.ticks * 1000 / (uint64_t)hz;
    if (r->watch_cpu_milli) {
        /* Its share so far, with one tick of slack for the tick-sampled accounting. */
        double share = cv_ms_since(&r->t0) * r->watch_cpu_milli / 1000.0 + 1000.0 / (double)hz;
        int ahead = (double)r->limits.cpu_ms > share;
        if (ahead != r->cpu_paused) {
            cv_tree_pause(r, ahead);
            r->cpu_paused = ahead;
        } else if (ahead) {
            cv_tree_pause(r, 1); /* born since the last stop */
        }
    }
    if (r->watch_mem && bytes > r->watch_mem) {
        r->limits.hit |= CV_LIMIT_MEMORY;
        return 1;
    }
    return 0;
}

int cv_limits_counts(const struct cv_run *r, int nr) {
    return r->watch_pids && (nr == __NR_fork || nr == __NR_vfork || nr == __NR_clone);
}

struct cv_reply cv_limits_fork(struct cv_notif *n) {
    struct cv_run *r = n->run;
    const struct seccomp_data *d = &n->req->data;
    /* The row first, as the filter would have applied it: a refused clone stays refused. */
    uint32_t policy = cv_run_row_policy(r, d);
    if ((policy & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO) return cv_err((int)(policy & SECCOMP_RET_DATA));
    struct cv_tree_usage u;
    cv_tree_usage(r, &u);
    /* Forks let through that the scan may not see yet: each holds its place until the count
     * reaches it (its task exists) or RESERVE_MS passed (one that ended at once frees it then). */
    int kept = 0;
    for (int i = 0; i < r->npids_resv; i++)
        if (u.tasks < r->pids_resv[i].expect && cv_ms_since(&r->pids_resv[i].t) < RESERVE_MS)
            r->pids_resv[kept++] = r->pids_resv[i];
    r->npids_resv = kept;
    uint32_t counted = u.tasks + (uint32_t)kept;
    if (counted >= r->watch_pids || kept == CV_MAX_PIDS_RESV) {
        r->limits.hit |= CV_LIMIT_PIDS;
        return cv_err(EAGAIN);
    }
    r->pids_resv[kept].expect = counted + 1;
    clock_gettime(CLOCK_MONOTONIC, &r->pids_resv[kept].t);
    r->npids_resv = kept + 1;
    if (counted + 1 > r->limits.pids_peak) r->limits.pids_peak = counted + 1;
    /* Allowed by the row, and only counted here: the kernel makes it from the same registers. */
    return cv_continue();
}

/* ---- disk: what the upper layer holds ---------------------------------------------------- */

CV_API int cv_run_set_disk_limit(cv_run *r, uint64_t bytes) {
    if (!r) return CV_ERR_INVALID;
    if (atomic_load(&r->started)) return CV_ERR_STATE;
    r->disk_limit = bytes;
    return 0;
}

/* The blocks of everything under the directory dfd (closed here), its own entries' included.
 * Symlinks are not followed; a tree deeper than DISK_DEPTH is counted down to there. */
static uint64_t dir_bytes(int dfd, int depth) {
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return 0;
    }
    uint64_t sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue; /* gone meanwhile */
        sum += (uint64_t)st.st_blocks * 512;
        if (S_ISDIR(st.st_mode) && depth < DISK_DEPTH) {
            int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) sum += dir_bytes(sub, depth + 1);
        }
    }
    closedir(d);
    return sum;
}

static void *disk_main(void *arg) {
    struct cv_run *r = arg;
    for (;;) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int fd = open(r->disk_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        uint64_t used = fd < 0 ? 0 : dir_bytes(fd, 0); /* not made yet: nothing written */
        double wait = cv_ms_since(&t0) * 10;
        wait = wait < DISK_MIN_MS ? DISK_MIN_MS : wait > DISK_MAX_MS ? DISK_MAX_MS : wait;
        if (used > atomic_load(&r->disk_peak)) atomic_store(&r->disk_peak, used);
        if (used > r->disk_limit) {
            atomic_store(&r->disk_over, 1);
            uint64_t one = 1;
            if (write(r->ctl_efd, &one, sizeof one) < 0) { /* the receiver polls anyway */ }
            return NULL;
        }
        struct pollfd p = {r->ending_efd, POLLIN, 0};
        if (poll(&p, 1, (int)wait) > 0) return NULL; /* the run is ending */
    }
}

void cv_limits_start(struct cv_run *r) {
    const char *upper = r->upper ? r->upper : r->upper_want;
    if (!r->disk_limit || !upper || r->disk_started) return;
    r->disk_path = strdup(upper);
    if (!r->disk_path) return;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    r->disk_started = pthread_create(&r->disk_thread, &attr, disk_main, r) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

void cv_limits_stop(struct cv_run *r) {
    if (r->disk_started) pthread_join(r->disk_thread, NULL);
    r->disk_started = 0;
    r->limits.disk_peak = atomic_load(&r->disk_peak);
    if (atomic_load(&r->disk_over)) r->limits.hit |= CV_LIMIT_DISK;
}

int cv_limits_disk_over(struct cv_run *r) { return atomic_load(&r->disk_over); }
