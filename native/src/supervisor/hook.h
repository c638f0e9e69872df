/* An embedder's per-syscall hook (cv_run_set_hook): the wire format and the call. */
#ifndef CV_HOOK_H
#define CV_HOOK_H

#include <stdint.h>

/* A hooked call, to the embedder (one message on the hook socket), then its strings. */
struct cv_hook_req {
    uint32_t len;          /* of the whole message, strings included */
    uint32_t nr;
    uint64_t seq;          /* the reply names it */
    int32_t tid, pid;      /* the calling thread and its process (0 when unknown) */
    uint64_t args[6];
    uint32_t policy;       /* enum cv_hook_policy: what cvisor does if the hook allows */
    int32_t policy_errno;  /* CV_HOOK_DENIED: the errno */
    uint32_t nstr;
    uint32_t reserved;
};

enum cv_hook_policy { CV_HOOK_NATIVE = 0, CV_HOOK_HANDLED = 1, CV_HOOK_DENIED = 2 };

/* A string of the call, as the supervisor read it from the guest. */
struct cv_hook_str {
    uint8_t what;          /* enum cv_hook_str_kind */
    uint8_t arg;           /* the argument it was read from */
    uint16_t reserved;
    uint32_t len;          /* bytes that follow (no NUL) */
};

/* CV_HOOK_RESOLVED follows the CV_HOOK_PATH of the same argument: the absolute, symlink-free
 * path in the sandbox's view that the call would act on (absent when it names nothing there). */
enum cv_hook_str_kind { CV_HOOK_PATH = 1, CV_HOOK_ARGV = 2, CV_HOOK_SOCKADDR = 3, CV_HOOK_RESOLVED = 4 };

/* The embedder's answer. */
struct cv_hook_reply {
    uint64_t seq;
    int32_t action;        /* CV_HOOK_ALLOW, CV_HOOK_DENY or CV_HOOK_RESULT */
    int32_t err;           /* CV_HOOK_DENY: the errno (EPERM when 0) */
    int64_t value;         /* CV_HOOK_RESULT: what the call returns (it is not made) */
};

enum { CV_HOOK_ALLOW = 0, CV_HOOK_DENY = 1, CV_HOOK_RESULT = 2 };

/* Which arguments of a syscall point to what: paths (a bit per argument), an argv array, a
 * socket address with its length; and how many arguments it takes (for the trace). */
struct cv_hook_strings { int nr; uint8_t paths; int8_t argv, addr, addrlen; uint8_t arity; };

/* The row of syscall nr, or NULL when none of its arguments is described. */
const struct cv_hook_strings *cv_hook_strings_of(int nr);

struct cv_run;
/* One trace line for a described call (req, then its strings) and the reply it got
 * (enum cv_reply_kind, errno, value), written whole to the run's trace fd. */
void cv_trace_line(struct cv_run *r, const struct cv_hook_req *req, const char *strs,
                   size_t strs_len, int kind, int err, int64_t val);

#endif
