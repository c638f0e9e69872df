/* `cvisor-helper probe`: tries each kernel feature for real in a throwaway
 * child and prints `key=value` pairs for the supervisor's cv_probe(). */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/landlock.h"
#include "common/seccomp_defs.h"
#include "common/util.h"
#include "common/sysnr.h"

struct probe {
    int seccomp_unotify, seccomp_errno, addfd_send, addfd_errno, sync_wakeup, killable_recv;
    int pidfd_open, pidfd_getfd, pidfd_errno, landlock_abi, landlock_errno, proc_mem_force,
        proc_mem_errno;
};

#define PROBE_VAL 4242

static int child_install(int *killable) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getppid, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getpgid, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    int fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                          SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &prog);
    *killable = fd >= 0;
    if (fd < 0 && errno == EINVAL)
        fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    return fd;
}

static void probe_unotify(struct probe *p) {
    int to_parent[2], to_child[2];
    if (pipe2(to_parent, O_CLOEXEC) < 0 || pipe2(to_child, O_CLOEXEC) < 0) return;
    pid_t pid = fork();
    if (pid == 0) {
        /* Only the parent may hold the write end of to_child: if it gives up before the go
         * byte (no pidfd_getfd, as under Docker's default profile), the read below ends. */
        close(to_child[1]);
        close(to_parent[0]);
        int killable = 0;
        int fd = child_install(&killable);
        int msg[3] = {fd, fd < 0 ? errno : 0, killable};
        cv_write_full(to_parent[1], msg, sizeof msg);
        if (fd < 0) _exit(1);
        char go;
        if (cv_read_full(to_child[0], &go, 1) != 1) _exit(1);
        int ok = 0;
        if (getppid() == PROBE_VAL) ok |= 1;
        long injected = syscall(__NR_getpgid, 0);
        struct stat st;
        if (injected >= 0 && fstat((int)injected, &st) == 0 && S_ISCHR(st.st_mode)) ok |= 2;
        _exit(ok == 3 ? 0 : 10 + ok);
    }
    close(to_parent[1]);
    close(to_child[0]);
    int msg[3] = {-1, 0, 0};
    if (pid < 0 || cv_read_full(to_parent[0], msg, sizeof msg) != sizeof msg || msg[0] < 0) {
        p->seccomp_errno = msg[1] ? msg[1] : EIO;
        goto reap;
    }
    p->killable_recv = msg[2];
    int pidfd = (int)syscall(__NR_pidfd_open, pid, 0);
    p->pidfd_open = pidfd >= 0;
    if (pidfd < 0) { p->pidfd_errno = errno; goto reap; }
    int listener = (int)syscall(__NR_pidfd_getfd, pidfd, msg[0], 0);
    p->pidfd_getfd = listener >= 0;
    close(pidfd);
    if (listener < 0) { p->pidfd_errno = errno; goto reap; }
    p->seccomp_unotify = 1;
    p->sync_wakeup = ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) == 0;
    cv_write_full(to_child[1], "g", 1);
    struct seccomp_notif req;
    struct seccomp_notif_resp resp;
    for (int round = 0; round < 2; round++) {
        memset(&req, 0, sizeof req);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0) { p->seccomp_unotify = 0; p->seccomp_errno = errno; break; }
        if (req.data.nr == __NR_getppid) {
            resp = (struct seccomp_notif_resp){.id = req.id, .val = PROBE_VAL};
            if (ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0) { p->seccomp_unotify = 0; p->seccomp_errno = errno; }
        } else {
            int src = open("/dev/null", O_RDONLY | O_CLOEXEC);
            struct seccomp_notif_addfd add = {.id = req.id, .flags = SECCOMP_ADDFD_FLAG_SEND, .srcfd = (uint32_t)src};
            int r = ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
            if (r < 0) {
                p->addfd_errno = errno;
                resp = (struct seccomp_notif_resp){.id = req.id, .error = -ENOSYS};
                ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
            }
            close(src);
        }
    }
    close(listener);
reap:
    close(to_child[1]);
    close(to_parent[0]);
    if (pid > 0) {
        int st;
        waitpid(pid, &st, 0);
        if (p->seccomp_unotify && WIFEXITED(st)) {
            int code = WEXITSTATUS(st);
            if (code == 0) p->addfd_send = 1;
            else if (code == 11 && !p->addfd_errno) p->addfd_errno = EIO;
            else if (code != 11) { p->seccomp_unotify = 0; p->seccomp_errno = EIO; }
        }
    }
}

static void probe_proc_mem(struct probe *p) {
    char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) { p->proc_mem_errno = errno; return; }
    page[0] = 'a';
    mprotect(page, 4096, PROT_READ);
    int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    if (fd < 0) { p->proc_mem_errno = errno; return; }
    if (pwrite(fd, "b", 1, (off_t)(uintptr_t)page) == 1 && page[0] == 'b') p->proc_mem_force = 1;
    else p->proc_mem_errno = errno ? errno : EIO;
    close(fd);
    munmap(page, 4096);
}

int cv_helper_probe(void) {
    struct probe p = {0};
    errno = 0;
    p.landlock_abi = cv_landlock_abi();
    if (!p.landlock_abi) p.landlock_errno = errno ? errno : ENOSYS;
    probe_unotify(&p);
    probe_proc_mem(&p);
    printf("seccomp_unotify=%d seccomp_errno=%d addfd_send=%d addfd_errno=%d sync_wakeup=%d "
           "killable_recv=%d pidfd_open=%d pidfd_getfd=%d pidfd_errno=%d landlock_abi=%d "
           "landlock_errno=%d proc_mem_force=%d proc_mem_errno=%d\n",
           p.seccomp_unotify, p.seccomp_errno, p.addfd_send, p.addfd_errno, p.sync_wakeup,
           p.killable_recv, p.pidfd_open, p.pidfd_getfd, p.pidfd_errno, p.landlock_abi,
           p.landlock_errno, p.proc_mem_force, p.proc_mem_errno);
    return 0;
}
