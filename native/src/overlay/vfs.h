/* The guest's view: a path resolved over the layers (upper, read-only layers, host),
 * the way the kernel would resolve it if the merged tree were a real filesystem.
 *
 * Every walk step looks the name up with fstatat on the current directory's
 * upper and host fds (in the read-only layers: their kept listings, overlay/lowers.h,
 * then one fstatat in the layer that has it), so nothing the guest planted (a symlink in the upper, a
 * renamed directory) can lead the supervisor out of a layer: symlinks are read
 * and followed through the virtual view, never by the kernel. */
#ifndef CV_VFS_H
#define CV_VFS_H

#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>

#include "overlay/ctx.h"
#include "overlay/longpath.h"
#include "overlay/resolve.h"
#include "supervisor/run.h"

enum cv_layer { CV_LOWER = 1, CV_UPPER = 2 };

struct cv_vnode {
    struct cv_run *run;
    int exists;          /* the final object exists (else only its parent, see CV_RES_PARENT) */
    int layer;           /* CV_UPPER or CV_LOWER: where the final object lives */
    int lidx;            /* CV_LOWER: 0 the host, i > 0 the run's i-th read-only layer (top first) */
    int lower_dir;       /* the final is a directory whose lower entries show through */
    int opaque;          /* the final is an opaque upper directory */
    int touched;         /* the answer involved the upper, a read-only layer or a whiteout: no CONTINUE */
    int trailing;        /* the path ended in '/' */
    struct stat st;      /* lstat (or stat when following) of the final, from its layer */
    dev_t adev;          /* aino != 0: an upper copy standing for the host file it was linked */
    ino_t aino;          /* from (overlay/alias.h); these are the copy's, st is that file's */
    char *vpath;         /* absolute, symlink-free virtual path of the final (in vbuf; it may be
                          * longer than PATH_MAX, overlay/longpath.h) */
    const char *name;    /* its last component (inside vpath; "" for "/") */
    int pup;             /* the parent directory in the upper (O_PATH), or -1 */
    int plow;            /* the parent directory in the host, when its entries show, or -1 */
    int psrc;            /* the parent directory in the layer holding the final: pup, plow, or a
                          * read-only layer's (then owned by the node); -1 when it does not exist */
    int psrc_own;
    uint64_t plmask;     /* the read-only layers whose parent directory shows (bit i: layer i+1) */
    int popq;            /* the parent's upper is opaque */
    int in_proc;         /* under /proc: `proc` holds the host resolver's answer */
    struct cv_resolved proc;
    struct cv_lpath vbuf;
};

/* 0 or -errno (ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG, EBADF, EACCES) for a failure before the final
 * component. Flags: CV_RES_FOLLOW (follow a final symlink), CV_RES_PARENT (a missing final must have an
 * existing parent directory). Release with cv_vnode_release. */
int cv_vresolve(const struct cv_vctx *c, int dirfd, const char *path, int flags, struct cv_vnode *v);
void cv_vnode_release(struct cv_vnode *v);
/* The real object of an existing node, opened O_PATH|O_NOFOLLOW (plus flags). -errno on failure. */
int cv_vnode_open(const struct cv_vnode *v, int flags);

/* Write and search permission on the directory holding v, as the kernel checks it: the host
 * directory's when it has one (the supervisor has the guest's uid), as overlayfs does. 0 or -errno. */
int cv_vnode_may_change(const struct cv_vnode *v);

/* The object under v's name below the upper (in the read-only layers, then the host), the one
 * the upper's own entry or whiteout covers. 1 with *st, 0 when there is none (also when a layer
 * deletes it or the parent directory is opaque, or it cannot be read). */
int cv_vnode_lower(const struct cv_vnode *v, struct stat *st);

/* A directory of the upper whose twin below (in a read-only layer or the host) shows through it:
 * it stands for that twin, as a merged directory of overlayfs keeps its lower one's inode. */
int cv_vnode_merged_dir(const struct cv_vnode *v);
/* 1 and *st: the twin of a merged directory (its st_dev and st_ino are the directory's);
 * else 0. */
int cv_vnode_lower_id(const struct cv_vnode *v, struct stat *st);
/* The twin of a merged directory, opened with flags (O_RDONLY, ...): what the guest is given for
 * it, so that fstat agrees with stat and with what it saw before the directory had an upper
 * copy (fts checks ".." against it). fd or -errno. */
int cv_vnode_open_lower(const struct cv_vnode *v, int flags);

/* The object lives in cvisor's storage (the upper or a read-only layer), where the guest's own
 * calls cannot reach it: the supervisor opens it, never the kernel for the guest. */
static inline int cv_vnode_stored(const struct cv_vnode *v) { return v->layer == CV_UPPER || v->lidx > 0; }

/* One directory of the merged view, layer by layer, opened O_RDONLY|O_DIRECTORY: fd[0] the upper,
 * fd[1..n-2] the read-only layers (top first), fd[n-1] the host; -1 where the directory is not, or
 * does not show (under an opaque directory, a whiteout, a file of a layer above). */
struct cv_vstack {
    int n;
    int fd[CV_MAX_LOWERS + 2];
};
/* The layers of the directory at a symlink-free virtual path. 0 or -errno (ENOENT, ENOTDIR). */
int cv_vdir_stack(struct cv_run *r, const char *vdir, struct cv_vstack *s);
void cv_vstack_close(struct cv_vstack *s);

/* The virtual path of a real path seen in /proc (a cwd, an fd): the upper's or a layer's root
 * stripped, host paths as they are. 0, or -ENOENT for the storage of another sandbox or a hidden path. */
int cv_virtual_of_real(const struct cv_run *r, const char *real, char *out, size_t len);

/* The virtual path of a real directory (fd) whose path /proc cannot give (ENAMETOOLONG: a tree
 * deeper than PATH_MAX), found by climbing ".." to one it can, or to one the walk remembers.
 * *stored: the directory is in cvisor's storage; *own: it is an upper directory through which
 * nothing below the upper shows (the merged view of it is fd's directory alone). 0 or -errno. */
int cv_vfs_long_dir_vpath(struct cv_run *r, int fd, struct cv_lpath *out, int *stored, int *own);

/* fd is the upper directory at vpath (as /proc names it), one the walk remembers as the sandbox's
 * own: nothing below the upper shows through it. */
int cv_vfs_own_dir(struct cv_run *r, int fd, const char *vpath);

/* The upper directory holding v (made, with the directories above it, when it is missing): the
 * walk's own when it had one. fd (O_RDONLY | O_DIRECTORY) or -errno. */
int cv_vnode_upper_parent(struct cv_run *r, const struct cv_vnode *v);

/* A real path lies in the upper or a read-only layer; in the upper. */
int cv_vfs_in_store(const struct cv_run *r, const char *real);
int cv_vfs_in_upper(const struct cv_run *r, const char *real);

/* The path is hidden from the guest (the hide list: credentials, the sandbox storage); the entry
 * of the hide list that hides it, or NULL. */
int cv_vfs_hidden(const struct cv_run *r, const char *vpath);
const char *cv_vfs_hidden_root(const struct cv_run *r, const char *vpath);
/* Some hidden path is p, lies below it or holds it: 0 rules all of them out at once. */
int cv_vfs_may_touch_hidden(const struct cv_run *r, const char *p);
/* Some hidden path lives directly in the directory vdir. */
int cv_vfs_holds_hidden(const struct cv_run *r, const char *vdir);

#endif
