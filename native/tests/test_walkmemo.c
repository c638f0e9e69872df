/* The walk's memo (overlay/walkmemo.c) as a table: the nearest remembered directory of a path,
 * how far up it looks, what forgetting a directory takes with it (and what it leaves: a sibling
 * whose name starts the same), and that a full memo makes room by the least recently used.
 * The walk's own use of it (checking each entry against the upper) is tested end to end by
 * test/e2e/overlay/paths.test.ts.
 *
 * Output: one line per failure, then "walkmemo: N passed, M failed". */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "overlay/walkmemo.h"
#include "supervisor/run.h"

static struct cv_run *run;

static void put(const char *vpath, ino_t ino) {
    struct cv_wmemo_dir d = {.has_up = 1, .dev = 1, .ino = ino, .lmask = ino * 2};
    cv_wmemo_put(run, vpath, strlen(vpath), &d, -1);
}

/* The remembered directory found for vpath: its ino, and its length in *len; 0 for none. */
static ino_t find(const char *vpath, size_t *len) {
    struct cv_wmemo_dir d;
    size_t l = 0;
    if (!cv_wmemo_find(run, vpath, &l, &d)) return 0;
    if (d.lmask != d.ino * 2 || !d.has_up) failf("%s: entry came back changed", vpath);
    if (len) *len = l;
    return d.ino;
}

int main(void) {
    run = calloc(1, sizeof *run);
    if (!run) return 1;
    size_t len;

    check(find("/a/b", NULL) == 0, "an empty memo finds nothing");
    put("/a/b", 10);
    put("/a/b/c/d", 20);
    check(find("/a/b", &len) == 10 && len == 4, "the directory itself");
    check(find("/a/b/c", &len) == 10 && len == 4, "its nearest remembered ancestor");
    check(find("/a/b/c/d/e/f", &len) == 20 && len == 8, "the longest remembered ancestor wins");
    check(find("/a/bc/d", NULL) == 0, "a sibling whose name starts the same is not below it");
    check(find("/a", NULL) == 0, "nothing above what was put");
    check(find("/", NULL) == 0 && find("relative/a/b", NULL) == 0, "never / nor a relative path");

    /* How far up it looks: CV_WMEMO_REACH components. */
    char deep[4096] = "/a/b";
    for (int i = 0; i < CV_WMEMO_REACH - 1; i++) strcat(deep, "/x");
    check(find(deep, &len) == 10 && len == 4, "an ancestor CV_WMEMO_REACH levels up is found");
    strcat(deep, "/x");
    check(find(deep, NULL) == 0, "one more level up is out of reach");

    put("/a/bc", 30);
    put("/a/b/c/d", 21);
    check(find("/a/b/c/d", NULL) == 21, "put again: the newest answer");
    cv_wmemo_forget(run, "/a/b/c");
    check(find("/a/b/c/d", &len) == 10 && len == 4, "forgetting a directory takes what is below it");
    check(find("/a/bc", NULL) == 30, "and leaves a sibling whose name starts the same");
    cv_wmemo_forget(run, "/a/b");
    check(find("/a/b", NULL) == 0, "forgetting the directory itself");
    cv_wmemo_clear(run);
    check(find("/a/bc", NULL) == 0, "clear forgets everything");

    /* Full: the least recently used entry makes room; one just used stays. */
    char p[64];
    put("/keep", 1);
    for (int i = 0; i < 4096; i++) {
        snprintf(p, sizeof p, "/d%d", i);
        put(p, (ino_t)(100 + i));
        if (i % 512 == 0) (void)find("/keep", NULL);
    }
    check(find("/keep", NULL) == 1, "an entry in use survives a full memo");
    check(find("/d4095", NULL) == 4195, "the newest entry is there");
    check(find("/d0", NULL) == 0, "the oldest unused one made room");

    /* By identity: the index follows puts, forgets and evictions. */
    cv_wmemo_clear(run);
    put("/i/a", 500);
    put("/i/a/b", 501);
    struct cv_wmemo_dir d;
    int pinned = 0;
    char *got = cv_wmemo_find_id(run, 1, 501, &d, &pinned);
    check(got && !strcmp(got, "/i/a/b") && d.ino == 501, "found by identity: %s", got ? got : "(none)");
    free(got);
    check(cv_wmemo_holds(run, "/i/a/b", 1, 501, &d) && !cv_wmemo_holds(run, "/i/a/c", 1, 501, &d) &&
              !cv_wmemo_holds(run, "/i/a/b", 2, 501, &d),
          "holds: that path with that identity, nothing else");
    struct cv_wmemo_dir none = {.has_up = 0, .lmask = 3};
    cv_wmemo_put(run, "/i/layer-only", strlen("/i/layer-only"), &none, -1);
    got = cv_wmemo_find_id(run, 0, 0, &d, &pinned);
    check(!got, "an entry without an upper directory has no identity");
    free(got);
    put("/i/a/b", 502); /* made again: the old identity is gone */
    got = cv_wmemo_find_id(run, 1, 501, &d, &pinned);
    check(!got, "put again: the old identity is not found");
    free(got);
    cv_wmemo_forget(run, "/i/a");
    got = cv_wmemo_find_id(run, 1, 502, &d, &pinned);
    check(!got && !cv_wmemo_holds(run, "/i/a", 1, 500, &d), "forgotten: not found by identity either");
    free(got);
    for (int i = 0; i < 4096; i++) { /* evictions unlink from the identity index too */
        snprintf(p, sizeof p, "/e%d", i);
        put(p, (ino_t)(10000 + i));
    }
    got = cv_wmemo_find_id(run, 1, 10000, &d, &pinned);
    check(!got, "evicted: not found by identity");
    free(got);
    got = cv_wmemo_find_id(run, 1, 10000 + 4095, &d, &pinned);
    check(got && !strcmp(got, "/e4095"), "the newest is found by identity");
    free(got);

    /* Pinned: a deep entry with nothing below the upper keeps its directory open. */
    cv_wmemo_clear(run);
    int dfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat rst;
    fstat(dfd, &rst);
    char *longp = malloc(CV_WMEMO_PIN_FROM + 8);
    memset(longp, 'x', CV_WMEMO_PIN_FROM + 4);
    longp[0] = '/';
    longp[CV_WMEMO_PIN_FROM + 4] = 0;
    struct cv_wmemo_dir own = {.has_up = 1, .dev = rst.st_dev, .ino = rst.st_ino};
    cv_wmemo_put(run, longp, strlen(longp), &own, dfd);
    got = cv_wmemo_find_id(run, rst.st_dev, rst.st_ino, &d, &pinned);
    check(got && pinned, "a deep own entry is pinned");
    free(got);
    cv_wmemo_put(run, "/short", 6, &own, dfd); /* the same identity, a short path: found first */
    got = cv_wmemo_find_id(run, rst.st_dev, rst.st_ino, &d, &pinned);
    check(got && !strcmp(got, "/short") && !pinned, "a short entry is not pinned");
    free(got);
    cv_wmemo_clear(run);
    struct cv_wmemo_dir other = {.has_up = 1, .dev = rst.st_dev, .ino = rst.st_ino + 1};
    cv_wmemo_put(run, longp, strlen(longp), &other, dfd);
    got = cv_wmemo_find_id(run, rst.st_dev, rst.st_ino + 1, &d, &pinned);
    check(got && !pinned, "an fd that is not the entry's directory is not kept");
    free(got);
    free(longp);
    close(dfd);

    cv_wmemo_free(run);
    free(run);
    printf("walkmemo: %lu passed, %lu failed\n", passed, failed);
    return failed != 0;
}
