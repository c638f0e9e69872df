/* Directories a rename brought up from the host or a read-only layer. The kernel's cwds and fds
 * of such a directory still name it by its old real path, which the view no longer shows (a
 * whiteout hides it); on the host, and in kernel overlayfs, they follow the directory to its new
 * name. Each one's copy in the upper is kept open, so wherever it is renamed since, the old real
 * path maps to where the copy is now. */
#ifndef CV_MOVED_H
#define CV_MOVED_H

#include <stddef.h>

#include "supervisor/run.h"

/* The directory at virtual path `from` (shown from the host or a read-only layer) now lives at
 * `upfd` in the upper (an fd of it, duplicated here). 0 or -errno. */
int cv_moved_note(struct cv_run *r, const char *from, int upfd);

/* A real path of the host or of a read-only layer inside a moved directory: 1 with the real path
 * of the same name inside its copy in `out`; 0 when the path is not inside one; -ENOENT when the
 * copy was removed since, -ENAMETOOLONG. */
int cv_moved_real(const struct cv_run *r, const char *real, char *out, size_t len);

void cv_moved_free(struct cv_run *r);

#endif
