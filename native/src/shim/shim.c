/* libcvisor-shim.so: the in-guest tier's first step, preloaded into dynamically linked guests
 * (LD_PRELOAD, src/sandbox/shim.ts).
 *
 * glibc's fstat is fstatat(fd, "", buf, AT_EMPTY_PATH). The filter cannot read a path, and a
 * path there instead of "" names any file, a hidden one too, so it sends every AT_EMPTY_PATH
 * stat with a path to the supervisor. One with a NULL path it lets through: since Linux 6.11
 * the kernel then answers about the fd alone. This shim turns glibc's "" into NULL, in the only
 * places glibc makes these calls (fstatat, statx, and syscall() for libuv's raw statx), so
 * fstat stays a native call. It redirects their entry to its own code: an LD_PRELOAD symbol
 * would miss glibc's calls from inside itself (fdopendir, stdio, setlocale: most of them).
 *
 * Nothing here is trusted. The filter decides; a guest without the shim, or one that undoes
 * it, only makes its own fstat calls slower. Whatever the shim does not recognise (another C
 * library, other code at those entries, a kernel without NULL paths) it leaves alone. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/patch.h"

static long raw6(long nr, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

static long set_errno(long r) {
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

/* The filter's test, made here first: an fd (not AT_FDCWD), AT_EMPTY_PATH and the path "". */
static const char *fd_only(long fd, const char *path, long flags) {
    return ((flags & AT_EMPTY_PATH) && (int)fd >= 0 && path && !path[0]) ? NULL : path;
}

static int shim_fstatat(int fd, const char *path, struct stat *buf, int flags) {
    return (int)set_errno(raw6(SYS_newfstatat, fd, (long)fd_only(fd, path, flags), (long)buf, flags, 0, 0));
}

static int shim_statx(int fd, const char *path, int flags, unsigned mask, void *buf) {
    return (int)set_errno(raw6(SYS_statx, fd, (long)fd_only(fd, path, flags), flags, mask, (long)buf, 0));
}

static long shim_syscall(long nr, long a, long b, long c, long d, long e, long f) {
    if (nr == SYS_newfstatat) b = (long)fd_only(a, (const char *)b, d);
    else if (nr == SYS_statx) b = (long)fd_only(a, (const char *)b, c);
    return set_errno(raw6(nr, a, b, c, d, e, f));
}

/* The entries as glibc 2.33+ has them on x86-64: the instructions up to and including the
 * syscall and the test of its result, which the jump to ours overwrites. */
static const unsigned char FSTATAT[] = {0x41, 0x89, 0xca,                   /* mov %ecx,%r10d */
                                        0xb8, 0x06, 0x01, 0x00, 0x00,       /* mov $SYS_newfstatat,%eax */
                                        0x0f, 0x05,                         /* syscall */
                                        0x3d, 0x00, 0xf0, 0xff, 0xff};      /* cmp $-4096,%eax */
static const unsigned char STATX[] = {0x41, 0x89, 0xca,                     /* mov %ecx,%r10d */
                                      0xb8, 0x4c, 0x01, 0x00, 0x00,         /* mov $SYS_statx,%eax */
                                      0x0f, 0x05,                           /* syscall */
                                      0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff};  /* cmp $-4096,%rax */
static const unsigned char SYSCALL[] = {0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, /* nr, a, b */
                                        0x48, 0x89, 0xca, 0x4d, 0x89, 0xc2, 0x4d, 0x89, 0xc8, /* c, d, e */
                                        0x4c, 0x8b, 0x4c, 0x24, 0x08,                         /* f */
                                        0x0f, 0x05};                                          /* syscall */

/* libc's own definition of name (its default version), found in its dynamic symbol table: the
 * shim links against nothing newer than glibc 2.2.5 (dl_iterate_phdr, __errno_location), so it
 * loads into any glibc guest, and a symbol another preload defines is not the one patched. */
struct lookup {
    const char *name;
    unsigned char *addr;
};

