#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

ssize_t cv_read_full(int fd, void *buf, size_t len) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = CV_RETRY(read(fd, (char *)buf + done, len - done));
        if (n < 0) return -1;
        if (n == 0) break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

ssize_t cv_write_full(int fd, const void *buf, size_t len) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = CV_RETRY(write(fd, (const char *)buf + done, len - done));
        if (n < 0) return -1;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

ssize_t cv_readlinkat(int dirfd, const char *path, char *buf, size_t len) {
    ssize_t n = readlinkat(dirfd, path, buf, len - 1);
    if (n < 0) return -errno;
    if ((size_t)n >= len - 1) return -ENAMETOOLONG;
    buf[n] = 0;
    return n;
}

ssize_t cv_readlink(const char *path, char *buf, size_t len) {
    return cv_readlinkat(AT_FDCWD, path, buf, len);
}

int cv_path_under(const char *path, const char *dir) {
    size_t l = strlen(dir);
    if (l == 1 && dir[0] == '/') return 1;
    return !strncmp(path, dir, l) && (path[l] == 0 || path[l] == '/');
}

int cv_send_fd(int sock, int fd, char tag) {
    struct iovec iov = {&tag, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return CV_RETRY(sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 ? -errno : 0;
}

int cv_reopen_dir_quietly(int fd, int flags) {
    int r = cv_reopen_dir(fd, flags | O_NOATIME);
    return r >= 0 || errno != EPERM ? r : cv_reopen_dir(fd, flags);
}

int cv_openat_quietly(int dirfd, const char *name, int flags) {
    int r = openat(dirfd, name, flags | O_CLOEXEC | O_NOATIME);
    return r >= 0 || errno != EPERM ? r : openat(dirfd, name, flags | O_CLOEXEC);
}

int cv_reopen_dir(int fd, int flags) {
    int r = openat(fd, ".", flags | O_CLOEXEC);
    if (r >= 0 || errno != EACCES) return r;
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    r = open(p, flags | O_CLOEXEC);
    if (r < 0) errno = EACCES;
    return r;
}

ssize_t cv_read_small(const char *path, char *buf, size_t len) {
    cv_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    ssize_t n = cv_read_full(fd, buf, len - 1);
    if (n < 0) return -errno;
    buf[n] = 0;
    return n;
}

long cv_proc_field(const char *text, const char *key) {
    size_t klen = strlen(key);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ':') return strtol(p + klen + 1, NULL, 10);
        p = strchr(p, '\n');
        if (p) p++;
    }
    return -1;
}

pid_t cv_pidfd_pid(int fd) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    if (cv_read_small(path, buf, sizeof buf) <= 0) return -1;
    return (pid_t)cv_proc_field(buf, "Pid");
}

char *cv_next_component(char **pp, int *trailing, int *last) {
    char *p = *pp;
    while (*p == '/') p++;
    if (!*p) {
        *pp = p;
        return NULL;
    }
    char *comp = p;
    while (*p && *p != '/') p++;
    *trailing = *p == '/';
    if (*p) *p++ = 0;
    const char *q = p;
    while (*q == '/') q++;
    *last = !*q;
    *pp = p;
    return comp;
}
