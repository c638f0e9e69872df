/* Publishing a host directory for the shim (statpub.c), shared with the walk ahead (prefetch.c). */
#ifndef CV_HANDLERS_STATPUB_H
#define CV_HANDLERS_STATPUB_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "overlay/vfs.h"

struct cv_run;

/* A directory's listing as getdents64 gives it: whole up to CV_ANS_LIST_MAX bytes (the shim
 * serves it to the guest's own getdents64), else its beginning; names counts the whole. */
struct cv_listing {
    char *buf;
    size_t len;
    int whole;
    uint32_t names;
};

/* The listing of the directory open as fd, read from its offset to the end. 0 or -1 (nothing). */
int cv_read_listing(int fd, struct cv_listing *l);

/* Publish the directory open as fd, with its listing: its entries at level, the listing itself
 * when whole; ds: its statx, asked for no time (whether the filesystem fills them unasked tells
 * how statx answers such masks). Named vdir in the view (may be NULL). */
void cv_publish_listed(struct cv_run *r, int fd, const struct statx *ds, int level, const struct cv_listing *l,
                       uint64_t tree_gen, const char *vdir);

/* "." or "..": the two records of a listing that name no entry. */
static inline int cv_dots(const char *name) { return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])); }

/* The view of v's directory is the host's, entry for entry. */
int cv_kernel_view(const struct cv_vnode *v);

/* What statpub.c asks statx of a directory it publishes. */
#define CV_PUB_ID_MASK (STATX_NLINK | STATX_INO | STATX_MNT_ID | STATX_SIZE)

#endif
