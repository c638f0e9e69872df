/* The compiled seccomp program (cv_filter_build) must return exactly what the
 * reference evaluator (cv_policy_eval) returns, for every syscall number, both
 * option bits, random and targeted arguments, x32 numbers and foreign
 * architectures; it must pass the kernel's checker; argument-free ALLOWs must
 * stay cacheable by the kernel; and the table itself must be well formed and
 * keep a few decisions that matter.
 *
 * Output: one summary line, or one line per failure (capped), then
 * "filter: N passed, M failed". Exit status 0 only when M == 0. */
#include <errno.h>
#include <stdarg.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>

#include "cbpf.h"
#include "filter/rules.h"
#include "filter/table.h"
#include "check.h"
#include "handlers/handlers.h"
#include "filter_progs.h" /* what cvisor-helper installs: build/gen/, made by filter-gen */

#define ALLOW SECCOMP_RET_ALLOW
#define NOTIF SECCOMP_RET_USER_NOTIF
#define KILLP SECCOMP_RET_KILL_PROCESS
#define ERR(e) (SECCOMP_RET_ERRNO | ((uint32_t)(e) & SECCOMP_RET_DATA))

#define NR_SPAN 1024        /* syscall numbers checked exhaustively */
#define RANDOM_VECTORS 24   /* random argument vectors per number (plus all-zero) */


/* ---------- reporting ---------- */

