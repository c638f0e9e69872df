/* execve, execveat. A host binary the kernel finds by the guest's own path is
 * CONTINUEd (Landlock grants execute on visible host files only). Anything
 * else goes through the exec relay (common/relay_proto.h):
 *  - a script (#!) anywhere: the relay execs the interpreter with
 *    [interp, opt, path as the guest gave it, argv[1..]], as the kernel would,
 *    so $0 is the virtual path; a nested interpreter comes back here;
 *  - an ELF file in the upper or a read-only layer: the relay execs a sealed memfd copy
 *    (Landlock only grants execute on host files, and the layers are hidden);
 *  - a host file reached through the upper (a symlink there, a relative path
 *    from an upper directory): the relay execs it by its host path.
 * The path argument is rewritten to "/dev/fd/K" (K: the injected helper) with
 * a forced write; argv and envp go in the plan, read before the rewrite, so
 * whatever the rewrite overlaps does not matter. A vfork parent that shares
 * the memory gets its bytes back when the relay asks for the plan. */
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/relay_proto.h"
#include "common/seccomp_defs.h"
#include "common/util.h"
#include "handlers.h"
#include "overlay/vfs.h"

#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif
#define MAX_ARG_STRLEN (32 * 4096)

/* A growing NUL-separated buffer. */
struct plan {
    char *buf;
    size_t len, cap;
    int err;
};

static void put(struct plan *p, const char *s, size_t n) {
    if (p->err) return;
    if (p->len + n + 1 > CV_RELAY_PLAN_MAX) {
        p->err = E2BIG;
        return;
    }
    if (p->len + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 4096;
        while (cap < p->len + n + 1) cap *= 2;
        char *nb = realloc(p->buf, cap);
        if (!nb) {
            p->err = ENOMEM;
            return;
        }
        p->buf = nb;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, s, n);
    p->buf[p->len + n] = 0;
    p->len += n + 1;
}

static void puts_(struct plan *p, const char *s) { put(p, s, strlen(s)); }

static void putnum(struct plan *p, long v) {
    char b[24];
    snprintf(b, sizeof b, "%ld", v);
    puts_(p, b);
}

/* Append the guest's string array at addr (argv or envp), skipping the first `skip` entries.
 * Returns the count appended, or -errno. */
static long guest_list(struct cv_notif *n, uint64_t addr, long skip, struct plan *out) {
    if (!addr) return 0;
    char *s = malloc(MAX_ARG_STRLEN);
    if (!s) return -ENOMEM;
    long count = 0;
    for (long i = 0;; i++) {
        uint64_t ptr;
        if (cv_guest_peek(&n->g, addr + (uint64_t)i * 8, &ptr, sizeof ptr) < 0) {
            free(s);
            return -EFAULT;
        }
        if (!ptr) break;
        ssize_t l = cv_guest_peek_str(&n->g, ptr, s, MAX_ARG_STRLEN);
        if (l < 0) {
            free(s);
            return l == -ENAMETOOLONG ? -E2BIG : l;
        }
        if (i >= skip) {
            put(out, s, (size_t)l);
            count++;
        }
        if (out->err) break;
    }
    free(s);
    return out->err ? -out->err : count;
}

static long list_len(struct cv_notif *n, uint64_t addr) {
    long i = 0;
    for (uint64_t ptr = 1; addr; i++)
        if (cv_guest_peek(&n->g, addr + (uint64_t)i * 8, &ptr, sizeof ptr) < 0 || !ptr) break;
    return i;
}

/* "#!interp opt" from the file's first line: 1 and the two parts, 0 if not a script. */
static int shebang(int fd, char *interp, size_t ilen, char *opt, size_t olen) {
    char head[256];
    ssize_t r = pread(fd, head, sizeof head - 1, 0);
    if (r < 2 || head[0] != '#' || head[1] != '!') return 0;
    head[r] = 0;
    char *nl = strchr(head, '\n');
    if (nl) *nl = 0;
    char *p = head + 2;
    while (*p == ' ' || *p == '\t') p++;
    char *e = p;
    while (*e && *e != ' ' && *e != '\t') e++;
    snprintf(interp, ilen, "%.*s", (int)(e - p), p);
    while (*e == ' ' || *e == '\t') e++;
    char *end = e + strlen(e); /* the kernel keeps the rest of the line as one argument, trimmed */
    while (end > e && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) end--;
    snprintf(opt, olen, "%.*s", (int)(end - e), e);
    return interp[0] ? 1 : -1;
}

