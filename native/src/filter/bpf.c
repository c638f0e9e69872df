/* Compiles the syscall table to a cBPF program:
 *   1. arch != x86_64, or an x32 number  → KILL_PROCESS
 *   2. binary search on nr over runs of neighbouring numbers with one action →
 *      a shared action block, or a per-syscall block that loads argument words
 *      (only there, so argument-free ALLOWs stay in the kernel's constant-action
 *      cache). The program's length is what installing it costs (the kernel
 *      checks and JIT-compiles it at every sandbox start), hence runs and
 *      one-insn tests wherever the 8-bit jump offset reaches.
 *   3. default                            → ERRNO(ENOSYS)
 * Other conditional jumps are emitted as "jxx k, 0, 1; ja L" so targets can be
 * arbitrarily far: cBPF conditional offsets are only 8 bits. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "table.h"

#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | ((uint32_t)(e) & SECCOMP_RET_DATA))
#define OFF_NR offsetof(struct seccomp_data, nr)
#define OFF_ARCH offsetof(struct seccomp_data, arch)
#define OFF_ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))

struct asm_ {
    struct sock_filter *code;
    size_t cap, n;
    int *label_of; /* for "ja" insns: the label index they jump to, else -1 */
    int *labels;   /* label index → insn address */
    size_t nlabels, labels_cap;
    int overflow;
};

static void emit(struct asm_ *a, uint16_t code, uint32_t k, uint8_t jt, uint8_t jf, int label) {
    if (a->n >= a->cap) { a->overflow = 1; return; }
    a->code[a->n] = (struct sock_filter){code, jt, jf, k};
    a->label_of[a->n] = label;
    a->n++;
}
static int new_label(struct asm_ *a) {
    if (a->nlabels == a->labels_cap) {
        size_t cap = a->labels_cap ? a->labels_cap * 2 : 64;
        int *l = realloc(a->labels, cap * sizeof *l);
        if (!l) { a->overflow = 1; return 0; }
        a->labels = l;
        a->labels_cap = cap;
    }
    a->labels[a->nlabels] = -1;
    return (int)a->nlabels++;
}
static void place(struct asm_ *a, int label) { if (!a->overflow) a->labels[label] = (int)a->n; }
static void ret(struct asm_ *a, uint32_t v) { emit(a, BPF_RET | BPF_K, v, 0, 0, -1); }
static void ld(struct asm_ *a, uint32_t off) { emit(a, BPF_LD | BPF_W | BPF_ABS, off, 0, 0, -1); }
static void jmp(struct asm_ *a, int label) { emit(a, BPF_JMP | BPF_JA, 0, 0, 0, label); }
/* if (A <op> k) goto label */
static void jif(struct asm_ *a, uint16_t op, uint32_t k, int label) {
    emit(a, BPF_JMP | op | BPF_K, k, 0, 1, -1);
    jmp(a, label);
}

struct entry { int nr; const struct cv_syscall *s; };
static int by_nr(const void *x, const void *y) {
    return ((const struct entry *)x)->nr - ((const struct entry *)y)->nr;
}

/* Shared blocks for argument-free actions. */
struct blocks { int allow, notify, enosys, kill, deny[4096]; };

static int deny_label(struct asm_ *a, struct blocks *b, uint16_t e) {
    if (e >= 4096) e = ENOSYS;
    if (b->deny[e] < 0) b->deny[e] = new_label(a);
    return b->deny[e];
}

static int simple_label(struct asm_ *a, struct blocks *b, const struct cv_filter_opts *o,
                        const struct cv_syscall *s) {
    if (cv_filter_hooked(o, s->nr)) return b->notify;
    if (s->arg_rule == CV_ARG_SIGNAL) return o->signals_scoped ? b->allow : b->notify;
    if (s->arg_rule != CV_ARG_NONE) return -1;
    if (s->kind == CV_ALLOW) return b->allow;
    if (s->kind == CV_NOTIFY) return b->notify;
    return deny_label(a, b, s->errno_);
}

