/* The public API (include/cvisor.h) with real sandboxes: cvisor-helper from
 * build/ (next to build/tests/, or $CVISOR_HELPER). Every run gets the
 * environment PATH=/usr/bin:/bin, stdout and stderr captured through cv_pipe,
 * and is waited for by polling its done fd until EOF.
 *
 * Checked: exit codes, signals, exec failures, captured output, the read-only
 * filesystem, /proc confinement, timeouts and cv_run_kill (nothing of the tree
 * survives, setsid daemons included), helper failures, argument and state
 * errors, stats JSON, 20 concurrent runs, cv_probe; and that no fd of this
 * process is left behind (ASan checks leaks and memory errors).
 *
 * Output: one line per failure, then "run: N passed, M failed".
 * Exit status 0 only when M == 0. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "cvisor.h"
#include "check.h"
#include "supervisor/run.h" /* cv_hide_cached_fds: the hide cache keeps fds open on purpose */

#define RUN_GUARD_MS 10000 /* a run that takes longer is a failure (and gets killed) */
#define CONCURRENT 20

static char helper[PATH_MAX];
static pid_t me;


static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (isdigit((unsigned char)e->d_name[0])) n++;
    closedir(d);
    return n - 1; /* the DIR's own */
}

/* Is any live process's command line containing marker? (pid, or 0) */
static pid_t find_marker(const char *marker) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    pid_t found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue; /* zombies and kernel threads */
        for (ssize_t i = 0; i < n; i++)
            if (!buf[i]) buf[i] = ' ';
        buf[n] = 0;
        if (strstr(buf, marker)) found = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    return found;
}

static const char *state_str(int s) {
    switch (s) {
    case CV_RUN_EXITED: return "EXITED";
    case CV_RUN_SIGNALED: return "SIGNALED";
    case CV_RUN_EXEC_FAILED: return "EXEC_FAILED";
    case CV_RUN_FAILED: return "FAILED";
    default: return "?";
    }
}

/* One line describing a result, for failure messages. */
static const char *res_str(const cv_run_result *r) {
    static char b[4][400];
    static int k;
    char *o = b[k++ & 3];
    snprintf(o, sizeof b[0], "%s exit=%d signal=%d exec_errno=%d error=%d timed_out=%d killed=%d %.0fms%s%s",
             state_str(r->state), r->exit_code, r->signal, r->exec_errno, r->error, r->timed_out, r->killed,
             r->duration_ms, r->message[0] ? " msg=" : "", r->message);
    return o;
}

/* ---------- a run ---------- */

struct opts {
    const char *helper;   /* NULL: the real one */
    const char *cwd;
    uint32_t timeout_ms;
    int kill_after_ms;    /* > 0: cv_run_kill after this long */
    const char *watch;    /* marker to look for in /proc while it runs */
    const char *hide[4];  /* cv_run_add_hidden */
};

struct job {
    const char *name;
    struct opts o;
    cv_run *r;
    int done, out, err;  /* read ends; -1 once at EOF and closed */
    int start_rc;
    int finished;        /* done fd reached EOF */
    int hung;
    double t0;
    int killed_sent;
    int watch_seen;
    cv_run_result res;
    int res_rc;
    char stats[2048];
    int stats_len;
    char outbuf[16384], errbuf[4096];
    size_t outlen, errlen;
};

static void slurp(int *fd, char *buf, size_t cap, size_t *len) {
    char tmp[4096];
    ssize_t n = read(*fd, tmp, sizeof tmp);
    if (n > 0) {
        size_t c = (size_t)n;
        if (c > cap - 1 - *len) c = cap - 1 - *len;
        memcpy(buf + *len, tmp, c);
        *len += c;
        buf[*len] = 0;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(*fd);
        *fd = -1;
    }
}

static int job_start(struct job *j, const char *name, const char *const *argv, const struct opts *o) {
    memset(j, 0, sizeof *j);
    j->name = name;
    if (o) j->o = *o;
    j->done = j->out = j->err = -1;
    j->r = cv_run_new(j->o.helper ? j->o.helper : helper);
    if (!j->r) return CV_ERR_NOMEM;
    for (size_t i = 0; argv[i]; i++) cv_run_add_arg(j->r, argv[i]);
    cv_run_add_env(j->r, "PATH=/usr/bin:/bin");
    if (j->o.cwd) cv_run_set_cwd(j->r, j->o.cwd);
    if (j->o.timeout_ms) cv_run_set_timeout_ms(j->r, j->o.timeout_ms);
    for (size_t i = 0; i < 4 && j->o.hide[i]; i++) cv_run_add_hidden(j->r, j->o.hide[i]);
    int po[2], pe[2];
    if (cv_pipe(po) < 0) return -errno;
    if (cv_pipe(pe) < 0) { close(po[0]); close(po[1]); return -errno; }
    cv_run_set_stdio(j->r, -1, po[1], pe[1]);
    j->t0 = now_ms();
    j->start_rc = cv_run_start(j->r, &j->done);
    cv_close(po[1]);
    cv_close(pe[1]);
    j->out = po[0];
    j->err = pe[0];
    if (j->start_rc < 0) j->done = -1;
    return j->start_rc;
}

