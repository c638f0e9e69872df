/* The run's answer table (common/answers_fmt.h): made on a guest's first ask, written by the
 * supervisor as it answers (on the receiver thread: the only one that answers the calls it
 * records or that change names; the walk-ahead thread publishes directories too, see
 * cv_answers_publish_begin), and moved to a new generation by every change that could make a
 * record wrong. */
#ifndef CV_SUPERVISOR_ANSWERS_H
#define CV_SUPERVISOR_ANSWERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/run.h"

/* A read-only fd of the table for a guest (made on first use), or -errno: -ENOENT when the run
 * keeps none (an embedder's hook or a trace watches a call the shim serves: each must reach it). */
int cv_answers_fd(struct cv_run *r);

/* The generations to record an answer with: read them before computing the answer, so that a
 * change made meanwhile leaves the record stale. */
struct cv_ans_gens {
    uint64_t gone, made;
};
struct cv_ans_gens cv_answers_gens(struct cv_run *r);

/* Record an answer for the virtual path key: a readlink target (len bytes) when err is 0, else
 * err (EINVAL: not a link; ENOENT: no such name, for readlink and open alike). Nothing when the
 * run keeps no table or key or target do not fit. */
void cv_answers_put(struct cv_run *r, struct cv_ans_gens g, const char *key, int err, const char *target, size_t len);

/* A name is about to be made (a file or an empty directory) or removed (a file, an empty
 * directory) at vpath: its record, if any, goes. The records below it stay true: nothing
 * exists below such a name, before or after. */
void cv_answers_named(struct cv_run *r, const char *vpath);

/* What a call is about to change: names may go (unlink, rmdir, rename: records of existing names
 * go stale) or be made (ENOENT records go stale). Call it before the change. */
enum { CV_ANS_GONE = 1, CV_ANS_MADE = 2, CV_ANS_TREE = 4 /* (dispatch.c) names below it too */ };
void cv_answers_changing(struct cv_run *r, int what);

/* A host or layer file was copied up (listed in r->copied): the table lists its old inode and its
 * count moves on; a guest's shim that sees it asks for its fds of such files to follow
 * (CV_FOLLOW_MAGIC). Receiver thread only. */
void cv_answers_copied(struct cv_run *r);

/* Where the kernel makes, removes and touches names by itself, with no call the supervisor
 * sees (a pty's slave in /dev/pts, a tty's times, /proc, /sys): path is /dev, /proc, /sys or
 * below. Nothing there is recorded. */
int cv_answers_kernel_made(const char *path);

/* The directory records (handlers/statpub.c). The tree generation to record a directory's path
 * with, read before resolving it (0: no table); it moves on before a rename or a symlink
 * (cv_answers_changing with CV_ANS_TREE). */
uint64_t cv_answers_tree_gen(struct cv_run *r);
/* The table's clock (CLOCK_MONOTONIC ns), which its records are stamped with. */
uint64_t cv_answers_now(void);
/* The directory at virtual path vpath was published to level (CV_ANS_DIRS_ONLY, ...) or more
 * less than half a record's life ago: no need to again. */
int cv_answers_dir_fresh(struct cv_run *r, const char *vpath, int level);
/* The directory id has a listing in the table for half a record's life more. */
struct cv_ans_id;
int cv_answers_listed(struct cv_run *r, const struct cv_ans_id *id);
/* What the directory id's entries are published to (CV_ANS_DIRS_ONLY, ...), or -1: none. */
int cv_answers_level(struct cv_run *r, const struct cv_ans_id *id);
/* A directory's publication: a new serial (0: no table), its entries under it, then the
 * directory's identity record, which makes them good, then its path. */
struct statx;
uint64_t cv_answers_serial(struct cv_run *r);
void cv_answers_put_entry(struct cv_run *r, uint64_t serial, const struct cv_ans_id *dir, const char *name,
                          const struct statx *stx, uint32_t bits);
/* Its listing first (getdents64 records, whole: len a multiple of 8, at most CV_ANS_LIST_MAX):
 * where it lies, for the identity record, or UINT64_MAX (no table, too long). */
uint64_t cv_answers_put_listing(struct cv_run *r, const void *records, size_t len);
/* How many times a host directory's records went because it was about to change (it gets a
 * twin). A publication off the receiver thread (the walk ahead, handlers/prefetch.c) is made
 * between cv_answers_publish_begin, which says 0 (and holds nothing) when the count moved since
 * `changes`, and cv_answers_publish_end: no change comes between its check and its records. */
uint64_t cv_answers_dir_changes(struct cv_run *r);
int cv_answers_publish_begin(struct cv_run *r, uint64_t changes);
void cv_answers_publish_end(struct cv_run *r);
/* A copy (malloc'd) of the published listing of the directory id: 0, or -1 without one. */
int cv_answers_listing_copy(struct cv_run *r, const struct cv_ans_id *id, char **buf, size_t *len);
void cv_answers_put_did(struct cv_run *r, const struct cv_ans_id *id, uint64_t serial, int level, uint64_t list_at,
                        size_t list_len);
void cv_answers_put_dir(struct cv_run *r, uint64_t tree_gen, const char *vpath, const struct cv_ans_id *id);
/* The host or layer directory dev/ino is about to change in the view (its upper twin is being
 * made): its entries' records go. Receiver thread. */
void cv_answers_dir_changing(struct cv_run *r, dev_t dev, ino_t ino);
void cv_answers_free(struct cv_run *r);

#endif
