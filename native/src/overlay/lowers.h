/* The read-only layers under the upper (a sandbox's snapshot chain, cv_run_add_lower).
 *
 * A layer is a frozen former upper: the store never changes it once it is a layer, and it is
 * hidden from every guest. So each of its directories is listed once per run and the listing
 * kept: looking a name up in a chain of layers costs a hash probe per layer instead of two
 * system calls, and a path whose directories were all proven real directories of an immutable
 * tree can be used relative to the layer's root (no symlink can appear on the way). */
#ifndef CV_LOWERS_H
#define CV_LOWERS_H

#include <sys/stat.h>

#include "supervisor/run.h"

enum cv_lfind { CV_LMISS = 0, CV_LFOUND = 1, CV_LWHITEOUT = 2 };

/* Look name up in layer i's directory vdir (a directory the walk found there). CV_LFOUND with
 * *dtype (DT_DIR, DT_REG, ...), CV_LWHITEOUT when the layer deletes the name, else CV_LMISS
 * (also when the directory cannot be read: nothing of it shows). */
int cv_lower_find(struct cv_run *r, int i, const char *vdir, const char *name, unsigned char *dtype);

/* Layer i's directory vdir holds the opaque marker. */
int cv_lower_opaque(struct cv_run *r, int i, const char *vdir);

/* Open vpath in layer i (flags as openat; O_NOFOLLOW and O_CLOEXEC added), never following a
 * symlink on the way. fd or -errno. */
int cv_lower_open(const struct cv_run *r, int i, const char *vpath, int flags);

/* lstat of vpath in layer i. 0 or -errno. */
int cv_lower_lstat(const struct cv_run *r, int i, const char *vpath, struct stat *st);

/* The run's listing cache: made when the first layer is added. 0 or -ENOMEM. */
int cv_lower_cache_new(struct cv_run *r);
/* Forget every listing (the run ends). */
void cv_lower_cache_free(struct cv_run *r);

#endif
