/* Landlock domain A. Rules only grant, and a grant covers a whole subtree, so
 * a hidden path P is hidden by granting every sibling along the chain from /
 * to P and never an ancestor of P (its ancestors get READ_DIR only: listing).
 * Hidden: every procfs mount, so /proc is served only by the supervisor, which
 * checks that a /proc/<pid> belongs to this sandbox; and the caller's list
 * (credentials, the sandbox storage), so no race can read them. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/landlock.h"
#include "common/landlock_rules.h"
#include "common/util.h"

#define MAX_HIDDEN 512

struct hidden {
    char *path[MAX_HIDDEN];
    size_t n;
};

static int hidden_add(struct hidden *h, const char *p) {
    if (h->n >= MAX_HIDDEN) return -E2BIG; /* never drop a path silently */
    if (!(h->path[h->n] = strdup(p))) return -ENOMEM;
    h->n++;
    return 0;
}

/* Mount points of every procfs (fields: id parent maj:min root mountpoint ... - fstype ...).
 * Read and split by hand: stdio and sscanf cost several times more on a first call, and this
 * runs at every CLI start. */
static int hide_procfs(struct hidden *h) {
    int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return hidden_add(h, "/proc");
    size_t cap = 16384, len = 0;
    char *buf = malloc(cap);
    ssize_t n = 0;
    while (buf && (n = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) break;
            buf = bigger;
            cap *= 2;
        }
    }
    close(fd);
    if (!buf || n < 0) {
        free(buf);
        return hidden_add(h, "/proc"); /* cannot tell: hide the usual place */
    }
    buf[len] = 0;
    int r = 0;
    for (char *line = buf, *next; r == 0 && *line; line = next) {
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : line + strlen(line);
        if (nl) *nl = 0;
        const char *dash = strstr(line, " - ");
        if (!dash || strncmp(dash + 3, "proc ", 5) != 0) continue;
        char *field = line; /* the 5th space-separated field: the mount point */
        for (int i = 0; i < 4 && field; i++) {
            field = strchr(field, ' ');
            if (field) field++;
        }
        char *end = field ? strchr(field, ' ') : NULL;
        if (!end || field >= dash) continue;
        *end = 0;
        r = hidden_add(h, field);
    }
    free(buf);
    return r;
}

static int is_prefix_dir(const char *dir, const char *path) {
    size_t n = strlen(dir);
    if (strcmp(dir, "/") == 0) return 1;
    return strncmp(dir, path, n) == 0 && (path[n] == '/' || path[n] == 0);
}

/* Grants access on dirfd/name (a final symlink is not followed: links are never granted,
 * their targets are). type: a DT_* of the entry, DT_UNKNOWN to ask the object itself. */
static int add_rule_at(int rs, int dirfd, const char *name, uint64_t access, unsigned char type) {
    cv_autoclose int fd = openat(dirfd, name, O_PATH | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return errno == ENOENT || errno == EACCES || errno == ELOOP ? 0 : -errno;
    if (type == DT_UNKNOWN) {
        struct stat st;
        if (fstat(fd, &st) < 0) return -errno;
        type = S_ISLNK(st.st_mode) ? DT_LNK : S_ISDIR(st.st_mode) ? DT_DIR : DT_REG;
    }
    if (type == DT_LNK) return 0;
    if (type != DT_DIR)
        access &= CV_LL_EXECUTE | CV_LL_READ_FILE | CV_LL_WRITE_FILE | CV_LL_TRUNCATE |
                  CV_LL_IOCTL_DEV;
    if (cv_landlock_add_path(rs, fd, access) < 0) return -errno;
    return 0;
}

static int add_rule(int rs, const char *path, uint64_t access, int is_dir) {
    return add_rule_at(rs, AT_FDCWD, path, access, is_dir ? DT_DIR : DT_UNKNOWN);
}

static void note_expanded(struct cv_ll_expanded *x, const char *dir) {
    if (!x || x->n >= CV_LL_MAX_EXPANDED) {
        if (x) x->overflow = 1;
        return;
    }
    struct stat st;
    if (stat(dir, &st) < 0) return;
    snprintf(x->dir[x->n], sizeof x->dir[x->n], "%s", dir);
    x->mtime[x->n] = st.st_mtim;
    x->n++;
}

static int grant_tree(int rs, const char *dir, const struct hidden *h, uint64_t rx, int depth,
                      struct cv_ll_expanded *x) {
    int contains = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->path[i], dir) == 0) return 0; /* hidden itself */
        if (is_prefix_dir(dir, h->path[i])) contains = 1;
    }
    if (!contains || depth > 32) return add_rule(rs, dir, rx, 1);
    int r = add_rule(rs, dir, CV_LL_READ_DIR, 1);
    if (r < 0) return r;
    note_expanded(x, dir);
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (e->d_type == DT_LNK) continue; /* links: their targets are granted */
        char child[4096];
        snprintf(child, sizeof child, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", e->d_name);
        int hidden = 0, holds = 0;
        for (size_t i = 0; i < h->n && !hidden; i++) {
            hidden = !strcmp(h->path[i], child);
            holds |= is_prefix_dir(child, h->path[i]);
        }
        if (hidden) continue;
        unsigned char type = e->d_type;
        if (holds && type == DT_UNKNOWN) {
            struct stat st;
            if (lstat(child, &st) < 0 || S_ISLNK(st.st_mode)) continue;
            type = S_ISDIR(st.st_mode) ? DT_DIR : DT_REG;
        }
        /* Most entries hold no hidden path: granted whole, by name in this directory (the
         * entry's type from the listing; the object itself when the listing does not say). */
        r = holds && type == DT_DIR ? grant_tree(rs, child, h, rx, depth + 1, x)
                                    : add_rule_at(rs, dirfd(d), e->d_name, rx, type);
        if (r < 0) break;
    }
    closedir(d);
    return r;
}

