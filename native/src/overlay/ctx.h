/* Who a path is resolved for: the run's layers, and the guest whose relative paths and
 * /proc/self they are. The overlay knows guests only through this (never the handlers). */
#ifndef CV_OVERLAY_CTX_H
#define CV_OVERLAY_CTX_H

#include <stddef.h>

struct cv_run;
struct cv_guest;
struct cv_lpath;

struct cv_vctx {
    struct cv_run *run;
    struct cv_guest *guest;
    int nr; /* the syscall resolving (for the run's report of refusals), or -1 */
    /* The guest's remembered working directory, where the kernel's cwd cannot be (a directory
     * only the upper has, kept by handlers/cwd.c): 1 and out set (and *fd, an O_PATH fd of
     * it or -1, when fd is not NULL), else 0. NULL: the kernel's cwd is the guest's. */
    int (*cwd)(const struct cv_vctx *c, struct cv_lpath *out, int *fd);
};

#endif
