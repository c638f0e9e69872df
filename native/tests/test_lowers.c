/* cv_vresolve() over a chain of read-only layers (snapshots): upper, L1, L2, host.
 * The test process plays the guest, in a private mkdtemp tree:
 *
 *   host H/:  a/{f, g, h, old}, b/{old}, b2/{old}, c (a file), e/{k}
 *   L2 (bottom, the older snapshot): a/.wh.f, a/n2 "2", d2/x, b/{.wh..wh..opq, y}, s -> a/n2,
 *             e/.wh.k
 *   L1 (top):  a/n2 "1", a/only1, d2/.wh.x, c/z (a directory where the host has a file),
 *             .wh.e (the directory e deleted), a/.wh.h/ (a whiteout that is a directory),
 *             b2/.wh..wh..opq/ (a directory by the marker's name: not opaque)
 *   upper:     a/u, a/.wh.old
 *
 * Checked: the topmost layer wins, whiteouts of each layer hide what is below, opaque
 * directories of a lower layer, a directory of a layer over a host file, symlinks stored in a
 * layer followed through the view, which layer a node comes from (lidx), touched answers,
 * cv_vnode_lower, merged listings (cv_vdir_stack + cv_dirsnap_build_stack), the real path of a
 * layer mapped back to its virtual path, a chain of 8 layers.
 *
 * Output: one line per failure, then "lowers: N passed, M failed". */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "guest/guest.h"
#include "overlay/dirsnap.h"
#include "overlay/layers.h"
#include "overlay/vfs.h"
#include "supervisor/run.h"

static char tmp[64], H[128];
static struct cv_run *run;

static void put(const char *path, const char *text) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) < 0) failf("cannot write %s", path);
    if (fd >= 0) close(fd);
}

/* mkdir -p root+H+rel */
static void dir_in(const char *root, const char *rel) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s%s/%s'", root, H, rel);
    if (system(cmd) != 0) failf("%s", cmd);
}

static void file_in(const char *root, const char *rel, const char *text) {
    char p[1024];
    snprintf(p, sizeof p, "%s%s/%s", root, H, rel);
    put(p, text);
}

static int res(const char *rel, int flags, struct cv_vnode *v) {
    struct cv_guest g;
    cv_guest_init(&g, CV_GUEST_UNNOTIFIED, 0, getpid());
    struct cv_vctx n = {.run = run, .guest = &g, .nr = -1};
    char full[1024];
    snprintf(full, sizeof full, "%s/%s", H, rel);
    return cv_vresolve(&n, AT_FDCWD, full, flags, v);
}

/* exists / lidx (-1: the upper) / touched of one path. */
static void expect(const char *rel, int exists, int lidx, int touched) {
    struct cv_vnode v;
    int r = res(rel, CV_RES_FOLLOW, &v);
    if (r < 0) {
        check(!exists && r == -ENOENT, "%s: rc %d", rel, r);
        return;
    }
    check(v.exists == exists, "%s: exists %d, want %d", rel, v.exists, exists);
    if (exists) {
        int got = v.layer == CV_UPPER ? -1 : v.lidx;
        check(got == lidx, "%s: from layer %d, want %d", rel, got, lidx);
    }
    if (touched >= 0) check(v.touched == touched, "%s: touched %d, want %d", rel, v.touched, touched);
    cv_vnode_release(&v);
}

/* The content the guest would read. */
static void expect_text(const char *rel, const char *want) {
    struct cv_vnode v;
    char buf[64] = "";
    if (res(rel, CV_RES_FOLLOW, &v) == 0 && v.exists) {
        int o = cv_vnode_open(&v, 0);
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", o);
        int fd = o >= 0 ? open(self, O_RDONLY | O_CLOEXEC) : -1;
        ssize_t len = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        buf[len > 0 ? len : 0] = 0;
        if (fd >= 0) close(fd);
        if (o >= 0) close(o);
        cv_vnode_release(&v);
    }
    check(!strcmp(buf, want), "%s: reads \"%s\", want \"%s\"", rel, buf, want);
}