static void emit_rule(struct asm_ *a, struct blocks *b, const struct cv_filter_opts *o,
                      const struct cv_syscall *s) {
    switch (s->arg_rule) {
    case CV_ARG_CLONE: {
        int files = new_label(a);
        ld(a, OFF_ARG_LO(0));
        jif(a, BPF_JSET, CV_CLONE_NEW_MASK, deny_label(a, b, EPERM));
        jif(a, BPF_JSET, CV_CLONE_FILES, files);
        jmp(a, b->allow);
        place(a, files);
        jif(a, BPF_JSET, CV_CLONE_THREAD, b->allow);
        jmp(a, deny_label(a, b, EPERM));
        return;
    }
    case CV_ARG_SOCKET: {
        int inet = o->deny_network ? deny_label(a, b, EACCES) : b->allow;
        int netlink = new_label(a);
        ld(a, OFF_ARG_LO(0));
        jif(a, BPF_JEQ, CV_AF_UNIX, b->allow);
        jif(a, BPF_JEQ, CV_AF_INET, inet);
        jif(a, BPF_JEQ, CV_AF_INET6, inet);
        jif(a, BPF_JEQ, CV_AF_NETLINK, netlink);
        jmp(a, deny_label(a, b, EAFNOSUPPORT));
        place(a, netlink);
        ld(a, OFF_ARG_LO(2));
        jif(a, BPF_JEQ, CV_NETLINK_ROUTE, b->allow);
        jmp(a, deny_label(a, b, EAFNOSUPPORT));
        return;
    }
    case CV_ARG_SOCKETPAIR:
        ld(a, OFF_ARG_LO(0));
        jif(a, BPF_JEQ, CV_AF_UNIX, b->allow);
        jmp(a, deny_label(a, b, EAFNOSUPPORT));
        return;
    case CV_ARG_IOCTL: {
        /* One-insn tests that jump straight to returns at the block's end (it is short, so the
         * 8-bit offsets reach): [tests] ja notify; ret EPERM; ret ALLOW. */
        size_t n = 0, pos = 0;
        for (size_t i = 0; i < CV_ALLOWED_IOCTLS; i++) n += cv_allowed_ioctls[i].lo == cv_allowed_ioctls[i].hi ? 1 : 2;
        n += CV_DENIED_IOCTLS;
        ld(a, OFF_ARG_LO(1));
        /* from the insn at index pos of the tests: to "ret EPERM" and "ret ALLOW" */
#define TO_DENY() ((uint8_t)(n - pos))
#define TO_ALLOW() ((uint8_t)(n - pos + 1))
        for (size_t i = 0; i < CV_DENIED_IOCTLS; i++, pos++)
            emit(a, BPF_JMP | BPF_JEQ | BPF_K, cv_denied_ioctls[i], TO_DENY(), 0, -1);
        for (size_t i = 0; i < CV_ALLOWED_IOCTLS; i++) {
            const struct cv_ioctl_range *r = &cv_allowed_ioctls[i];
            if (r->lo == r->hi) {
                emit(a, BPF_JMP | BPF_JEQ | BPF_K, r->lo, TO_ALLOW(), 0, -1);
                pos++;
                continue;
            }
            emit(a, BPF_JMP | BPF_JGE | BPF_K, r->lo, 0, 1, -1); /* below: skip the next test */
            pos++;
            emit(a, BPF_JMP | BPF_JGT | BPF_K, r->hi, 0, TO_ALLOW(), -1);
            pos++;
        }
#undef TO_DENY
#undef TO_ALLOW
        jmp(a, b->notify);
        ret(a, RET_ERRNO(EPERM));
        ret(a, SECCOMP_RET_ALLOW);
        return;
    }
    case CV_ARG_NO_ADDR:
        /* a NULL pointer: the low and the high word both 0 */
        ld(a, OFF_ARG_LO(s->errno_));
        jif(a, BPF_JSET, 0xffffffffu, b->notify);
        ld(a, OFF_ARG_LO(s->errno_) + 4);
        jif(a, BPF_JSET, 0xffffffffu, b->notify);
        jmp(a, b->allow);
        return;
    case CV_ARG_FCNTL: {
        /* [6 lock tests] jeq F_SETLEASE; ja allow; (lease:) ld arg2; jeq F_UNLCK; ret EACCES;
         * ret ALLOW ... with the lock tests jumping to a local "ja notify". */
        static const uint32_t locks[] = {CV_F_GETLK, CV_F_SETLK, CV_F_SETLKW, CV_F_OFD_GETLK, CV_F_OFD_SETLK,
                                         CV_F_OFD_SETLKW};
        const uint8_t nl = sizeof locks / sizeof locks[0];
        ld(a, OFF_ARG_LO(1));
        for (uint8_t i = 0; i < nl; i++) /* to the "ja notify" after the lease test and "ja allow" */
            emit(a, BPF_JMP | BPF_JEQ | BPF_K, locks[i], (uint8_t)(nl - i + 1), 0, -1);
        emit(a, BPF_JMP | BPF_JEQ | BPF_K, CV_F_SETLEASE, 2, 0, -1);
        jmp(a, b->allow);
        jmp(a, b->notify);
        ld(a, OFF_ARG_LO(2)); /* a lease: only its release goes */
        emit(a, BPF_JMP | BPF_JEQ | BPF_K, CV_F_UNLCK, 1, 0, -1);
        ret(a, RET_ERRNO(EACCES));
        ret(a, SECCOMP_RET_ALLOW);
        return;
    }
    case CV_ARG_PRCTL: {
        int dump = new_label(a);
        ld(a, OFF_ARG_LO(0));
        jif(a, BPF_JEQ, CV_PR_SET_DUMPABLE, dump);
        jmp(a, b->allow);
        place(a, dump);
        ld(a, OFF_ARG_LO(1));
        jif(a, BPF_JEQ, 0, deny_label(a, b, 0));
        jmp(a, b->allow);
        return;
    }
    case CV_ARG_PERSONALITY:
        ld(a, OFF_ARG_LO(0));
        for (size_t i = 0; i < CV_ALLOWED_PERSONAS; i++)
            jif(a, BPF_JEQ, cv_allowed_personas[i], b->allow);
        jmp(a, deny_label(a, b, EPERM));
        return;
    case CV_ARG_PID0:
        ld(a, OFF_ARG_LO(0));
        jif(a, BPF_JEQ, 0, b->allow);
        jmp(a, b->notify);
        return;
    case CV_ARG_PRIO_SELF: {
        int who = new_label(a);
        ld(a, OFF_ARG_LO(0));
        jif(a, BPF_JEQ, s->errno_, who);
        jmp(a, b->notify);
        place(a, who);
        ld(a, OFF_ARG_LO(1));
        jif(a, BPF_JEQ, 0, b->allow);
        jmp(a, b->notify);
        return;
    }
    case CV_ARG_FD_STAT: {
        /* About the fd alone: AT_EMPTY_PATH, a NULL path (Linux 6.11+) and an fd, not AT_FDCWD. */
        int empty = new_label(a);
        ld(a, OFF_ARG_LO(s->errno_));
        jif(a, BPF_JSET, CV_AT_EMPTY_PATH, empty);
        jmp(a, b->notify);
        place(a, empty);
        ld(a, OFF_ARG_LO(1));
        jif(a, BPF_JSET, 0xffffffffu, b->notify);
        ld(a, OFF_ARG_LO(1) + 4);
        jif(a, BPF_JSET, 0xffffffffu, b->notify);
        ld(a, OFF_ARG_LO(0));
        jif(a, BPF_JSET, 0x80000000u, b->notify);
        jmp(a, b->allow);
        return;
    }
    default:
        jmp(a, b->notify);
    }
}

