/* cvisor-helper as the exec relay (common/relay_proto.h): fetch the plan the
 * supervisor made for this exec, then exec it. Runs inside the sandbox, under
 * its filter and Landlock domains, with the guest's own credentials. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/relay_proto.h"
#include "relay.h"

int cv_is_relay(void) {
    const char *fn = (const char *)getauxval(AT_EXECFN);
    return fn && !strncmp(fn, "/dev/fd/", 8);
}

static const char *next_field(const char **p, const char *end) {
    const char *f = *p;
    const char *nul = memchr(f, 0, (size_t)(end - f));
    if (!nul) return NULL;
    *p = nul + 1;
    return f;
}

static char **read_list(const char **p, const char *end) {
    const char *c = next_field(p, end);
    if (!c) return NULL;
    long n = strtol(c, NULL, 10);
    if (n < 0 || n > (long)(CV_RELAY_PLAN_MAX / 2)) return NULL;
    char **list = calloc((size_t)n + 1, sizeof *list);
    if (!list) return NULL;
    for (long i = 0; i < n; i++)
        if (!(list[i] = (char *)next_field(p, end))) return NULL;
    return list;
}

int cv_relay_main(void) {
    char *plan = mmap(NULL, CV_RELAY_PLAN_MAX, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (plan == MAP_FAILED) return 126;
    ssize_t len = readlink(CV_RELAY_MAGIC, plan, CV_RELAY_PLAN_MAX);
    if (len <= 0) {
        fprintf(stderr, "cvisor: exec relay: no plan for this exec (%s)\n", strerror(len < 0 ? errno : EINVAL));
        return 126;
    }
    const char *p = plan, *end = plan + len;
    const char *kind = next_field(&p, end), *target = next_field(&p, end);
    char **argv = read_list(&p, end), **envp = argv ? read_list(&p, end) : NULL;
    if (!kind || !target || !argv || !envp) {
        fprintf(stderr, "cvisor: exec relay: malformed plan\n");
        return 126;
    }
    if (kind[0] == 'f') syscall(SYS_execveat, atoi(target), "", argv, envp, AT_EMPTY_PATH);
    else execve(target, argv, envp);
    int e = errno;
    fprintf(stderr, "%s: %s\n", argv[0] ? argv[0] : target, strerror(e));
    return e == ENOENT ? 127 : 126;
}