/* The merged listing of a directory, names joined by spaces, "." and ".." left out. */
static void expect_list(const char *rel, const char *want) {
    char vdir[512], got[512] = "";
    snprintf(vdir, sizeof vdir, "%s/%s", H, rel);
    struct cv_vstack st;
    if (cv_vdir_stack(run, vdir, &st) < 0) {
        failf("%s: no stack", rel);
        return;
    }
    struct cv_dirsnap *s = cv_dirsnap_build_stack(st.fd, st.n, NULL, NULL);
    if (s) {
        /* names come layer by layer, each layer sorted: sort them all for the comparison */
        const char *names[64];
        size_t k = 0;
        for (uint32_t i = 2; i < cv_dirsnap_count(s) && k < 64; i++) names[k++] = cv_dirsnap_entry(s, i)->name;
        for (size_t i = 0; i < k; i++)
            for (size_t j = i + 1; j < k; j++)
                if (strcmp(names[j], names[i]) < 0) {
                    const char *t = names[i];
                    names[i] = names[j];
                    names[j] = t;
                }
        for (size_t i = 0; i < k; i++) {
            if (i) strcat(got, " ");
            strcat(got, names[i]);
        }
        check(cv_dirsnap_matches_stack(s, st.fd, st.n), "%s: the snapshot does not match its stack", rel);
        cv_dirsnap_unref(s);
    }
    cv_vstack_close(&st);
    check(!strcmp(got, want), "%s: lists \"%s\", want \"%s\"", rel, got, want);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/cvisor-test-lowers-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    snprintf(H, sizeof H, "%s/H", tmp);
    char up[192], work[192], l1[192], l2[192];
    snprintf(up, sizeof up, "%s/upper", tmp);
    snprintf(work, sizeof work, "%s/work", tmp);
    snprintf(l1, sizeof l1, "%s/l1", tmp);
    snprintf(l2, sizeof l2, "%s/l2", tmp);
    mkdir(work, 0700);

    dir_in("", "a"), dir_in("", "b"), dir_in("", "e");
    file_in("", "a/f", "f"), file_in("", "a/g", "g"), file_in("", "a/old", "old"), file_in("", "b/old", "bo");
    file_in("", "c", "c"), file_in("", "e/k", "k");
    dir_in("", "b2"), file_in("", "a/h", "h"), file_in("", "b2/old", "o");

    dir_in(l2, "a"), dir_in(l2, "d2"), dir_in(l2, "b"), dir_in(l2, "e");
    file_in(l2, "a/.wh.f", ""), file_in(l2, "a/n2", "2"), file_in(l2, "d2/x", "x");
    file_in(l2, "b/.wh..wh..opq", ""), file_in(l2, "b/y", "y"), file_in(l2, "e/.wh.k", "");
    char p[512];
    snprintf(p, sizeof p, "%s%s/s", l2, H);
    if (symlink("a/n2", p) < 0) failf("symlink %s", p);

    dir_in(l1, "a"), dir_in(l1, "d2"), dir_in(l1, "c/z");
    file_in(l1, "a/n2", "1"), file_in(l1, "a/only1", "o"), file_in(l1, "d2/.wh.x", ""), file_in(l1, ".wh.e", "");
    /* The rule of layers.h: any entry .wh.NAME is a whiteout (here a directory); only a regular
     * file .wh..wh..opq makes a directory opaque (here a directory does not). */
    dir_in(l1, "a/.wh.h"), dir_in(l1, "b2/.wh..wh..opq");

    dir_in(up, "a");
    file_in(up, "a/u", "u"), file_in(up, "a/.wh.old", "");

    run = cv_run_new("/bin/true");
    check(cv_run_set_upper(run, up, work) == 0, "set_upper");
    check(cv_run_add_lower(run, l1) == 0, "add_lower l1");
    check(cv_run_add_lower(run, l2) == 0, "add_lower l2");
    check(cv_run_add_lower(run, "/nonexistent-layer") == CV_ERR_INVALID, "add_lower of a missing dir refused");

    expect("a/g", 1, 0, 0);     /* a host file no layer touches: untouched, the kernel may answer */
    expect("a/f", 0, 0, 1);     /* deleted by L2 */
    expect("a/n2", 1, 1, 1);    /* L1 over L2 */
    expect_text("a/n2", "1");
    expect("a/only1", 1, 1, 1);
    expect("a/u", 1, -1, 1);    /* the upper */
    expect("a/old", 0, 0, 1);   /* deleted by the upper */
    expect("d2", 1, 1, 1);      /* a directory the layers made */
    expect("d2/x", 0, 0, 1);    /* made by L2, deleted by L1 */
    expect("b/y", 1, 2, 1);
    expect("b/old", 0, 0, 1);   /* b is opaque in L2: the host's b/old does not show */
    expect("c/z", 1, 1, 1);     /* L1's directory over the host's file */
    expect("e", 0, 0, 1);       /* deleted by L1 */
    expect("e/k", 0, 0, 1);
    expect("s", 1, 1, 1);       /* L2's symlink, followed through the view to L1's a/n2 */
    expect_text("s", "1");
    expect("missing", 0, 0, 1);
    expect("a/h", 0, 0, 1);       /* deleted by L1's .wh.h, a directory */
    expect("b2/old", 1, 0, -1);   /* b2 is not opaque in L1: its marker is a directory */

    expect_list("a", "g n2 only1 u");
    expect_list("b", "y");
    expect_list("b2", "old");
    expect_list("d2", "");
    expect_list("c", "z");

    struct cv_vnode v;
    struct stat st;
    if (res("a/n2", CV_RES_FOLLOW, &v) == 0) {
        check(cv_vnode_lower(&v, &st) == 1 && st.st_size == 1, "cv_vnode_lower(a/n2): L1's copy");
        cv_vnode_release(&v);
    } else {
        failf("a/n2: does not resolve");
    }
    if (res("a/u", CV_RES_FOLLOW, &v) == 0) {
        check(cv_vnode_lower(&v, &st) == 0, "cv_vnode_lower(a/u): nothing below the upper");
        cv_vnode_release(&v);
    } else {
        failf("a/u: does not resolve");
    }
    if (res("a/f", CV_RES_PARENT, &v) == 0) {
        check(cv_vnode_lower(&v, &st) == 0, "cv_vnode_lower(a/f): L2's whiteout hides the host's");
        cv_vnode_release(&v);
    } else {
        failf("a/f: does not resolve");
    }
    if (res("a/old", CV_RES_PARENT, &v) == 0) {
        check(cv_vnode_lower(&v, &st) == 1, "cv_vnode_lower(a/old): the host's, under the upper's whiteout");
        cv_vnode_release(&v);
    } else {
        failf("a/old: does not resolve");
    }

    char real[512], out[512];
    snprintf(real, sizeof real, "%s%s/a", l2, H);
    char want[512];
    snprintf(want, sizeof want, "%s/a", H);
    check(cv_virtual_of_real(run, real, out, sizeof out) == 0 && !strcmp(out, want), "a layer path maps to %s: %s",
          want, out);
    check(cv_vfs_in_store(run, real) && !cv_vfs_in_store(run, want), "cv_vfs_in_store");
    cv_run_free(run);

    /* A name in the bottom layer of 8, each layer holding the directories on the way (the cost
     * of this is measured by `npm run bench`, not here). */
    char deep[192];
    snprintf(deep, sizeof deep, "%s/deep", tmp);
    for (int round = 0; round < 2; round++) {
        int layers = round ? 8 : 1;
        run = cv_run_new("/bin/true");
        check(cv_run_set_upper(run, up, work) == 0, "set_upper");
        for (int i = 0; i < layers; i++) {
            char L[256];
            snprintf(L, sizeof L, "%s/%d", deep, i);
            dir_in(L, "p/q");
            char name[32];
            snprintf(name, sizeof name, "p/q/f%d", i);
            file_in(L, name, "x");
            check(cv_run_add_lower(run, L) == 0, "add_lower %s", L);
        }
        char rel[32];
        snprintf(rel, sizeof rel, "p/q/f%d", layers - 1);
        expect(rel, 1, layers, 1);
        cv_run_free(run);
    }

    nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("lowers: %lu passed, %lu failed\n", passed, failed);
    return failed ? 1 : 0;
}
