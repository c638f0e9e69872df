/* Merged directory listings for the copy-on-write overlay, and the cursor that
 * lets a guest's getdents64 walk one across calls.
 *
 * Layers: the upper holds the sandbox's entries as real files; in it an empty
 * regular file `.wh.<name>` is a whiteout (name deleted in the merged view) and
 * a regular file `.wh..wh..opq` makes the directory opaque (no lower entries).
 * Every name starting with `.wh.` is reserved and never listed, from either
 * layer. The lower is a host directory.
 *
 * A snapshot is immutable and refcounted (atomically): build it once, share it.
 * The slot table is process-wide: slots are not tied to a run or a directory,
 * and a guest can lseek its directory fd to any offset, so a handler that takes
 * a slot from a guest's offset must check the snapshot is the directory's
 * (cv_dirsnap_matches) before listing it, or keep its own slot bookkeeping. */
#ifndef CV_DIRSNAP_H
#define CV_DIRSNAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CV_DIRSNAP_SLOT_BITS 10
#define CV_DIRSNAP_SLOTS (1u << CV_DIRSNAP_SLOT_BITS) /* live slots at most */
#define CV_DIRSNAP_MEM_CAP ((size_t)64 << 20)          /* bytes of stored snapshots at most */
#define CV_DIRSNAP_SLOT_MAX 0x7fffffffu                /* slots are 1..CV_DIRSNAP_SLOT_MAX */

/* One entry, stored exactly as the kernel's struct linux_dirent64 (8-byte aligned,
 * zeroed padding); off is 0 in the snapshot, cv_dirsnap_fill sets it per copy. */
struct cv_dirent {
    uint64_t ino;
    int64_t off;
    uint16_t reclen;
    unsigned char type; /* DT_* */
    char name[];        /* NUL-terminated, any bytes, at most 255 */
};

struct cv_dirsnap; /* an immutable merged listing */

/* Merged listing of one virtual directory. upper_fd / lower_fd: directory fds,
 * either may be -1 (not both). They are read through a fresh open of the same
 * directory, so the caller's fds and their offsets are untouched.
 * Entries: "." and ".." (inos of the topmost layer's directory and of its ".."
 * entry, the directory's own when that is 0), then the upper's entries minus
 * reserved names, sorted by name (bytewise), then the lower's entries that are
 * not in the upper, not whited out, not reserved, and none at all when the
 * upper is opaque, sorted by name. skip(name, arg) returning nonzero drops a
 * name of the lower (the host's: hidden paths are host paths; what the layers
 * above hold is the sandbox's own), never "." or ".."; skip may be NULL. ino and type come from the layer
 * that provides the entry (DT_UNKNOWN: fstatat it; still DT_UNKNOWN if that
 * fails). Returns a snapshot holding one reference, or NULL with errno set
 * (EINVAL: both fds -1; ENOTDIR, EACCES, ENOMEM, EOVERFLOW: > 2^32-2 entries). */
struct cv_dirsnap *cv_dirsnap_build(int upper_fd, int lower_fd, int (*skip)(const char *name, void *arg),
                                    void *arg);
/* The same over a stack of directories, top first: fds[0..nl-2] are layers (their whiteouts
 * delete names below them, an opaque one hides everything below it), fds[nl-1] is the host
 * directory (read like the lower above); any may be -1, not all. An entry shows from the
 * topmost layer that has it, unless a layer above deletes it. nl at most CV_DIRSNAP_MAX_LAYERS. */
#define CV_DIRSNAP_MAX_LAYERS 34
struct cv_dirsnap *cv_dirsnap_build_stack(const int *fds, int nl, int (*skip)(const char *name, void *arg),
                                          void *arg);
/* Entries, "." and ".." included (so at least 2). */
size_t cv_dirsnap_count(const struct cv_dirsnap *s);
/* Entry i (0 is "."), or NULL when i >= count. Valid while s is referenced. */
const struct cv_dirent *cv_dirsnap_entry(const struct cv_dirsnap *s, uint32_t i);
/* Bytes the snapshot occupies (what the slot table charges for it). */
size_t cv_dirsnap_size(const struct cv_dirsnap *s);
/* 1 when s was built from these directories: each layer it was built from is the same
 * directory (st_dev/st_ino) at the same place; a layer it did not have may have appeared since
 * (a listing goes on over the upper twin its guest's deletions made). Else 0. The skip callback
 * is not part of the identity. */
int cv_dirsnap_matches(const struct cv_dirsnap *s, int upper_fd, int lower_fd);
int cv_dirsnap_matches_stack(const struct cv_dirsnap *s, const int *fds, int nl);
void cv_dirsnap_ref(struct cv_dirsnap *s);
void cv_dirsnap_unref(struct cv_dirsnap *s); /* NULL is fine */

/* The process-wide, thread-safe slot table: at most CV_DIRSNAP_SLOTS slots and
 * CV_DIRSNAP_MEM_CAP bytes; the least recently stored or got slots are evicted
 * first (a single snapshot bigger than the cap is still stored, alone).
 * store takes a reference of its own and returns the slot (never 0; a slot
 * number comes back only after 2^21 reuses of its table entry). get returns a
 * new reference, or NULL when the slot was evicted, dropped or never existed. */
uint32_t cv_dirsnap_store(struct cv_dirsnap *s);
struct cv_dirsnap *cv_dirsnap_get(uint32_t slot);
void cv_dirsnap_drop(uint32_t slot); /* forget a slot (e.g. its listing ended); unknown slots are ignored */

/* The directory-offset cursor: the guest's file offset is (slot << 32) | next_index,
 * next_index >= 1 after the first batch; offset 0 means "start: build a fresh
 * snapshot". With slot <= 0x7fffffff the offset is a positive loff_t. */
static inline uint64_t cv_dirsnap_off(uint32_t slot, uint32_t idx) {
    return (uint64_t)slot << 32 | idx;
}
static inline uint32_t cv_dirsnap_off_slot(uint64_t off) { return (uint32_t)(off >> 32); }
static inline uint32_t cv_dirsnap_off_idx(uint64_t off) { return (uint32_t)off; }

/* Fill buf (len bytes; any alignment) with linux_dirent64 records from entry i
 * on, each with d_off = cv_dirsnap_off(slot, its index + 1). Returns the bytes
 * written (0 when i >= count), or -EINVAL when the first record does not fit.
 * *next (may be NULL) receives the index after the last record written (i when
 * none was). */
ssize_t cv_dirsnap_fill(const struct cv_dirsnap *s, uint32_t slot, uint32_t i, void *buf, size_t len,
                        uint32_t *next);

#endif
