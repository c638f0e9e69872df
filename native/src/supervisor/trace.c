/* The trace of chosen syscalls (cv_run_set_trace, the CLI's --trace): one strace-like line per
 * call, `PID NAME(ARGS) = RESULT`, from the description supervisor/hook.c made (the strings read
 * once from the guest) and the reply the call got. The result is known where cvisor answered the
 * call; a call the kernel ran itself (continued) shows `= ?`. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "filter/table.h"
#include "handlers/handlers.h"
#include "hook.h"
#include "run.h"

#define LINE_MAX_ 4096
#define STR_SHOWN 256 /* characters of a string shown before "..." */

struct line { char buf[LINE_MAX_]; size_t len; };

static void add(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct line *l, const char *fmt, ...) {
    if (l->len >= sizeof l->buf) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l->buf + l->len, sizeof l->buf - l->len, fmt, ap);
    va_end(ap);
    if (n > 0) l->len += (size_t)n < sizeof l->buf - l->len ? (size_t)n : sizeof l->buf - l->len - 1;
}

/* A string as C would write it, cut after STR_SHOWN characters. */
static void add_quoted(struct line *l, const char *s, size_t n) {
    add(l, "\"");
    for (size_t i = 0; i < n && i < STR_SHOWN; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') add(l, "\\%c", c);
        else if (c == '\n') add(l, "\\n");
        else if (c == '\t') add(l, "\\t");
        else if (c < 0x20 || c >= 0x7f) add(l, "\\%03o", c);
        else add(l, "%c", c);
    }
    add(l, n > STR_SHOWN ? "\"..." : "\"");
}

static const struct { const char *name; unsigned bit; } open_flags[] = {
    {"O_CREAT", 0100},        {"O_EXCL", 0200},       {"O_NOCTTY", 0400},
    {"O_TRUNC", 01000},       {"O_APPEND", 02000},    {"O_NONBLOCK", 04000},
    {"O_DSYNC", 010000},      {"O_DIRECT", 040000},   {"O_DIRECTORY", 0200000},
    {"O_NOFOLLOW", 0400000},  {"O_NOATIME", 01000000}, {"O_CLOEXEC", 02000000},
    {"O_PATH", 010000000},
};

static void add_open_flags(struct line *l, uint64_t v) {
    static const char *acc[] = {"O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE"};
    add(l, "%s", acc[v & 3]);
    for (size_t i = 0; i < sizeof open_flags / sizeof open_flags[0]; i++)
        if (v & open_flags[i].bit) add(l, "|%s", open_flags[i].name);
}

static void add_sockaddr(struct line *l, const unsigned char *b, size_t n) {
    unsigned family = n >= 2 ? (unsigned)(b[0] | b[1] << 8) : 0;
    if (family == 2 && n >= 8) {
        add(l, "{AF_INET, %u.%u.%u.%u:%u}", b[4], b[5], b[6], b[7], (unsigned)(b[2] << 8 | b[3]));
    } else if (family == 10 && n >= 24) {
        add(l, "{AF_INET6, [");
        for (int i = 0; i < 8; i++) add(l, "%s%x", i ? ":" : "", (unsigned)(b[8 + 2 * i] << 8 | b[9 + 2 * i]));
        add(l, "]:%u}", (unsigned)(b[2] << 8 | b[3]));
    } else if (family == 1) {
        add(l, "{AF_UNIX, ");
        const char *p = (const char *)b + 2;
        size_t len = n - 2;
        if (len > 0 && p[0] == 0) {
            add(l, "@");
            add_quoted(l, p + 1, len - 1);
        } else {
            add_quoted(l, p, strnlen(p, len));
        }
        add(l, "}");
    } else {
        add(l, "{family %u}", family);
    }
}

/* The string described for argument arg (the k-th of that argument): its length, or -1. The
 * headers follow unpadded strings, so each is copied out, never read in place. */