static const char *ret_str(uint32_t r, char *buf, size_t len) {
    uint32_t data = r & SECCOMP_RET_DATA;
    switch (r & SECCOMP_RET_ACTION_FULL) {
    case SECCOMP_RET_KILL_PROCESS: snprintf(buf, len, "KILL_PROCESS"); break;
    case SECCOMP_RET_KILL_THREAD: snprintf(buf, len, "KILL_THREAD"); break;
    case SECCOMP_RET_TRAP: snprintf(buf, len, "TRAP(%u)", (unsigned)data); break;
    case SECCOMP_RET_ERRNO: snprintf(buf, len, "ERRNO(%u)", (unsigned)data); break;
    case SECCOMP_RET_USER_NOTIF: snprintf(buf, len, "USER_NOTIF"); break;
    case SECCOMP_RET_TRACE: snprintf(buf, len, "TRACE(%u)", (unsigned)data); break;
    case SECCOMP_RET_LOG: snprintf(buf, len, "LOG"); break;
    case SECCOMP_RET_ALLOW: snprintf(buf, len, "ALLOW"); break;
    default: snprintf(buf, len, "?"); break;
    }
    if (r & SECCOMP_RET_DATA &&
        ((r & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ALLOW ||
         (r & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_USER_NOTIF))
        snprintf(buf + strlen(buf), len - strlen(buf), "+data");
    return buf;
}

static const char *nr_name(int nr, char *buf, size_t len) {
    const char *n = cv_syscall_name(nr);
    if (n) snprintf(buf, len, "%s(%d)", n, nr);
    else snprintf(buf, len, "nr %d (0x%x)", nr, (unsigned)nr);
    return buf;
}

/* ---------- the programs ---------- */

struct variant {
    struct cv_filter_opts o;
    struct sock_filter code[CV_FILTER_MAX];
    struct cbpf_prog prog;
    int len;
};
static struct variant variants[4];

static const char *opts_str(const struct cv_filter_opts *o) {
    static const char *s[2][2] = {{"net=allow sig=notify", "net=allow sig=scoped"},
                                  {"net=deny sig=notify", "net=deny sig=scoped"}};
    return s[!!o->deny_network][!!o->signals_scoped];
}

static uint32_t run(const struct variant *v, uint32_t arch, int nr, const uint64_t a[6],
                    uint64_t ip, struct cbpf_trace *tr) {
    struct seccomp_data d;
    memset(&d, 0, sizeof d);
    d.nr = nr;
    d.arch = arch;
    d.instruction_pointer = ip;
    memcpy(d.args, a, sizeof d.args);
    return cbpf_run(&v->prog, &d, tr);
}

/* BPF against the reference; when want is not NULL, both against *want too. */
static void compare(const struct variant *v, uint32_t arch, int nr, const uint64_t a[6],
                    uint64_t ip, const uint32_t *want) {
    uint32_t ref = cv_policy_eval(&v->o, arch, nr, a);
    uint32_t got = run(v, arch, nr, a, ip, NULL);
    int ok = got == ref && (!want || ref == *want);
    if (ok) { passed++; return; }
    char nb[64], rb[32], gb[32], wb[48] = "";
    if (want) snprintf(wb, sizeof wb, ", expected 0x%08x ", (unsigned)*want);
    char wr[32] = "";
    if (want) ret_str(*want, wr, sizeof wr);
    failf("[%s] %s arch=0x%08x args={0x%llx,0x%llx,0x%llx,0x%llx,0x%llx,0x%llx}: "
          "policy 0x%08x %s, bpf 0x%08x %s%s%s",
          opts_str(&v->o), nr_name(nr, nb, sizeof nb), (unsigned)arch,
          (unsigned long long)a[0], (unsigned long long)a[1], (unsigned long long)a[2],
          (unsigned long long)a[3], (unsigned long long)a[4], (unsigned long long)a[5],
          (unsigned)ref, ret_str(ref, rb, sizeof rb), (unsigned)got, ret_str(got, gb, sizeof gb),
          wb, wr);
}

/* ---------- random arguments ---------- */

static uint64_t rng;
static uint64_t xorshift64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Values the argument rules care about, so random vectors reach every branch. */
static const uint32_t interesting[] = {
    0, 1, 2, 3, 4, 10, 15, 16, 17, 40, 1234, 0xffffffffu,
    0x00020000u, 0x02000000u, 0x04000000u, 0x08000000u, 0x10000000u, 0x20000000u, 0x40000000u,
    0x3d0f00u, 0x5412u, 0x541Cu, 0x40086602u, 0x40046602u, 0x401c5820u, 0x5401u,
    0x8u, 0x20000u, 0x20008u, 0x40000u, 0x0400000u,
};

static uint64_t random_arg(void) {
    uint64_t r = xorshift64();
    uint64_t hi = (r & 1) ? xorshift64() & 0xffffffff00000000ull : 0;
    switch ((r >> 1) % 4) {
    case 0: return xorshift64();                                           /* anything */
    case 1: return hi | (xorshift64() % 48);                               /* small */
    default: return hi | interesting[xorshift64() % (sizeof interesting / sizeof interesting[0])];
    }
}

static void random_args(uint64_t a[6]) {
    for (int i = 0; i < 6; i++) a[i] = random_arg();
}

/* ---------- 0. the interpreter itself ---------- */

#define S(c, k) {(uint16_t)(c), 0, 0, (uint32_t)(k)}
#define J(c, k, t, f) {(uint16_t)(c), (uint8_t)(t), (uint8_t)(f), (uint32_t)(k)}

static void expect_reject(const char *what, const struct sock_filter *f, size_t len) {
    char err[CBPF_ERR_LEN] = "";
    check(cbpf_verify(f, len, err, sizeof err) != 0, "cbpf accepted an invalid program: %s", what);
}

static void expect_value(const char *what, const struct sock_filter *f, size_t len,
                         const struct seccomp_data *d, uint32_t want) {
    char err[CBPF_ERR_LEN] = "";
    uint32_t got = 0;
    int vr = cbpf_verify(f, len, err, sizeof err);
    check(vr == 0, "cbpf rejected a valid program (%s): %s", what, err);
    if (vr != 0) return;
    int er = cbpf_exec(f, len, d, &got, NULL, err, sizeof err);
    check(er == 0 && got == want, "cbpf %s: got 0x%08x (%s), want 0x%08x", what, (unsigned)got,
          er ? err : "ok", (unsigned)want);
}

static void test_interpreter(void) {
    struct seccomp_data d;
    memset(&d, 0, sizeof d);
    d.nr = 59;
    d.arch = AUDIT_ARCH_X86_64;
    d.instruction_pointer = 0x1122334455667788ull;
    d.args[0] = 0xaaaaaaaa00000007ull;
    d.args[5] = 0x0000000500000003ull;

    /* loads: nr, arch, instruction pointer halves, the last word */
    static const struct sock_filter ld_nr[] = {S(BPF_LD | BPF_W | BPF_ABS, 0), S(BPF_RET | BPF_A, 0)};
    expect_value("load nr", ld_nr, 2, &d, 59);
    static const struct sock_filter ld_ar[] = {S(BPF_LD | BPF_W | BPF_ABS, 4), S(BPF_RET | BPF_A, 0)};
    expect_value("load arch", ld_ar, 2, &d, AUDIT_ARCH_X86_64);
    static const struct sock_filter ld_ip[] = {S(BPF_LD | BPF_W | BPF_ABS, 12), S(BPF_RET | BPF_A, 0)};
    expect_value("load ip high", ld_ip, 2, &d, 0x11223344u);
    static const struct sock_filter ld_a0[] = {S(BPF_LD | BPF_W | BPF_ABS, 20), S(BPF_RET | BPF_A, 0)};
    expect_value("load args[0] high", ld_a0, 2, &d, 0xaaaaaaaau);
    static const struct sock_filter ld_60[] = {S(BPF_LD | BPF_W | BPF_ABS, 60), S(BPF_RET | BPF_A, 0)};
    expect_value("load offset 60", ld_60, 2, &d, 5);
    /* LEN, IMM, TAX/TXA, scratch memory, every ALU op with K and X, X jumps */
    static const struct sock_filter alu[] = {
        S(BPF_LD | BPF_W | BPF_LEN, 0),           /* A = 64 */
        S(BPF_LDX | BPF_W | BPF_LEN, 0),          /* X = 64 */
        S(BPF_ALU | BPF_ADD | BPF_X, 0),          /* A = 128 */
        S(BPF_ALU | BPF_ADD | BPF_K, 2),          /* 130 */
        S(BPF_ALU | BPF_SUB | BPF_K, 10),         /* 120 */
        S(BPF_ST, 3),                             /* M[3] = 120 */
        S(BPF_LDX | BPF_IMM, 3),                  /* X = 3 */
        S(BPF_ALU | BPF_MUL | BPF_X, 0),          /* 360 */
        S(BPF_ALU | BPF_MUL | BPF_K, 2),          /* 720 */
        S(BPF_ALU | BPF_DIV | BPF_K, 7),          /* 102 */
        S(BPF_ALU | BPF_DIV | BPF_X, 0),          /* 34 */
        S(BPF_ALU | BPF_SUB | BPF_X, 0),          /* 31 */
        S(BPF_ALU | BPF_LSH | BPF_K, 4),          /* 496 */
        S(BPF_ALU | BPF_RSH | BPF_X, 0),          /* 62 */
        S(BPF_ALU | BPF_LSH | BPF_X, 0),          /* 496 */
        S(BPF_ALU | BPF_RSH | BPF_K, 1),          /* 248 */
        S(BPF_ALU | BPF_OR | BPF_K, 0x10000),     /* 0x100f8 */
        S(BPF_ALU | BPF_AND | BPF_K, 0x1fff0),    /* 0x100f0 */
        S(BPF_ALU | BPF_XOR | BPF_K, 0xf),        /* 0x100ff */
        S(BPF_ALU | BPF_XOR | BPF_X, 0),          /* 0x100fc */
        S(BPF_ALU | BPF_OR | BPF_X, 0),           /* 0x100ff */
        S(BPF_ALU | BPF_AND | BPF_X, 0),          /* 3 */
        S(BPF_ALU | BPF_NEG, 0),                  /* 0xfffffffd */
        S(BPF_MISC | BPF_TAX, 0),                 /* X = 0xfffffffd */
        S(BPF_LD | BPF_MEM, 3),                   /* A = 120 */
        S(BPF_STX, 5),                            /* M[5] = 0xfffffffd */
        S(BPF_LDX | BPF_MEM, 3),                  /* X = 120 */
        J(BPF_JMP | BPF_JEQ | BPF_X, 0, 1, 0),   /* 120 == 120 → skip */
        S(BPF_RET | BPF_K, 0xbad1),
        J(BPF_JMP | BPF_JGT | BPF_X, 0, 0, 1),   /* 120 > 120 false */
        S(BPF_RET | BPF_K, 0xbad2),
        J(BPF_JMP | BPF_JGE | BPF_X, 0, 1, 0),   /* 120 >= 120 */
        S(BPF_RET | BPF_K, 0xbad3),
        J(BPF_JMP | BPF_JSET | BPF_X, 0, 1, 0),  /* 120 & 120 */
        S(BPF_RET | BPF_K, 0xbad4),
        J(BPF_JMP | BPF_JGT | BPF_K, 119, 1, 0),
        S(BPF_RET | BPF_K, 0xbad5),
        J(BPF_JMP | BPF_JSET | BPF_K, 0x7, 0, 1), /* 120 & 7 == 0 */
        S(BPF_RET | BPF_K, 0xbad6),
        S(BPF_JMP | BPF_JA, 1),
        S(BPF_RET | BPF_K, 0xbad7),
        S(BPF_LD | BPF_MEM, 5),
        S(BPF_MISC | BPF_TXA, 0),                 /* A = X = 120 */
        S(BPF_ALU | BPF_ADD | BPF_K, 1),
        S(BPF_RET | BPF_A, 0),
    };
    expect_value("alu/jump program", alu, sizeof alu / sizeof alu[0], &d, 121);
    static const struct sock_filter divx0[] = {
        S(BPF_LD | BPF_IMM, 5), S(BPF_LDX | BPF_IMM, 0), S(BPF_ALU | BPF_DIV | BPF_X, 0),
        S(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    expect_value("division by X == 0 returns 0", divx0, 4, &d, 0);

    /* what the kernel refuses */
    static const struct sock_filter one_ret[] = {S(BPF_RET | BPF_K, 0)};
    expect_reject("empty program", one_ret, 0);
    static struct sock_filter big[BPF_MAXINSNS + 1];
    for (size_t i = 0; i < BPF_MAXINSNS + 1; i++) big[i] = (struct sock_filter)S(BPF_RET | BPF_K, 0);
    expect_reject("BPF_MAXINSNS + 1 insns", big, BPF_MAXINSNS + 1);
    expect_value("BPF_MAXINSNS insns", big, BPF_MAXINSNS, &d, 0);
    static const struct sock_filter r1[] = {S(BPF_LD | BPF_W | BPF_ABS, 64), S(BPF_RET | BPF_A, 0)};
    expect_reject("load at 64", r1, 2);
    static const struct sock_filter r2[] = {S(BPF_LD | BPF_W | BPF_ABS, 2), S(BPF_RET | BPF_A, 0)};
    expect_reject("misaligned load", r2, 2);
    static const struct sock_filter r3[] = {S(BPF_LD | BPF_W | BPF_ABS, 0xfffffffcu), S(BPF_RET | BPF_A, 0)};
    expect_reject("load at -4", r3, 2);
    static const struct sock_filter r4[] = {S(BPF_LD | BPF_H | BPF_ABS, 0), S(BPF_RET | BPF_A, 0)};
    expect_reject("half-word load", r4, 2);
    static const struct sock_filter r5[] = {S(BPF_LD | BPF_B | BPF_ABS, 0), S(BPF_RET | BPF_A, 0)};
    expect_reject("byte load", r5, 2);
    static const struct sock_filter r6[] = {S(BPF_LD | BPF_W | BPF_IND, 0), S(BPF_RET | BPF_A, 0)};
    expect_reject("indirect load", r6, 2);
    static const struct sock_filter r7[] = {S(BPF_LDX | BPF_B | BPF_MSH, 0), S(BPF_RET | BPF_A, 0)};
    expect_reject("ldx msh", r7, 2);
    static const struct sock_filter r8[] = {S(BPF_ALU | BPF_DIV | BPF_K, 0), S(BPF_RET | BPF_A, 0)};
    expect_reject("division by constant 0", r8, 2);
    static const struct sock_filter r9[] = {S(BPF_ALU | BPF_MOD | BPF_K, 3), S(BPF_RET | BPF_A, 0)};
    expect_reject("mod (not in the seccomp whitelist)", r9, 2);
    static const struct sock_filter r10[] = {S(BPF_ALU | BPF_LSH | BPF_K, 32), S(BPF_RET | BPF_A, 0)};
    expect_reject("shift by 32", r10, 2);
    static const struct sock_filter r11[] = {S(BPF_ST, 16), S(BPF_RET | BPF_A, 0)};
    expect_reject("scratch cell 16", r11, 2);
    static const struct sock_filter r12[] = {S(BPF_LD | BPF_MEM, 2), S(BPF_RET | BPF_A, 0)};
    expect_reject("unwritten scratch cell", r12, 2);
    static const struct sock_filter r13[] = {
        J(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1), S(BPF_ST, 2), S(BPF_LD | BPF_MEM, 2),
        S(BPF_RET | BPF_A, 0)};
    expect_reject("scratch cell written on one path only", r13, 4);
    static const struct sock_filter r14[] = {S(BPF_JMP | BPF_JA, 1), S(BPF_RET | BPF_K, 0)};
    expect_reject("ja past the end", r14, 2);
    static const struct sock_filter r15[] = {S(BPF_JMP | BPF_JA, 0xffffffffu), S(BPF_RET | BPF_K, 0)};
    expect_reject("ja -1 (wraps backward)", r15, 2);
    static const struct sock_filter r16[] = {J(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1), S(BPF_RET | BPF_K, 0)};
    expect_reject("jf past the end", r16, 2);
    static const struct sock_filter r17[] = {J(BPF_JMP | BPF_JGT | BPF_X, 0, 5, 0), S(BPF_RET | BPF_K, 0)};
    expect_reject("jt past the end", r17, 2);
    static const struct sock_filter r18[] = {S(BPF_RET | BPF_K, 0), S(BPF_LD | BPF_IMM, 0)};
    expect_reject("last insn not a RET", r18, 2);
    static const struct sock_filter r19[] = {S(BPF_RET | BPF_X, 0)};
    expect_reject("ret X", r19, 1);
    static const struct sock_filter r20[] = {S(0xffff, 0), S(BPF_RET | BPF_K, 0)};
    expect_reject("unknown opcode", r20, 2);
    static const struct sock_filter r21[] = {S(BPF_ALU | BPF_NEG | BPF_X, 0), S(BPF_RET | BPF_A, 0)};
    expect_reject("neg X", r21, 2);

    /* runtime guards, on programs that were never verified */
    char err[CBPF_ERR_LEN];
    uint32_t r = 0;
    static const struct sock_filter off_end[] = {S(BPF_LD | BPF_IMM, 1)};
    check(cbpf_exec(off_end, 1, &d, &r, NULL, err, sizeof err) != 0,
          "cbpf ran off the end of a program without complaint");
    static const struct sock_filter jmp_out[] = {J(BPF_JMP | BPF_JEQ | BPF_K, 0, 9, 9), S(BPF_RET | BPF_K, 0)};
    check(cbpf_exec(jmp_out, 2, &d, &r, NULL, err, sizeof err) != 0,
          "cbpf followed a jump out of the program");
    check(cbpf_exec(r2, 2, &d, &r, NULL, err, sizeof err) != 0, "cbpf executed a misaligned load");
    check(cbpf_exec(r20, 2, &d, &r, NULL, err, sizeof err) != 0, "cbpf executed an unknown opcode");

    /* the trace: which words were loaded */
    static const struct sock_filter tr_prog[] = {
        S(BPF_LD | BPF_W | BPF_ABS, 4), S(BPF_LD | BPF_W | BPF_ABS, 0),
        S(BPF_LD | BPF_W | BPF_ABS, 16 + 8 * 2), S(BPF_RET | BPF_A, 0)};
    struct cbpf_trace tr;
    if (cbpf_exec(tr_prog, 4, &d, &r, &tr, err, sizeof err) == 0)
        check(tr.words == (CBPF_WORD_NR | CBPF_WORD_ARCH | (1u << 8)) && tr.steps == 4,
              "cbpf trace: words 0x%x steps %u", (unsigned)tr.words, (unsigned)tr.steps);
    else
        check(0, "cbpf trace program failed: %s", err);
    /* the kernel cache emulation */
    static const struct sock_filter ca[] = {
        S(BPF_LD | BPF_W | BPF_ABS, 0), J(BPF_JMP | BPF_JEQ | BPF_K, 7, 0, 1),
        S(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), S(BPF_LD | BPF_W | BPF_ABS, 16),
        S(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    check(cbpf_const_allow(ca, 5, AUDIT_ARCH_X86_64, 7) && !cbpf_const_allow(ca, 5, AUDIT_ARCH_X86_64, 8),
          "cbpf_const_allow does not model the kernel's cache");
}

/* ---------- 1. table hygiene ---------- */

static void test_table(void) {
    for (size_t i = 0; i < cv_syscalls_len; i++) {
        const struct cv_syscall *s = &cv_syscalls[i];
        const char *nm = s->name ? s->name : "(null)";
        check(s->name && s->name[0], "row %zu (nr %d): no name", i, s->nr);
        check(s->why && s->why[0], "row %zu %s: empty why", i, nm);
        check(s->nr >= 0 && s->nr < NR_SPAN, "row %zu %s: nr %d outside 0..%d", i, nm, s->nr,
              NR_SPAN - 1);
        check(s->arg_rule <= CV_ARG_FCNTL, "row %zu %s: unknown arg_rule %u", i, nm, s->arg_rule);
        /* a row that can reach the supervisor names a handler that exists; no other row does */
        if (cv_rule_may_notify(s))
            check(s->handler > CV_H_NONE && s->handler < CV_H_COUNT && cv_handler_of(s->handler) != NULL,
                  "row %zu %s: can be notified but names no handler (%u)", i, nm, s->handler);
        else
            check(s->handler == CV_H_NONE, "row %zu %s: is never notified but names handler %u", i, nm,
                  s->handler);
        if (s->arg_rule == CV_ARG_NONE) {
            check(s->kind == CV_ALLOW || s->kind == CV_DENY || s->kind == CV_NOTIFY,
                  "row %zu %s: unknown kind %u", i, nm, s->kind);
            if (s->kind == CV_DENY)
                check(s->errno_ > 0 && s->errno_ < 4096, "row %zu %s: deny errno %u", i, nm,
                      s->errno_);
        }
        /* each row against the earlier ones: one check per row for nr, one for name */
        size_t dn = i, dm = i;
        for (size_t j = 0; j < i; j++) {
            if (cv_syscalls[j].nr == s->nr && dn == i) dn = j;
            if (s->name && cv_syscalls[j].name && strcmp(s->name, cv_syscalls[j].name) == 0 &&
                dm == i)
                dm = j;
        }
        check(dn == i, "nr %d appears twice: rows %zu (%s) and %zu (%s)", s->nr, dn,
              cv_syscalls[dn].name ? cv_syscalls[dn].name : "(null)", i, nm);
        check(dm == i, "name %s appears twice: rows %zu (nr %d) and %zu (nr %d)", nm, dm,
              cv_syscalls[dm].nr, i, s->nr);
        check(s->name && cv_syscall_name(s->nr) == s->name, "cv_syscall_name(%d) is not %s",
              s->nr, nm);
    }
}

/* Every handler family is named by some row: none is left without a syscall. */
static void test_handlers(void) {
    for (int h = CV_H_NONE + 1; h < CV_H_COUNT; h++) {
        int named = 0;
        for (size_t i = 0; i < cv_syscalls_len; i++) named |= cv_syscalls[i].handler == h;
        check(named, "handler %d is named by no row of the table", h);
        check(cv_handler_of(h) != NULL, "handler %d has no function", h);
    }
}

/* ---------- 2. building ---------- */

static void build_all(void) {
    for (int v = 0; v < 4; v++) {
        struct variant *x = &variants[v];
        x->o.deny_network = v >> 1;
        x->o.signals_scoped = v & 1;
        x->len = cv_filter_build(&x->o, x->code, CV_FILTER_MAX);
        if (x->len <= 0 || x->len > BPF_MAXINSNS)
            cbpf_die("[%s] cv_filter_build returned %d", opts_str(&x->o), x->len);
        passed++;
        cbpf_load(&x->prog, x->code, (size_t)x->len); /* aborts if the kernel would refuse it */
        passed++;
        /* The helper installs the program generated at build time: this very one. */
        const struct sock_fprog *built = &cv_progs[x->o.deny_network][x->o.signals_scoped];
        check(built->len == x->len && !memcmp(built->filter, x->code, sizeof *x->code * (size_t)x->len),
              "[%s] build/gen/filter_progs.h is not what cv_filter_build makes (stale? make)",
              opts_str(&x->o));
        /* The kernel checks and JIT-compiles the program at every sandbox start, at a cost that
         * grows with its length: neighbouring numbers with one action share a search leaf, and
         * the argument blocks (the ioctl allow list above all) use one-insn local jumps. */
        check(x->len < (int)cv_syscalls_len + 160, "[%s] program of %d insns for %zu table rows",
              opts_str(&x->o), x->len, cv_syscalls_len);

        /* deterministic, exact-capacity builds work, short buffers are refused */
        static struct sock_filter again[CV_FILTER_MAX];
        int n = cv_filter_build(&x->o, again, (size_t)x->len);
        check(n == x->len && memcmp(again, x->code, (size_t)n * sizeof *again) == 0,
              "[%s] rebuild with cap %d gave %d insns or a different program", opts_str(&x->o),
              x->len, n);
        n = cv_filter_build(&x->o, again, (size_t)x->len - 1);
        check(n == -1, "[%s] cv_filter_build with cap %d (needs %d) returned %d",
              opts_str(&x->o), x->len - 1, x->len, n);
        n = cv_filter_build(&x->o, again, 0);
        check(n == -1, "[%s] cv_filter_build with cap 0 returned %d", opts_str(&x->o), n);
    }
}

/* ---------- 3. every number, random arguments ---------- */

static void test_exhaustive(void) {
    static const uint64_t zero[6] = {0};
    for (int v = 0; v < 4; v++) {
        const struct variant *x = &variants[v];
        rng = 0x9e3779b97f4a7c15ull; /* same vectors for every variant */
        for (int nr = 0; nr < NR_SPAN; nr++) {
            compare(x, AUDIT_ARCH_X86_64, nr, zero, 0, NULL);
            for (int k = 0; k < RANDOM_VECTORS; k++) {
                uint64_t a[6];
                random_args(a);
                compare(x, AUDIT_ARCH_X86_64, nr, a, xorshift64(), NULL);
            }
        }
        /* numbers beyond the table, without the x32 bit: ENOSYS */
        static const uint32_t far[] = {1024, 4095, 0x10000, 0x3fffffff, 0x80000000u,
                                       0x80000001u, 0xa0000000u, 0xbfffffffu};
        for (size_t i = 0; i < sizeof far / sizeof far[0]; i++) {
            uint32_t want = ERR(ENOSYS);
            compare(x, AUDIT_ARCH_X86_64, (int)far[i], zero, 0, &want);
        }
    }
}

/* ---------- 4. x32 and foreign architectures ---------- */

static void test_arch(void) {
    static const uint64_t zero[6] = {0};
    static const uint64_t ones[6] = {~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull};
    const uint32_t want_kill = KILLP;
    static const uint32_t archs[] = {AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, 0,
                                     AUDIT_ARCH_X86_64 & ~__AUDIT_ARCH_64BIT,
                                     AUDIT_ARCH_X86_64 ^ 1u, 0xffffffffu};
    for (int v = 0; v < 4; v++) {
        const struct variant *x = &variants[v];
        /* x32: every number with bit 30 set, and -1 */
        for (int nr = 0; nr < NR_SPAN; nr++)
            compare(x, AUDIT_ARCH_X86_64, (int)((uint32_t)nr | CV_X32_BIT), zero, 0, &want_kill);
        static const uint32_t x32[] = {0xffffffffu, 0x40000000u, 0x7fffffffu, 0xc0000000u,
                                       0x40000000u | 512u, 0x40000000u | 547u};
        for (size_t i = 0; i < sizeof x32 / sizeof x32[0]; i++) {
            compare(x, AUDIT_ARCH_X86_64, (int)x32[i], zero, 0, &want_kill);
            compare(x, AUDIT_ARCH_X86_64, (int)x32[i], ones, ~0ull, &want_kill);
        }
        /* other architectures, whatever the number */
        for (size_t ai = 0; ai < sizeof archs / sizeof archs[0]; ai++) {
            for (int nr = 0; nr < NR_SPAN; nr += (nr < 480 ? 1 : 37))
                compare(x, archs[ai], nr, zero, 0, &want_kill);
            compare(x, archs[ai], -1, zero, 0, &want_kill);
            compare(x, archs[ai], (int)0x80000000u, ones, 0, &want_kill);
        }
    }
}

/* ---------- 5. targeted argument cases, with absolute expectations ---------- */

enum { E_FIXED, E_NET, E_SIG };
struct tcase {
    const char *what;
    int nr;
    uint64_t a[6];
    int kind;       /* E_FIXED: want; E_NET: ALLOW, or EACCES under deny_network;
                       E_SIG: USER_NOTIF, or ALLOW when signals are scoped */
    uint32_t want;
    int hi_ok;      /* the kernel reads the arguments as 32-bit: garbage above is ignored */
};

#define NEW_FLAGS(X) X(0x00020000u) X(0x02000000u) X(0x04000000u) X(0x08000000u) \
                     X(0x10000000u) X(0x20000000u) X(0x40000000u)
#define THREAD_FLAGS 0x3d0f00u
#define SIGCHLD_ 17u

static const struct tcase tcases[] = {
    /* socket(domain, type, protocol) */
    {"socket AF_UNIX", __NR_socket, {1, 1, 0}, E_FIXED, ALLOW, 1},
    {"socket AF_UNIX dgram cloexec", __NR_socket, {1, 2 | 0x80000, 0}, E_FIXED, ALLOW, 1},
    {"socket AF_INET", __NR_socket, {2, 1, 0}, E_NET, 0, 1},
    {"socket AF_INET dgram nonblock", __NR_socket, {2, 2 | 0x800, 17}, E_NET, 0, 1},
    {"socket AF_INET6", __NR_socket, {10, 1, 6}, E_NET, 0, 1},
    {"socket AF_NETLINK route", __NR_socket, {16, 3, 0}, E_FIXED, ALLOW, 1},
    {"socket AF_NETLINK uevent", __NR_socket, {16, 3, 15}, E_FIXED, ERR(EAFNOSUPPORT), 1},
    {"socket AF_NETLINK audit", __NR_socket, {16, 3, 9}, E_FIXED, ERR(EAFNOSUPPORT), 1},
    {"socket AF_PACKET", __NR_socket, {17, 3, 0x300}, E_FIXED, ERR(EAFNOSUPPORT), 1},
    {"socket AF_VSOCK", __NR_socket, {40, 1, 0}, E_FIXED, ERR(EAFNOSUPPORT), 1},
    {"socket AF_UNSPEC", __NR_socket, {0, 1, 0}, E_FIXED, ERR(EAFNOSUPPORT), 1},
    {"socket AF_INET+0x10000", __NR_socket, {0x10002, 1, 0}, E_FIXED, ERR(EAFNOSUPPORT), 1},
    {"socket AF_INET, garbage above", __NR_socket, {0xdeadbeef00000002ull, 1, 0}, E_NET, 0, 0},
    {"socket AF_UNIX, garbage above", __NR_socket, {0xffffffff00000001ull, 1, 0}, E_FIXED, ALLOW, 0},
    {"socket AF_PACKET, garbage above", __NR_socket, {0x0000000100000011ull, 3, 0}, E_FIXED, ERR(EAFNOSUPPORT), 0},
    {"socket AF_NETLINK route, garbage above", __NR_socket, {0x8000000000000010ull, 3, 0xffffffff00000000ull}, E_FIXED, ALLOW, 0},
    {"socket AF_NETLINK 15, garbage above", __NR_socket, {0x8000000000000010ull, 3, 0xffffffff0000000full}, E_FIXED, ERR(EAFNOSUPPORT), 0},
    /* socketpair */
    {"socketpair AF_UNIX", __NR_socketpair, {1, 1, 0, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"socketpair AF_INET", __NR_socketpair, {2, 1, 0, 0x7ffc0000}, E_FIXED, ERR(EAFNOSUPPORT), 1},
    {"socketpair AF_INET6", __NR_socketpair, {10, 1, 0}, E_FIXED, ERR(EAFNOSUPPORT), 1},
    {"socketpair AF_NETLINK", __NR_socketpair, {16, 3, 0}, E_FIXED, ERR(EAFNOSUPPORT), 1},
    /* clone(flags, ...) */
    {"clone thread", __NR_clone, {THREAD_FLAGS, 0x7f0000001000ull, 0, 0, 0}, E_FIXED, ALLOW, 1},
    {"clone SIGCHLD (fork)", __NR_clone, {SIGCHLD_}, E_FIXED, ALLOW, 1},
    {"clone vfork", __NR_clone, {0x4100 | SIGCHLD_}, E_FIXED, ALLOW, 1},
    {"clone 0", __NR_clone, {0}, E_FIXED, ALLOW, 1},
#define CL(f) {"clone " #f, __NR_clone, {f}, E_FIXED, ERR(EPERM), 1},                 \
              {"clone thread|" #f, __NR_clone, {THREAD_FLAGS | f}, E_FIXED, ERR(EPERM), 1}, \
              {"clone SIGCHLD|" #f, __NR_clone, {SIGCHLD_ | f}, E_FIXED, ERR(EPERM), 1},
    NEW_FLAGS(CL)
#undef CL
    {"clone all NEW flags", __NR_clone, {CV_CLONE_NEW_MASK | SIGCHLD_}, E_FIXED, ERR(EPERM), 1},
    /* every open is notified: the merged view decides, directories included */
    {"openat O_RDONLY|O_DIRECTORY", __NR_openat, {-100, 0x7ffc0000, 0200000 | 02000000}, E_FIXED, NOTIF, 1},
    {"openat O_RDONLY file", __NR_openat, {-100, 0x7ffc0000, 0}, E_FIXED, NOTIF, 1},
    {"open O_RDONLY|O_DIRECTORY", __NR_open, {0x7ffc0000, 0200000}, E_FIXED, NOTIF, 1},
    /* newfstatat(dirfd, path, buf, flags) / statx(dirfd, path, flags, ...): only an fstat is native,
     * AT_EMPTY_PATH with a NULL path and an fd; "" (or any path) could name another file */
    {"newfstatat AT_EMPTY_PATH NULL", __NR_newfstatat, {3, 0, 0x7ffc1000, 0x1000}, E_FIXED, ALLOW, 0},
    {"newfstatat AT_EMPTY_PATH|NOFOLLOW NULL", __NR_newfstatat, {3, 0, 0x7ffc1000, 0x1100}, E_FIXED, ALLOW, 0},
    {"newfstatat AT_EMPTY_PATH with a path", __NR_newfstatat, {3, 0x7ffc0000, 0x7ffc1000, 0x1000}, E_FIXED, NOTIF, 1},
    {"newfstatat AT_EMPTY_PATH, path above 4 GiB", __NR_newfstatat, {3, 0x100000000ull, 0x7ffc1000, 0x1000}, E_FIXED, NOTIF, 1},
    {"newfstatat AT_EMPTY_PATH NULL AT_FDCWD", __NR_newfstatat, {-100, 0, 0x7ffc1000, 0x1000}, E_FIXED, NOTIF, 1},
    {"newfstatat AT_EMPTY_PATH NULL fd -1 (32 bits)", __NR_newfstatat, {0xffffffffu, 0, 0x7ffc1000, 0x1000}, E_FIXED, NOTIF, 1},
    {"newfstatat NULL without AT_EMPTY_PATH", __NR_newfstatat, {3, 0, 0x7ffc1000, 0}, E_FIXED, NOTIF, 1},
    {"newfstatat by path", __NR_newfstatat, {-100, 0x7ffc0000, 0x7ffc1000, 0}, E_FIXED, NOTIF, 1},
    {"newfstatat NOFOLLOW", __NR_newfstatat, {-100, 0x7ffc0000, 0x7ffc1000, 0x100}, E_FIXED, NOTIF, 1},
    {"newfstatat flag in the buf slot", __NR_newfstatat, {-100, 0x7ffc0000, 0x1000, 0}, E_FIXED, NOTIF, 1},
    {"statx AT_EMPTY_PATH NULL", __NR_statx, {3, 0, 0x1000, 0xfff, 0x7ffc1000}, E_FIXED, ALLOW, 0},
    {"statx AT_EMPTY_PATH with a path", __NR_statx, {3, 0x7ffc0000, 0x1000, 0xfff, 0x7ffc1000}, E_FIXED, NOTIF, 1},
    {"statx AT_EMPTY_PATH NULL AT_FDCWD", __NR_statx, {-100, 0, 0x1000, 0xfff, 0x7ffc1000}, E_FIXED, NOTIF, 1},
    {"statx by path", __NR_statx, {-100, 0x7ffc0000, 0, 0xfff, 0x7ffc1000}, E_FIXED, NOTIF, 1},
    {"statx flag in the mask slot", __NR_statx, {-100, 0x7ffc0000, 0, 0x1000, 0x7ffc1000}, E_FIXED, NOTIF, 1},
    {"creat", __NR_creat, {0x7ffc0000, 0755}, E_FIXED, NOTIF, 1},
    /* ioctl(fd, request, ...) */
    {"ioctl TIOCSTI", __NR_ioctl, {0, 0x5412, 0x7ffc0000}, E_FIXED, ERR(EPERM), 1},
    {"ioctl TIOCLINUX", __NR_ioctl, {0, 0x541C, 0x7ffc0000}, E_FIXED, ERR(EPERM), 1},
    {"ioctl FS_IOC_SETFLAGS", __NR_ioctl, {3, 0x40086602, 0x7ffc0000}, E_FIXED, ERR(EPERM), 1},
    {"ioctl FS_IOC32_SETFLAGS", __NR_ioctl, {3, 0x40046602, 0x7ffc0000}, E_FIXED, ERR(EPERM), 1},
    {"ioctl FS_IOC_FSSETXATTR", __NR_ioctl, {3, 0x401c5820, 0x7ffc0000}, E_FIXED, ERR(EPERM), 1},
    {"ioctl TCGETS", __NR_ioctl, {0, 0x5401, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"ioctl TIOCGWINSZ", __NR_ioctl, {1, 0x5413, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"ioctl FS_IOC_GETFLAGS", __NR_ioctl, {3, 0x80086601, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"ioctl FIONREAD", __NR_ioctl, {5, 0x541B, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"ioctl FIOCLEX", __NR_ioctl, {5, 0x5451}, E_FIXED, ALLOW, 1},
    {"ioctl TIOCSPGRP", __NR_ioctl, {0, 0x5410, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"ioctl TIOCSWINSZ", __NR_ioctl, {0, 0x5414, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"ioctl TCSETS2", __NR_ioctl, {0, 0x402C542B, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"ioctl TIOCGPTN", __NR_ioctl, {4, 0x80045430, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"ioctl SIOCGIFCONF", __NR_ioctl, {4, 0x8912, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"ioctl FS_IOC_SETVERSION", __NR_ioctl, {3, 0x40087602, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"ioctl TIOCSETD", __NR_ioctl, {0, 0x5423, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"ioctl TIOCCONS", __NR_ioctl, {0, 0x541D}, E_FIXED, NOTIF, 1},
    {"ioctl below the first range", __NR_ioctl, {0, 0x5400}, E_FIXED, NOTIF, 1},
    {"ioctl FICLONE", __NR_ioctl, {3, 0x40049409, 4}, E_FIXED, NOTIF, 1},
    {"ioctl EVIOCGRAB", __NR_ioctl, {3, 0x40044590, 1}, E_FIXED, NOTIF, 1},
    /* clone: CLONE_FILES without CLONE_THREAD would share an fd table between processes */
    {"clone CLONE_FILES (process)", __NR_clone, {0x400 | SIGCHLD_}, E_FIXED, ERR(EPERM), 1},
    {"clone CLONE_VM|CLONE_FILES", __NR_clone, {0x100 | 0x400}, E_FIXED, ERR(EPERM), 1},
    /* fcntl(fd, cmd, arg): record locks to the supervisor, leases refused */
    {"fcntl F_GETFL", __NR_fcntl, {3, 3}, E_FIXED, ALLOW, 1},
    {"fcntl F_SETFD", __NR_fcntl, {3, 2, 1}, E_FIXED, ALLOW, 1},
    {"fcntl F_SETLK", __NR_fcntl, {3, 6, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"fcntl F_SETLKW", __NR_fcntl, {3, 7, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"fcntl F_GETLK", __NR_fcntl, {3, 5, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"fcntl F_OFD_SETLK", __NR_fcntl, {3, 37, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"fcntl F_OFD_SETLKW", __NR_fcntl, {3, 38, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"fcntl F_OFD_GETLK", __NR_fcntl, {3, 36, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"fcntl F_SETLEASE F_RDLCK", __NR_fcntl, {3, 1024, 0}, E_FIXED, ERR(EACCES), 1},
    {"fcntl F_SETLEASE F_WRLCK", __NR_fcntl, {3, 1024, 1}, E_FIXED, ERR(EACCES), 1},
    {"fcntl F_SETLEASE F_UNLCK", __NR_fcntl, {3, 1024, 2}, E_FIXED, ALLOW, 1},
    {"fcntl F_GETLEASE", __NR_fcntl, {3, 1025}, E_FIXED, ALLOW, 1},
    {"flock", __NR_flock, {3, 2}, E_FIXED, NOTIF, 1},
    /* sendto(fd, buf, len, flags, addr, addrlen): an address goes to the supervisor */
    {"sendto no address", __NR_sendto, {3, 0x7ffc0000, 10, 0, 0, 0}, E_FIXED, ALLOW, 0},
    {"sendto with an address", __NR_sendto, {3, 0x7ffc0000, 10, 0, 0x7ffc1000, 16}, E_FIXED, NOTIF, 0},
    {"sendto address in the high word", __NR_sendto, {3, 0x7ffc0000, 10, 0, 0x100000000ull, 16}, E_FIXED, NOTIF, 0},
    {"sendmsg", __NR_sendmsg, {3, 0x7ffc0000, 0}, E_FIXED, NOTIF, 1},
    {"sendmmsg", __NR_sendmmsg, {3, 0x7ffc0000, 2, 0}, E_FIXED, NOTIF, 1},
    /* prctl(option, arg2, ...): arg2 is unsigned long, so no garbage variant */
    {"prctl PR_SET_DUMPABLE 0", __NR_prctl, {4, 0}, E_FIXED, ERR(0), 0},
    {"prctl PR_SET_DUMPABLE 1", __NR_prctl, {4, 1}, E_FIXED, ALLOW, 0},
    {"prctl PR_GET_DUMPABLE", __NR_prctl, {3, 0}, E_FIXED, ALLOW, 0},
    {"prctl PR_SET_NAME", __NR_prctl, {15, 0x7ffc00001000ull}, E_FIXED, ALLOW, 0},
    {"prctl PR_SET_NAME ptr 0", __NR_prctl, {15, 0}, E_FIXED, ALLOW, 0},
    {"prctl PR_SET_NO_NEW_PRIVS", __NR_prctl, {38, 1}, E_FIXED, ALLOW, 0},
    /* personality(persona) */
    {"personality PER_LINUX", __NR_personality, {0}, E_FIXED, ALLOW, 1},
    {"personality PER_LINUX32", __NR_personality, {8}, E_FIXED, ALLOW, 1},
    {"personality query", __NR_personality, {0xffffffff}, E_FIXED, ALLOW, 1},
    {"personality UNAME26", __NR_personality, {0x20000}, E_FIXED, ALLOW, 1},
    {"personality ADDR_NO_RANDOMIZE", __NR_personality, {0x40000}, E_FIXED, ALLOW, 1},
    {"personality READ_IMPLIES_EXEC", __NR_personality, {0x0400000}, E_FIXED, ERR(EPERM), 1},
    {"personality READ_IMPLIES_EXEC|PER_LINUX32", __NR_personality, {0x0400008}, E_FIXED, ERR(EPERM), 1},
    {"personality 1", __NR_personality, {1}, E_FIXED, ERR(EPERM), 1},
    /* pid 0 means the caller */
    {"prlimit64 self", __NR_prlimit64, {0, 7, 0x7ffc0000, 0}, E_FIXED, ALLOW, 1},
    {"prlimit64 other", __NR_prlimit64, {1234, 7, 0x7ffc0000, 0}, E_FIXED, NOTIF, 1},
    {"prlimit64 pid -1", __NR_prlimit64, {0xffffffff, 7, 0, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"sched_setaffinity self", __NR_sched_setaffinity, {0, 128, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"sched_setaffinity other", __NR_sched_setaffinity, {1234, 128, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"sched_setparam other", __NR_sched_setparam, {1234, 0x7ffc0000}, E_FIXED, NOTIF, 1},
    {"sched_setscheduler self", __NR_sched_setscheduler, {0, 0, 0x7ffc0000}, E_FIXED, ALLOW, 1},
    {"sched_setattr other", __NR_sched_setattr, {99, 0x7ffc0000, 0}, E_FIXED, NOTIF, 1},
    /* setpriority(which, who, prio), ioprio_set(which, who, prio) */
    {"setpriority process self", __NR_setpriority, {0, 0, 10}, E_FIXED, ALLOW, 1},
    {"setpriority process other", __NR_setpriority, {0, 1234, 10}, E_FIXED, NOTIF, 1},
    {"setpriority pgrp self", __NR_setpriority, {1, 0, 10}, E_FIXED, NOTIF, 1},
    {"setpriority user self", __NR_setpriority, {2, 0, 10}, E_FIXED, NOTIF, 1},
    {"ioprio_set process self", __NR_ioprio_set, {1, 0, 0x4004}, E_FIXED, ALLOW, 1},
    {"ioprio_set process other", __NR_ioprio_set, {1, 99, 0x4004}, E_FIXED, NOTIF, 1},
    {"ioprio_set pgrp self", __NR_ioprio_set, {2, 0, 0x4004}, E_FIXED, NOTIF, 1},
    {"ioprio_set which 0", __NR_ioprio_set, {0, 0, 0x4004}, E_FIXED, NOTIF, 1},
    /* the kill family */
    {"kill", __NR_kill, {1234, 15}, E_SIG, 0, 1},
    {"kill 0 0", __NR_kill, {0, 0}, E_SIG, 0, 1},
    {"kill -1 9", __NR_kill, {0xffffffff, 9}, E_SIG, 0, 1},
    {"tkill", __NR_tkill, {1234, 15}, E_SIG, 0, 1},
    {"tgkill", __NR_tgkill, {1234, 1235, 15}, E_SIG, 0, 1},
    {"rt_sigqueueinfo", __NR_rt_sigqueueinfo, {1234, 10, 0x7ffc0000}, E_SIG, 0, 1},
    {"rt_tgsigqueueinfo", __NR_rt_tgsigqueueinfo, {1234, 1235, 10, 0x7ffc0000}, E_SIG, 0, 1},
    {"pidfd_send_signal", __NR_pidfd_send_signal, {3, 15, 0, 0}, E_SIG, 0, 1},
};

static uint32_t tcase_want(const struct tcase *c, const struct cv_filter_opts *o) {
    switch (c->kind) {
    case E_NET: return o->deny_network ? ERR(EACCES) : ALLOW;
    case E_SIG: return o->signals_scoped ? ALLOW : NOTIF;
    default: return c->want;
    }
}

static void test_targeted(void) {
    for (int v = 0; v < 4; v++) {
        const struct variant *x = &variants[v];
        for (size_t i = 0; i < sizeof tcases / sizeof tcases[0]; i++) {
            const struct tcase *c = &tcases[i];
            uint32_t want = tcase_want(c, &x->o);
            unsigned long before = failed;
            compare(x, AUDIT_ARCH_X86_64, c->nr, c->a, 0x401000, &want);
            if (c->hi_ok) {
                /* the same call with garbage in every upper half */
                uint64_t g[6];
                for (int k = 0; k < 6; k++)
                    g[k] = (c->a[k] & 0xffffffffull) | ((uint64_t)(0x5a5a0000u + (unsigned)k) << 32);
                compare(x, AUDIT_ARCH_X86_64, c->nr, g, 0x401000, &want);
                for (int k = 0; k < 6; k++) g[k] = c->a[k] | 0xffffffff00000000ull;
                compare(x, AUDIT_ARCH_X86_64, c->nr, g, 0x401000, &want);
            }
            if (failed != before && failed <= MAX_REPORTS) printf("     (case: %s)\n", c->what);
        }
    }
}

/* ---------- 6. absolute expectations on the table ---------- */

static void test_absolute(void) {
    static const uint64_t zero[6] = {0};
    static const struct { int nr; uint32_t want; } fixed[] = {
        {__NR_ptrace, ERR(EPERM)},         {__NR_io_uring_setup, ERR(ENOSYS)},
        {__NR_io_uring_enter, ERR(ENOSYS)}, {__NR_clone3, ERR(ENOSYS)},
        {__NR_mount, ERR(EPERM)},          {__NR_unshare, ERR(EPERM)},
        {__NR_setns, ERR(EPERM)},          {__NR_bpf, ERR(EPERM)},
        {__NR_process_vm_readv, ERR(EPERM)}, {__NR_read, ALLOW},
        {__NR_write, ALLOW},               {__NR_exit_group, NOTIF},
        {__NR_openat, NOTIF},              {__NR_open, NOTIF},
        {__NR_execve, NOTIF},              {__NR_unlinkat, NOTIF},
        {__NR_fchmod, NOTIF},              {__NR_getdents64, NOTIF},
        {__NR_stat, NOTIF},                {__NR_chdir, NOTIF},
        {__NR_fchdir, NOTIF},              {__NR_getcwd, NOTIF},
        {__NR_fstat, ALLOW},               {__NR_readlink, NOTIF},
        {1000, ERR(ENOSYS)},               {__NR_openat2, ERR(ENOSYS)},
    };
    for (int v = 0; v < 4; v++) {
        const struct variant *x = &variants[v];
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            compare(x, AUDIT_ARCH_X86_64, fixed[i].nr, zero, 0, &fixed[i].want);
        uint64_t inet[6] = {2, 1, 0};
        uint32_t want = x->o.deny_network ? ERR(EACCES) : ALLOW;
        compare(x, AUDIT_ARCH_X86_64, __NR_socket, inet, 0, &want);
    }
}

/* ---------- 7. the kernel's constant-action cache ---------- */

static int arg_free_allow(const struct cv_syscall *s, const struct cv_filter_opts *o) {
    if (s->arg_rule == CV_ARG_NONE) return s->kind == CV_ALLOW;
    if (s->arg_rule == CV_ARG_SIGNAL) return o->signals_scoped != 0;
    return 0;
}

static void test_cache(void) {
    const uint32_t nr_arch = CBPF_WORD_NR | CBPF_WORD_ARCH;
    for (int v = 0; v < 4; v++) {
        const struct variant *x = &variants[v];
        for (size_t i = 0; i < cv_syscalls_len; i++) {
            const struct cv_syscall *s = &cv_syscalls[i];
            struct cbpf_trace tr;
            uint64_t a[6] = {0};
            if (arg_free_allow(s, &x->o)) {
                rng = 0x1234567u + (uint64_t)i;
                for (int k = 0; k < 4; k++) {
                    uint32_t r = run(x, AUDIT_ARCH_X86_64, s->nr, a, 0, &tr);
                    check(r == ALLOW && (tr.words & ~nr_arch) == 0,
                          "[%s] %s(%d): argument-free ALLOW path returned 0x%08x and loaded "
                          "words 0x%04x (only nr and arch = 0x%04x may be read)",
                          opts_str(&x->o), s->name, s->nr, (unsigned)r, (unsigned)tr.words,
                          (unsigned)nr_arch);
                    random_args(a);
                }
            } else if (s->arg_rule != CV_ARG_NONE && s->arg_rule != CV_ARG_SIGNAL) {
                /* the recorder sees argument loads where there must be some */
                run(x, AUDIT_ARCH_X86_64, s->nr, a, 0, &tr);
                check((tr.words & ~nr_arch) != 0, "[%s] %s(%d): argument rule but no argument "
                      "loaded (words 0x%04x)", opts_str(&x->o), s->name, s->nr,
                      (unsigned)tr.words);
            }
        }
        /* The kernel's own emulation (seccomp_is_const_allow) must find exactly
         * the argument-free ALLOWs cacheable, and nothing on a foreign arch. */
        for (int nr = 0; nr < NR_SPAN; nr++) {
            int want = 0;
            for (size_t i = 0; i < cv_syscalls_len; i++)
                if (cv_syscalls[i].nr == nr) want = arg_free_allow(&cv_syscalls[i], &x->o);
            int got = cbpf_const_allow(x->code, (size_t)x->len, AUDIT_ARCH_X86_64, nr);
            char nb[64];
            check(got == want, "[%s] %s: kernel cache emulation says %s, expected %s",
                  opts_str(&x->o), nr_name(nr, nb, sizeof nb),
                  got ? "always ALLOW" : "not cacheable", want ? "always ALLOW" : "not cacheable");
            check(!cbpf_const_allow(x->code, (size_t)x->len, AUDIT_ARCH_I386, nr),
                  "[%s] nr %d: cacheable as ALLOW on i386", opts_str(&x->o), nr);
        }
    }
}

/* ---------- 8. hooks: an embedder's syscalls are notified, whatever their row ---------- */

static void test_hooks(void) {
    static const char *names[] = {"openat", "read", "clone", "kill", "socket", "execve", "ioctl"};
    static uint64_t bits[CV_FILTER_NR_MAX / 64];
    memset(bits, 0, sizeof bits);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int nr = -1;
        for (size_t j = 0; j < cv_syscalls_len; j++)
            if (!strcmp(cv_syscalls[j].name, names[i])) nr = cv_syscalls[j].nr;
        check(nr >= 0 && nr < CV_FILTER_NR_MAX, "hook test: no row for %s", names[i]);
        if (nr >= 0) bits[nr / 64] |= 1ull << (nr % 64);
    }
    static struct variant h;
    h.o = (struct cv_filter_opts){.deny_network = 1, .signals_scoped = 1, .hooked = bits};
    h.len = cv_filter_build(&h.o, h.code, CV_FILTER_MAX);
    if (h.len <= 0) cbpf_die("[hooked] cv_filter_build returned %d", h.len);
    cbpf_load(&h.prog, h.code, (size_t)h.len);
    const struct variant *plain = &variants[3]; /* the same options, no hooks */
    rng = 0x5eedull;
    for (int nr = 0; nr < NR_SPAN; nr++) {
        for (int k = 0; k < RANDOM_VECTORS; k++) {
            uint64_t a[6];
            random_args(a);
            compare(&h, AUDIT_ARCH_X86_64, nr, a, 0, NULL);
            uint32_t got = run(&h, AUDIT_ARCH_X86_64, nr, a, 0, NULL);
            int in_table = cv_syscall_name(nr) != NULL;
            if (cv_filter_hooked(&h.o, nr) && in_table) {
                check(got == SECCOMP_RET_USER_NOTIF, "[hooked] nr %d: 0x%08x, not NOTIFY", nr,
                      (unsigned)got);
            } else {
                uint32_t was = run(plain, AUDIT_ARCH_X86_64, nr, a, 0, NULL);
                check(got == was, "[hooked] nr %d (not hooked): 0x%08x, without hooks 0x%08x", nr,
                      (unsigned)got, (unsigned)was);
            }
        }
    }
    /* Still killed on a foreign architecture and for x32 numbers, hooked or not. */
    static const uint64_t zero[6] = {0};
    check(run(&h, AUDIT_ARCH_I386, 257, zero, 0, NULL) == SECCOMP_RET_KILL_PROCESS,
          "[hooked] i386 openat not killed");
    check(run(&h, AUDIT_ARCH_X86_64, 257 | 0x40000000, zero, 0, NULL) == SECCOMP_RET_KILL_PROCESS,
          "[hooked] x32 openat not killed");
}

int main(void) {
    test_interpreter();
    test_table();
    test_handlers();
    build_all();
    test_exhaustive();
    test_arch();
    test_targeted();
    test_absolute();
    test_cache();
    test_hooks();

    printf("filter: table %zu rows; program %d/%d/%d/%d insns (max %d) for "
           "net=allow|deny x sig=notify|scoped\n",
           cv_syscalls_len, variants[0].len, variants[1].len, variants[2].len, variants[3].len,
           BPF_MAXINSNS);
    printf("filter: %lu passed, %lu failed\n", passed, failed);
    return failed ? 1 : 0;
}
