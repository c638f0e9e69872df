/* A small, strict classic-BPF interpreter for seccomp programs, for tests.
 *
 * It accepts exactly what the kernel accepts for a seccomp filter and rejects
 * everything else, with the kernel's own checks, in the kernel's order:
 *   - bpf_check_basics_ok:     1 <= len <= BPF_MAXINSNS
 *   - bpf_check_classic:       known opcodes, DIV by constant 0, shifts by
 *                              constant >= 32, scratch index < BPF_MEMWORDS,
 *                              every jump target inside the program, last
 *                              instruction a RET, no scratch load that may
 *                              read an unwritten cell (check_load_and_stores)
 *   - seccomp_check_filter:    the seccomp opcode whitelist (no byte/half or
 *                              indirect loads, no MOD, no RET X, ...) and
 *                              BPF_LD|W|ABS offsets 4-aligned and < 64
 * Execution mirrors the kernel too: A, X and M[] start at 0, loads are native
 * 32-bit words of the 64-byte struct seccomp_data, division by X == 0 makes
 * the whole program return 0 (SECCOMP_RET_KILL_THREAD), as cBPF always did.
 *
 * cbpf_exec() also re-checks every executed instruction, so it refuses an
 * unverified program that falls off its end or jumps out of it.
 *
 * Header-only (static inline), since the Makefile builds tests/test_*.c only.
 */
#ifndef CV_TESTS_CBPF_H
#define CV_TESTS_CBPF_H

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CBPF_DATA_LEN ((uint32_t)sizeof(struct seccomp_data))
_Static_assert(sizeof(struct seccomp_data) == 64, "struct seccomp_data is 64 bytes");
_Static_assert(BPF_MEMWORDS <= 16, "scratch masks are 16 bits");

#define CBPF_ERR_LEN 160

/* Offsets of the words a program may load, as bits of cbpf_trace.words:
 * bit i <=> the 32-bit word at offset 4*i. */
#define CBPF_WORD_NR (1u << (offsetof(struct seccomp_data, nr) / 4))
#define CBPF_WORD_ARCH (1u << (offsetof(struct seccomp_data, arch) / 4))

struct cbpf_trace {
    uint32_t words;   /* seccomp_data words loaded with BPF_LD|W|ABS */
    uint32_t steps;   /* instructions executed */
};

struct cbpf_prog {
    const struct sock_filter *insns;
    size_t len;
    int verified;
};

static inline __attribute__((format(printf, 3, 4))) int
cbpf_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static inline int cbpf_is_cond_jump(uint16_t code) {
    switch (code) {
    case BPF_JMP | BPF_JEQ | BPF_K: case BPF_JMP | BPF_JEQ | BPF_X:
    case BPF_JMP | BPF_JGE | BPF_K: case BPF_JMP | BPF_JGE | BPF_X:
    case BPF_JMP | BPF_JGT | BPF_K: case BPF_JMP | BPF_JGT | BPF_X:
    case BPF_JMP | BPF_JSET | BPF_K: case BPF_JMP | BPF_JSET | BPF_X:
        return 1;
    default:
        return 0;
    }
}

/* The seccomp whitelist (kernel/seccomp.c: seccomp_check_filter), which is a
 * subset of the classic opcodes bpf_check_classic knows. */
static inline int cbpf_seccomp_opcode(uint16_t code) {
    switch (code) {
    case BPF_LD | BPF_W | BPF_ABS:
    case BPF_LD | BPF_W | BPF_LEN:
    case BPF_LDX | BPF_W | BPF_LEN:
    case BPF_RET | BPF_K: case BPF_RET | BPF_A:
    case BPF_ALU | BPF_ADD | BPF_K: case BPF_ALU | BPF_ADD | BPF_X:
    case BPF_ALU | BPF_SUB | BPF_K: case BPF_ALU | BPF_SUB | BPF_X:
    case BPF_ALU | BPF_MUL | BPF_K: case BPF_ALU | BPF_MUL | BPF_X:
    case BPF_ALU | BPF_DIV | BPF_K: case BPF_ALU | BPF_DIV | BPF_X:
    case BPF_ALU | BPF_AND | BPF_K: case BPF_ALU | BPF_AND | BPF_X:
    case BPF_ALU | BPF_OR | BPF_K: case BPF_ALU | BPF_OR | BPF_X:
    case BPF_ALU | BPF_XOR | BPF_K: case BPF_ALU | BPF_XOR | BPF_X:
    case BPF_ALU | BPF_LSH | BPF_K: case BPF_ALU | BPF_LSH | BPF_X:
    case BPF_ALU | BPF_RSH | BPF_K: case BPF_ALU | BPF_RSH | BPF_X:
    case BPF_ALU | BPF_NEG:
    case BPF_LD | BPF_IMM: case BPF_LDX | BPF_IMM:
    case BPF_MISC | BPF_TAX: case BPF_MISC | BPF_TXA:
    case BPF_LD | BPF_MEM: case BPF_LDX | BPF_MEM:
    case BPF_ST: case BPF_STX:
    case BPF_JMP | BPF_JA:
        return 1;
    default:
        return cbpf_is_cond_jump(code);
    }
}

