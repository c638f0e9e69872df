/* Paths longer than PATH_MAX (overlay/longpath.c): the path buffer (inline, then the heap, and
 * back; a path set from a part of itself; never cut: ENAMETOOLONG past the bound), and opens and
 * stats of a real tree deeper than PATH_MAX, piece by piece, never through a symlink.
 *
 * Output: one line per failure, then "longpath: N passed, M failed". */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "overlay/longpath.h"

static void test_buffer(void) {
    struct cv_lpath p;
    cv_lpath_init(&p);
    check(p.s == p.in && !*p.s, "init: empty, inline");
    check(cv_lpath_join(&p, "/", "a") == 0 && !strcmp(p.s, "/a"), "join under /: %s", p.s);
    check(cv_lpath_join(&p, p.s, "b") == 0 && !strcmp(p.s, "/a/b"), "join onto itself: %s", p.s);
    check(cv_lpath_parent(&p, p.s) == 0 && !strcmp(p.s, "/a"), "parent of itself: %s", p.s);
    check(cv_lpath_parent(&p, p.s) == 0 && !strcmp(p.s, "/"), "parent of /a: %s", p.s);
    check(cv_lpath_parent(&p, "/") == 0 && !strcmp(p.s, "/"), "parent of /: %s", p.s);

    /* Grow past PATH_MAX, one level at a time: the heap, the same bytes. */
    size_t levels = PATH_MAX; /* "/d" each: twice PATH_MAX */
    for (size_t i = 0; i < levels; i++)
        if (cv_lpath_join(&p, p.s, "d") < 0) failf("join %zu failed", i);
    check(p.s != p.in && strlen(p.s) == 2 * levels, "long: on the heap, %zu bytes", strlen(p.s));
    int whole = 1;
    for (size_t i = 0; i < levels; i++) whole &= p.s[2 * i] == '/' && p.s[2 * i + 1] == 'd';
    check(whole, "long: every level kept");
    /* Back under PATH_MAX from a part of itself: inline again. */
    check(cv_lpath_setn(&p, p.s, 10) == 0 && p.s == p.in && !strcmp(p.s, "/d/d/d/d/d"), "set from itself: %s", p.s);
    struct cv_lpath q;
    cv_lpath_init(&q);
    for (size_t i = 0; i < levels; i++) cv_lpath_join(&p, p.s, "d");
    char *heap = p.s;
    cv_lpath_move(&q, &p);
    check(q.s == heap && p.s == p.in && !*p.s, "move takes the heap copy, leaves an empty path");
    cv_lpath_set(&p, "/short");
    cv_lpath_move(&q, &p);
    check(q.s == q.in && !strcmp(q.s, "/short"), "move of a short one: inline");
    cv_lpath_free(&q);

    /* The bound: ENAMETOOLONG, and the path as it was. */
    char *huge = malloc(CV_LPATH_MAX + 1);
    memset(huge, 'x', CV_LPATH_MAX);
    huge[0] = '/';
    huge[CV_LPATH_MAX] = 0;
    cv_lpath_set(&p, "/kept");
    check(cv_lpath_set(&p, huge) == -ENAMETOOLONG && !strcmp(p.s, "/kept"), "past the bound: refused, unchanged");
    free(huge);
    cv_lpath_free(&p);
}

static void test_tree(const char *root) {
    /* 2 500 levels of "d": 5 000 bytes below root. */
    int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC), cur = dup(rfd);
    enum { LEVELS = 2500 };
    for (int i = 0; i < LEVELS; i++) {
        if (mkdirat(cur, "d", 0755) < 0) failf("mkdir level %d: %s", i, strerror(errno));
        int next = openat(cur, "d", O_PATH | O_DIRECTORY | O_CLOEXEC);
        close(cur);
        cur = next;
    }
    int leaf = openat(cur, "leaf", O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    close(leaf);
    symlinkat(".", cur, "loop");
    struct stat want, got;
    fstat(cur, &want);
    char *rel = malloc(2 * LEVELS + 32);
    rel[0] = 0;
    for (int i = 0; i < LEVELS; i++) strcat(rel, i ? "/d" : "d");
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
    int fd = cv_openat2_long(rfd, rel, &how);
    check(fd >= 0 && fstat(fd, &got) == 0 && got.st_ino == want.st_ino, "open of a 5 000-byte path: the bottom (%d)", fd);
    if (fd >= 0) close(fd);
    strcat(rel, "/");
    fd = cv_openat2_long(rfd, rel, &how);
    check(fd >= 0, "a trailing slash: the same directory (%d)", fd);
    if (fd >= 0) close(fd);
    rel[strlen(rel) - 1] = 0;
    strcat(rel, "/leaf");
    check(cv_fstatat_long(rfd, rel, &got, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(got.st_mode), "stat of the leaf");
    /* a symlink on the way: refused, in the pieces as in the last one */
    char *via = malloc(strlen(rel) + 32);
    strcpy(via, rel);
    strcpy(strrchr(via, '/'), "/loop/leaf");
    check(cv_fstatat_long(rfd, via, &got, AT_SYMLINK_NOFOLLOW) == -ELOOP, "a symlink in the directories: ELOOP");
    symlinkat("d", rfd, "link"); /* the first piece through a symlink */
    via[0] = 0;
    strcat(via, "link");
    for (int i = 1; i < LEVELS; i++) strcat(via, "/d");
    check(cv_openat2_long(rfd, via, &how) == -ELOOP, "a symlink in the first piece: ELOOP");
    /* an absolute one, from / */
    char *abs = malloc(strlen(root) + strlen(rel) + 2);
    sprintf(abs, "%s/%s", root, rel);
    check(cv_fstatat_long(AT_FDCWD, abs, &got, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(got.st_mode), "stat of an absolute long path");
    /* missing: ENOENT, not a cut path */
    strcpy(strrchr(rel, '/'), "/none");
    check(cv_fstatat_long(rfd, rel, &got, 0) == -ENOENT, "a missing leaf: ENOENT");
    free(abs);
    free(via);
    free(rel);
    close(cur);
    close(rfd);
}

int main(void) {
    test_buffer();
    char root[] = "/tmp/cvisor-longpath-XXXXXX";
    if (!mkdtemp(root)) return 1;
    test_tree(root);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) failf("could not remove %s", root);
    printf("longpath: %lu passed, %lu failed\n", passed, failed);
    return failed != 0;
}
