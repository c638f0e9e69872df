/* Small helpers shared by the library and the helper binary. */
#ifndef CV_UTIL_H
#define CV_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

/* Retry a call while it fails with EINTR. */
#define CV_RETRY(expr)                                                                 \
    ({                                                                                 \
        __typeof__(expr) cv_r_;                                                        \
        do cv_r_ = (expr);                                                             \
        while (cv_r_ == -1 && errno == EINTR);                                         \
        cv_r_;                                                                         \
    })

/* Scope-bound cleanup: `cv_autoclose int fd = open(...)` closes on every return. */
static inline void cv_close_ptr(int *fd) {
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}
#define cv_autoclose __attribute__((cleanup(cv_close_ptr)))

/* Give up ownership of an fd held in a cv_autoclose variable. */
static inline int cv_steal_fd(int *fd) {
    int v = *fd;
    *fd = -1;
    return v;
}

ssize_t cv_read_full(int fd, void *buf, size_t len);
ssize_t cv_write_full(int fd, const void *buf, size_t len);
/* readlink into buf (NUL-terminated); returns length or -errno. */
ssize_t cv_readlink(const char *path, char *buf, size_t len);
/* path is dir or lies below it ("/" holds everything). */
int cv_path_under(const char *path, const char *dir);
/* Another open file description of the directory fd (O_CLOEXEC added): openat(fd, ".") needs
 * search permission on it, so a readable one without (0600) is reopened through procfs. */
int cv_reopen_dir(int fd, int flags);
/* The same, with O_NOATIME where the owner's right allows it: a look of the supervisor's own
 * leaves the directory's access time as the guest's reads left it. */
int cv_reopen_dir_quietly(int fd, int flags);
/* openat(dirfd, name, flags | O_CLOEXEC), with O_NOATIME where the owner's right allows it. */
int cv_openat_quietly(int dirfd, const char *name, int flags);
/* Send fd over the unix socket sock (SCM_RIGHTS) with the one byte tag. 0 or -errno. */
int cv_send_fd(int sock, int fd, char tag);
ssize_t cv_readlinkat(int dirfd, const char *path, char *buf, size_t len);
/* Read a small file (e.g. under /proc) into buf, NUL-terminated. Returns length or -errno. */
ssize_t cv_read_small(const char *path, char *buf, size_t len);
/* Parse "Key:\t<number>" from a /proc status-like text. -1 if missing. */
long cv_proc_field(const char *text, const char *key);
/* The process a pidfd (ours) names, from its fdinfo; <= 0 when it has exited or is unknown. */
pid_t cv_pidfd_pid(int fd);

/* One component of a path being walked in place: *p is cut after it (a NUL over the '/').
 * Returns the component, or NULL at the end; *trailing: a '/' followed it; *last: nothing but
 * slashes follows. */
char *cv_next_component(char **p, int *trailing, int *last);

#endif
