/* uname: the guest sees the sandbox's name as its nodename (and nothing else changes).
 * The answer is written into the guest's buffer by the supervisor. */
#include <errno.h>
#include <string.h>
#include <sys/utsname.h>

#include "handlers.h"

const char *cv_run_hostname(const struct cv_run *r) { return r->hostname ? r->hostname : "cvisor"; }

struct cv_reply cv_h_identity(struct cv_notif *n) {
    struct utsname u;
    if (uname(&u) < 0) return cv_err(errno);
    memset(u.nodename, 0, sizeof u.nodename);
    strncpy(u.nodename, cv_run_hostname(n->run), sizeof u.nodename - 1);
    int e = cv_guest_write(&n->g, n->req->data.args[0], &u, sizeof u);
    if (e < 0) return cv_err(-e);
    return cv_val(0);
}
