/* The upper layer on disk (docs/ARCHITECTURE.md, "The overlay on disk"):
 *  - the guest's files live at their virtual paths under the upper directory;
 *  - an entry `.wh.NAME` deletes NAME of the layers below (cvisor writes an empty regular
 *    file; any entry by that name counts, as for OCI readers);
 *  - a directory holding a regular file `.wh..wh..opq` is opaque: nothing below shows through;
 *  - every name starting with `.wh.` is reserved (the guest cannot create one);
 *  - new objects are made in the work directory and renamed into place, so a
 *    crash leaves either the old state or the new one, never half a file.
 * The same convention as OCI image layers, so a layer exports as it is. */
#ifndef CV_LAYERS_H
#define CV_LAYERS_H

#include <sys/stat.h>
#include <sys/types.h>

#include "supervisor/run.h"

#define CV_WH_PREFIX ".wh."
#define CV_OPAQUE_NAME ".wh..wh..opq"

struct cv_vnode;

int cv_ov_reserved(const char *name);
/* upper_dir holds a whiteout for name. */
int cv_ov_whited_out(int upper_dir, const char *name);
/* Record / forget the deletion of name in upper_dir. 0 or -errno. */
int cv_ov_whiteout(int upper_dir, const char *name);
void cv_ov_unwhiteout(int upper_dir, const char *name);
/* The directory holds the opaque marker (a regular file by that name; a whiteout is any
 * entry named .wh.NAME). */
int cv_ov_is_opaque(int dir);
/* Mark an upper directory opaque. 0 or -errno. */
int cv_ov_set_opaque(int upper_dir);

/* The run has a writable layer (it may not exist on disk yet: see cv_ov_ensure_upper). */
int cv_ov_writable(const struct cv_run *r);
/* Make the upper and work directories of a lazily created layer (an ephemeral sandbox is only
 * made on disk when its guest first changes something). 0 or -errno. */
int cv_ov_ensure_upper(struct cv_run *r);

/* The upper directory for a virtual directory that exists (upper or host), made
 * along the way with the host directories' modes and times. Returns an
 * O_RDONLY|O_DIRECTORY fd or -errno. */
int cv_ov_upper_dir(struct cv_run *r, const char *vdir);

/* The upper directory holding vpath (its parent), made as cv_ov_upper_dir does. fd or -errno. */
int cv_ov_upper_parent(struct cv_run *r, const char *vpath);

/* Copy mode, times and (when we may) the owner of st onto fd. */
void cv_ov_copy_attrs(int fd, const struct stat *st);

/* A fresh name for a temporary object in the work directory. */
void cv_ov_tmpname(char *out, size_t len);

/* Copy the host object v names (exists, layer CV_LOWER) into the upper layer,
 * atomically. with_data 0: a regular file comes up empty (O_TRUNC). 0 or
 * -errno; a concurrent copy-up of the same object counts as done. */
int cv_ov_copy_up(struct cv_run *r, const struct cv_vnode *v, int with_data);

/* Bring a whole virtual directory into the upper layer (every host entry below
 * it copied up, the directory made opaque), so that it can be renamed. */
int cv_ov_materialize(struct cv_run *r, const char *vdir, int lower_shows);

/* Open vpath in the upper layer without following any symlink. */
int cv_ov_open_upper(const struct cv_run *r, const char *vpath, int flags, mode_t mode);

/* Remove an upper directory that holds only reserved entries (whiteouts, the opaque marker). */
int cv_ov_rmdir_upper(int parent, const char *name);

#endif
