/* Compiles the syscall table to a cBPF program:
 *   1. arch != x86_64, or an x32 number  → KILL_PROCESS
 *   2. binary search on nr over the table → a shared action block, or a
 *      per-syscall block that loads argument words (only there, so argument-free
 *      ALLOWs stay in the kernel's constant-action cache)
 *   3. default                            → ERRNO(ENOSYS)
 * Every conditional jump is emitted as "jxx k, 0, 1; ja L" so targets can be
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
    if (s->arg_rule == CV_ARG_SIGNAL) return o->signals_scoped ? b->allow : b->notify;
    if (s->arg_rule != CV_ARG_NONE) return -1;
    if (s->kind == CV_ALLOW) return b->allow;
    if (s->kind == CV_NOTIFY) return b->notify;
    return deny_label(a, b, s->errno_);
}

static void emit_rule(struct asm_ *a, struct blocks *b, const struct cv_filter_opts *o,
                      const struct cv_syscall *s) {
    switch (s->arg_rule) {
    case CV_ARG_CLONE:
        ld(a, OFF_ARG_LO(0));
        jif(a, BPF_JSET, CV_CLONE_NEW_MASK, deny_label(a, b, EPERM));
        jmp(a, b->allow);
        return;
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
    case CV_ARG_IOCTL:
        ld(a, OFF_ARG_LO(1));
        for (size_t i = 0; i < CV_DENIED_IOCTLS; i++)
            jif(a, BPF_JEQ, cv_denied_ioctls[i], deny_label(a, b, EPERM));
        jmp(a, b->allow);
        return;
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
    case CV_ARG_FD_STAT:
        ld(a, OFF_ARG_LO(s->errno_));
        jif(a, BPF_JSET, CV_AT_EMPTY_PATH, b->allow);
        jmp(a, b->notify);
        return;
    default:
        jmp(a, b->notify);
    }
}

/* Binary search over entries[lo, hi); A holds nr. */
static void emit_tree(struct asm_ *a, const struct entry *e, size_t lo, size_t hi,
                      const int *target, int dflt) {
    if (hi - lo <= 4) {
        for (size_t i = lo; i < hi; i++) jif(a, BPF_JEQ, (uint32_t)e[i].nr, target[i]);
        jmp(a, dflt);
        return;
    }
    size_t mid = lo + (hi - lo) / 2;
    int upper = new_label(a);
    jif(a, BPF_JGE, (uint32_t)e[mid].nr, upper);
    emit_tree(a, e, lo, mid, target, dflt);
    place(a, upper);
    emit_tree(a, e, mid, hi, target, dflt);
}

int cv_filter_build(const struct cv_filter_opts *o, struct sock_filter *out, size_t cap) {
    struct asm_ a = {.code = out, .cap = cap};
    struct entry *e = calloc(cv_syscalls_len, sizeof *e);
    int *target = calloc(cv_syscalls_len, sizeof *target);
    struct blocks *b = malloc(sizeof *b);
    a.label_of = calloc(cap ? cap : 1, sizeof *a.label_of);
    int result = -1;
    if (!e || !target || !b || !a.label_of) goto out;
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
    emit_tree(&a, e, 0, cv_syscalls_len, target, b->enosys);
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
    free(b);
    free(a.label_of);
    free(a.labels);
    return result;
}