/* A sealed memfd copy of an upper executable: Landlock lets the relay execute it. */
static int exec_copy(int src) {
    int m = memfd_create("cvisor-exec", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m < 0) return -errno;
    char buf[65536];
    off_t off = 0;
    for (;;) {
        ssize_t r = pread(src, buf, sizeof buf, off);
        if (r < 0) {
            close(m);
            return -errno;
        }
        if (r == 0) break;
        if (cv_write_full(m, buf, (size_t)r) < 0) {
            close(m);
            return -EIO;
        }
        off += r;
    }
    fchmod(m, 0755);
    fcntl(m, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK);
    return m;
}

static void relay_drop(struct cv_run *r, size_t i) {
    free(r->relays[i].exe);
    free(r->relays[i].plan);
    if (r->relays[i].fd >= 0) close(r->relays[i].fd);
    r->relays[i] = r->relays[--r->nrelay];
}

static struct cv_relay *relay_add(struct cv_run *r, pid_t tgid) {
    for (size_t i = 0; i < r->nrelay; i++)
        if (r->relays[i].tgid == tgid) relay_drop(r, i); /* an earlier exec that never reached the relay */
    if (r->nrelay == r->relay_cap) {
        size_t cap = r->relay_cap ? r->relay_cap * 2 : 4;
        struct cv_relay *nr = realloc(r->relays, cap * sizeof *nr);
        if (!nr) return NULL;
        r->relays = nr;
        r->relay_cap = cap;
    }
    struct cv_relay *x = &r->relays[r->nrelay++];
    memset(x, 0, sizeof *x);
    x->tgid = tgid;
    x->fd = -1;
    return x;
}

static pid_t parent_sharing_vm(pid_t tid) {
    pid_t ppid;
    unsigned long long start;
    if (cv_proc_stat(tid, &ppid, &start) < 0 || ppid <= 1) return 0;
    return syscall(SYS_kcmp, tid, ppid, KCMP_VM, 0, 0) == 0 ? ppid : 0;
}

/* Point the guest's exec at the relay: inject the helper, rewrite the path. argv and envp were
 * read for the plan already (checked valid after, below, before anything is written). */
static struct cv_reply redirect(struct cv_notif *n, uint64_t path_addr, struct cv_relay *x) {
    struct cv_run *r = n->run;
    cv_autoclose int helper = open(r->helper, O_RDONLY | O_CLOEXEC);
    if (helper < 0) return cv_err(EACCES);
    int k = cv_guest_addfd(&n->g, helper, 1, 0);
    if (k < 0) return cv_err(k == -EMFILE ? EMFILE : ESRCH);
    char repl[32];
    int rl = snprintf(repl, sizeof repl, "/dev/fd/%d", k) + 1;
    cv_autoclose int m = cv_guest_open(&n->g, "mem", O_RDWR);
    if (m < 0) return cv_err(m == -ESRCH ? ESRCH : EACCES);
    x->saved_len = (size_t)rl;
    memcpy(x->repl, repl, (size_t)rl);
    if (pread(m, x->saved, (size_t)rl, (off_t)path_addr) != rl) return cv_err(EFAULT);
    x->restore_pid = parent_sharing_vm(n->g.tid);
    x->restore_addr = path_addr;
    if (!cv_guest_valid(&n->g)) return cv_err(ESRCH);
    /* A forced write: the path may be a string literal in read-only memory. */
    if (pwrite(m, repl, (size_t)rl, (off_t)path_addr) != rl) return cv_err(EFAULT);
    return cv_continue();
}

