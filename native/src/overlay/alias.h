/* Hard links of host files. link(2) of a host (or read-only layer) file copies it up and links
 * the copy, but a hard link is one file under two names, and programs check that it is: a
 * local `git clone` links every object and compares the new name's st_dev/st_ino with the
 * source's, taken before the link. So for the rest of the run the copy stands for the file it
 * was made from: its names answer stat with that file's identity (and the copy's link count),
 * and read-only opens open that file, so fstat agrees with stat (cp compares the two). The
 * first change of the copy's data or metadata ends the alias: from then on the copy answers for
 * itself, as after any copy-up. The copy holds the data from the start, so nothing is lost if
 * the run dies; the table lives in the supervisor only, and the next run sees a plain copy.
 *
 * The table holds no fds. An entry names the copy by dev/ino and the ctime this run's own link,
 * unlink and rename calls left it with: a copy changed by anything else, or an inode number
 * reused by a new file, no longer matches, and answers for itself. The source is named by its
 * real path and checked to be the same dev/ino at each use. Used by the one receiver thread,
 * like the rest of the resolver's run state. */
#ifndef CV_ALIAS_H
#define CV_ALIAS_H

#include <sys/stat.h>

#include "supervisor/run.h"

/* The upper file whose lstat is `copy` was just copied from `srcfd` (O_PATH) and linked. */
int cv_alias_note(struct cv_run *r, int srcfd, const struct stat *copy);

/* This run changed the names of the upper file dev/ino (a link, an unlink, a rename); `now` is
 * its stat after (a link count of 0: it is gone). */
void cv_alias_relinked(struct cv_run *r, dev_t dev, ino_t ino, const struct stat *now);

/* An upper file's lstat as the guest sees it: for an alias, its source's, with the copy's link
 * count. 1 when `st` was changed. */
int cv_alias_stat(const struct cv_run *r, struct stat *st);

/* Open the source of the alias dev/ino (the copy's), flags as for open(2), read-only. -ENOENT
 * when it is no alias (any more). */
int cv_alias_open(const struct cv_run *r, dev_t dev, ino_t ino, int flags);

/* End the alias of the copy dev/ino before its data or metadata changes: 1 (with the source's
 * stat in `was`, for the fds that follow it to the copy) or 0 when it was none. */
int cv_alias_drop(struct cv_run *r, dev_t dev, ino_t ino, struct stat *was);

void cv_alias_free(struct cv_run *r);

#endif
