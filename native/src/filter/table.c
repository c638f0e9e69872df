/* The syscall table: one row per x86_64 syscall the policy names. Anything
 * missing is answered ENOSYS by the filter (default deny, never "continue").
 * Every row carries a reason; the unit test refuses a row without one. */
#include "table.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include "common/sysnr.h"

static const char MEM[] = "memory, threads or scheduling of the caller itself";
static const char TIME[] = "reads clocks or arms the caller's own timers";
static const char SIG[] = "signal state of the caller itself";
static const char FDIO[] = "works on an fd the guest already holds: host files are only ever open read-only";
static const char SOCK[] = "socket data path, no address names a file";
static const char ID[] = "identity and life cycle of the caller; NO_NEW_PRIVS blocks gains";
static const char VIEW[] = "looks a path up in the merged view: answered from the layers (fstat of an fd: native)";
static const char DIRS[] = "lists a directory: merged listings come from the layers, host-only ones run natively";
static const char CWD[] = "the working directory may be one the kernel cannot reach (upper-only): tracked";
static const char PATHW[] = "changes the filesystem: emulated by the supervisor, never continued";
static const char FDMETA[] = "metadata change through an fd: Landlock does not cover it, so emulated";
static const char OPEN[] = "opens a file: resolved over the layers; host files read-only may run natively";
static const char EXEC[] = "exec: host files continued (Landlock grants execute on visible ones), the rest relayed";
static const char PRIV[] = "privileged or host-wide administration";
static const char NS[] = "namespaces and mount topology";
static const char XPROC[] = "reaches into another process's memory or files";
static const char ATTACK[] = "kernel attack surface nobody's build needs";
static const char URING[] = "io_uring submissions bypass seccomp; libc and libuv fall back on ENOSYS";
static const char KILLF[] = "signals another process: must stay inside the sandbox";
static const char PRIO[] = "changes limits or scheduling of a process: self natively, others checked";
static const char LL[] = "the guest may only restrict itself further";
static const char LOCK[] = "locks: never on a host file; done by the supervisor on its copy of the fd";
static const char SEND[] = "a message may carry an address (a host socket): done by the supervisor on its copies";
static const char IPC[] = "host-wide IPC objects; ENOSYS so programs fall back (MIT-SHM, ...)";

#define A(n, why) {#n, __NR_##n, CV_ALLOW, CV_ARG_NONE, 0, CV_H_NONE, why}
#define D(n, e, why) {#n, __NR_##n, CV_DENY, CV_ARG_NONE, e, CV_H_NONE, why}
#define N(n, h, why) {#n, __NR_##n, CV_NOTIFY, CV_ARG_NONE, 0, h, why}
#define R(n, rule, extra, h, why) {#n, __NR_##n, 0, rule, extra, h, why}