const char *cv_exe_of(struct cv_run *r, pid_t pid) {
    pid_t pp;
    unsigned long long start;
    for (size_t i = 0; i < r->nexe; i++)
        if (r->exes[i].tgid == pid)
            return cv_proc_stat(pid, &pp, &start) == 0 && start == r->exes[i].start ? r->exes[i].vpath : NULL;
    return NULL;
}

/* Remember what the relay (tgid) is about to run from a memfd. */
static void exe_record(struct cv_run *r, pid_t tgid, char *vpath) {
    pid_t pp;
    unsigned long long start;
    if (!vpath || cv_proc_stat(tgid, &pp, &start) < 0) {
        free(vpath);
        return;
    }
    for (size_t i = 0; i < r->nexe; i++) {
        if (r->exes[i].tgid == tgid || cv_proc_stat(r->exes[i].tgid, &pp, &(unsigned long long){0}) < 0) {
            free(r->exes[i].vpath); /* the same pid again, or a process that is gone */
            r->exes[i] = (struct cv_exe){tgid, start, vpath};
            return;
        }
    }
    if (r->nexe == r->exe_cap) {
        size_t cap = r->exe_cap ? r->exe_cap * 2 : 8;
        struct cv_exe *ne = realloc(r->exes, cap * sizeof *ne);
        if (!ne) {
            free(vpath);
            return;
        }
        r->exes = ne;
        r->exe_cap = cap;
    }
    r->exes[r->nexe++] = (struct cv_exe){tgid, start, vpath};
}

int cv_relay_request(struct cv_notif *n, const char *path, uint64_t buf, size_t size, struct cv_reply *out) {
    (void)path;
    struct cv_run *r = n->run;
    pid_t tgid = cv_guest_tgid(&n->g);
    size_t i;
    for (i = 0; i < r->nrelay; i++)
        if (r->relays[i].tgid == tgid) break;
    if (i == r->nrelay) return 0;
    struct cv_relay *x = &r->relays[i];
    if (x->restore_pid) {
        /* Give the vfork parent its path back — only if the bytes are still ours: the parent runs
         * again as soon as the exec succeeded and may have reused that memory already. */
        char mem[64], now[sizeof x->saved];
        snprintf(mem, sizeof mem, "/proc/%d/mem", (int)x->restore_pid);
        int m = open(mem, O_RDWR | O_CLOEXEC);
        if (m >= 0) {
            if (pread(m, now, x->saved_len, (off_t)x->restore_addr) == (ssize_t)x->saved_len &&
                !memcmp(now, x->repl, x->saved_len) &&
                pwrite(m, x->saved, x->saved_len, (off_t)x->restore_addr) < 0) {
                /* the parent is gone: nothing to give back */
            }
            close(m);
        }
    }
    if (x->fd >= 0) {
        /* The plan names the fd the copy gets in the relay: put it in now, then patch the number. */
        int k = cv_guest_addfd(&n->g, x->fd, 1, 0);
        if (k < 0) {
            relay_drop(r, i);
            *out = cv_err(ESRCH);
            return 1;
        }
        /* The plan was built with "f\0-1\0": rebuild its head with k. */
        struct plan p = {0};
        puts_(&p, "f");
        putnum(&p, k);
        size_t head = 2 + strlen(x->plan + 2) + 1;
        put(&p, x->plan + head, x->len - head - 1);
        if (p.err) {
            free(p.buf);
            relay_drop(r, i);
            *out = cv_err(p.err);
            return 1;
        }
        free(x->plan);
        x->plan = p.buf;
        x->len = p.len;
        exe_record(r, tgid, x->exe);
        x->exe = NULL;
    }
    if (x->len > size) *out = cv_err(ENAMETOOLONG);
    else {
        int e = cv_guest_write(&n->g, buf, x->plan, x->len);
        *out = e < 0 ? cv_err(-e) : cv_val((int64_t)x->len);
    }
    relay_drop(r, i);
    return 1;
}

