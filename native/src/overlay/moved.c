#include "overlay/moved.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

/* Past this many, the oldest entry goes: a process still in it then sees its old name gone. */
#define CV_MOVED_MAX 1024

int cv_moved_note(struct cv_run *r, const char *from, int upfd) {
    size_t at = r->nmoved;
    for (size_t i = 0; i < r->nmoved; i++)
        if (!strcmp(r->moved[i].from, from)) at = i; /* moved away again: the newer copy holds it */
    if (at == r->nmoved && r->nmoved == CV_MOVED_MAX) {
        free(r->moved[0].from);
        close(r->moved[0].up);
        memmove(r->moved, r->moved + 1, --r->nmoved * sizeof *r->moved);
        at = r->nmoved;
    }
    if (at == r->nmoved && r->nmoved == r->moved_cap) {
        size_t cap = r->moved_cap ? r->moved_cap * 2 : 8;
        struct cv_moved *m = realloc(r->moved, cap * sizeof *m);
        if (!m) return -ENOMEM;
        r->moved = m;
        r->moved_cap = cap;
    }
    char *f = strdup(from);
    int fd = fcntl(upfd, F_DUPFD_CLOEXEC, 3);
    if (!f || fd < 0) {
        int e = fd < 0 ? -errno : -ENOMEM;
        free(f);
        if (fd >= 0) close(fd);
        return e;
    }
    if (at < r->nmoved) {
        free(r->moved[at].from);
        close(r->moved[at].up);
    } else {
        r->nmoved++;
    }
    r->moved[at] = (struct cv_moved){.from = f, .up = fd};
    return 0;
}

int cv_moved_real(const struct cv_run *r, const char *real, char *out, size_t len) {
    if (!r->nmoved || real[0] != '/') return 0;
    if (r->upper && cv_path_under(real, r->upper)) return 0; /* the upper follows itself */
    const char *vpath = real;                                          /* the host's: its own path */
    for (int i = 0; i < r->nlower; i++) {
        if (cv_path_under(real, r->lower[i])) {
            size_t l = strlen(r->lower[i]);
            vpath = real[l] ? real + l : "/";
            break;
        }
    }
    const struct cv_moved *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < r->nmoved; i++) {
        size_t l = strlen(r->moved[i].from);
        if ((!best || l > best_len) && cv_path_under(vpath, r->moved[i].from)) {
            best = &r->moved[i];
            best_len = l;
        }
    }
    if (!best) return 0;
    char self[64], now[PATH_MAX];
    snprintf(self, sizeof self, "/proc/self/fd/%d", best->up);
    ssize_t n = cv_readlink(self, now, sizeof now);
    if (n < 0) return -ENOENT;
    if (n > 10 && !strcmp(now + n - 10, " (deleted)")) return -ENOENT;
    return snprintf(out, len, "%s%s", now, vpath + best_len) < (int)len ? 1 : -ENAMETOOLONG;
}

void cv_moved_free(struct cv_run *r) {
    for (size_t i = 0; i < r->nmoved; i++) {
        free(r->moved[i].from);
        close(r->moved[i].up);
    }
    free(r->moved);
    r->moved = NULL;
    r->nmoved = r->moved_cap = 0;
}