/* Poll every unfinished job until all done fds reached EOF. */
static void jobs_pump(struct job *js, int n) {
    for (;;) {
        struct pollfd pf[3 * CONCURRENT + 3];
        int np = 0, live = 0;
        int idx[3 * CONCURRENT + 3], what[3 * CONCURRENT + 3];
        double t = now_ms();
        for (int i = 0; i < n; i++) {
            struct job *j = &js[i];
            if (j->finished || j->done < 0) continue;
            live++;
            if (j->o.kill_after_ms > 0 && !j->killed_sent && t - j->t0 >= j->o.kill_after_ms) {
                int kr = cv_run_kill(j->r);
                check(kr == 0, "%s: cv_run_kill returned %d", j->name, kr);
                check(cv_run_kill(j->r) == 0, "%s: second cv_run_kill failed (not idempotent)", j->name);
                j->killed_sent = 1;
            }
            if (j->o.watch && !j->watch_seen && find_marker(j->o.watch)) j->watch_seen = 1;
            if (t - j->t0 > RUN_GUARD_MS && !j->hung) {
                j->hung = 1;
                check(0, "%s: still running after %d ms; killing it", j->name, RUN_GUARD_MS);
                cv_run_kill(j->r);
            }
            int fds[3] = {j->done, j->out, j->err};
            for (int k = 0; k < 3; k++) {
                if (fds[k] < 0) continue;
                pf[np] = (struct pollfd){fds[k], POLLIN, 0};
                idx[np] = i;
                what[np++] = k;
            }
        }
        if (!live) return;
        int pr = poll(pf, (nfds_t)np, 20);
        if (pr <= 0) continue;
        for (int q = 0; q < np; q++) {
            if (!pf[q].revents) continue;
            struct job *j = &js[idx[q]];
            if (what[q] == 0) {
                char c;
                ssize_t rn = read(j->done, &c, 1);
                if (rn == 0) j->finished = 1;
                else if (rn < 0 && errno != EAGAIN && errno != EINTR) j->finished = 1;
                else if (rn > 0) check(0, "%s: data on the done fd", j->name);
            } else if (what[q] == 1) {
                slurp(&j->out, j->outbuf, sizeof j->outbuf, &j->outlen);
            } else {
                slurp(&j->err, j->errbuf, sizeof j->errbuf, &j->errlen);
            }
        }
    }
}

/* After done: result, stats, what is left of the output, free, close. */
static void job_finish(struct job *j) {
    if (j->r && j->start_rc == 0) {
        j->res_rc = cv_run_get_result(j->r, &j->res);
        check(j->res_rc == 0, "%s: cv_run_get_result after done returned %d", j->name, j->res_rc);
        int need = cv_run_stats_json(j->r, NULL, 0);
        j->stats_len = cv_run_stats_json(j->r, j->stats, sizeof j->stats);
        check(need == j->stats_len && need >= 2 && (size_t)need < sizeof j->stats,
              "%s: cv_run_stats_json lengths %d / %d", j->name, need, j->stats_len);
        /* The guest tree is gone: whatever it wrote is in the pipes now. */
        while (j->out >= 0 || j->err >= 0) {
            struct pollfd pf[2] = {{j->out, POLLIN, 0}, {j->err, POLLIN, 0}};
            if (poll(pf, 2, 0) <= 0) break;
            if (pf[0].revents) slurp(&j->out, j->outbuf, sizeof j->outbuf, &j->outlen);
            if (pf[1].revents) slurp(&j->err, j->errbuf, sizeof j->errbuf, &j->errlen);
        }
    }
    cv_run_free(j->r);
    j->r = NULL;
    /* After cv_run_free the library's copies go (possibly a moment later, on its thread). */
    double until = now_ms() + 5000;
    while (j->out >= 0 || j->err >= 0) {
        struct pollfd pf[2] = {{j->out, POLLIN, 0}, {j->err, POLLIN, 0}};
        int left = (int)(until - now_ms());
        if (left <= 0) {
            check(0, "%s: output pipes not at EOF 5 s after cv_run_free", j->name);
            break;
        }
        if (poll(pf, 2, left) <= 0) continue;
        if (pf[0].revents) slurp(&j->out, j->outbuf, sizeof j->outbuf, &j->outlen);
        if (pf[1].revents) slurp(&j->err, j->errbuf, sizeof j->errbuf, &j->errlen);
    }
    if (j->out >= 0) close(j->out);
    if (j->err >= 0) close(j->err);
    if (j->done >= 0) close(j->done);
    j->out = j->err = j->done = -1;
}

static void run(struct job *j, const char *name, const char *const *argv, const struct opts *o) {
    int rc = job_start(j, name, argv, o);
    check(rc == 0, "%s: cv_run_start returned %d (%s)", name, rc, cv_strerror(rc));
    if (rc == 0) jobs_pump(j, 1);
    job_finish(j);
}

static void want_exit(const struct job *j, int code) {
    check(j->res.state == CV_RUN_EXITED && j->res.exit_code == code && !j->res.timed_out && !j->res.killed,
          "%s: expected EXITED %d, got %s; stderr: %.200s", j->name, code, res_str(&j->res), j->errbuf);
}

