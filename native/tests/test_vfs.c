/* cv_vresolve(): a guest path over the upper layer and the host. The test process
 * plays the guest (a struct cv_notif with its own tid, a run with an upper
 * layer and a hide list), in a private mkdtemp tree:
 *
 *   host H/: a/{f, g, l -> f, abs -> H/a/g}, a2/g, link2dir -> a2, d/x,
 *            loop -> loop, dang -> nowhere, secret/file (hidden)
 *   upper:   H/a/{new, .wh.f}, H/d/{.wh..wh..opq, y} (d replaced), H/nd/z (new dir),
 *            H/ul -> a/new (a symlink made in the sandbox)
 *
 * Checked: whiteouts and opaque directories hide host entries, upper entries
 * win, symlinks are followed through the merged view (upper ones too), "..",
 * loops (ELOOP), hidden paths (ENOENT), long names (ENAMETOOLONG), trailing
 * slashes, relative paths from the cwd, and which answers are "untouched"
 * (the only ones the handlers may CONTINUE).
 *
 * Output: one line per failure, then "vfs: N passed, M failed". */
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
#include "overlay/alias.h"
#include "overlay/layers.h"
#include "overlay/moved.h"
#include "overlay/vfs.h"
#include "supervisor/run.h"

static char tmp[64], H[128], U[512];
static struct cv_run *run;

static void put(const char *path, const char *text) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) < 0) failf("cannot write %s", path);
    if (fd >= 0) close(fd);
}

/* mkdir base/rel (rel may be ""). */
static void mk2(const char *base, const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s%s%s", base, *rel ? "/" : "", rel);
    if (mkdir(p, 0755) < 0 && errno != EEXIST) failf("mkdir %s", p);
}

static void file(const char *base, const char *rel, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", base, rel);
    put(p, text);
}

static void link_(const char *target, const char *base, const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", base, rel);
    if (symlink(target, p) < 0) failf("symlink %s", p);
}

/* Resolve path (relative to H unless absolute); returns the rc, fills v. */
static int res(const char *path, int flags, struct cv_vnode *v) {
    struct cv_guest g;
    cv_guest_init(&g, CV_GUEST_UNNOTIFIED, 0, getpid());
    struct cv_vctx n = {.run = run, .guest = &g, .nr = -1};
    char full[1024];
    if (path[0] == '/' || path[0] == '.') snprintf(full, sizeof full, "%s", path);
    else snprintf(full, sizeof full, "%s/%s", H, path);
    return cv_vresolve(&n, AT_FDCWD, full, flags, v);
}