int cv_fs_ruleset_build(int abi, const char *const *ttys, const char *const *hide,
                        struct cv_ll_expanded *x, const char **what) {
    struct cv_ll_ruleset_attr attr = {.handled_access_fs = cv_landlock_fs_rights(abi)};
    attr.handled_access_fs &= ~CV_LL_IOCTL_DEV; /* device ioctls: see docs/ARCHITECTURE.md */
    /* The init's signals stay in its sandbox: its kill(-1), when the supervisor dies, reaches the
     * guests (whose domains are below this one) and no other process of the user. */
    if (abi >= 6) attr.scoped = CV_LL_SCOPE_SIGNAL;
    *what = "landlock_create_ruleset";
    cv_autoclose int rs = cv_landlock_create(&attr, abi);
    if (rs < 0) return -errno;
    struct hidden h = {0};
    *what = "hidden paths";
    int r = hide_procfs(&h);
    for (size_t i = 0; hide && hide[i] && r == 0; i++) r = hidden_add(&h, hide[i]);
    uint64_t rx = CV_LL_READ_FILE | CV_LL_READ_DIR | CV_LL_EXECUTE;
    if (r == 0) {
        *what = "landlock_add_rule (host tree)";
        if (x) memset(x, 0, sizeof *x);
        r = grant_tree(rs, "/", &h, rx, 0, x);
    }
    for (size_t i = 0; i < h.n; i++) free(h.path[i]);
    if (r < 0) return r;
    /* Writable device nodes. The supervisor decides every write open; these
     * rules only let its CONTINUE through. */
    uint64_t rw = CV_LL_READ_FILE | CV_LL_WRITE_FILE;
    if (abi >= 3) rw |= CV_LL_TRUNCATE;
    static const char *devs[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx"};
    *what = "landlock_add_rule (devices)";
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++)
        if ((r = add_rule(rs, devs[i], rw, 0)) < 0) return r;
    for (size_t i = 0; ttys && ttys[i]; i++)
        if ((r = add_rule(rs, ttys[i], rw, 0)) < 0) return r;
    return cv_steal_fd(&rs);
}

int cv_ll_expanded_fresh(const struct cv_ll_expanded *x) {
    if (x->overflow) return 0;
    for (size_t i = 0; i < x->n; i++) {
        struct stat st;
        if (stat(x->dir[i], &st) < 0 || st.st_mtim.tv_sec != x->mtime[i].tv_sec ||
            st.st_mtim.tv_nsec != x->mtime[i].tv_nsec)
            return 0;
    }
    return 1;
}

int cv_apply_scope_domain(int abi) {
    if (abi < 6) return 0;
    struct cv_ll_ruleset_attr attr = {.scoped = CV_LL_SCOPE_SIGNAL | CV_LL_SCOPE_ABSTRACT_UNIX};
    cv_autoclose int rs = cv_landlock_create(&attr, abi);
    if (rs < 0) return -errno;
    if (cv_landlock_restrict(rs) < 0) return -errno;
    return 0;
}