/* ---------- cases ---------- */

static void test_basic(void) {
    static struct job j;
    run(&j, "/bin/true", (const char *[]){"/bin/true", NULL}, NULL);
    want_exit(&j, 0);
    check(j.res.signal == 0 && j.res.exec_errno == 0 && j.res.error == 0 && !j.res.message[0],
          "/bin/true: stray result fields: %s", res_str(&j.res));
    check(j.res.duration_ms > 0 && j.res.duration_ms < RUN_GUARD_MS, "/bin/true: duration %.1f ms",
          j.res.duration_ms);
    check(j.res.max_rss_kb > 0, "/bin/true: max_rss_kb %lld", (long long)j.res.max_rss_kb);
    check(j.res.notifications >= 1, "/bin/true: %llu notifications (execve at least)",
          (unsigned long long)j.res.notifications);
    /* stats: {"execve":1,...} */
    check(strstr(j.stats, "\"execve\":") != NULL && j.stats[0] == '{' && j.stats[j.stats_len - 1] == '}',
          "/bin/true: stats JSON without execve: %s", j.stats);
    unsigned long long sum = 0;
    for (const char *p = j.stats; (p = strchr(p, ':')); p++) sum += strtoull(p + 1, NULL, 10);
    check(sum == j.res.notifications, "/bin/true: stats sum %llu != notifications %llu (%s)", sum,
          (unsigned long long)j.res.notifications, j.stats);

    run(&j, "exit 3", (const char *[]){"sh", "-c", "exit 3", NULL}, NULL);
    want_exit(&j, 3);

    run(&j, "kill -TERM $$", (const char *[]){"sh", "-c", "kill -TERM $$; sleep 5", NULL}, NULL);
    check(j.res.state == CV_RUN_SIGNALED && j.res.signal == SIGTERM && j.res.exit_code == -1 && !j.res.timed_out,
          "kill -TERM $$: expected SIGNALED 15, got %s", res_str(&j.res));

    run(&j, "missing command", (const char *[]){"cvisor-no-such-command-xyz", "a", NULL}, NULL);
    check(j.res.state == CV_RUN_EXEC_FAILED && j.res.exec_errno == ENOENT,
          "missing command: expected EXEC_FAILED ENOENT, got %s", res_str(&j.res));

    char noexec[64];
    snprintf(noexec, sizeof noexec, "/tmp/cvisor-test-noexec-%d", (int)me);
    int fd = open(noexec, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, "#!/bin/sh\nexit 0\n", 17) != 17) check(0, "write %s", noexec);
        close(fd);
        run(&j, "non-executable", (const char *[]){noexec, NULL}, NULL);
        check(j.res.state == CV_RUN_EXEC_FAILED && j.res.exec_errno == EACCES,
              "non-executable file: expected EXEC_FAILED EACCES, got %s", res_str(&j.res));
        unlink(noexec);
    } else {
        check(0, "create %s: %s", noexec, strerror(errno));
    }

    /* The library keeps its copies of the stdio fds until cv_run_free (not
     * documented in cvisor.h; src/sandbox/sandbox.ts frees before waiting for
     * the captured pipes), so EOF is only required after cv_run_free, which
     * job_finish checks. Everything written is readable once done. */
    run(&j, "echo hello", (const char *[]){"echo", "hello", NULL}, NULL);
    want_exit(&j, 0);
    check(j.outlen == 6 && !memcmp(j.outbuf, "hello\n", 6) && j.errlen == 0,
          "echo hello: stdout \"%s\" (%zu bytes), stderr \"%s\"", j.outbuf, j.outlen, j.errbuf);

    /* exactly the given environment; stdin -1 is /dev/null */
    run(&j, "env", (const char *[]){"/usr/bin/env", NULL}, NULL);
    want_exit(&j, 0);
    check(!strcmp(j.outbuf, "PATH=/usr/bin:/bin\n"), "env: guest environment is \"%s\"", j.outbuf);
    run(&j, "cat < /dev/null", (const char *[]){"cat", NULL}, NULL);
    want_exit(&j, 0);
    check(j.outlen == 0, "cat with stdin -1: read \"%s\"", j.outbuf);

    /* cwd */
    run(&j, "pwd in /usr", (const char *[]){"/bin/pwd", NULL}, &(struct opts){.cwd = "/usr"});
    want_exit(&j, 0);
    check(!strcmp(j.outbuf, "/usr\n"), "pwd with cwd /usr: \"%s\"", j.outbuf);
    run(&j, "bad cwd", (const char *[]){"/bin/true", NULL}, &(struct opts){.cwd = "/nonexistent-cvisor-dir"});
    check(j.res.state == CV_RUN_FAILED && j.res.error == CV_ERR_CWD && j.res.message[0],
          "bad cwd: expected FAILED CV_ERR_CWD with a message, got %s", res_str(&j.res));
}