/* exists/layer/touched of one case. layer 0: must not exist. */
static void expect(const char *path, int flags, int rc, int exists, int layer, int touched) {
    struct cv_vnode v;
    int r = res(path, flags, &v);
    if (r != rc) {
        failf("%s: rc %d, want %d", path, r, rc);
        if (r == 0) cv_vnode_release(&v);
        return;
    }
    if (r < 0) {
        passed++;
        return;
    }
    check(v.exists == exists, "%s: exists %d, want %d", path, v.exists, exists);
    if (exists && layer) check(v.layer == layer, "%s: layer %d, want %d", path, v.layer, layer);
    if (touched >= 0) check(v.touched == touched, "%s: touched %d, want %d", path, v.touched, touched);
    cv_vnode_release(&v);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/cvisor-test-vfs-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    snprintf(H, sizeof H, "%s/H", tmp);
    mk2(H, "");
    mk2(H, "a"), mk2(H, "a2"), mk2(H, "d"), mk2(H, "secret");
    file(H, "a/f", "f"), file(H, "a/g", "g"), file(H, "a2/g", "g2"), file(H, "d/x", "x"), file(H, "secret/file", "s");
    link_("f", H, "a/l");
    char abs[256];
    snprintf(abs, sizeof abs, "%s/a/g", H);
    link_(abs, H, "a/abs");
    link_("a2", H, "link2dir"), link_("loop", H, "loop"), link_("nowhere", H, "dang");

    /* The upper layer, as the handlers would have left it. */
    char sb[128], up[192], work[192];
    snprintf(sb, sizeof sb, "%s/sb", tmp);
    mk2(sb, "");
    snprintf(up, sizeof up, "%s/upper", sb);
    snprintf(work, sizeof work, "%s/work", sb);
    mk2(up, ""), mk2(work, "");
    snprintf(U, sizeof U, "%s%s", up, H);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/a' '%s/d' '%s/nd'", U, U, U);
    if (system(cmd) != 0) failf("mkdir -p upper");
    file(U, "a/new", "new"), file(U, "a/.wh.f", ""), file(U, "d/.wh..wh..opq", ""), file(U, "d/y", "y");
    file(U, "nd/z", "z");
    link_("a/new", U, "ul");

    run = cv_run_new("/bin/true");
    check(cv_run_set_upper(run, up, work) == 0, "set_upper");
    char secret[256];
    snprintf(secret, sizeof secret, "%s/secret", H);
    check(cv_run_add_hidden(run, secret) == 0, "add_hidden");

    int F = CV_RES_FOLLOW;
    expect("a/g", F, 0, 1, CV_LOWER, 0);          /* a host file, untouched */
    expect("a2/g", F, 0, 1, CV_LOWER, 0);         /* below a dir with no upper twin */
    expect("link2dir/g", F, 0, 1, CV_LOWER, 0);   /* a host symlink to a dir */
    expect("a/abs", F, 0, 1, CV_LOWER, 0);        /* an absolute host symlink */
    expect("a/f", F, 0, 0, 0, 1);                 /* whited out */
    expect("a/l", F, 0, 0, 0, 1);                 /* a link to a whited-out file */
    expect("a/l", 0, 0, 1, CV_LOWER, -1);         /* the link itself is still there */
    expect("a/new", F, 0, 1, CV_UPPER, 1);        /* made in the sandbox */
    expect("d/x", F, 0, 0, 0, 1);                 /* below an opaque directory */
    expect("d/y", F, 0, 1, CV_UPPER, 1);
    expect("nd/z", F, 0, 1, CV_UPPER, 1);         /* a directory only the upper has */
    expect("nd/missing/deeper", F, -ENOENT, 0, 0, -1);
    expect("ul", F, 0, 1, CV_UPPER, 1);           /* an upper symlink, followed in the view */
    expect("ul", 0, 0, 1, CV_UPPER, 1);
    expect("a/../d/y", F, 0, 1, CV_UPPER, 1);
    expect("loop", F, -ELOOP, 0, 0, -1);
    expect("dang", F, 0, 0, 0, -1);               /* dangling: the target is missing */
    expect("secret/file", F, -ENOENT, 0, 0, -1);  /* hidden */
    expect("secret", F, 0, 0, 0, -1);
    expect("a/g/", F, -ENOTDIR, 0, 0, -1);        /* a trailing slash on a file */
    expect("/", F, 0, 1, 0, -1);
    char longname[300];
    memset(longname, 'n', 260);
    longname[260] = 0;
    expect(longname, F, -ENAMETOOLONG, 0, 0, -1);

    /* The merged directory a/: its upper twin, and the host's entries show through. */
    struct cv_vnode v;
    if (res("a", F, &v) == 0) {
        check(v.exists && v.layer == CV_UPPER && v.lower_dir && !v.opaque, "a: merged directory");
        cv_vnode_release(&v);
    } else {
        failf("a: does not resolve");
    }
    if (res("d", F, &v) == 0) {
        check(v.exists && v.opaque, "d: opaque");
        cv_vnode_release(&v);
    } else {
        failf("d: does not resolve");
    }
    /* Relative paths start at the guest's cwd. */
    char a[256];
    snprintf(a, sizeof a, "%s/a", H);
    if (chdir(a) != 0) {
        failf("chdir %s", a);
    } else {
        expect("./new", F, 0, 1, CV_UPPER, 1);
        expect("./g", F, 0, 1, CV_LOWER, 0);
        expect("../d/y", F, 0, 1, CV_UPPER, 1);
        expect("./f", F, 0, 0, 0, 1);
        if (chdir("/") != 0) failf("chdir /");
    }

    /* A rename brought H/a2 up as H/m: the kernel's cwd, still the host's H/a2, names the copy;
     * renamed again, the copy's new name; removed, nothing. H/a2x is another directory. */
    mk2(U, "m"), file(U, "m/g", "g2"), file(U, ".wh.a2", ""), mk2(H, "a2x");
    char from[256], up_m[600], real[PATH_MAX], want[PATH_MAX];
    snprintf(from, sizeof from, "%s/a2", H);
    snprintf(up_m, sizeof up_m, "%s/m", U);
    int mfd = open(up_m, O_PATH | O_DIRECTORY | O_CLOEXEC);
    check(mfd >= 0 && cv_moved_note(run, from, mfd) == 0, "moved: noted");
    if (mfd >= 0) close(mfd);
    snprintf(real, sizeof real, "%s/a2/g", H);
    snprintf(want, sizeof want, "%s/m/g", H);
    char got[PATH_MAX] = "";
    check(cv_virtual_of_real(run, real, got, sizeof got) == 0 && !strcmp(got, want), "moved: %s is %s", got, want);
    snprintf(real, sizeof real, "%s/a2x", H);
    check(cv_virtual_of_real(run, real, got, sizeof got) == 0 && !strcmp(got, real), "moved: a2x is itself");
    if (chdir(from) != 0) {
        failf("chdir %s", from);
    } else {
        expect("./g", F, 0, 1, CV_UPPER, 1);
        char up_m2[600];
        snprintf(up_m2, sizeof up_m2, "%s/m2", U);
        check(rename(up_m, up_m2) == 0, "rename m m2");
        snprintf(real, sizeof real, "%s/a2", H);
        snprintf(want, sizeof want, "%s/m2", H);
        check(cv_virtual_of_real(run, real, got, sizeof got) == 0 && !strcmp(got, want), "moved again: %s", got);
        expect("../m2/g", F, 0, 1, CV_UPPER, 1);
        snprintf(real, sizeof real, "%s/g", up_m2);
        check(unlink(real) == 0 && rmdir(up_m2) == 0, "rm m2");
        expect("./g", F, -ENOENT, 0, 0, -1);
        if (chdir("/") != 0) failf("chdir /");
    }

    /* A link made U/a/new the copy of the host's H/a/g: it answers as H/a/g until it changes. */
    {
        char hg[256], un[600];
        snprintf(hg, sizeof hg, "%s/a/g", H);
        snprintf(un, sizeof un, "%s/a/new", U);
        int src = open(hg, O_PATH | O_CLOEXEC), cp = open(un, O_PATH | O_CLOEXEC);
        struct stat hs, us;
        check(src >= 0 && cp >= 0 && fstat(src, &hs) == 0 && fstat(cp, &us) == 0, "alias: fixtures");
        check(cv_alias_note(run, src, &us) == 0 && cv_alias_note(run, src, &us) == 0 && run->nalias == 1,
              "alias: noted once");
        struct cv_vnode av;
        if (res("a/new", F, &av) == 0) {
            check(av.st.st_ino == hs.st_ino && av.st.st_dev == hs.st_dev && av.st.st_nlink == us.st_nlink,
                  "alias: stat is the host file's, with the copy's link count");
            check(av.aino == us.st_ino && av.adev == us.st_dev && av.layer == CV_UPPER, "alias: the copy is known");
            int fd = cv_alias_open(run, av.adev, av.aino, O_RDONLY);
            char buf[8] = "";
            check(fd >= 0 && read(fd, buf, sizeof buf) == 1 && buf[0] == 'g', "alias: reads the host file");
            if (fd >= 0) close(fd);
            struct stat was;
            check(cv_alias_drop(run, av.adev, av.aino, &was) == 1 && was.st_ino == hs.st_ino, "alias: dropped");
            check(cv_alias_drop(run, av.adev, av.aino, &was) == 0 && run->nalias == 0, "alias: dropped once");
            cv_vnode_release(&av);
        } else {
            failf("alias: a/new does not resolve");
        }
        if (res("a/new", F, &av) == 0) {
            check(av.st.st_ino == us.st_ino && !av.aino, "alias: after the drop the copy answers for itself");
            cv_vnode_release(&av);
        }
        /* Changed by anything but this run's own calls (its ctime moves): no alias any more. */
        check(cv_alias_note(run, src, &us) == 0, "alias: noted again");
        struct timespec later[2] = {{0, UTIME_OMIT}, {1, 0}};
        usleep(20000); /* past the clock tick of the copy's ctime */
        check(utimensat(AT_FDCWD, un, later, 0) == 0, "alias: the copy changed behind its back");
        if (res("a/new", F, &av) == 0) {
            check(av.st.st_ino == us.st_ino && !av.aino, "alias: a changed copy answers for itself");
            cv_vnode_release(&av);
        }
        if (src >= 0) close(src);
        if (cp >= 0) close(cp);
    }

    cv_run_free(run);
    nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("vfs: %lu passed, %lu failed\n", passed, failed);
    return failed ? 1 : 0;
}
