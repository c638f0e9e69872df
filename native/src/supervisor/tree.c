/* The sandbox's processes: the init (a subreaper) and all its descendants.
 * This kernel may lack /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN),
 * so membership and kill walks read the parent links from /proc/<pid>/stat. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "run.h"

struct pinfo {
    pid_t pid, ppid, pgrp;
    char state;
};

/* /proc/<pid>/stat read into buf: the fields after "(comm)" (which may hold spaces and
 * parentheses itself), or NULL. */
static const char *stat_fields(pid_t pid, char *buf, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (cv_read_small(path, buf, len) <= 0) return NULL;
    char *rp = strrchr(buf, ')');
    return rp ? rp + 1 : NULL;
}

/* Fields after "(comm)": state ppid pgrp ... */
static int read_stat(pid_t pid, struct pinfo *out) {
    char buf[1024];
    const char *f = stat_fields(pid, buf, sizeof buf);
    int ppid, pgrp;
    char state;
    if (!f || sscanf(f, " %c %d %d", &state, &ppid, &pgrp) != 3) return -1;
    *out = (struct pinfo){pid, ppid, pgrp, state};
    return 0;
}

int cv_tree_is_member(const struct cv_run *r, pid_t pid) {
    if (pid <= 1 || pid == r->init_pid) return 0;
    struct pinfo p;
    for (int depth = 0; depth < 256 && pid > 1; depth++) {
        if (read_stat(pid, &p) < 0) return 0;
        if (p.ppid == r->init_pid) return 1;
        pid = p.ppid;
    }
    return 0;
}

/* Snapshot of every process, then the descendants of the init. */
static size_t descendants(const struct cv_run *r, struct pinfo **out) {
    size_t n = 0, cap = 256;
    struct pinfo *all = malloc(cap * sizeof *all);
    DIR *d = opendir("/proc");
    if (!all || !d) {
        free(all);
        if (d) closedir(d);
        *out = NULL;
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        if (n == cap) {
            struct pinfo *na = realloc(all, (cap *= 2) * sizeof *all);
            if (!na) break;
            all = na;
        }
        if (read_stat((pid_t)atoi(e->d_name), &all[n]) == 0) n++;
    }
    closedir(d);
    /* Mark descendants: repeat until no change (trees are shallow). */
    char *in = calloc(n ? n : 1, 1);
    for (int changed = 1; changed && in;) {
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            if (in[i]) continue;
            int parent_in = all[i].ppid == r->init_pid;
            for (size_t j = 0; j < n && !parent_in; j++) parent_in = in[j] && all[j].pid == all[i].ppid;
            if (parent_in) { in[i] = 1; changed = 1; }
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < n && in; i++)
        if (in[i]) all[k++] = all[i];
    free(in);
    *out = all;
    return k;
}

int cv_tree_kill(const struct cv_run *r) {
    int killed = 0;
    for (int round = 0; round < 200; round++) {
        struct pinfo *ps;
        size_t n = descendants(r, &ps);
        size_t live = 0;
        for (size_t i = 0; i < n; i++) {
            if (ps[i].state == 'Z' || ps[i].state == 'X') continue;
            kill(ps[i].pid, SIGKILL);
            live++;
        }
        free(ps);
        killed += (int)live;
        if (!live) break;
        /* Give the dying a moment to be reaped and their orphans to reparent. */
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return killed;
}

int cv_tree_each(const struct cv_run *r, pid_t pgrp, int (*fn)(pid_t, void *), void *arg) {
    struct pinfo *ps;
    size_t n = descendants(r, &ps);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        if (ps[i].state == 'Z' || (pgrp && ps[i].pgrp != pgrp)) continue;
        if (!fn || fn(ps[i].pid, arg) == 0) count++;
    }
    free(ps);
    return count;
}

/* From each of its threads' children lists where the kernel keeps them; else found by their
 * parent links in every /proc/<pid>/stat. */