static void test_confinement(void) {
    static struct job j;
    char path[64], cmd[128];
    snprintf(path, sizeof path, "/tmp/cvisor-test-%d-write", (int)me);
    unlink(path);
    snprintf(cmd, sizeof cmd, "echo x > %s", path);
    run(&j, "write to /tmp", (const char *[]){"sh", "-c", cmd, NULL}, NULL);
    struct stat st;
    check(lstat(path, &st) < 0 && errno == ENOENT, "write to /tmp: %s exists afterwards", path);
    check(j.res.state == CV_RUN_EXITED && j.res.exit_code != 0, "write to /tmp: expected a failed exit, got %s",
          res_str(&j.res));
    check(strstr(j.errbuf, "Read-only") != NULL, "write to /tmp: stderr does not say Read-only: \"%s\"",
          j.errbuf);
    unlink(path);

    snprintf(path, sizeof path, "/tmp/cvisor-test-%d-mkdir", (int)me);
    run(&j, "mkdir in /tmp", (const char *[]){"mkdir", path, NULL}, NULL);
    check(lstat(path, &st) < 0 && j.res.state == CV_RUN_EXITED && j.res.exit_code != 0 &&
              strstr(j.errbuf, "Read-only"),
          "mkdir in /tmp: %s; stderr \"%s\"", res_str(&j.res), j.errbuf);
    rmdir(path);

    run(&j, "cat /proc/1/environ", (const char *[]){"cat", "/proc/1/environ", NULL}, NULL);
    check(j.res.state == CV_RUN_EXITED && j.res.exit_code != 0 && j.outlen == 0,
          "cat /proc/1/environ: expected failure and no output, got %s, %zu bytes", res_str(&j.res), j.outlen);

    run(&j, "cat /proc/self/status", (const char *[]){"cat", "/proc/self/status", NULL}, NULL);
    want_exit(&j, 0);
    check(strstr(j.outbuf, "Name:\tcat\n") != NULL, "cat /proc/self/status: unexpected output \"%.100s\"",
          j.outbuf);

    /* A missing /proc/self entry is missing, as in the kernel (not hidden). */
    run(&j, "cat /proc/self/nonexistent", (const char *[]){"cat", "/proc/self/nonexistent", NULL}, NULL);
    check(j.res.state == CV_RUN_EXITED && j.res.exit_code != 0 && strstr(j.errbuf, "No such file"),
          "cat /proc/self/nonexistent: expected ENOENT, got %s; stderr \"%s\"", res_str(&j.res), j.errbuf);
}

/* Hidden paths: neither a hidden directory's files nor a hidden file can be read, by any
 * spelling; everything next to them can; and a path that appears later stays hidden. */
static void test_hidden(void) {
    static struct job j;
    char dir[64], secret_dir[96], secret_file[96], inside[128], beside[96], later[96], via[160];
    snprintf(dir, sizeof dir, "/tmp/cvisor-test-%d-hide", (int)me);
    snprintf(secret_dir, sizeof secret_dir, "%s/creds", dir);
    snprintf(secret_file, sizeof secret_file, "%s/token", dir);
    snprintf(inside, sizeof inside, "%s/key", secret_dir);
    snprintf(beside, sizeof beside, "%s/visible", dir);
    snprintf(later, sizeof later, "%s/later", dir);
    snprintf(via, sizeof via, "/proc/self/root%s/../creds/key", secret_dir);
    mkdir(dir, 0755);
    mkdir(secret_dir, 0755);
    const char *files[][2] = {{inside, "SECRET-KEY\n"}, {secret_file, "SECRET-TOKEN\n"}, {beside, "visible\n"}};
    for (size_t i = 0; i < 3; i++) {
        FILE *f = fopen(files[i][0], "w");
        if (f) fputs(files[i][1], f), fclose(f);
    }
    struct opts o = {.hide = {secret_dir, secret_file, later}};
    run(&j, "hidden dir", (const char *[]){"cat", inside, NULL}, &o);
    check(j.res.exit_code != 0 && !strstr(j.outbuf, "SECRET"), "hidden dir: read %s: %s \"%s\"", inside,
          res_str(&j.res), j.outbuf);
    run(&j, "hidden dir via /proc/self/root", (const char *[]){"cat", via, NULL}, &o);
    check(j.res.exit_code != 0 && !strstr(j.outbuf, "SECRET"), "hidden via %s: %s \"%s\"", via,
          res_str(&j.res), j.outbuf);
    run(&j, "hidden file", (const char *[]){"cat", secret_file, NULL}, &o);
    check(j.res.exit_code != 0 && !strstr(j.outbuf, "SECRET"), "hidden file: %s \"%s\"", res_str(&j.res),
          j.outbuf);
    run(&j, "beside hidden", (const char *[]){"cat", beside, NULL}, &o);
    check(j.res.exit_code == 0 && !strcmp(j.outbuf, "visible\n"), "next to hidden: %s \"%s\"",
          res_str(&j.res), j.outbuf);
    /* Created after the ruleset was built, under a directory that shaped it. */
    FILE *f = fopen(later, "w");
    if (f) fputs("SECRET-LATER\n", f), fclose(f);
    run(&j, "hidden later", (const char *[]){"cat", later, NULL}, &o);
    check(j.res.exit_code != 0 && !strstr(j.outbuf, "SECRET"), "hidden, created later: %s \"%s\"",
          res_str(&j.res), j.outbuf);
    run(&j, "not hidden", (const char *[]){"cat", inside, NULL}, NULL);
    check(j.res.exit_code == 0 && strstr(j.outbuf, "SECRET-KEY"), "without the hide list: %s \"%s\"",
          res_str(&j.res), j.outbuf);
    unlink(inside), unlink(secret_file), unlink(beside), unlink(later), rmdir(secret_dir), rmdir(dir);
}