/* Static verification. Returns 0, or -1 with a message in err. */
static inline int cbpf_verify(const struct sock_filter *f, size_t len, char *err, size_t errlen) {
    if (!f) return cbpf_err(err, errlen, "no program");
    if (len == 0 || len > BPF_MAXINSNS)
        return cbpf_err(err, errlen, "length %zu outside 1..%d", len, BPF_MAXINSNS);
    for (size_t pc = 0; pc < len; pc++) {
        const struct sock_filter *i = &f[pc];
        if (!cbpf_seccomp_opcode(i->code))
            return cbpf_err(err, errlen, "insn %zu: opcode 0x%04x not allowed in seccomp", pc,
                            (unsigned)i->code);
        switch (i->code) {
        case BPF_LD | BPF_W | BPF_ABS:
            if (i->k >= CBPF_DATA_LEN || (i->k & 3))
                return cbpf_err(err, errlen,
                                "insn %zu: load at offset %u (must be 4-aligned and < %u)", pc,
                                (unsigned)i->k, (unsigned)CBPF_DATA_LEN);
            break;
        case BPF_ALU | BPF_DIV | BPF_K:
            if (i->k == 0) return cbpf_err(err, errlen, "insn %zu: division by constant 0", pc);
            break;
        case BPF_ALU | BPF_LSH | BPF_K:
        case BPF_ALU | BPF_RSH | BPF_K:
            if (i->k >= 32)
                return cbpf_err(err, errlen, "insn %zu: shift by constant %u", pc, (unsigned)i->k);
            break;
        case BPF_LD | BPF_MEM: case BPF_LDX | BPF_MEM:
        case BPF_ST: case BPF_STX:
            if (i->k >= BPF_MEMWORDS)
                return cbpf_err(err, errlen, "insn %zu: scratch cell %u out of range", pc,
                                (unsigned)i->k);
            break;
        case BPF_JMP | BPF_JA:
            /* unsigned offset: "backward" is only reachable by wrapping */
            if ((uint64_t)i->k >= (uint64_t)(len - pc - 1))
                return cbpf_err(err, errlen, "insn %zu: ja +%u past the end (len %zu)", pc,
                                (unsigned)i->k, len);
            break;
        default:
            if (cbpf_is_cond_jump(i->code) &&
                (pc + i->jt + 1 >= len || pc + i->jf + 1 >= len))
                return cbpf_err(err, errlen, "insn %zu: conditional jump +%u/+%u past the end",
                                pc, (unsigned)i->jt, (unsigned)i->jf);
            break;
        }
    }
    if (f[len - 1].code != (BPF_RET | BPF_K) && f[len - 1].code != (BPF_RET | BPF_A))
        return cbpf_err(err, errlen, "last insn %zu is not a RET (opcode 0x%04x)", len - 1,
                        (unsigned)f[len - 1].code);
    /* net/core/filter.c: check_load_and_stores, same (conservative) algorithm */
    uint16_t *masks = malloc(len * sizeof *masks);
    if (!masks) return cbpf_err(err, errlen, "out of memory");
    memset(masks, 0xff, len * sizeof *masks);
    uint16_t memvalid = 0;
    int rc = 0;
    for (size_t pc = 0; pc < len && rc == 0; pc++) {
        const struct sock_filter *i = &f[pc];
        memvalid &= masks[pc];
        switch (i->code) {
        case BPF_ST: case BPF_STX:
            memvalid |= (uint16_t)(1u << i->k);
            break;
        case BPF_LD | BPF_MEM: case BPF_LDX | BPF_MEM:
            if (!(memvalid & (1u << i->k)))
                rc = cbpf_err(err, errlen, "insn %zu: scratch cell %u may be read unwritten", pc,
                              (unsigned)i->k);
            break;
        case BPF_JMP | BPF_JA:
            masks[pc + 1 + i->k] &= memvalid;
            memvalid = 0xffff;
            break;
        default:
            if (cbpf_is_cond_jump(i->code)) {
                masks[pc + 1 + i->jt] &= memvalid;
                masks[pc + 1 + i->jf] &= memvalid;
                memvalid = 0xffff;
            }
            break;
        }
    }
    free(masks);
    return rc;
}