static int children_listed(pid_t parent, pid_t *out, int max) {
    static int kept; /* does the kernel keep children lists: 0 not asked yet, 1 yes, -1 no */
    int k = __atomic_load_n(&kept, __ATOMIC_RELAXED);
    if (!k) __atomic_store_n(&kept, k = access("/proc/thread-self/children", F_OK) == 0 ? 1 : -1, __ATOMIC_RELAXED);
    if (k < 0) return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)parent);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0, listed = 1;
    struct dirent *e;
    while (listed && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char kids[4096], file[320];
        snprintf(file, sizeof file, "/proc/%d/task/%s/children", (int)parent, e->d_name);
        ssize_t len = cv_read_small(file, kids, sizeof kids);
        if (len < 0 || len >= (ssize_t)sizeof kids - 1) listed = 0; /* no such file, or too many to read */
        for (char *p = kids, *end; listed && len >= 0 && n < max; p = end) {
            long pid = strtol(p, &end, 10);
            if (end == p) break;
            out[n++] = (pid_t)pid;
        }
    }
    closedir(d);
    return listed ? n : -1;
}

int cv_tree_children(pid_t parent, pid_t *out, int max) {
    int n = children_listed(parent, out, max);
    if (n >= 0) return n;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        struct pinfo p;
        if (read_stat((pid_t)atoi(e->d_name), &p) == 0 && p.ppid == parent) out[n++] = p.pid;
    }
    closedir(d);
    return n;
}

/* The start time (clock ticks after boot) of pid, or 0. */
static unsigned long long start_time(pid_t pid) {
    char buf[1024];
    const char *p = stat_fields(pid, buf, sizeof buf);
    /* Field 22 (starttime) is the 20th after the ")": skip 19. */
    for (int field = 0; p && field < 20; field++) p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

pid_t cv_tree_main(const struct cv_run *r) {
    struct pinfo *ps;
    size_t n = descendants(r, &ps);
    pid_t best = 0;
    unsigned long long best_t = 0;
    for (size_t i = 0; i < n; i++) {
        if (ps[i].ppid != r->init_pid || ps[i].state == 'Z' || ps[i].state == 'X') continue;
        unsigned long long t = start_time(ps[i].pid);
        if (t && (!best || t < best_t)) best = ps[i].pid, best_t = t;
    }
    free(ps);
    return best;
}

/* What the tree (the init included) uses now, from one /proc scan: memory (the sum of the
 * processes' resident sets: shared pages count once per process, so it errs high), tasks
 * (threads included, as the pids controller counts), and CPU time in clock ticks (each live
 * process's own and that of the children it reaped: a process that ended counts in its
 * reaper, and the init reaps the rest). */
static int read_usage(pid_t pid, struct cv_tree_usage *u) {
    char buf[1024];
    const char *f = stat_fields(pid, buf, sizeof buf);
    if (!f) return -1;
    char state;
    unsigned long ut, st;
    long cut, cst, threads, rss;
    /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
     * cstime priority nice num_threads itrealvalue starttime vsize rss */
    if (sscanf(f, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %ld %ld %*d %*d %ld %*d %*u %*u %ld",
               &state, &ut, &st, &cut, &cst, &threads, &rss) != 7)
        return -1;
    u->ticks += (uint64_t)ut + st + (uint64_t)(cut > 0 ? cut : 0) + (uint64_t)(cst > 0 ? cst : 0);
    if (state == 'Z' || state == 'X') return 0;
    u->tasks += threads > 0 ? (uint32_t)threads : 1;
    u->rss_pages += rss > 0 ? (uint64_t)rss : 0;
    return 0;
}

void cv_tree_usage(const struct cv_run *r, struct cv_tree_usage *u) {
    *u = (struct cv_tree_usage){0};
    read_usage(r->init_pid, u);
    struct pinfo *ps;
    size_t n = descendants(r, &ps);
    for (size_t i = 0; i < n; i++) read_usage(ps[i].pid, u);
    free(ps);
}

/* SIGSTOP (stop) or SIGCONT every descendant of the init: the supervisor's CPU limit. */
void cv_tree_pause(const struct cv_run *r, int stop) {
    struct pinfo *ps;
    size_t n = descendants(r, &ps);
    for (size_t i = 0; i < n; i++)
        if (ps[i].state != 'Z' && ps[i].state != 'X') kill(ps[i].pid, stop ? SIGSTOP : SIGCONT);
    free(ps);
}