static void test_timeouts(void) {
    static struct job j;
    run(&j, "timeout sleep 5", (const char *[]){"sleep", "5", NULL}, &(struct opts){.timeout_ms = 300});
    check(j.res.state == CV_RUN_SIGNALED && j.res.signal == SIGKILL && j.res.timed_out && !j.res.killed,
          "timeout 300 ms on sleep 5: expected timed_out SIGNALED 9, got %s", res_str(&j.res));
    check(j.res.duration_ms >= 290 && j.res.duration_ms < 3000, "timeout 300 ms on sleep 5: duration %.0f ms",
          j.res.duration_ms);

    /* A setsid daemon left behind by the timeout must die with the tree. */
    char marker[32], cmd[128];
    snprintf(marker, sizeof marker, "sleep 31.%05d", (int)me % 100000);
    snprintf(cmd, sizeof cmd, "setsid %s & sleep 30", marker);
    run(&j, "timeout setsid", (const char *[]){"sh", "-c", cmd, NULL},
        &(struct opts){.timeout_ms = 800, .watch = marker});
    check(j.watch_seen, "timeout setsid: the daemon '%s' was never seen running", marker);
    check(j.res.timed_out && j.res.state == CV_RUN_SIGNALED && j.res.signal == SIGKILL,
          "timeout setsid: expected timed_out SIGNALED 9, got %s", res_str(&j.res));
    pid_t left = find_marker(marker);
    if (left) {
        sleep_ms(500);
        pid_t later = find_marker(marker);
        check(0, "timeout setsid: pid %d ('%s') alive after done%s", (int)left, marker,
              later ? " and 500 ms later" : " (gone 500 ms later)");
        if (later) kill(later, SIGKILL);
    } else {
        passed++;
    }

    /* The main process exits, a setsid daemon is left: it must not survive the run. */
    snprintf(marker, sizeof marker, "sleep 32.%05d", (int)me % 100000);
    snprintf(cmd, sizeof cmd, "setsid %s & sleep 0.3", marker);
    run(&j, "daemon left behind", (const char *[]){"sh", "-c", cmd, NULL}, &(struct opts){.watch = marker});
    want_exit(&j, 0);
    check(j.watch_seen, "daemon left behind: '%s' was never seen running", marker);
    left = find_marker(marker);
    check(!left, "daemon left behind: pid %d ('%s') survives the run", (int)left, marker);
    if (left) kill(left, SIGKILL);
}

