/* Resource limits the kernel enforces: the caller (src/sandbox/limits/) makes the run's cgroups
 * and sets their limits; here the guest tree's init joins them before it runs any guest code (the
 * helper waits for its go byte, receiver.c), so every guest process is born inside. A memory
 * cgroup's OOM ends the whole run, as it ends a container: the OOM killer picks one process, and
 * a tree that lost one of its processes is not left running half-killed. */
#include "run.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

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
    for (int i = 0; i < r->ncgroup; i++) free(r->cgroup_procs[i]);
    r->ncgroup = 0;
    if (r->oom_efd >= 0) close(r->oom_efd);
    if (r->oom_ctl >= 0) close(r->oom_ctl);
    r->oom_efd = r->oom_ctl = -1;
}
