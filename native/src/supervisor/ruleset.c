/* Domain A's Landlock ruleset, built once and handed to every helper: walking
 * the host tree costs more than the rest of a sandbox's start. A cached
 * ruleset is reused while the directories that shaped it are unchanged (a
 * new top-level entry must be granted) and the terminals match. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/landlock.h"
#include "common/landlock_rules.h"
#include "common/util.h"
#include "run.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int cached_fd = -1;
static int cached_abi = -1;
static dev_t cached_ttys[3];
static struct cv_ll_expanded cached_x;
static char *cached_hide; /* the hide list the cached ruleset was built for, joined by '\n' */

/* The run's hide list as one string, to compare with the cached one. */
static char *hide_key(const struct cv_run *r) {
    size_t len = 1;
    for (size_t i = 0; i < r->nhide; i++) len += strlen(r->hide[i]) + 1;
    char *k = malloc(len);
    if (!k) return NULL;
    char *w = k;
    for (size_t i = 0; i < r->nhide; i++) {
        size_t l = strlen(r->hide[i]);
        memcpy(w, r->hide[i], l);
        w[l] = '\n';
        w += l + 1;
    }
    *w = 0;
    return k;
}

static int cache_fits(const struct cv_run *r, const char *key) {
    return cached_fd >= 0 && key && cached_hide && !strcmp(key, cached_hide) &&
           !memcmp(cached_ttys, r->stdio_rdev, sizeof cached_ttys) && cv_ll_expanded_fresh(&cached_x);
}

/* A dup of the cached ruleset if it is still right for this run, else -1. */
int cv_ruleset_cached(const struct cv_run *r) {
    char *key = hide_key(r);
    pthread_mutex_lock(&mu);
    int dup = cache_fits(r, key) ? fcntl(cached_fd, F_DUPFD_CLOEXEC, 3) : -1;
    pthread_mutex_unlock(&mu);
    free(key);
    return dup;
}

/* A dup of the cached ruleset for this run (the caller closes it), or -errno. */
int cv_ruleset_for(const struct cv_run *r, char *msg, size_t msglen) {
    char *key = hide_key(r);
    if (!key) {
        snprintf(msg, msglen, "out of memory");
        return -ENOMEM;
    }
    pthread_mutex_lock(&mu);
    if (cached_abi < 0) cached_abi = cv_landlock_abi();
    int abi = cached_abi;
    if (!cache_fits(r, key) && abi > 0) {
        char tty[3][256];
        const char *ttys[4] = {0};
        size_t nt = 0;
        for (int i = 0; i < 3; i++) {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", r->stdio[i]);
            if (r->stdio_rdev[i] && r->stdio[i] >= 0 && cv_readlink(link, tty[nt], sizeof tty[nt]) > 0 &&
                tty[nt][0] == '/')
                ttys[nt] = tty[nt], nt++;
        }
        const char *what = "landlock";
        struct cv_ll_expanded x;
        int fd = cv_fs_ruleset_build(abi, ttys, (const char *const *)r->hide, &x, &what);
        if (fd < 0) {
            pthread_mutex_unlock(&mu);
            free(key);
            snprintf(msg, msglen, "%s: %s", what, strerror(-fd));
            return fd;
        }
        if (cached_fd >= 0) close(cached_fd);
        cached_fd = fd;
        memcpy(cached_ttys, r->stdio_rdev, sizeof cached_ttys);
        cached_x = x;
        free(cached_hide);
        cached_hide = key;
        key = NULL;
    }
    free(key);
    int dup = cached_fd >= 0 ? fcntl(cached_fd, F_DUPFD_CLOEXEC, 3) : -1;
    int e = errno;
    pthread_mutex_unlock(&mu);
    if (abi <= 0) {
        snprintf(msg, msglen, "Landlock is not available here (cvisor doctor explains)");
        return -ENOSYS;
    }
    return dup < 0 ? -e : dup;
}
