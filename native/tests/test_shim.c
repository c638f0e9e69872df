/* The guests' shim (src/shim/): the jump it writes (patch.h) lands where it says, it writes
 * only over code it recognises, and, loaded into this process, it redirects libc's fstatat so
 * that glibc's fstat ("" with AT_EMPTY_PATH) reaches the kernel with a NULL path, and answers
 * as before.
 *
 * Output: one line per failure, then "shim: N passed, M failed". */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "check.h"
#include "shim/patch.h"

#ifndef CV_SHIM_SO
#define CV_SHIM_SO "build/libcvisor-shim.so"
#endif

static int forty_two(void) { return 42; }

static void test_jump(void) {
    unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        failf("mmap: %s", strerror(errno));
        return;
    }
    cv_shim_jump(page, (uintptr_t)forty_two);
    int (*fn)(void) = (int (*)(void))(uintptr_t)page;
    check(fn() == 42, "a call to the patched entry runs the target");
    munmap(page, 4096);

    const unsigned char code[] = {0x41, 0x89, 0xca, 0xb8, 0x06, 0x01, 0x00, 0x00, 0x0f, 0x05, 0x3d, 0x00, 0xf0};
    check(cv_shim_matches(code, code, sizeof code), "the same bytes match");
    unsigned char other[sizeof code];
    memcpy(other, code, sizeof code);
    other[4] = 0x4c; /* another syscall number */
    check(!cv_shim_matches(other, code, sizeof code), "one byte off does not match");
    check(!cv_shim_matches(code, code, CV_SHIM_JUMP_LEN - 1), "a pattern shorter than the jump never matches");
    const unsigned char endbr[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x41};
    check(cv_shim_endbr(endbr) == 4 && cv_shim_endbr(code) == 0, "an endbr64 is stepped over, nothing else");
}

/* A trampoline runs the instructions it was given, then continues where it was told. */
static long add_rest(long a, long b) { return a + b; }

static void test_tramp(void) {
    unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        failf("mmap: %s", strerror(errno));
        return;
    }
    /* lea 0x29(%rdi),%rdi (adds 41 to the first argument); then add_rest adds the second. */
    const unsigned char code[] = {0x48, 0x8d, 0x7f, 0x29};
    cv_shim_tramp(page, code, sizeof code, (uintptr_t)add_rest);
    check(mprotect(page, 4096, PROT_READ | PROT_EXEC) == 0, "mprotect");
    long (*fn)(long, long) = (long (*)(long, long))(uintptr_t)page;
    check(fn(1, 0) == 42 && fn(0, 1) == 42, "the copied instructions run, then the rest");
    munmap(page, 4096);
}

static void *idle(void *arg) {
    usleep(200000);
    return arg;
}

