/* The syscall policy as data, and the filter compiled from it. */
#ifndef CV_FILTER_TABLE_H
#define CV_FILTER_TABLE_H

#include <linux/filter.h>
#include <stddef.h>
#include <stdint.h>

/* What the filter does with a syscall, before argument rules. */
enum cv_kind {
    CV_ALLOW = 1,   /* runs natively */
    CV_DENY,        /* fails in BPF with errno_ */
    CV_NOTIFY,      /* goes to the supervisor */
};

/* Argument rules: decided in BPF from register values only. */
enum cv_arg_rule {
    CV_ARG_NONE = 0,
    CV_ARG_CLONE,        /* arg0 & CLONE_NEW*, or CLONE_FILES without CLONE_THREAD → EPERM, else ALLOW */
    CV_ARG_SOCKET,       /* domain in arg0: unix allow, inet per policy, netlink route only */
    CV_ARG_SOCKETPAIR,   /* AF_UNIX allow, else EAFNOSUPPORT */
    CV_ARG_IOCTL,        /* arg1 in the deny list → EPERM, in the allow list → ALLOW, else NOTIFY */
    CV_ARG_PRCTL,        /* PR_SET_DUMPABLE 0 → fake success, else ALLOW */
    CV_ARG_PERSONALITY,  /* known-safe personas ALLOW, else EPERM */
    CV_ARG_PID0,         /* arg0 == 0 (self) → ALLOW, else NOTIFY */
    CV_ARG_PRIO_SELF,    /* arg0 == which_self && arg1 == 0 → ALLOW, else NOTIFY */
    CV_ARG_SIGNAL,       /* ALLOW when signals are Landlock-scoped, else NOTIFY */
    CV_ARG_FD_STAT,      /* AT_EMPTY_PATH in arg[errno_], a NULL path, an fd ≥ 0 (fstat) → ALLOW, else NOTIFY */
    CV_ARG_NO_ADDR,      /* arg[errno_] (an address pointer) is NULL → ALLOW, else NOTIFY */
    CV_ARG_FCNTL,        /* record locks → NOTIFY, a lease → EACCES, else ALLOW */
};

/* Which handler family answers a notified call (handlers/dispatch.c maps each to its function). */
enum cv_handler {
    CV_H_NONE = 0,
    CV_H_OPEN,     /* handlers/open.c */
    CV_H_EXEC,     /* handlers/exec.c */
    CV_H_MUTATE,   /* handlers/mutate.c */
    CV_H_META,     /* handlers/meta.c */
    CV_H_STAT,     /* handlers/stat.c */
    CV_H_DIRENT,   /* handlers/dirent.c */
    CV_H_CWD,      /* handlers/cwd.c */
    CV_H_SOCK,     /* handlers/sock.c */
    CV_H_SIGNAL,   /* handlers/signal.c */
    CV_H_IDENTITY, /* handlers/identity.c */
    CV_H_IOCTL,    /* handlers/ioctl.c */
    CV_H_LOCK,     /* handlers/lock.c */
    CV_H_COUNT
};

struct cv_syscall {
    const char *name;
    int nr;
    uint8_t kind;        /* enum cv_kind, when arg_rule is NONE */
    uint8_t arg_rule;    /* enum cv_arg_rule */
    uint16_t errno_;     /* CV_DENY; for CV_ARG_PRIO_SELF the "which" value meaning self; the
                          * argument index for CV_ARG_FD_STAT and CV_ARG_NO_ADDR */
    uint8_t handler;     /* enum cv_handler: who answers when it is notified */
    const char *why;     /* one line: why this is safe natively / why denied / why notified */
};

/* The row may reach the supervisor (NOTIFY, or a rule that can answer NOTIFY). */
int cv_rule_may_notify(const struct cv_syscall *s);

/* Syscall numbers the table may hold (x86_64 numbers are below 512). */
#define CV_FILTER_NR_MAX 512

/* Options that change the compiled program. */
struct cv_filter_opts {
    int deny_network;     /* AF_INET/AF_INET6 sockets → EACCES */
    int signals_scoped;   /* Landlock ABI >= 6 scopes signals: kill family natively */
    /* Syscalls an embedder's hook watches (a run's onSyscall): each is notified whatever its
     * row says, and the supervisor applies the row itself (cv_policy_eval without hooks) after
     * the hook. NULL: none (the programs compiled at build time). */
    const uint64_t *hooked; /* CV_FILTER_NR_MAX bits */
};

/* nr is in a set of syscall numbers (CV_FILTER_NR_MAX bits). */
static inline int cv_nr_in(const uint64_t *bits, int nr) {
    return nr >= 0 && nr < CV_FILTER_NR_MAX && ((bits[nr / 64] >> (nr % 64)) & 1);
}

/* nr is one of o's hooked syscalls. */
static inline int cv_filter_hooked(const struct cv_filter_opts *o, int nr) {
    return o->hooked && cv_nr_in(o->hooked, nr);
}

extern const struct cv_syscall cv_syscalls[];
extern const size_t cv_syscalls_len;

/* Name of syscall nr (NULL when the table does not know it). */
const char *cv_syscall_name(int nr);

/* The reference decision, computed straight from the table (no BPF): the
 * SECCOMP_RET_* value the filter must return for this call. The unit test
 * compares it with the compiled program for every syscall number. */
uint32_t cv_policy_eval(const struct cv_filter_opts *o, uint32_t arch, int nr,
                        const uint64_t args[6]);

/* Compile the table to cBPF. Returns the number of instructions, or -1 if
 * cap is too small. */
int cv_filter_build(const struct cv_filter_opts *o, struct sock_filter *out, size_t cap);

#define CV_FILTER_MAX 4096

#endif