static void test_kill_and_state(void) {
    static struct job j;
    int rc = job_start(&j, "kill sleep 30", (const char *[]){"sleep", "30", NULL}, NULL);
    check(rc == 0, "kill: cv_run_start returned %d", rc);
    if (rc == 0) {
        cv_run_result res;
        check(cv_run_get_result(j.r, &res) == CV_ERR_STATE, "get_result while running: not CV_ERR_STATE");
        check(cv_run_add_arg(j.r, "x") == CV_ERR_STATE, "add_arg after start: not CV_ERR_STATE");
        check(cv_run_add_env(j.r, "A=b") == CV_ERR_STATE, "add_env after start: not CV_ERR_STATE");
        check(cv_run_set_cwd(j.r, "/") == CV_ERR_STATE, "set_cwd after start: not CV_ERR_STATE");
        check(cv_run_set_stdio(j.r, -1, -1, -1) == CV_ERR_STATE, "set_stdio after start: not CV_ERR_STATE");
        check(cv_run_set_network(j.r, CV_NET_DENY) == CV_ERR_STATE, "set_network after start: not CV_ERR_STATE");
        check(cv_run_set_allow_listen(j.r, 1) == CV_ERR_STATE, "set_allow_listen after start: not CV_ERR_STATE");
        check(cv_run_set_timeout_ms(j.r, 5) == CV_ERR_STATE, "set_timeout_ms after start: not CV_ERR_STATE");
        check(cv_run_set_hostname(j.r, "h") == CV_ERR_STATE, "set_hostname after start: not CV_ERR_STATE");
        int d2 = -1;
        check(cv_run_start(j.r, &d2) == CV_ERR_STATE && d2 == -1, "second cv_run_start: not CV_ERR_STATE");
        j.o.kill_after_ms = 300;
        jobs_pump(&j, 1);
    }
    job_finish(&j);
    check(j.res.state == CV_RUN_SIGNALED && j.res.signal == SIGKILL && j.res.killed && !j.res.timed_out,
          "cv_run_kill on sleep 30: expected killed SIGNALED 9, got %s", res_str(&j.res));
    check(j.res.duration_ms < 3000, "cv_run_kill on sleep 30: took %.0f ms", j.res.duration_ms);

    /* cv_run_free on a running run kills it: the done fd still reaches EOF. */
    char marker[32];
    snprintf(marker, sizeof marker, "33.%05d", (int)me % 100000);
    int done = -1;
    cv_run *r = cv_run_new(helper);
    cv_run_add_arg(r, "sleep");
    cv_run_add_arg(r, marker);
    cv_run_add_env(r, "PATH=/usr/bin:/bin");
    rc = cv_run_start(r, &done);
    check(rc == 0, "free while running: cv_run_start returned %d", rc);
    double t0 = now_ms();
    while (rc == 0 && !find_marker(marker) && now_ms() - t0 < 3000) sleep_ms(10);
    cv_run_free(r);
    if (rc == 0) {
        int eof = 0;
        while (!eof && now_ms() - t0 < 5000) {
            struct pollfd pf = {done, POLLIN, 0};
            char c;
            if (poll(&pf, 1, 100) > 0 && read(done, &c, 1) == 0) eof = 1;
        }
        check(eof, "free while running: the done fd did not reach EOF");
        char full[48];
        snprintf(full, sizeof full, "sleep %s", marker);
        pid_t left = find_marker(full);
        check(!left, "free while running: pid %d ('%s') survives", (int)left, full);
        if (left) kill(left, SIGKILL);
        close(done);
    }

    /* argument errors */
    r = cv_run_new(helper);
    check(r != NULL, "cv_run_new failed");
    done = -1;
    check(cv_run_start(r, &done) == CV_ERR_INVALID && done == -1, "cv_run_start without args: not CV_ERR_INVALID");
    cv_run_add_arg(r, "true");
    check(cv_run_start(r, NULL) == CV_ERR_INVALID, "cv_run_start(NULL done_fd): not CV_ERR_INVALID");
    check(cv_run_add_env(r, "NOEQUALS") == CV_ERR_INVALID, "add_env without '=': not CV_ERR_INVALID");
    check(cv_run_add_arg(r, NULL) == CV_ERR_INVALID, "add_arg(NULL): not CV_ERR_INVALID");
    check(cv_run_set_network(r, 7) == CV_ERR_INVALID, "set_network(7): not CV_ERR_INVALID");
    cv_run_result res;
    check(cv_run_get_result(r, &res) == CV_ERR_STATE, "get_result before start: not CV_ERR_STATE");
    check(cv_run_kill(r) == 0, "cv_run_kill before start failed");
    check(cv_run_stats_json(r, NULL, 0) == 2, "stats of an unstarted run: not {}");
    char small[4] = "zzz";
    check(cv_run_stats_json(r, small, 2) == 2 && small[0] == '{' && small[1] == 0,
          "stats_json truncation: \"%s\"", small);
    cv_run_free(r);
    check(cv_run_new(NULL) == NULL, "cv_run_new(NULL) is not NULL");
    check(cv_run_add_arg(NULL, "x") == CV_ERR_INVALID && cv_run_kill(NULL) == CV_ERR_INVALID &&
              cv_run_get_result(NULL, &res) == CV_ERR_INVALID && cv_run_stats_json(NULL, NULL, 0) == CV_ERR_INVALID,
          "NULL run: not CV_ERR_INVALID");
    cv_run_free(NULL);
    check(cv_pipe(NULL) == CV_ERR_INVALID, "cv_pipe(NULL): not CV_ERR_INVALID");
    check(cv_abi_version() == CV_ABI_VERSION, "cv_abi_version %d", cv_abi_version());
    check(!strcmp(cv_strerror(CV_ERR_HELPER), "CV_ERR_HELPER") && strlen(cv_strerror(-ENOENT)) > 0,
          "cv_strerror");

    /* a bad helper */
    static struct job b;
    run(&b, "bad helper", (const char *[]){"/bin/true", NULL}, &(struct opts){.helper = "/nonexistent/cvisor-helper"});
    check(b.res.state == CV_RUN_FAILED && b.res.error == CV_ERR_HELPER && b.res.message[0] != 0,
          "bad helper: expected FAILED CV_ERR_HELPER with a message, got %s", res_str(&b.res));
    /* not executable (0644); executable but not a program (ENOEXEC); a script
     * that exits before the handshake */
    static const struct { const char *name, *text; mode_t mode; int err; } bad[] = {
        {"helper not executable", "#!/bin/sh\nexit 0\n", 0644, CV_ERR_HELPER},
        {"helper not a program", "not a program\n", 0755, CV_ERR_SPAWN},
        {"helper exits early", "#!/bin/sh\nexit 0\n", 0755, CV_ERR_HANDSHAKE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/cvisor-test-%d-helper%zu", (int)me, i);
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, bad[i].mode);
        if (fd < 0 || write(fd, bad[i].text, strlen(bad[i].text)) != (ssize_t)strlen(bad[i].text) ||
            fchmod(fd, bad[i].mode) < 0) {
            check(0, "%s: cannot create %s: %s", bad[i].name, path, strerror(errno));
            if (fd >= 0) close(fd);
            continue;
        }
        close(fd);
        run(&b, bad[i].name, (const char *[]){"/bin/true", NULL}, &(struct opts){.helper = path});
        check(b.res.state == CV_RUN_FAILED && b.res.error == bad[i].err && b.res.message[0] != 0,
              "%s: expected FAILED %s with a message, got %s", bad[i].name, cv_strerror(bad[i].err),
              res_str(&b.res));
        unlink(path);
    }
}

