/* How the shim redirects a function's entry: an absolute jump (movabs $to, %rax; jmp *%rax),
 * written only over instructions it knows. %rax is free at a function's entry: it carries no
 * argument (only the vector count of a variadic call, which the target does not read). */
#ifndef CV_SHIM_PATCH_H
#define CV_SHIM_PATCH_H

#include <stddef.h>
#include <stdint.h>

#define CV_SHIM_JUMP_LEN 12

/* The len bytes at fn are exactly expect. */
static inline int cv_shim_same(const unsigned char *fn, const unsigned char *expect, size_t len) {
    for (size_t i = 0; i < len; i++) /* by hand: the shim needs no memcmp of a newer glibc */
        if (fn[i] != expect[i]) return 0;
    return 1;
}

/* The code at fn is exactly expect, and expect covers the whole jump. */
static inline int cv_shim_matches(const unsigned char *fn, const unsigned char *expect, size_t len) {
    return len >= CV_SHIM_JUMP_LEN && cv_shim_same(fn, expect, len);
}

/* The length of an endbr64 at fn (a CET build's function entry), or 0. */
static inline size_t cv_shim_endbr(const unsigned char *fn) {
    return fn[0] == 0xf3 && fn[1] == 0x0f && fn[2] == 0x1e && fn[3] == 0xfa ? 4 : 0;
}

static inline void cv_shim_jump(unsigned char out[CV_SHIM_JUMP_LEN], uintptr_t to) {
    out[0] = 0x48, out[1] = 0xb8; /* movabs $to, %rax */
    for (int i = 0; i < 8; i++) out[2 + i] = (unsigned char)(to >> (8 * i));
    out[10] = 0xff, out[11] = 0xe0; /* jmp *%rax */
}

/* A trampoline, for an entry whose own code must still run: the len bytes the jump replaced
 * (whole instructions that do not depend on where they run: the caller checked them all), then
 * jmp *0(%rip) to the instruction after them. out holds len + CV_SHIM_BACK_LEN bytes. */
#define CV_SHIM_BACK_LEN 14
static inline void cv_shim_tramp(unsigned char *out, const unsigned char *code, size_t len, uintptr_t back) {
    for (size_t i = 0; i < len; i++) out[i] = code[i];
    out[len] = 0xff, out[len + 1] = 0x25; /* jmp *0(%rip) */
    for (int i = 0; i < 4; i++) out[len + 2 + i] = 0;
    for (int i = 0; i < 8; i++) out[len + 6 + i] = (unsigned char)(back >> (8 * i));
}

#endif
