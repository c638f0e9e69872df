/* Destinations a host-side service of the caller's grants while the run goes (cv_run_set_grant_fd):
 * the credential broker's name service adds the addresses an allowed name resolved to, before
 * the guest learns them. Read and applied on the receiver thread, the only one that reads the
 * rules, between two notifications: a connect decided after the answer sees the rule. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netrules.h"
#include "run.h"

#define CV_MAX_GRANTS 4096

static int same_rule(const struct cv_net_rule *a, const struct cv_net_rule *b) {
    return !a->divert && a->family == b->family && a->prefix == b->prefix && a->port_lo == b->port_lo &&
           a->port_hi == b->port_hi && !memcmp(a->addr, b->addr, sizeof a->addr);
}

/* "A ADDR LO HI": one address and a port range, never an address only a rule naming it may open
 * (loopback, link-local: a name looked up while the run goes must not open them). "D NAME [TID]":
 * a lookup the service refused, for the report. 1 when done, 0 when refused. */
static int apply(struct cv_run *r, char *line) {
    char addr[64];
    int lo, hi, used = 0;
    if (line[0] == 'D' && line[1] == ' ' && line[2]) {
        char *space = strchr(line + 2, ' '); /* "D NAME [TID]": who asked, as announced */
        pid_t tid = space ? (pid_t)atoi(space + 1) : 0;
        if (space) *space = 0;
        cv_run_deny(r, CV_DENY_DNS, tid, line + 2, "no --allow-net rule names it");
        return 1;
    }
    if (sscanf(line, "A %63s %d %d%n", addr, &lo, &hi, &used) != 3 || line[used]) return 0;
    struct cv_net_rule rule;
    if (cv_net_rule_make(&rule, addr, strchr(addr, ':') ? 128 : 32, lo, hi) < 0) return 0;
    if (rule.prefix != (rule.family == 4 ? 32 : 128) || cv_net_addr_named_only(rule.family, rule.addr)) return 0;
    for (size_t i = 0; i < r->nnet_rules; i++)
        if (same_rule(&r->net_rules[i], &rule)) return 1;
    if (r->ngranted >= CV_MAX_GRANTS) return 0;
    if (cv_run_add_rule(r, &rule) < 0) return 0;
    r->ngranted++;
    return 1;
}

int cv_grants_read(struct cv_run *r) {
    ssize_t got = read(r->grant_fd, r->grant_buf + r->grant_len, sizeof r->grant_buf - 1 - r->grant_len);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    if (got <= 0) return -1;
    r->grant_len += (size_t)got;
    r->grant_buf[r->grant_len] = 0;
    char *start = r->grant_buf, *nl;
    while ((nl = strchr(start, '\n'))) {
        *nl = 0;
        const char *answer = apply(r, start) ? "1\n" : "0\n";
        if (write(r->grant_fd, answer, 2) != 2) return -1; /* the service waits for each */
        start = nl + 1;
    }
    r->grant_len -= (size_t)(start - r->grant_buf);
    memmove(r->grant_buf, start, r->grant_len);
    if (r->grant_len == sizeof r->grant_buf - 1) return -1; /* a line this long is not ours */
    return 0;
}