static void *send_signal_later(void *arg) {
    int sig = *(int *)arg;
    sleep_ms(150);
    kill(me, sig);
    return NULL;
}

/* cv_run_wait_forwarding: SIGTERM kills the run; SIGINT does too unless interactive. */
static void forwarding_case(int sig, int interactive, const char *sleep_arg, int want_killed) {
    cv_run *r = cv_run_new(helper);
    cv_run_add_arg(r, "sleep");
    cv_run_add_arg(r, sleep_arg);
    cv_run_add_env(r, "PATH=/usr/bin:/bin");
    int done = -1;
    int rc = cv_run_start(r, &done);
    check(rc == 0, "forwarding: cv_run_start returned %d", rc);
    if (rc) { cv_run_free(r); return; }
    close(done);
    pthread_t t;
    pthread_create(&t, NULL, send_signal_later, &sig);
    double t0 = now_ms();
    int got = cv_run_wait_forwarding(r, interactive);
    pthread_join(t, NULL);
    cv_run_result res;
    check(cv_run_get_result(r, &res) == 0, "forwarding: no result after the wait");
    if (want_killed) {
        check(got == sig && res.killed && res.state == CV_RUN_SIGNALED && now_ms() - t0 < 3000,
              "forwarding sig %d: expected the run killed and %d returned, got %d, %s", sig, sig, got,
              res_str(&res));
    } else {
        check(got == 0 && !res.killed && res.state == CV_RUN_EXITED && res.exit_code == 0,
              "forwarding sig %d interactive: expected the guest to finish, got %d, %s", sig, got, res_str(&res));
    }
    struct sigaction now;
    sigaction(sig, NULL, &now);
    check(now.sa_handler == SIG_IGN, "forwarding sig %d: the previous handler was not restored", sig);
    cv_run_free(r);
}

static void test_forwarding(void) {
    /* The process ignores the signals outside the wait, so a stray one cannot kill the test. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    forwarding_case(SIGTERM, 0, "30", 1);
    forwarding_case(SIGINT, 0, "30", 1);
    forwarding_case(SIGINT, 1, "0.6", 0);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
}

static void test_concurrent(void) {
    static struct job js[CONCURRENT];
    char args[CONCURRENT][16];
    for (int i = 0; i < CONCURRENT; i++) {
        snprintf(args[i], sizeof args[i], "%d", i);
        int rc = job_start(&js[i], "concurrent",
                           (const char *[]){"sh", "-c", "echo \"r$1\"; exit $(($1 % 7))", "sh", args[i], NULL}, NULL);
        check(rc == 0, "concurrent %d: cv_run_start returned %d", i, rc);
    }
    jobs_pump(js, CONCURRENT);
    for (int i = 0; i < CONCURRENT; i++) {
        job_finish(&js[i]);
        char want[16];
        snprintf(want, sizeof want, "r%d\n", i);
        int ok = js[i].res.state == CV_RUN_EXITED && js[i].res.exit_code == i % 7 && !strcmp(js[i].outbuf, want);
        check(ok, "concurrent %d: expected EXITED %d and \"r%d\", got %s, stdout \"%s\", stderr \"%.200s\"", i, i % 7,
              i, res_str(&js[i].res), js[i].outbuf, js[i].errbuf);
    }
}

/* The end note: sent once, when the done fd reaches EOF, never before; the run's dup goes with it. */
static void test_end_note(void) {
    int sv[2];
    check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "end note: socketpair");
    const uint64_t token = 0x1122334455667788ull;
    cv_run *r = cv_run_new(helper);
    cv_run_add_arg(r, "sleep");
    cv_run_add_arg(r, "0.3");
    cv_run_add_env(r, "PATH=/usr/bin:/bin");
    check(cv_run_set_end_note(r, -1, token) == CV_ERR_INVALID, "end note: fd -1 taken");
    check(cv_run_set_end_note(r, sv[1], token) == 0, "end note: not taken");
    check(cv_run_set_end_note(r, sv[1], token) == CV_ERR_INVALID, "end note: a second one taken");
    close(sv[1]); /* the run holds its own dup */
    int done = -1, rc = cv_run_start(r, &done);
    check(rc == 0, "end note: cv_run_start returned %d", rc);
    check(cv_run_set_end_note(r, sv[0], 1) == CV_ERR_STATE, "end note: set after start");
    uint64_t got = 0;
    check(recv(sv[0], &got, sizeof got, MSG_DONTWAIT) < 0 && errno == EAGAIN, "end note: sent while running");
    char c;
    double t0 = now_ms();
    while (rc == 0 && now_ms() - t0 < RUN_GUARD_MS) {
        struct pollfd pf = {done, POLLIN, 0};
        if (poll(&pf, 1, 100) > 0 && read(done, &c, 1) == 0) break;
    }
    struct pollfd pn = {sv[0], POLLIN, 0};
    check(poll(&pn, 1, 5000) == 1 && recv(sv[0], &got, sizeof got, MSG_WAITALL) == (ssize_t)sizeof got &&
              got == token, "end note: got %llx after the done fd's EOF", (unsigned long long)got);
    cv_run_free(r);
    check(poll(&pn, 1, 5000) == 1 && recv(sv[0], &got, sizeof got, 0) == 0, "end note: the run kept its dup");
    close(sv[0]);
    if (done >= 0) close(done);
}

