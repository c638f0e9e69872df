/* The guest module's memo (cv_guest_memo_begin): while it is on, a second read of the guest's
 * memory, fds or /proc links gives the first answer whatever the guest changed in between; a
 * write into the guest or a change of its fd table forgets what it made stale; off, every read
 * is fresh. The process plays its own guest (CV_GUEST_UNNOTIFIED). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "guest/guest.h"

static char path[64];
static uint64_t argv_ptrs[3];

static ino_t ino_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

int main(void) {
    struct cv_guest g;
    cv_guest_init(&g, CV_GUEST_UNNOTIFIED, 0, getpid());
    char buf[PATH_MAX];
    uint64_t addr = (uint64_t)(uintptr_t)path;

    /* Off: each read sees the guest as it is now. */
    strcpy(path, "/allowed");
    check(cv_guest_path(&g, addr, buf, sizeof buf) == 0 && !strcmp(buf, "/allowed"), "read");
    strcpy(path, "/secret1");
    check(cv_guest_path(&g, addr, buf, sizeof buf) == 0 && !strcmp(buf, "/secret1"), "off: fresh");

    /* On: the first read stands, for strings and for ranges inside a read range. */
    cv_guest_memo_begin(&g);
    strcpy(path, "/allowed");
    check(cv_guest_peek_str(&g, addr, buf, sizeof buf) == 8, "first read");
    strcpy(path, "/secret1");
    check(cv_guest_path(&g, addr, buf, sizeof buf) == 0 && !strcmp(buf, "/allowed"), "on: the first copy");
    check(cv_guest_peek_str(&g, addr, buf, 4) == -ENAMETOOLONG, "a smaller buffer: too long, as a read would say");
    argv_ptrs[0] = 1, argv_ptrs[1] = 2, argv_ptrs[2] = 3;
    uint64_t got[3] = {0};
    check(cv_guest_peek(&g, (uint64_t)(uintptr_t)argv_ptrs, got, sizeof got) == 0, "a range");
    argv_ptrs[1] = 99;
    uint64_t one = 0;
    check(cv_guest_read(&g, (uint64_t)(uintptr_t)&argv_ptrs[1], &one, sizeof one) == 0 && one == 2,
          "a part of a read range: the first copy (%llu)", (unsigned long long)one);

    /* A write into the guest forgets what it overlaps, and only that. */
    check(cv_guest_write(&g, addr, "/written", 9) == 0, "write");
    check(cv_guest_path(&g, addr, buf, sizeof buf) == 0 && !strcmp(buf, "/written"), "after a write: fresh");
    check(cv_guest_read(&g, (uint64_t)(uintptr_t)&argv_ptrs[1], &one, sizeof one) == 0 && one == 2,
          "a write elsewhere keeps the rest");

    /* fds: the first fetch's file, as a new copy each time. */
    int a = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC), b = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int gfd = dup(a);
    char link[PATH_MAX], what[32];
    snprintf(what, sizeof what, "fd/%d", gfd);
    int f1 = cv_guest_fd(&g, gfd);
    check(cv_guest_link(&g, what, link, sizeof link) == 1 && !strcmp(link, "/"), "link (%s)", link);
    dup2(b, gfd);
    int f2 = cv_guest_fd(&g, gfd);
    check(f1 >= 0 && f2 >= 0 && f1 != f2 && ino_of(f2) == ino_of(a), "fd: the first fetch's file");
    check(cv_guest_link(&g, what, link, sizeof link) == 1 && !strcmp(link, "/"), "link: the first answer (%s)", link);
    cv_guest_memo_end(&g);
    cv_guest_memo_begin(&g);
    check(cv_guest_link(&g, what, link, sizeof link) == 5 && !strcmp(link, "/proc"), "a new memo: fresh");
    cv_guest_memo_end(&g);
    int f3 = cv_guest_fd(&g, gfd);
    check(ino_of(f3) == ino_of(b), "off again: fresh fd");
    close(a), close(b), close(gfd), close(f1), close(f2), close(f3);

    printf("memo: %lu passed, %lu failed\n", passed, failed);
    return failed ? 1 : 0;
}