/* Runs f on d. Returns 0 with the program's value in *ret, or -1 with a message
 * (a guard tripped: only possible for a program cbpf_verify rejects). */
static inline int cbpf_exec(const struct sock_filter *f, size_t len, const struct seccomp_data *d,
                            uint32_t *ret, struct cbpf_trace *tr, char *err, size_t errlen) {
    unsigned char data[sizeof(struct seccomp_data)]; /* what the kernel presents */
    memcpy(data, d, sizeof data);
    uint32_t A = 0, X = 0, M[BPF_MEMWORDS] = {0};
    uint16_t written = 0;
    struct cbpf_trace local = {0, 0};
    if (!tr) tr = &local;
    tr->words = 0;
    tr->steps = 0;
    if (!f || len == 0 || len > BPF_MAXINSNS)
        return cbpf_err(err, errlen, "length %zu outside 1..%d", len, BPF_MAXINSNS);
    size_t pc = 0;
    while (pc < len) {
        const struct sock_filter *i = &f[pc];
        if (++tr->steps > len) return cbpf_err(err, errlen, "more steps than insns: a loop");
        size_t next = pc + 1;
        switch (i->code) {
        case BPF_LD | BPF_W | BPF_ABS:
            if (i->k >= CBPF_DATA_LEN || (i->k & 3))
                return cbpf_err(err, errlen, "insn %zu: load at offset %u", pc, (unsigned)i->k);
            memcpy(&A, data + i->k, sizeof A);
            tr->words |= 1u << (i->k / 4);
            break;
        case BPF_LD | BPF_W | BPF_LEN: A = CBPF_DATA_LEN; break;
        case BPF_LDX | BPF_W | BPF_LEN: X = CBPF_DATA_LEN; break;
        case BPF_LD | BPF_IMM: A = i->k; break;
        case BPF_LDX | BPF_IMM: X = i->k; break;
        case BPF_MISC | BPF_TAX: X = A; break;
        case BPF_MISC | BPF_TXA: A = X; break;
        case BPF_LD | BPF_MEM:
        case BPF_LDX | BPF_MEM:
            if (i->k >= BPF_MEMWORDS || !(written & (1u << i->k)))
                return cbpf_err(err, errlen, "insn %zu: read of scratch cell %u (unwritten or out of range)",
                                pc, (unsigned)i->k);
            if (i->code == (BPF_LD | BPF_MEM)) A = M[i->k]; else X = M[i->k];
            break;
        case BPF_ST:
        case BPF_STX:
            if (i->k >= BPF_MEMWORDS)
                return cbpf_err(err, errlen, "insn %zu: scratch cell %u out of range", pc,
                                (unsigned)i->k);
            M[i->k] = i->code == BPF_ST ? A : X;
            written |= (uint16_t)(1u << i->k);
            break;
        case BPF_ALU | BPF_ADD | BPF_K: A += i->k; break;
        case BPF_ALU | BPF_ADD | BPF_X: A += X; break;
        case BPF_ALU | BPF_SUB | BPF_K: A -= i->k; break;
        case BPF_ALU | BPF_SUB | BPF_X: A -= X; break;
        case BPF_ALU | BPF_MUL | BPF_K: A *= i->k; break;
        case BPF_ALU | BPF_MUL | BPF_X: A *= X; break;
        case BPF_ALU | BPF_DIV | BPF_K:
            if (i->k == 0) return cbpf_err(err, errlen, "insn %zu: division by constant 0", pc);
            A /= i->k;
            break;
        case BPF_ALU | BPF_DIV | BPF_X:
            if (X == 0) { *ret = 0; return 0; } /* the kernel's cBPF semantics */
            A /= X;
            break;
        case BPF_ALU | BPF_AND | BPF_K: A &= i->k; break;
        case BPF_ALU | BPF_AND | BPF_X: A &= X; break;
        case BPF_ALU | BPF_OR | BPF_K: A |= i->k; break;
        case BPF_ALU | BPF_OR | BPF_X: A |= X; break;
        case BPF_ALU | BPF_XOR | BPF_K: A ^= i->k; break;
        case BPF_ALU | BPF_XOR | BPF_X: A ^= X; break;
        case BPF_ALU | BPF_LSH | BPF_K:
        case BPF_ALU | BPF_RSH | BPF_K:
            if (i->k >= 32) return cbpf_err(err, errlen, "insn %zu: shift by %u", pc, (unsigned)i->k);
            A = BPF_OP(i->code) == BPF_LSH ? A << i->k : A >> i->k;
            break;
        /* by X: the count is taken mod 32, as x86 does (eBPF leaves >= 32 undefined) */
        case BPF_ALU | BPF_LSH | BPF_X: A <<= (X & 31); break;
        case BPF_ALU | BPF_RSH | BPF_X: A >>= (X & 31); break;
        case BPF_ALU | BPF_NEG: A = 0u - A; break;
        case BPF_JMP | BPF_JA:
            if ((uint64_t)i->k >= (uint64_t)(len - pc - 1))
                return cbpf_err(err, errlen, "insn %zu: ja +%u past the end", pc, (unsigned)i->k);
            next = pc + 1 + i->k;
            break;
        case BPF_RET | BPF_K: *ret = i->k; return 0;
        case BPF_RET | BPF_A: *ret = A; return 0;
        default:
            if (!cbpf_is_cond_jump(i->code))
                return cbpf_err(err, errlen, "insn %zu: opcode 0x%04x not allowed in seccomp", pc,
                                (unsigned)i->code);
            {
                uint32_t v = BPF_SRC(i->code) == BPF_X ? X : i->k;
                int taken;
                switch (BPF_OP(i->code)) {
                case BPF_JEQ: taken = A == v; break;
                case BPF_JGT: taken = A > v; break;
                case BPF_JGE: taken = A >= v; break;
                default: taken = (A & v) != 0; break; /* BPF_JSET */
                }
                size_t off = taken ? i->jt : i->jf;
                if (pc + 1 + off >= len)
                    return cbpf_err(err, errlen, "insn %zu: jump +%zu past the end", pc, off);
                next = pc + 1 + off;
            }
            break;
        }
        pc = next;
    }
    return cbpf_err(err, errlen, "fell off the end of the program (len %zu)", len);
}

