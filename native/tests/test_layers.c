/* The upper layer on disk (overlay/layers.c, overlay/copyup.c), without a guest:
 * a private mkdtemp tree under /tmp holds a "host" directory (the lower) and a
 * sandbox (upper + work). Checked: a layer made lazily on the first change;
 * upper directories made along a path with the host's modes and times; copy-up
 * of files (data, mode, times, user.* xattrs, O_TRUNC without data), symlinks
 * and FIFOs; a second copy-up never replaces the first (and its writes);
 * whiteouts, opaque markers, reserved names; materializing a directory tree
 * (whiteouts and hidden names left out, the result opaque); removing an upper
 * directory that holds only reserved names; nothing left behind in work/.
 *
 * Output: one line per failure, then "layers: N passed, M failed". */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "check.h"
#include "overlay/layers.h"
#include "overlay/vfs.h"
#include "supervisor/run.h"

static char tmp[64], host[128], sbdir[128];

static void put(const char *path, const char *text, mode_t mode) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, mode);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) failf("cannot write %s", path);
    if (fd >= 0) close(fd);
    chmod(path, mode);
}

static int read_text(int dir, const char *name, char *buf, size_t len) {
    int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    return n < 0 ? -1 : 0;
}

/* A node for host path dir/name, as the resolver would describe it. */
static int host_node(const char *dir, const char *name, struct cv_vnode *v) {
    memset(v, 0, sizeof *v);
    v->pup = -1;
    v->plow = v->psrc = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    cv_lpath_init(&v->vbuf);
    snprintf(v->vbuf.in, sizeof v->vbuf.in, "%s/%s", dir, name);
    v->vpath = v->vbuf.s;
    v->name = strrchr(v->vpath, '/') + 1;
    v->layer = CV_LOWER;
    v->exists = fstatat(v->plow, name, &v->st, AT_SYMLINK_NOFOLLOW) == 0;
    return v->exists ? 0 : -1;
}