/* A run of consecutive syscall numbers, from start to the next run's start, that all go to one
 * label: neighbours with the same shared action (most ALLOWs, NOTIFYs) and the gaps between
 * table entries (ENOSYS) merge, so the search tests run boundaries, not single numbers. */
struct run { uint32_t start; int target; };

static void add_run(struct run *runs, size_t *n, uint32_t start, int target) {
    if (*n > 0 && runs[*n - 1].target == target) return;
    runs[(*n)++] = (struct run){start, target};
}

/* The runs covering every number from 0 up, in order (at most 2 * entries + 1). */
static size_t make_runs(const struct entry *e, const int *target, size_t n, int dflt, struct run *runs) {
    size_t r = 0;
    uint32_t next = 0; /* the first number no run covers yet */
    for (size_t i = 0; i < n; i++) {
        uint32_t nr = (uint32_t)e[i].nr;
        if (nr > next) add_run(runs, &r, next, dflt);
        add_run(runs, &r, nr, target[i]);
        next = nr + 1;
    }
    add_run(runs, &r, next, dflt);
    return r;
}

/* "if (A >= k) skip the next `over` insns": one insn when cBPF's 8-bit offset reaches. */
static size_t jge_size(size_t over) { return over <= 255 ? 1 : 2; }

/* Insns that emit_runs takes for runs[lo, hi). */
static size_t runs_size(size_t lo, size_t hi) {
    if (hi - lo == 1) return 1;
    size_t mid = lo + (hi - lo) / 2, lower = runs_size(lo, mid);
    return jge_size(lower) + lower + runs_size(mid, hi);
}

