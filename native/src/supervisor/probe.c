/* cv_probe: run `cvisor-helper probe`, which tries each kernel feature for
 * real in a throwaway child, and parse its one line of key=value pairs. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "run.h"

static void field(const char *text, const char *key, int32_t *out) {
    char pat[64];
    snprintf(pat, sizeof pat, "%s=", key);
    const char *p = strstr(text, pat);
    if (p && (p == text || p[-1] == ' ')) *out = (int32_t)strtol(p + strlen(pat), NULL, 10);
}

CV_API int cv_probe(const char *helper_path, cv_probe_result *out) {
    if (!helper_path || !out) return CV_ERR_INVALID;
    memset(out, 0, sizeof *out);
    if (access(helper_path, X_OK) < 0) {
        out->helper_errno = errno;
        return 0;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) return -errno;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    char *argv[] = {(char *)helper_path, "probe", NULL};
    char *envp[] = {NULL};
    pid_t pid;
    int e = posix_spawn(&pid, helper_path, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (e) {
        close(p[0]);
        out->helper_errno = e;
        return 0;
    }
    char buf[1024];
    ssize_t n = cv_read_full(p[0], buf, sizeof buf - 1);
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        out->helper_errno = EIO;
        return 0;
    }
    buf[n] = 0;
    out->helper_ok = 1;
    field(buf, "seccomp_unotify", &out->seccomp_unotify);
    field(buf, "seccomp_errno", &out->seccomp_errno);
    field(buf, "addfd_send", &out->addfd_send);
    field(buf, "addfd_errno", &out->addfd_errno);
    field(buf, "sync_wakeup", &out->sync_wakeup);
    field(buf, "killable_recv", &out->killable_recv);
    field(buf, "pidfd_open", &out->pidfd_open);
    field(buf, "pidfd_getfd", &out->pidfd_getfd);
    field(buf, "pidfd_errno", &out->pidfd_errno);
    field(buf, "landlock_abi", &out->landlock_abi);
    field(buf, "landlock_errno", &out->landlock_errno);
    field(buf, "proc_mem_force", &out->proc_mem_force);
    field(buf, "proc_mem_errno", &out->proc_mem_errno);
    return 0;
}
