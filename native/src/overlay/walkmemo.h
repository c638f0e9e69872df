/* Directories of the merged view the walk has already found, so that a walk into a deep
 * directory starts near it instead of at the root (a relative path in a deep cwd, "..", a
 * listing: each walked every component again, so `mkdir d; cd d`, repeated, cost the square of
 * the depth).
 *
 * Only directories that hold nothing of the host are kept: an upper directory with no host
 * twin, or one only the read-only layers have. An entry is what the walk found there: the
 * identity of its upper directory (or that it had none) and the read-only layers showing it;
 * a deep one may keep that directory open (cv_wmemo_put), for naming it by identity.
 * The walk (overlay/vfs.c) uses an entry only after opening the upper at that path again and
 * finding the same directory (or still none), so a directory another run of the sandbox
 * removed, renamed or made is walked afresh. The supervisor's own renames empty the memo, and
 * a directory it removes or gives an upper twin is forgotten with what lay below it. Host
 * directories are always walked, so a host change shows at once, as before. */
#ifndef CV_WALKMEMO_H
#define CV_WALKMEMO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/run.h"

struct cv_wmemo_dir {
    int has_up;        /* an upper directory, with this identity */
    dev_t dev;
    ino_t ino;
    uint64_t lmask;    /* the read-only layers whose directory shows here (bit i: layer i+1) */
};

/* The longest of vpath's own directories (vpath itself included, "/" excluded) the memo holds:
 * 1 with *len (its length in vpath) and *dir, else 0. Only the nearest CV_WMEMO_REACH are
 * looked at. */
int cv_wmemo_find(struct cv_run *r, const char *vpath, size_t *len, struct cv_wmemo_dir *dir);
#define CV_WMEMO_REACH 64

/* The path of an entry whose upper directory is dev/ino (a copy to free) and *dir, or NULL.
 * *pinned: the entry holds that directory open, so an equal dev/ino is that very directory (its
 * inode number cannot have been reused), wherever it is now. */
char *cv_wmemo_find_id(struct cv_run *r, dev_t dev, ino_t ino, struct cv_wmemo_dir *dir, int *pinned);

/* The memo holds vpath with the upper directory dev/ino: 1 and *dir, else 0. */
int cv_wmemo_holds(struct cv_run *r, const char *vpath, dev_t dev, ino_t ino, struct cv_wmemo_dir *dir);

/* Remember the directory at vpath[0..len) (absolute, symlink-free). fd: the upper directory, or
 * -1; a deep one (a path of CV_WMEMO_PIN_FROM bytes or more) with nothing below the upper showing
 * is kept open with it, at most CV_WMEMO_PINS of them (an fd each; the least recently used
 * gives its up), for cv_wmemo_find_id. */
void cv_wmemo_put(struct cv_run *r, const char *vpath, size_t len, const struct cv_wmemo_dir *dir, int fd);
#define CV_WMEMO_PIN_FROM 2048
#define CV_WMEMO_PINS 256

/* Forget vpath and every directory below it. */
void cv_wmemo_forget(struct cv_run *r, const char *vpath);
/* Forget everything. */
void cv_wmemo_clear(struct cv_run *r);
void cv_wmemo_free(struct cv_run *r);

#endif
