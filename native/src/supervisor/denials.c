/* What the supervisor refused, for the run report: each distinct (syscall, target, why) once,
 * with a count; at most CV_MAX_DENIALS distinct ones are kept. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "filter/table.h"
#include "run.h"

#define CV_MAX_DENIALS 256

/* The process a thread belongs to, and its name, from /proc/<tid>/status. */
static void who(pid_t tid, struct cv_denial *d) {
    d->pid = 0;
    d->comm[0] = 0;
    char path[32], buf[512];
    snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
    FILE *f = tid > 0 ? fopen(path, "re") : NULL;
    if (!f) return;
    while (fgets(buf, sizeof buf, f)) {
        if (!strncmp(buf, "Name:\t", 6)) {
            size_t l = strcspn(buf + 6, "\n");
            if (l >= sizeof d->comm) l = sizeof d->comm - 1;
            memcpy(d->comm, buf + 6, l);
            d->comm[l] = 0;
        } else if (!strncmp(buf, "Tgid:\t", 6)) {
            d->pid = (pid_t)atoi(buf + 6);
            break;
        }
    }
    fclose(f);
}

void cv_run_deny(struct cv_run *r, int nr, pid_t tid, const char *target, const char *why) {
    pthread_mutex_lock(&r->deny_lock);
    for (size_t i = 0; i < r->ndeny; i++) {
        struct cv_denial *d = &r->denials[i];
        if (d->nr == nr && !strcmp(d->target, target) && !strcmp(d->why, why)) {
            d->count++;
            pthread_mutex_unlock(&r->deny_lock);
            return;
        }
    }
    if (r->ndeny >= CV_MAX_DENIALS) {
        pthread_mutex_unlock(&r->deny_lock);
        return;
    }
    if (r->ndeny == r->deny_cap) {
        size_t cap = r->deny_cap ? r->deny_cap * 2 : 8;
        struct cv_denial *nd = realloc(r->denials, cap * sizeof *nd);
        if (!nd) {
            pthread_mutex_unlock(&r->deny_lock);
            return;
        }
        r->denials = nd;
        r->deny_cap = cap;
    }
    struct cv_denial *d = &r->denials[r->ndeny];
    d->nr = nr;
    d->count = 1;
    who(tid, d);
    d->target = strdup(target);
    d->why = strdup(why);
    if (d->target && d->why) r->ndeny++;
    else {
        free(d->target);
        free(d->why);
    }
    pthread_mutex_unlock(&r->deny_lock);
}

void cv_run_denials_free(struct cv_run *r) {
    for (size_t i = 0; i < r->ndeny; i++) {
        free(r->denials[i].target);
        free(r->denials[i].why);
    }
    free(r->denials);
    r->denials = NULL;
    r->ndeny = r->deny_cap = 0;
}

/* A JSON string's contents: quotes, backslashes and control bytes escaped; other bytes as they
 * are (paths are bytes; the reader decodes them leniently). */
static size_t put_escaped(char *buf, size_t len, size_t at, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char tmp[8];
        const char *piece = tmp;
        if (*p == '"' || *p == '\\') snprintf(tmp, sizeof tmp, "\\%c", *p);
        else if (*p < 0x20) snprintf(tmp, sizeof tmp, "\\u%04x", *p);
        else tmp[0] = (char)*p, tmp[1] = 0;
        size_t l = strlen(piece);
        if (buf && at + l < len) memcpy(buf + at, piece, l);
        at += l;
    }
    return at;
}

static size_t put(char *buf, size_t len, size_t at, const char *s) {
    size_t l = strlen(s);
    if (buf && at + l < len) memcpy(buf + at, s, l);
    return at + l;
}

CV_API int cv_run_denials_json(cv_run *r, char *buf, size_t len) {
    if (!r) return CV_ERR_INVALID;
    pthread_mutex_lock(&r->deny_lock);
    size_t at = put(buf, len, 0, "[");
    for (size_t i = 0; i < r->ndeny; i++) {
        const struct cv_denial *d = &r->denials[i];
        const char *name = d->nr == CV_DENY_DNS ? "dns" : cv_syscall_name(d->nr);
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%s{\"syscall\":\"%s\",\"count\":%lu,\"target\":\"", i ? "," : "",
                 name ? name : "?", d->count);
        at = put(buf, len, at, tmp);
        at = put_escaped(buf, len, at, d->target);
        at = put(buf, len, at, "\",\"why\":\"");
        at = put_escaped(buf, len, at, d->why);
        if (d->pid > 0) {
            snprintf(tmp, sizeof tmp, "\",\"pid\":%d,\"process\":\"", (int)d->pid);
            at = put(buf, len, at, tmp);
            at = put_escaped(buf, len, at, d->comm);
        }
        at = put(buf, len, at, "\"}");
    }
    at = put(buf, len, at, "]");
    pthread_mutex_unlock(&r->deny_lock);
    if (buf && len) buf[at < len ? at : len - 1] = 0;
    return (int)at;
}