static void test_probe(void) {
    cv_probe_result p;
    int rc = cv_probe(helper, &p);
    check(rc == 0 && p.helper_ok, "cv_probe: rc %d helper_ok %d helper_errno %d", rc, p.helper_ok, p.helper_errno);
    check(p.seccomp_unotify == 1, "cv_probe: seccomp_unotify %d (errno %d)", p.seccomp_unotify, p.seccomp_errno);
    check(p.addfd_send == 1, "cv_probe: addfd_send %d (errno %d)", p.addfd_send, p.addfd_errno);
    check(p.pidfd_getfd == 1, "cv_probe: pidfd_getfd %d (errno %d)", p.pidfd_getfd, p.pidfd_errno);
    check(p.pidfd_open == 1, "cv_probe: pidfd_open %d (errno %d)", p.pidfd_open, p.pidfd_errno);
    check(p.landlock_abi > 0, "cv_probe: landlock_abi %d (errno %d)", p.landlock_abi, p.landlock_errno);
    rc = cv_probe("/nonexistent/cvisor-helper", &p);
    check(rc == 0 && !p.helper_ok && p.helper_errno == ENOENT, "cv_probe of a missing helper: rc %d ok %d errno %d",
          rc, p.helper_ok, p.helper_errno);
    check(cv_probe(NULL, &p) == CV_ERR_INVALID, "cv_probe(NULL): not CV_ERR_INVALID");
}

/* Docker's default seccomp profile refuses pidfd_getfd without CAP_SYS_PTRACE: the probe must
 * then say so, not hang. A child of this test installs such a filter (EPERM for pidfd_getfd;
 * the helper inherits it) and probes; this process waits for it, at most RUN_GUARD_MS. */
static void test_probe_without_pidfd_getfd(void) {
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0); /* a hang is killed whole: the helper's processes too */
        struct sock_filter code[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_pidfd_getfd, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) _exit(2);
        cv_probe_result p;
        int rc = cv_probe(helper, &p);
        _exit(rc == 0 && p.helper_ok && !p.pidfd_getfd && p.pidfd_errno == EPERM && !p.seccomp_unotify ? 0 : 3);
    }
    int st = 0;
    long waited = 0;
    while (waitpid(pid, &st, WNOHANG) == 0 && waited < RUN_GUARD_MS) {
        usleep(10000);
        waited += 10;
    }
    if (waited >= RUN_GUARD_MS) {
        kill(-pid, SIGKILL);
        waitpid(pid, &st, 0);
        check(0, "cv_probe without pidfd_getfd: hung for %d ms", RUN_GUARD_MS);
        return;
    }
    check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cv_probe without pidfd_getfd: child status 0x%x", st);
}

static int find_helper(void) {
    const char *env = getenv("CVISOR_HELPER");
    if (env && *env) {
        snprintf(helper, sizeof helper, "%s", env);
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return -1;
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (!slash) return -1;
        *slash = 0;
        if (snprintf(helper, sizeof helper, "%s/../cvisor-helper", exe) >= (int)sizeof helper) return -1;
    }
    return access(helper, X_OK);
}

int main(void) {
    me = getpid();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (find_helper() < 0) {
        printf("FAIL cvisor-helper not found at %s (make all; or set CVISOR_HELPER)\nrun: 0 passed, 1 failed\n",
               helper);
        return 1;
    }
    double t0 = now_ms();
    test_basic();
    test_forwarding();
    /* The library keeps fds for the life of the process (the cached Landlock
     * ruleset, the forwarding wait's self-pipe, the hide list's directories): count
     * from after the first runs, once their receiver threads have let go of theirs. */
    sleep_ms(300);
    int fds0 = count_fds() - (int)cv_hide_cached_fds();
    test_confinement();
    test_hidden();
    test_timeouts();
    test_kill_and_state();
    test_concurrent();
    test_end_note();
    test_probe();
    test_probe_without_pidfd_getfd();
    /* Every fd the runs opened is closed (the library's last ones may go on its thread). */
    int fds1 = count_fds() - (int)cv_hide_cached_fds();
    for (int i = 0; i < 100 && fds1 != fds0; i++) {
        sleep_ms(20);
        fds1 = count_fds() - (int)cv_hide_cached_fds();
    }
    check(fds1 == fds0, "fd leak: %d open fds after the first runs, %d at the end", fds0, fds1);
    printf("run: %.1f s\n", (now_ms() - t0) / 1e3);
    printf("run: %lu passed, %lu failed\n", passed, failed);
    return failed ? 1 : 0;
}
