/* The read-only layers under the upper (a sandbox's snapshot chain, cv_run_add_lower).
 *
 * A layer is a frozen former upper: the store never changes it once it is a layer, and it is
 * hidden from every guest. So each directory is listed once per run in every layer and the
 * listings merged and kept: looking a name up in a chain of layers costs one hash probe and one
 * binary search, whatever the chain's length, instead of two system calls per layer, and a path whose directories were all proven real directories of an immutable
 * tree can be used relative to the layer's root (no symlink can appear on the way). */
#ifndef CV_LOWERS_H
#define CV_LOWERS_H

#include <sys/stat.h>

#include "supervisor/run.h"

/* What the layers hold under one name of a directory: bit i for the run's layer i (top first). */
struct cv_lnames {
    uint64_t has; /* an entry */
    uint64_t wh;  /* a whiteout: the layer deletes the name */
    uint64_t dir; /* the entry is a directory */
};

/* The layers' entries under name in the directory vdir (a symlink-free virtual path), over every
 * layer that has vdir as a directory; the caller masks out the layers that do not show there.
 * All zero when the directory cannot be read (nothing of it shows). */
void cv_lower_names(struct cv_run *r, const char *vdir, const char *name, struct cv_lnames *out);

/* The layers whose directory vdir holds the opaque marker. */
uint64_t cv_lower_opaque(struct cv_run *r, const char *vdir);

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