static uint32_t gnu_hash(const char *s) {
    uint32_t h = 5381;
    for (; *s; s++) h = h * 33 + (unsigned char)*s;
    return h;
}

static int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static int is_libc(const char *path) {
    const char *base = path;
    for (const char *p = path; *p; p++)
        if (*p == '/') base = p + 1;
    return same(base, "libc.so.6");
}

static int find_in_libc(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct lookup *l = arg;
    if (!info->dlpi_name || !is_libc(info->dlpi_name)) return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const void *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 1;
    uintptr_t symtab = 0, strtab = 0, gnuhash = 0, versym = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        uintptr_t v = dyn->d_un.d_ptr;
        if (v && v < info->dlpi_addr) v += info->dlpi_addr; /* ld.so may have relocated it already */
        if (dyn->d_tag == DT_SYMTAB) symtab = v;
        else if (dyn->d_tag == DT_STRTAB) strtab = v;
        else if (dyn->d_tag == DT_GNU_HASH) gnuhash = v;
        else if (dyn->d_tag == DT_VERSYM) versym = v;
    }
    if (!symtab || !strtab || !gnuhash) return 1;
    const uint32_t *h = (const uint32_t *)gnuhash;
    uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(h + 4) + bloom_size);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t hash = gnu_hash(l->name);
    uint32_t i = nbuckets ? buckets[hash % nbuckets] : 0;
    if (i < symoffset) return 1;
    for (;; i++) {
        uint32_t ch = chain[i - symoffset];
        const ElfW(Sym) *sym = (const ElfW(Sym) *)symtab + i;
        if ((ch | 1) == (hash | 1) && same(l->name, (const char *)strtab + sym->st_name) &&
            sym->st_shndx != SHN_UNDEF && ELF64_ST_TYPE(sym->st_info) == STT_FUNC &&
            !(versym && (((const uint16_t *)versym)[i] & 0x8000))) {
            l->addr = (unsigned char *)(info->dlpi_addr + sym->st_value);
            return 1;
        }
        if (ch & 1) return 1;
    }
}

static int redirect(const char *name, const unsigned char *expect, size_t len, void *to) {
    struct lookup l = {name, NULL};
    dl_iterate_phdr(find_in_libc, &l);
    unsigned char *fn = l.addr;
    if (!fn) return -1;
    fn += cv_shim_endbr(fn); /* a CET build's landing pad stays where it is */
    if (!cv_shim_matches(fn, expect, len)) return -1;
    unsigned char jump[CV_SHIM_JUMP_LEN];
    cv_shim_jump(jump, (uintptr_t)to);
    uintptr_t lo = (uintptr_t)fn & ~(uintptr_t)4095;
    size_t span = (size_t)((uintptr_t)fn + sizeof jump - lo);
    /* Executable while written: a thread a constructor started may be running there. */
    if (raw6(SYS_mprotect, (long)lo, (long)span, PROT_READ | PROT_WRITE | PROT_EXEC, 0, 0, 0) < 0) return -1;
    for (size_t i = 0; i < sizeof jump; i++) ((volatile unsigned char *)fn)[i] = jump[i];
    raw6(SYS_mprotect, (long)lo, (long)span, PROT_READ | PROT_EXEC, 0, 0, 0);
    return 0;
}

__attribute__((constructor)) static void cv_shim_init(void) {
    /* Linux 6.11+ answers a NULL path about the fd (EBADF here); before, EFAULT. */
    struct stat st;
    if (raw6(SYS_newfstatat, 0x7fffffff, 0, (long)&st, AT_EMPTY_PATH, 0, 0) != -EBADF) return;
    redirect("fstatat", FSTATAT, sizeof FSTATAT, (void *)shim_fstatat);
    redirect("statx", STATX, sizeof STATX, (void *)shim_statx);
    redirect("syscall", SYSCALL, sizeof SYSCALL, (void *)shim_syscall);
}