static void test_loaded(void) {
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    struct stat before, after, raw;
    if (fd < 0 || fstat(fd, &before) < 0) {
        failf("fstat before: %s", strerror(errno));
        return;
    }
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    const unsigned char *fstatat_entry = libc ? dlsym(libc, "fstatat") : NULL;
    check(fstatat_entry && fstatat_entry[0] != 0x48, "libc's fstatat starts unpatched");
    void *shim = dlopen(CV_SHIM_SO, RTLD_NOW);
    check(shim != NULL, "dlopen %s: %s", CV_SHIM_SO, shim ? "" : dlerror());
    if (!shim || !fstatat_entry) return;
    /* Linux 6.11+ only: the shim leaves libc alone where a NULL path is not an fstat. */
    int null_ok = syscall(SYS_newfstatat, fd, NULL, &raw, AT_EMPTY_PATH) == 0;
    if (null_ok) {
        check(fstatat_entry[0] == 0x48 && fstatat_entry[1] == 0xb8 && fstatat_entry[10] == 0xff,
              "libc's fstatat now jumps to the shim");
        check(fstat(fd, &after) == 0 && after.st_ino == before.st_ino && after.st_size == before.st_size,
              "fstat through the shim answers as before");
        struct stat by_path;
        check(fstatat(AT_FDCWD, "/proc/self/exe", &by_path, 0) == 0 && by_path.st_ino == before.st_ino,
              "a stat by path goes through unchanged");
        errno = 0;
        check(fstat(-1, &after) < 0 && errno == EBADF, "errors come back in errno: %s", strerror(errno));
        errno = 0;
        check(fstatat(AT_FDCWD, "/nonexistent/x", &after, 0) < 0 && errno == ENOENT, "ENOENT by path");
        check(syscall(SYS_newfstatat, fd, "", &raw, AT_EMPTY_PATH) == 0 && raw.st_ino == before.st_ino,
              "syscall() through the shim");
        /* open and openat now enter the shim and, with no answer table here, run libc's own
         * code through their trampolines. */
        const unsigned char *open_entry = dlsym(libc, "open");
        check(open_entry && open_entry[0] == 0x48 && open_entry[1] == 0xb8, "libc's open now jumps to the shim");
        int o = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        struct stat ost;
        check(o >= 0 && fstat(o, &ost) == 0 && ost.st_ino == before.st_ino, "open through the trampoline");
        if (o >= 0) close(o);
        o = openat(AT_FDCWD, "/proc/self/exe", O_RDONLY | O_CLOEXEC);
        check(o >= 0, "openat through the trampoline");
        if (o >= 0) close(o);
        errno = 0;
        check(open("/nonexistent/x", O_RDONLY) < 0 && errno == ENOENT, "its errors in errno");
        char tmpl[] = "/tmp/cvisor-shim-XXXXXX";
        check(mkdtemp(tmpl) != NULL, "mkdtemp");
        char made[64];
        snprintf(made, sizeof made, "%s/f", tmpl);
        o = open(made, O_WRONLY | O_CREAT | O_EXCL, 0640);
        struct stat mst;
        check(o >= 0 && fstat(o, &mst) == 0 && (mst.st_mode & 0777) == (0640 & ~umask(022)),
              "O_CREAT with its mode (the variadic argument) through the trampoline");
        umask(022);
        if (o >= 0) close(o);
        unlink(made);
        rmdir(tmpl);
        char link[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", link, sizeof link);
        check(n > 0, "readlink through the shim");
        errno = 0;
        check(readlink("/proc/self/exe/x", link, sizeof link) < 0 && errno == ENOTDIR, "readlink's errors");
        /* read, readv, pread and lseek enter the shim (a check of the copy-up count, none here),
         * then make the single-threaded syscall, or libc's own multi-threaded path. */
        const unsigned char *read_entry = dlsym(libc, "read");
        check(read_entry && read_entry[0] == 0x48 && read_entry[1] == 0xb8, "libc's read now jumps to the shim");
        int p[2];
        check(pipe(p) == 0 && write(p[1], "abcdef", 6) == 6, "pipe");
        char buf[8] = {0};
        check(read(p[0], buf, 2) == 2 && !memcmp(buf, "ab", 2), "read through the shim");
        struct iovec iov = {buf, 2};
        check(readv(p[0], &iov, 1) == 2 && !memcmp(buf, "cd", 2), "readv through the shim");
        errno = 0;
        check(pread(p[0], buf, 1, 0) < 0 && errno == ESPIPE, "pread's errors in errno");
        check(lseek(fd, 3, SEEK_SET) == 3 && pread(fd, buf, 3, 1) == 3 && !memcmp(buf, "ELF", 3),
              "lseek and pread through the shim");
        check(lseek(fd, 0, SEEK_CUR) == 3, "pread leaves the offset");
        pthread_t t; /* a second thread: libc's multi-threaded path (a cancellation point) */
        check(pthread_create(&t, NULL, idle, NULL) == 0, "thread");
        check(read(p[0], buf, 2) == 2 && !memcmp(buf, "ef", 2), "read by a multi-threaded process");
        check(pread(fd, buf, 3, 1) == 3 && !memcmp(buf, "ELF", 3), "pread by a multi-threaded process");
        pthread_join(t, NULL);
        close(p[0]), close(p[1]);
        /* Every entry the shim recognises jumps to it: a pattern that no longer matches glibc's
         * code would leave its entry alone without a word. */
        static const char *const redirected[] = {"statx",    "syscall", "readlink", "readlinkat", "access",
                                                 "getxattr", "lgetxattr", "chdir",  "fchdir",     "lseek64",
                                                 "read",     "readv",     "pread64", "open64",    "openat64",
                                                 "getdents64", "__open_nocancel"};
        for (size_t i = 0; i < sizeof redirected / sizeof *redirected; i++) {
            const unsigned char *e = dlsym(libc, redirected[i]);
            if (e) e += cv_shim_endbr(e);
            check(e && e[0] == 0x48 && e[1] == 0xb8, "libc's %s now jumps to the shim", redirected[i]);
        }
        /* opendir goes through glibc's own open, which the shim now fronts (no table here) */
        errno = 0;
        check(!opendir("/nonexistent/dir") && errno == ENOENT, "opendir's errors in errno");
        /* readdir through the shim (no table here: the kernel lists) */
        DIR *dir = opendir("/");
        int names = 0, etc = 0;
        for (struct dirent *e; dir && (e = readdir(dir));) names++, etc |= !strcmp(e->d_name, "etc");
        check(dir && etc && names > 3, "readdir through the shim: %d names", names);
        if (dir) closedir(dir);
        errno = 0;
        check(getdents64(-1, buf, sizeof buf) < 0 && errno == EBADF, "getdents64's errors in errno");
        /* chdir, fchdir, getxattr and lgetxattr through the shim (no table here: the kernel answers). */
        char was[PATH_MAX], now[PATH_MAX];
        int here = open(".", O_RDONLY | O_DIRECTORY);
        check(getcwd(was, sizeof was) && chdir("/") == 0 && getcwd(now, sizeof now) && !strcmp(now, "/"),
              "chdir through the shim");
        check(here >= 0 && fchdir(here) == 0 && getcwd(now, sizeof now) && !strcmp(now, was), "fchdir through it");
        errno = 0;
        check(chdir("/nonexistent") < 0 && errno == ENOENT, "chdir's errors in errno");
        if (here >= 0) close(here);
        errno = 0;
        check(lgetxattr("/nonexistent", "security.selinux", NULL, 0) < 0 && errno == ENOENT &&
                  getxattr("/nonexistent", "system.posix_acl_access", NULL, 0) < 0 && errno == ENOENT,
              "getxattr and lgetxattr through the shim, their errors in errno");
    } else {
        check(fstatat_entry[0] != 0x48, "no NULL-path fstat here: libc left alone");
    }
    close(fd);
}

int main(void) {
    test_jump();
    test_tramp();
    test_loaded();
    printf("shim: %lu passed, %lu failed\n", passed, failed);
    return failed != 0;
}