static ssize_t str_of(const char *strs, size_t len, int what, int arg, int k, const char **bytes) {
    size_t at = 0;
    while (at + sizeof(struct cv_hook_str) <= len) {
        struct cv_hook_str h;
        memcpy(&h, strs + at, sizeof h);
        const char *b = strs + at + sizeof h;
        at += sizeof h + h.len;
        if (at > len) break;
        if (h.what == what && h.arg == arg && k-- == 0) {
            *bytes = b;
            return (ssize_t)h.len;
        }
    }
    return -1;
}

/* The open family's flags argument, or -1. */
static int flags_arg(int nr) {
    return nr == SYS_open ? 1 : nr == SYS_openat ? 2 : -1;
}

/* The argument that is a file mode (shown in octal), or -1. */
static int mode_arg(int nr) {
    switch (nr) {
    case SYS_open: case SYS_mkdirat: case SYS_fchmodat: case SYS_mknodat: return 2;
    case SYS_openat: return 3;
    case SYS_creat: case SYS_mkdir: case SYS_chmod: case SYS_mknod: return 1;
    default: return -1;
    }
}

void cv_trace_line(struct cv_run *r, const struct cv_hook_req *req, const char *strs,
                   size_t strs_len, int kind, int err, int64_t val) {
    struct line l = {.len = 0};
    int nr = (int)req->nr;
    const char *name = cv_syscall_name(nr);
    const struct cv_hook_strings *s = cv_hook_strings_of(nr);
    int arity = s ? s->arity : 3;
    /* The open family's mode means something only when it creates (as strace shows it). */
    int fa = flags_arg(nr);
    if (fa >= 0 && !(req->args[fa] & (0100 | 020000000))) arity = fa + 1;
    add(&l, "%d %s(", req->pid ? req->pid : req->tid, name ? name : "?");
    for (int i = 0; i < arity; i++) {
        const char *b;
        ssize_t h;
        uint64_t v = req->args[i];
        if (i) add(&l, ", ");
        if (s && (s->paths & (1u << i)) && (h = str_of(strs, strs_len, CV_HOOK_PATH, i, 0, &b)) >= 0) {
            add_quoted(&l, b, (size_t)h);
        } else if (s && s->argv == i && v) {
            add(&l, "[");
            for (int k = 0; (h = str_of(strs, strs_len, CV_HOOK_ARGV, i, k, &b)) >= 0; k++) {
                if (k) add(&l, ", ");
                add_quoted(&l, b, (size_t)h);
            }
            add(&l, "]");
        } else if (s && s->addr == i && (h = str_of(strs, strs_len, CV_HOOK_SOCKADDR, i, 0, &b)) >= 0) {
            add_sockaddr(&l, (const unsigned char *)b, (size_t)h);
        } else if (i == flags_arg(nr)) {
            add_open_flags(&l, v);
        } else if (i == mode_arg(nr)) {
            add(&l, (v & 07777) ? "0%llo" : "0", (unsigned long long)(v & 07777));
        } else if (s && s->argv >= 0 && i == s->argv + 1) {
            add(&l, v ? "0x%llx" : "NULL", (unsigned long long)v); /* envp */
        } else if (s && (s->paths & (1u << (i + 1))) && (int32_t)v == -100) {
            add(&l, "AT_FDCWD");
        } else if (s && ((s->paths & (1u << i)) || s->argv == i || s->addr == i)) {
            add(&l, v ? "0x%llx" : "NULL", (unsigned long long)v);
        } else {
            add(&l, "%lld", (long long)v);
        }
    }
    add(&l, ") = ");
    if (kind == CV_REPLY_VALUE) {
        add(&l, "%lld", (long long)val);
    } else if (kind == CV_REPLY_ERRNO) {
        const char *en = strerrorname_np(err);
        add(&l, "-1 %s (%s)", en ? en : "E?", strerror(err));
    } else {
        add(&l, "?");
    }
    if (l.len >= sizeof l.buf - 1) l.len = sizeof l.buf - 2;
    l.buf[l.len++] = '\n';
    cv_write_full(r->trace_fd, l.buf, l.len);
}