/* Binary search over runs[lo, hi) (A holds nr): the lower half right after the test, the
 * upper half after it, and a jump to the run's label at each leaf. */
static void emit_runs(struct asm_ *a, const struct run *runs, size_t lo, size_t hi) {
    if (hi - lo == 1) {
        jmp(a, runs[lo].target);
        return;
    }
    size_t mid = lo + (hi - lo) / 2, lower = runs_size(lo, mid);
    if (jge_size(lower) == 1) {
        emit(a, BPF_JMP | BPF_JGE | BPF_K, runs[mid].start, (uint8_t)lower, 0, -1);
        emit_runs(a, runs, lo, mid);
    } else {
        int upper = new_label(a);
        jif(a, BPF_JGE, runs[mid].start, upper);
        emit_runs(a, runs, lo, mid);
        place(a, upper);
    }
    emit_runs(a, runs, mid, hi);
}

int cv_filter_build(const struct cv_filter_opts *o, struct sock_filter *out, size_t cap) {
    struct asm_ a = {.code = out, .cap = cap};
    struct entry *e = calloc(cv_syscalls_len, sizeof *e);
    int *target = calloc(cv_syscalls_len, sizeof *target);
    struct run *runs = calloc(2 * cv_syscalls_len + 1, sizeof *runs);
    struct blocks *b = malloc(sizeof *b);
    a.label_of = calloc(cap ? cap : 1, sizeof *a.label_of);
    int result = -1;
    if (!e || !target || !runs || !b || !a.label_of) goto out;
    for (size_t i = 0; i < cv_syscalls_len; i++) e[i] = (struct entry){cv_syscalls[i].nr, &cv_syscalls[i]};
    qsort(e, cv_syscalls_len, sizeof *e, by_nr);

    b->allow = new_label(&a);
    b->notify = new_label(&a);
    b->kill = new_label(&a);
    for (size_t i = 0; i < 4096; i++) b->deny[i] = -1;
    b->enosys = deny_label(&a, b, ENOSYS);
    for (size_t i = 0; i < cv_syscalls_len; i++) {
        int l = simple_label(&a, b, o, e[i].s);
        target[i] = l >= 0 ? l : new_label(&a);
    }

    /* 1. architecture and x32 guards */
    ld(&a, OFF_ARCH);
    emit(&a, BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0, -1);
    jmp(&a, b->kill);
    ld(&a, OFF_NR);
    jif(&a, BPF_JSET, CV_X32_BIT, b->kill);
    /* 2. dispatch */
    emit_runs(&a, runs, 0, make_runs(e, target, cv_syscalls_len, b->enosys, runs));
    /* per-syscall argument blocks */
    for (size_t i = 0; i < cv_syscalls_len; i++) {
        if (simple_label(&a, b, o, e[i].s) >= 0) continue;
        place(&a, target[i]);
        emit_rule(&a, b, o, e[i].s);
    }
    /* shared blocks */
    place(&a, b->allow);
    ret(&a, SECCOMP_RET_ALLOW);
    place(&a, b->notify);
    ret(&a, SECCOMP_RET_USER_NOTIF);
    place(&a, b->kill);
    ret(&a, SECCOMP_RET_KILL_PROCESS);
    for (int err = 0; err < 4096; err++) {
        if (b->deny[err] < 0) continue;
        place(&a, b->deny[err]);
        ret(&a, RET_ERRNO(err));
    }
    if (a.overflow || a.n > BPF_MAXINSNS) goto out;
    /* resolve jumps */
    for (size_t i = 0; i < a.n; i++) {
        int l = a.label_of[i];
        if (l < 0) continue;
        int addr = a.labels[l];
        if (addr < 0 || (size_t)addr <= i) goto out;
        a.code[i].k = (uint32_t)(addr - (int)i - 1);
    }
    result = (int)a.n;
out:
    free(e);
    free(target);
    free(runs);
    free(b);
    free(a.label_of);
    free(a.labels);
    return result;
}