static int work_is_empty(const struct cv_run *r) {
    int fd = openat(r->work_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fdopendir(fd);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    if (d) closedir(d);
    return n == 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)ftw;
    if (flag == FTW_DP) chmod(p, 0700);
    return remove(p);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/cvisor-test-layers-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    snprintf(host, sizeof host, "%s/host", tmp);
    snprintf(sbdir, sizeof sbdir, "%s/sb", tmp);
    mkdir(host, 0755);
    char p[1024], up[256], work[256];

    /* The host: a/b/c (dirs with distinct modes and times), a file, a symlink, a FIFO. */
    snprintf(p, sizeof p, "%s/a", host), mkdir(p, 0751);
    snprintf(p, sizeof p, "%s/a/b", host), mkdir(p, 0705);
    snprintf(p, sizeof p, "%s/a/b/file.txt", host), put(p, "host data\n", 0640);
    setxattr(p, "user.cvisor", "v1", 2, 0); /* may be unsupported: checked below only if set */
    int has_xattr = getxattr(p, "user.cvisor", NULL, 0) == 2;
    struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    utimensat(AT_FDCWD, p, old, 0);
    snprintf(p, sizeof p, "%s/a/b/link", host), symlink("file.txt", p);
    snprintf(p, sizeof p, "%s/a/b/fifo", host), mkfifo(p, 0600);
    snprintf(p, sizeof p, "%s/a/b", host), utimensat(AT_FDCWD, p, old, 0);

    /* A lazy layer: nothing on disk until the first change. */
    struct cv_run *r = cv_run_new("/bin/true");
    snprintf(up, sizeof up, "%s/upper", sbdir);
    snprintf(work, sizeof work, "%s/work", sbdir);
    check(cv_run_set_upper(r, up, work) == 0, "set_upper on paths that do not exist yet");
    check(cv_ov_writable(r) && r->upper_fd < 0, "lazy: writable, not made");
    check(access(sbdir, F_OK) < 0, "lazy: no directory yet");

    /* Upper directories along a path: made with the host's modes and times. */
    char vdir[512];
    snprintf(vdir, sizeof vdir, "%s/a/b", host);
    int d = cv_ov_upper_dir(r, vdir);
    check(d >= 0, "upper_dir %s: %d", vdir, d);
    check(r->upper_fd >= 0 && r->upper && access(up, F_OK) == 0 && access(work, F_OK) == 0, "layer made");
    struct stat st;
    snprintf(p, sizeof p, "%s%s/a", up, host);
    check(stat(p, &st) == 0 && (st.st_mode & 07777) == 0751, "upper a mode %o", st.st_mode & 07777);
    snprintf(p, sizeof p, "%s%s/a/b", up, host);
    check(stat(p, &st) == 0 && (st.st_mode & 07777) == 0705 && st.st_mtim.tv_sec == old[1].tv_sec,
          "upper a/b mode %o mtime %ld", st.st_mode & 07777, (long)st.st_mtim.tv_sec);
    if (d >= 0) close(d);

    /* Copy-up of a file: data, mode, times, xattrs; the host file untouched. */
    snprintf(vdir, sizeof vdir, "%s/a/b", host);
    struct cv_vnode v;
    check(host_node(vdir, "file.txt", &v) == 0, "host node");
    check(cv_ov_copy_up(r, &v, 1) == 0, "copy_up file");
    int ud = cv_ov_open_upper(r, vdir, O_RDONLY | O_DIRECTORY, 0);
    char buf[256];
    check(ud >= 0 && read_text(ud, "file.txt", buf, sizeof buf) == 0 && !strcmp(buf, "host data\n"),
          "copied data: %s", buf);
    check(fstatat(ud, "file.txt", &st, 0) == 0 && (st.st_mode & 07777) == 0640 &&
              st.st_mtim.tv_sec == old[1].tv_sec,
          "copied mode %o mtime %ld", st.st_mode & 07777, (long)st.st_mtim.tv_sec);
    if (has_xattr) {
        snprintf(p, sizeof p, "%s%s/a/b/file.txt", up, host);
        char val[8] = {0};
        check(getxattr(p, "user.cvisor", val, sizeof val) == 2 && !memcmp(val, "v1", 2), "user xattr copied");
    }
    /* A second copy-up (another run of the sandbox) never replaces the first, nor its writes. */
    int w = openat(ud, "file.txt", O_WRONLY | O_TRUNC | O_CLOEXEC);
    check(w >= 0 && write(w, "sandbox\n", 8) == 8, "write the copy");
    if (w >= 0) close(w);
    check(cv_ov_copy_up(r, &v, 1) == 0, "second copy_up succeeds");
    check(read_text(ud, "file.txt", buf, sizeof buf) == 0 && !strcmp(buf, "sandbox\n"), "first copy kept: %s", buf);
    snprintf(p, sizeof p, "%s/a/b/file.txt", host);
    int hf = open(p, O_RDONLY | O_CLOEXEC);
    char hb[64] = {0};
    check(hf >= 0 && read(hf, hb, sizeof hb - 1) == 10 && !strcmp(hb, "host data\n"), "host file unchanged");
    if (hf >= 0) close(hf);
    cv_vnode_release(&v);

    /* Symlinks and FIFOs come up as what they are. */
    check(host_node(vdir, "link", &v) == 0 && cv_ov_copy_up(r, &v, 1) == 0, "copy_up symlink");
    cv_vnode_release(&v);
    char target[64] = {0};
    check(readlinkat(ud, "link", target, sizeof target - 1) == 8 && !strcmp(target, "file.txt"), "link %s", target);
    check(host_node(vdir, "fifo", &v) == 0 && cv_ov_copy_up(r, &v, 1) == 0, "copy_up fifo");
    cv_vnode_release(&v);
    check(fstatat(ud, "fifo", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISFIFO(st.st_mode) && (st.st_mode & 0777) == 0600,
          "fifo copied");
    /* O_TRUNC: the copy comes up empty. */
    snprintf(p, sizeof p, "%s/a/big.txt", host), put(p, "0123456789", 0644);
    snprintf(vdir, sizeof vdir, "%s/a", host);
    check(host_node(vdir, "big.txt", &v) == 0 && cv_ov_copy_up(r, &v, 0) == 0, "copy_up without data");
    cv_vnode_release(&v);
    snprintf(p, sizeof p, "%s%s/a/big.txt", up, host);
    check(stat(p, &st) == 0 && st.st_size == 0 && (st.st_mode & 0777) == 0644, "empty copy, mode kept");

    /* Whiteouts, opaque markers, reserved names. */
    check(cv_ov_reserved(".wh.x") && cv_ov_reserved(CV_OPAQUE_NAME) && !cv_ov_reserved(".whx") &&
              !cv_ov_reserved("x.wh."),
          "reserved names");
    check(!cv_ov_whited_out(ud, "gone") && cv_ov_whiteout(ud, "gone") == 0 && cv_ov_whited_out(ud, "gone"), "whiteout");
    cv_ov_unwhiteout(ud, "gone");
    check(!cv_ov_whited_out(ud, "gone"), "unwhiteout");
    char longname[NAME_MAX + 1];
    memset(longname, 'n', NAME_MAX);
    longname[NAME_MAX] = 0;
    check(cv_ov_whiteout(ud, longname) == -ENAMETOOLONG, "a 255-byte name cannot be whited out");
    if (ud >= 0) close(ud);

    /* Materialize: every host entry below comes up (whiteouts and hidden names left out). */
    snprintf(p, sizeof p, "%s/m", host), mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/m/keep", host), put(p, "k", 0644);
    snprintf(p, sizeof p, "%s/m/deleted", host), put(p, "d", 0644);
    snprintf(p, sizeof p, "%s/m/secret", host), put(p, "s", 0600);
    snprintf(p, sizeof p, "%s/m/sub", host), mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/m/sub/deep", host), put(p, "deep", 0644);
    snprintf(p, sizeof p, "%s/m/sub/ln", host), symlink("../keep", p);
    snprintf(p, sizeof p, "%s/m/secret", host);
    r->hide = calloc(1, sizeof *r->hide);
    r->hide[0] = strdup(p);
    r->nhide = r->hide_cap = 1;
    snprintf(vdir, sizeof vdir, "%s/m", host);
    int md = cv_ov_upper_dir(r, vdir);
    check(md >= 0 && cv_ov_whiteout(md, "deleted") == 0, "whiteout in m");
    check(cv_ov_materialize(r, vdir, 1) == 0, "materialize");
    check(faccessat(md, CV_OPAQUE_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0, "materialized dir is opaque");
    check(read_text(md, "keep", buf, sizeof buf) == 0 && !strcmp(buf, "k"), "keep came up");
    check(faccessat(md, "deleted", F_OK, AT_SYMLINK_NOFOLLOW) < 0, "deleted did not");
    check(faccessat(md, "secret", F_OK, AT_SYMLINK_NOFOLLOW) < 0, "hidden did not");
    check(fstatat(md, "sub", &st, 0) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700, "sub mode %o",
          st.st_mode & 07777);
    int sd = openat(md, "sub", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    check(sd >= 0 && read_text(sd, "deep", buf, sizeof buf) == 0 && !strcmp(buf, "deep"), "sub/deep");
    memset(target, 0, sizeof target);
    check(sd >= 0 && readlinkat(sd, "ln", target, sizeof target - 1) == 7, "sub/ln is a link");
    if (sd >= 0) close(sd);

    /* rmdir of an upper directory: only reserved names may be inside. */
    check(mkdirat(md, "e", 0755) == 0, "mkdir e");
    int ed = openat(md, "e", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cv_ov_whiteout(ed, "x");
    cv_ov_set_opaque(ed);
    check(cv_ov_rmdir_upper(md, "e") == 0 && faccessat(md, "e", F_OK, AT_SYMLINK_NOFOLLOW) < 0, "rmdir_upper");
    if (ed >= 0) close(ed);
    check(cv_ov_rmdir_upper(md, "sub") == -ENOTEMPTY, "rmdir_upper of a full dir");
    if (md >= 0) close(md);

    check(work_is_empty(r), "nothing left in work/");
    cv_run_free(r);
    nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("layers: %lu passed, %lu failed\n", passed, failed);
    return failed ? 1 : 0;
}