const struct cv_syscall cv_syscalls[] = {
    /* memory and threads */
    A(brk, MEM), A(mmap, MEM), A(munmap, MEM), A(mremap, MEM), A(mprotect, MEM),
    A(madvise, MEM), A(msync, MEM), A(mincore, MEM), A(mlock, MEM), A(mlock2, MEM),
    A(munlock, MEM), A(mlockall, MEM), A(munlockall, MEM), A(membarrier, MEM),
    A(futex, MEM), A(futex_waitv, MEM), A(futex_wake, MEM), A(futex_wait, MEM),
    A(futex_requeue, MEM), A(set_robust_list, MEM), A(get_robust_list, MEM),
    A(set_tid_address, MEM), A(rseq, MEM), A(arch_prctl, MEM), A(sched_yield, MEM),
    A(sched_getaffinity, MEM), A(sched_getparam, MEM), A(sched_getscheduler, MEM),
    A(sched_getattr, MEM), A(sched_get_priority_max, MEM), A(sched_get_priority_min, MEM),
    A(sched_rr_get_interval, MEM), A(getcpu, MEM), A(pkey_mprotect, MEM),
    A(pkey_alloc, MEM), A(pkey_free, MEM), A(map_shadow_stack, MEM), A(mseal, MEM),
    A(mbind, MEM), A(set_mempolicy, MEM), A(get_mempolicy, MEM),
    A(set_mempolicy_home_node, MEM), A(memfd_secret, MEM), A(remap_file_pages, MEM),
    A(modify_ldt, MEM),
    /* time */
    A(clock_gettime, TIME), A(clock_getres, TIME), A(clock_nanosleep, TIME),
    A(nanosleep, TIME), A(gettimeofday, TIME), A(time, TIME), A(times, TIME),
    A(timer_create, TIME), A(timer_settime, TIME), A(timer_gettime, TIME),
    A(timer_getoverrun, TIME), A(timer_delete, TIME), A(timerfd_create, TIME),
    A(timerfd_settime, TIME), A(timerfd_gettime, TIME), A(getitimer, TIME),
    A(setitimer, TIME), A(alarm, TIME),
    /* signals to self */
    A(rt_sigaction, SIG), A(rt_sigprocmask, SIG), A(rt_sigreturn, SIG),
    A(rt_sigsuspend, SIG), A(rt_sigpending, SIG), A(rt_sigtimedwait, SIG),
    A(sigaltstack, SIG), A(restart_syscall, SIG), A(signalfd, SIG), A(signalfd4, SIG),
    A(pause, SIG),
    /* fd I/O */
    A(read, FDIO), A(write, FDIO), A(pread64, FDIO), A(pwrite64, FDIO), A(readv, FDIO),
    A(writev, FDIO), A(preadv, FDIO), A(pwritev, FDIO), A(preadv2, FDIO),
    A(pwritev2, FDIO), A(lseek, FDIO), A(sendfile, FDIO), A(splice, FDIO), A(tee, FDIO),
    A(vmsplice, FDIO), A(copy_file_range, FDIO), A(fsync, FDIO), A(fdatasync, FDIO),
    A(sync_file_range, FDIO), A(fadvise64, FDIO), A(readahead, FDIO),
    A(ftruncate, FDIO), A(fallocate, FDIO), N(flock, CV_H_LOCK, LOCK), R(fcntl, CV_ARG_FCNTL, 0, CV_H_LOCK, LOCK), A(dup, FDIO),
    A(dup2, FDIO), A(dup3, FDIO), A(close, FDIO), A(close_range, FDIO), A(pipe, FDIO),
    A(pipe2, FDIO), A(eventfd, FDIO), A(eventfd2, FDIO), A(epoll_create, FDIO),
    A(epoll_create1, FDIO), A(epoll_ctl, FDIO), A(epoll_wait, FDIO), A(epoll_pwait, FDIO),
    A(epoll_pwait2, FDIO), A(poll, FDIO), A(ppoll, FDIO), A(select, FDIO),
    A(pselect6, FDIO), A(memfd_create, FDIO), A(fstat, FDIO), A(fstatfs, FDIO),
    A(fgetxattr, FDIO), A(flistxattr, FDIO), A(inotify_init, FDIO), A(inotify_init1, FDIO),
    A(inotify_rm_watch, FDIO), A(io_setup, FDIO), A(io_destroy, FDIO),
    A(io_getevents, FDIO), A(io_pgetevents, FDIO), A(io_submit, FDIO), A(io_cancel, FDIO),
    A(sync, FDIO), A(syncfs, FDIO), A(cachestat, FDIO),
    /* look-ups in the merged view: the supervisor answers from the layers */
    N(stat, CV_H_STAT, VIEW), N(lstat, CV_H_STAT, VIEW), R(newfstatat, CV_ARG_FD_STAT, 3, CV_H_STAT, VIEW), R(statx, CV_ARG_FD_STAT, 2, CV_H_STAT, VIEW),
    N(access, CV_H_STAT, VIEW), N(faccessat, CV_H_STAT, VIEW), N(faccessat2, CV_H_STAT, VIEW), N(readlink, CV_H_STAT, VIEW), N(readlinkat, CV_H_STAT, VIEW),
    N(statfs, CV_H_STAT, VIEW), N(getxattr, CV_H_STAT, VIEW), N(lgetxattr, CV_H_STAT, VIEW), N(listxattr, CV_H_STAT, VIEW),
    N(llistxattr, CV_H_STAT, VIEW), N(inotify_add_watch, CV_H_STAT, VIEW),
    N(getdents, CV_H_DIRENT, DIRS), N(getdents64, CV_H_DIRENT, DIRS),
    N(getcwd, CV_H_CWD, CWD), N(chdir, CV_H_CWD, CWD), N(fchdir, CV_H_CWD, CWD),
    N(exit_group, CV_H_CWD, "a leaving process's orphans keep the remembered working directory they inherit; continued"),
    /* sockets */
    A(recvfrom, SOCK), A(recvmsg, SOCK), A(recvmmsg, SOCK),
    R(sendto, CV_ARG_NO_ADDR, 4, CV_H_SOCK, "with an address: done by the supervisor on its copy (a unix path may be the host's)"),
    N(sendmsg, CV_H_SOCK, SEND), N(sendmmsg, CV_H_SOCK, SEND), A(shutdown, SOCK),
    N(connect, CV_H_SOCK, "done by the supervisor on its copy: unix paths resolved in the view, host ones only if allowed"),
    A(getsockopt, SOCK), A(setsockopt, SOCK),
    N(getsockname, CV_H_SOCK, "a unix path bound in the sandbox is named by the kernel as the supervisor bound it: given back as the guest's"),
    N(getpeername, CV_H_SOCK, "a unix path bound in the sandbox is named by the kernel as the supervisor bound it: given back as the guest's"),
    A(accept, SOCK), A(accept4, SOCK),
    N(bind, CV_H_SOCK, "binding inet ports needs --allow-listen; unix paths would create files"),
    N(listen, CV_H_SOCK, "listening on inet sockets needs --allow-listen"),
    R(socket, CV_ARG_SOCKET, 0, CV_H_NONE, "address families: unix always, inet per policy, others never"),
    R(socketpair, CV_ARG_SOCKETPAIR, 0, CV_H_NONE, "only unix socket pairs"),
    /* identity and life cycle */
    A(getpid, ID), A(getppid, ID), A(gettid, ID), A(getuid, ID), A(geteuid, ID),
    A(getgid, ID), A(getegid, ID), A(getresuid, ID), A(getresgid, ID), A(getgroups, ID),
    A(getpgid, ID), A(getpgrp, ID), A(getsid, ID), A(setsid, ID), A(setpgid, ID),
    A(setuid, ID), A(setgid, ID), A(setreuid, ID), A(setregid, ID), A(setresuid, ID),
    A(setresgid, ID), A(setfsuid, ID), A(setfsgid, ID), A(setgroups, ID), A(capget, ID),
    A(capset, ID), A(umask, ID), A(wait4, ID), A(waitid, ID), A(exit, ID),
    A(fork, ID), A(vfork, ID), A(getrlimit, ID), A(setrlimit, ID),
    A(getpriority, ID), A(ioprio_get, ID), A(getrandom, ID), N(uname, CV_H_IDENTITY, "the nodename is the sandbox's name"),
    A(sysinfo, ID), A(getrusage, ID), A(pidfd_open, ID), A(seccomp, LL),
    A(landlock_create_ruleset, LL), A(landlock_add_rule, LL),
    A(landlock_restrict_self, LL),
    /* SysV IPC and POSIX message queues are host-wide (no IPC namespace without user
     * namespaces): a guest could attach, change or remove the host's objects. */
    D(shmget, ENOSYS, IPC), D(shmat, ENOSYS, IPC), D(shmdt, ENOSYS, IPC), D(shmctl, ENOSYS, IPC),
    D(semget, ENOSYS, IPC), D(semop, ENOSYS, IPC), D(semtimedop, ENOSYS, IPC),
    D(semctl, ENOSYS, IPC), D(msgget, ENOSYS, IPC), D(msgsnd, ENOSYS, IPC),
    D(msgrcv, ENOSYS, IPC), D(msgctl, ENOSYS, IPC), D(mq_open, ENOSYS, IPC),
    D(mq_unlink, ENOSYS, IPC), D(mq_timedsend, ENOSYS, IPC), D(mq_timedreceive, ENOSYS, IPC),
    D(mq_notify, ENOSYS, IPC), D(mq_getsetattr, ENOSYS, IPC),
    R(clone, CV_ARG_CLONE, 0, CV_H_NONE, "new threads and processes; CLONE_NEW*, and fd tables shared between processes, denied"),
    R(prctl, CV_ARG_PRCTL, 0, CV_H_NONE, "own process attributes; becoming non-dumpable would blind the supervisor"),
    R(personality, CV_ARG_PERSONALITY, 0, CV_H_NONE, "only the personas Docker allows"),
    R(ioctl, CV_ARG_IOCTL, 0, CV_H_IOCTL, "safe requests natively; terminal injection and chattr denied; the rest decided on the fd"),
    R(prlimit64, CV_ARG_PID0, 0, CV_H_SIGNAL, PRIO), R(sched_setparam, CV_ARG_PID0, 0, CV_H_SIGNAL, PRIO),
    R(sched_setscheduler, CV_ARG_PID0, 0, CV_H_SIGNAL, PRIO), R(sched_setaffinity, CV_ARG_PID0, 0, CV_H_SIGNAL, PRIO),
    R(sched_setattr, CV_ARG_PID0, 0, CV_H_SIGNAL, PRIO),
    R(setpriority, CV_ARG_PRIO_SELF, 0 /* PRIO_PROCESS */, CV_H_SIGNAL, PRIO),
    R(ioprio_set, CV_ARG_PRIO_SELF, 1 /* IOPRIO_WHO_PROCESS */, CV_H_SIGNAL, PRIO),
    R(kill, CV_ARG_SIGNAL, 0, CV_H_SIGNAL, KILLF), R(tkill, CV_ARG_SIGNAL, 0, CV_H_SIGNAL, KILLF),
    R(tgkill, CV_ARG_SIGNAL, 0, CV_H_SIGNAL, KILLF), R(rt_sigqueueinfo, CV_ARG_SIGNAL, 0, CV_H_SIGNAL, KILLF),
    R(rt_tgsigqueueinfo, CV_ARG_SIGNAL, 0, CV_H_SIGNAL, KILLF),
    R(pidfd_send_signal, CV_ARG_SIGNAL, 0, CV_H_SIGNAL, KILLF),
    /* path operations */
    N(open, CV_H_OPEN, OPEN), N(openat, CV_H_OPEN, OPEN), N(creat, CV_H_OPEN, OPEN),
    D(openat2, ENOSYS, "RESOLVE_* semantics are not emulated yet; libc falls back to openat"),
    N(execve, CV_H_EXEC, EXEC), N(execveat, CV_H_EXEC, EXEC),
    N(truncate, CV_H_META, PATHW), N(rename, CV_H_MUTATE, PATHW), N(renameat, CV_H_MUTATE, PATHW), N(renameat2, CV_H_MUTATE, PATHW),
    N(mkdir, CV_H_MUTATE, PATHW), N(mkdirat, CV_H_MUTATE, PATHW), N(rmdir, CV_H_MUTATE, PATHW), N(link, CV_H_MUTATE, PATHW), N(linkat, CV_H_MUTATE, PATHW),
    N(unlink, CV_H_MUTATE, PATHW), N(unlinkat, CV_H_MUTATE, PATHW), N(symlink, CV_H_MUTATE, PATHW), N(symlinkat, CV_H_MUTATE, PATHW),
    N(mknod, CV_H_MUTATE, PATHW), N(mknodat, CV_H_MUTATE, PATHW), N(chmod, CV_H_META, PATHW), N(fchmodat, CV_H_META, PATHW),
    N(fchmodat2, CV_H_META, PATHW), N(chown, CV_H_META, PATHW), N(lchown, CV_H_META, PATHW), N(fchownat, CV_H_META, PATHW),
    N(utime, CV_H_META, PATHW), N(utimes, CV_H_META, PATHW), N(futimesat, CV_H_META, PATHW), N(utimensat, CV_H_META, PATHW),
    N(setxattr, CV_H_META, PATHW), N(lsetxattr, CV_H_META, PATHW), N(removexattr, CV_H_META, PATHW),
    N(lremovexattr, CV_H_META, PATHW),
    N(fchmod, CV_H_META, FDMETA), N(fchown, CV_H_META, FDMETA), N(fsetxattr, CV_H_META, FDMETA), N(fremovexattr, CV_H_META, FDMETA),
    /* denied in BPF */
    D(io_uring_setup, ENOSYS, URING), D(io_uring_enter, ENOSYS, URING),
    D(io_uring_register, ENOSYS, URING),
    D(clone3, ENOSYS, "BPF cannot read clone_args flags; glibc falls back to clone on ENOSYS"),
    D(ptrace, EPERM, XPROC), D(process_vm_readv, EPERM, XPROC),
    D(process_vm_writev, EPERM, XPROC), D(pidfd_getfd, EPERM, XPROC), D(kcmp, EPERM, XPROC),
    D(process_madvise, EPERM, XPROC), D(process_mrelease, EPERM, XPROC),
    D(move_pages, EPERM, XPROC), D(migrate_pages, EPERM, XPROC),
    D(unshare, EPERM, NS), D(setns, EPERM, NS), D(mount, EPERM, NS), D(umount2, EPERM, NS),
    D(pivot_root, EPERM, NS), D(chroot, EPERM, NS), D(fsopen, EPERM, NS),
    D(fsconfig, EPERM, NS), D(fsmount, EPERM, NS), D(fspick, EPERM, NS),
    D(move_mount, EPERM, NS), D(open_tree, EPERM, NS), D(mount_setattr, EPERM, NS),
    D(bpf, EPERM, ATTACK), D(perf_event_open, EPERM, ATTACK), D(userfaultfd, EPERM, ATTACK),
    D(fanotify_init, EPERM, ATTACK), D(fanotify_mark, EPERM, ATTACK),
    D(keyctl, EPERM, "the keyring is shared per uid"), D(add_key, EPERM, "the keyring is shared per uid"),
    D(request_key, EPERM, "the keyring is shared per uid"),
    D(open_by_handle_at, EPERM, "file handles bypass path resolution"),
    D(name_to_handle_at, EPERM, "file handles bypass path resolution"),
    D(reboot, EPERM, PRIV), D(kexec_load, EPERM, PRIV), D(kexec_file_load, EPERM, PRIV),
    D(init_module, EPERM, PRIV), D(finit_module, EPERM, PRIV), D(delete_module, EPERM, PRIV),
    D(swapon, EPERM, PRIV), D(swapoff, EPERM, PRIV), D(acct, EPERM, PRIV),
    D(quotactl, EPERM, PRIV), D(quotactl_fd, EPERM, PRIV), D(syslog, EPERM, PRIV),
    D(vhangup, EPERM, PRIV), D(iopl, EPERM, PRIV), D(ioperm, EPERM, PRIV),
    D(settimeofday, EPERM, PRIV), D(clock_settime, EPERM, PRIV),
    D(clock_adjtime, EPERM, PRIV), D(adjtimex, EPERM, PRIV), D(sethostname, EPERM, PRIV),
    D(setdomainname, EPERM, PRIV), D(nfsservctl, EPERM, PRIV), D(lookup_dcookie, EPERM, PRIV),
    D(uselib, EPERM, PRIV), D(ustat, EPERM, PRIV), D(sysfs, EPERM, PRIV),
    D(_sysctl, EPERM, PRIV), D(create_module, EPERM, PRIV), D(get_kernel_syms, EPERM, PRIV),
    D(query_module, EPERM, PRIV),
};
const size_t cv_syscalls_len = sizeof cv_syscalls / sizeof cv_syscalls[0];

int cv_rule_may_notify(const struct cv_syscall *s) {
    switch (s->arg_rule) {
    case CV_ARG_NONE: return s->kind == CV_NOTIFY;
    case CV_ARG_PID0: case CV_ARG_PRIO_SELF: case CV_ARG_SIGNAL: case CV_ARG_FD_STAT:
    case CV_ARG_IOCTL: case CV_ARG_NO_ADDR: case CV_ARG_FCNTL:
        return 1;
    default: return 0;
    }
}

const char *cv_syscall_name(int nr) {
    for (size_t i = 0; i < cv_syscalls_len; i++)
        if (cv_syscalls[i].nr == nr) return cv_syscalls[i].name;
    return NULL;
}