/* seccomp_is_const_allow() of kernel/seccomp.c: how the kernel decides, when a
 * filter is attached, that (arch, nr) is ALLOW whatever the arguments, and so
 * skips the filter for it (SECCOMP_ARCH_NATIVE action cache). Only loads of nr
 * and arch, JA, Jxx|K, AND|K and RET|K are understood: anything else on the
 * path means "not cacheable". */
static inline int cbpf_const_allow(const struct sock_filter *f, size_t len, uint32_t arch,
                                   int nr) {
    uint32_t reg = 0;
    for (size_t pc = 0; pc < len; pc++) {
        const struct sock_filter *i = &f[pc];
        switch (i->code) {
        case BPF_LD | BPF_W | BPF_ABS:
            if (i->k == offsetof(struct seccomp_data, nr)) reg = (uint32_t)nr;
            else if (i->k == offsetof(struct seccomp_data, arch)) reg = arch;
            else return 0;
            break;
        case BPF_RET | BPF_K:
            return i->k == SECCOMP_RET_ALLOW;
        case BPF_JMP | BPF_JA:
            pc += i->k;
            break;
        case BPF_JMP | BPF_JEQ | BPF_K:
        case BPF_JMP | BPF_JGE | BPF_K:
        case BPF_JMP | BPF_JGT | BPF_K:
        case BPF_JMP | BPF_JSET | BPF_K: {
            int r;
            switch (BPF_OP(i->code)) {
            case BPF_JEQ: r = reg == i->k; break;
            case BPF_JGE: r = reg >= i->k; break;
            case BPF_JGT: r = reg > i->k; break;
            default: r = (reg & i->k) != 0; break;
            }
            pc += r ? i->jt : i->jf;
            break;
        }
        case BPF_ALU | BPF_AND | BPF_K:
            reg &= i->k;
            break;
        default:
            return 0;
        }
    }
    return 0; /* ran off the end */
}

static inline __attribute__((noreturn, format(printf, 1, 2))) void cbpf_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cbpf: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* Verifies f (aborting the test if the kernel would refuse it). */
static inline void cbpf_load(struct cbpf_prog *p, const struct sock_filter *f, size_t len) {
    char err[CBPF_ERR_LEN];
    if (cbpf_verify(f, len, err, sizeof err) != 0)
        cbpf_die("the kernel would refuse this program: %s", err);
    p->insns = f;
    p->len = len;
    p->verified = 1;
}

/* Runs a loaded program (aborting the test on any guard). tr may be NULL. */
static inline uint32_t cbpf_run(const struct cbpf_prog *p, const struct seccomp_data *d,
                                struct cbpf_trace *tr) {
    char err[CBPF_ERR_LEN];
    uint32_t ret = 0;
    if (!p->verified) cbpf_die("running a program that was not verified");
    if (cbpf_exec(p->insns, p->len, d, &ret, tr, err, sizeof err) != 0)
        cbpf_die("nr=%d arch=0x%08x: %s", d->nr, (unsigned)d->arch, err);
    return ret;
}

#endif
