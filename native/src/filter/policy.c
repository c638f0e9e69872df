/* The reference evaluator: the decision for one call, read straight off the
 * table. The compiled BPF program must agree with it everywhere. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/seccomp.h>

#include "rules.h"
#include "table.h"

#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | ((uint32_t)(e) & SECCOMP_RET_DATA))

static uint32_t lo32(uint64_t v) { return (uint32_t)v; }

static uint32_t eval_rule(const struct cv_filter_opts *o, const struct cv_syscall *s,
                          const uint64_t a[6]) {
    switch (s->arg_rule) {
    case CV_ARG_CLONE:
        if (lo32(a[0]) & CV_CLONE_NEW_MASK) return RET_ERRNO(EPERM);
        if ((lo32(a[0]) & (CV_CLONE_FILES | CV_CLONE_THREAD)) == CV_CLONE_FILES) return RET_ERRNO(EPERM);
        return SECCOMP_RET_ALLOW;
    case CV_ARG_SOCKET: {
        uint32_t d = lo32(a[0]);
        if (d == CV_AF_UNIX) return SECCOMP_RET_ALLOW;
        if (d == CV_AF_INET || d == CV_AF_INET6)
            return o->deny_network ? RET_ERRNO(EACCES) : SECCOMP_RET_ALLOW;
        if (d == CV_AF_NETLINK && lo32(a[2]) == CV_NETLINK_ROUTE) return SECCOMP_RET_ALLOW;
        return RET_ERRNO(EAFNOSUPPORT);
    }
    case CV_ARG_SOCKETPAIR:
        return lo32(a[0]) == CV_AF_UNIX ? SECCOMP_RET_ALLOW : RET_ERRNO(EAFNOSUPPORT);
    case CV_ARG_IOCTL:
        for (size_t i = 0; i < CV_DENIED_IOCTLS; i++)
            if (lo32(a[1]) == cv_denied_ioctls[i]) return RET_ERRNO(EPERM);
        for (size_t i = 0; i < CV_ALLOWED_IOCTLS; i++)
            if (lo32(a[1]) >= cv_allowed_ioctls[i].lo && lo32(a[1]) <= cv_allowed_ioctls[i].hi)
                return SECCOMP_RET_ALLOW;
        return SECCOMP_RET_USER_NOTIF;
    case CV_ARG_NO_ADDR:
        return a[s->errno_] == 0 ? SECCOMP_RET_ALLOW : SECCOMP_RET_USER_NOTIF;
    case CV_ARG_FCNTL: {
        uint32_t cmd = lo32(a[1]);
        if (cmd == CV_F_GETLK || cmd == CV_F_SETLK || cmd == CV_F_SETLKW || cmd == CV_F_OFD_GETLK ||
            cmd == CV_F_OFD_SETLK || cmd == CV_F_OFD_SETLKW)
            return SECCOMP_RET_USER_NOTIF;
        if (cmd == CV_F_SETLEASE) return lo32(a[2]) == CV_F_UNLCK ? SECCOMP_RET_ALLOW : RET_ERRNO(EACCES);
        return SECCOMP_RET_ALLOW;
    }
    case CV_ARG_PRCTL:
        return (lo32(a[0]) == CV_PR_SET_DUMPABLE && lo32(a[1]) == 0) ? RET_ERRNO(0)
                                                                     : SECCOMP_RET_ALLOW;
    case CV_ARG_PERSONALITY:
        for (size_t i = 0; i < CV_ALLOWED_PERSONAS; i++)
            if (lo32(a[0]) == cv_allowed_personas[i]) return SECCOMP_RET_ALLOW;
        return RET_ERRNO(EPERM);
    case CV_ARG_PID0:
        return lo32(a[0]) == 0 ? SECCOMP_RET_ALLOW : SECCOMP_RET_USER_NOTIF;
    case CV_ARG_PRIO_SELF:
        return (lo32(a[0]) == s->errno_ && lo32(a[1]) == 0) ? SECCOMP_RET_ALLOW
                                                            : SECCOMP_RET_USER_NOTIF;
    case CV_ARG_FD_STAT:
        /* About the fd alone: AT_EMPTY_PATH, a NULL path (Linux 6.11+) and an fd, not AT_FDCWD. */
        return ((lo32(a[s->errno_]) & CV_AT_EMPTY_PATH) && a[1] == 0 && !(lo32(a[0]) & 0x80000000u))
                   ? SECCOMP_RET_ALLOW
                   : SECCOMP_RET_USER_NOTIF;
    case CV_ARG_SIGNAL:
        return o->signals_scoped ? SECCOMP_RET_ALLOW : SECCOMP_RET_USER_NOTIF;
    default:
        break;
    }
    switch (s->kind) {
    case CV_ALLOW: return SECCOMP_RET_ALLOW;
    case CV_DENY: return RET_ERRNO(s->errno_);
    case CV_NOTIFY: return SECCOMP_RET_USER_NOTIF;
    default: return RET_ERRNO(ENOSYS);
    }
}

uint32_t cv_policy_eval(const struct cv_filter_opts *o, uint32_t arch, int nr,
                        const uint64_t args[6]) {
    if (arch != AUDIT_ARCH_X86_64) return SECCOMP_RET_KILL_PROCESS;
    if ((uint32_t)nr & CV_X32_BIT) return SECCOMP_RET_KILL_PROCESS;
    for (size_t i = 0; i < cv_syscalls_len; i++) {
        if (cv_syscalls[i].nr != nr) continue;
        return cv_filter_hooked(o, nr) ? SECCOMP_RET_USER_NOTIF : eval_rule(o, &cv_syscalls[i], args);
    }
    return RET_ERRNO(ENOSYS);
}