struct cv_reply cv_h_exec(struct cv_notif *n) {
    const __u64 *a = n->req->data.args;
    int dirfd = AT_FDCWD, flags = 0;
    uint64_t addr = a[0], argv = a[1], envp = a[2];
    if (n->req->data.nr == __NR_execveat) dirfd = (int)a[0], addr = a[1], argv = a[2], envp = a[3], flags = (int)a[4];
    char path[PATH_MAX];
    int e = cv_guest_path(&n->g, addr, path, sizeof path);
    if (e < 0) return cv_err(-e);
    if (!*path && (flags & AT_EMPTY_PATH)) return cv_continue(); /* fexecve: an fd the guest holds */
    struct cv_vnode v;
    e = cv_vresolve(&n->ctx, dirfd, path, (flags & AT_SYMLINK_NOFOLLOW) ? 0 : CV_RES_FOLLOW, &v);
    if (e < 0) return cv_err(-e);
    struct cv_reply out;
    cv_autoclose int fd = -1;
    char interp[256], opt[256];
    int script = 0;
    if (v.in_proc) {
        out = cv_continue(); /* /proc/self/exe and friends: the kernel's answer */
        goto done;
    }
    if (!v.exists) out = cv_err(ENOENT);
    else if (S_ISLNK(v.st.st_mode)) out = cv_err(ELOOP);
    else if (!S_ISREG(v.st.st_mode)) out = cv_err(EACCES);
    else if (!v.touched && v.layer == CV_LOWER) out = cv_continue();
    else if ((fd = cv_vnode_open(&v, 0)) < 0) out = cv_err(-fd);
    else {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        cv_autoclose int rd = open(self, O_RDONLY | O_CLOEXEC);
        if (rd < 0 || access(self, X_OK) < 0) {
            out = cv_err(EACCES);
            goto done;
        }
        script = shebang(rd, interp, sizeof interp, opt, sizeof opt);
        struct plan p = {0};
        long argc;
        int copy = -1;
        if (script < 0) {
            out = cv_err(ENOEXEC);
            goto done;
        }
        if (script) {
            /* As binfmt_script: [interp, opt, path as given, argv[1..]]. */
            puts_(&p, "p");
            puts_(&p, interp);
            long rest = list_len(n, argv);
            putnum(&p, 1 + (opt[0] ? 1 : 0) + 1 + (rest > 1 ? rest - 1 : 0));
            puts_(&p, interp);
            if (opt[0]) puts_(&p, opt);
            puts_(&p, path);
            argc = guest_list(n, argv, 1, &p);
        } else {
            char magic[4];
            if (pread(rd, magic, 4, 0) != 4 || memcmp(magic, "\177ELF", 4)) {
                out = cv_err(ENOEXEC);
                goto done;
            }
            if (cv_vnode_stored(&v)) {
                copy = exec_copy(rd);
                if (copy < 0) {
                    out = cv_err(-copy);
                    goto done;
                }
                puts_(&p, "f");
                puts_(&p, "-1");
            } else {
                puts_(&p, "p");
                puts_(&p, v.vpath); /* a host file: its host path is symlink-free */
            }
            putnum(&p, list_len(n, argv));
            argc = guest_list(n, argv, 0, &p);
        }
        long envc = list_len(n, envp);
        if (argc >= 0) {
            putnum(&p, envc);
            argc = guest_list(n, envp, 0, &p);
        }
        if (argc < 0 || p.err) {
            free(p.buf);
            if (copy >= 0) close(copy);
            out = cv_err(argc < 0 ? (int)-argc : p.err);
            goto done;
        }
        struct cv_relay *x = relay_add(n->run, cv_guest_tgid(&n->g));
        if (!x) {
            free(p.buf);
            if (copy >= 0) close(copy);
            out = cv_err(ENOMEM);
            goto done;
        }
        x->plan = p.buf;
        x->len = p.len;
        x->fd = copy;
        x->exe = copy >= 0 ? strdup(v.vpath) : NULL;
        out = redirect(n, addr, x);
        if (out.kind != CV_REPLY_CONTINUE) {
            for (size_t i = 0; i < n->run->nrelay; i++)
                if (&n->run->relays[i] == x) relay_drop(n->run, i);
        }
    }
done:
    cv_vnode_release(&v);
    return out;
}
