/* Paths longer than PATH_MAX. The kernel bounds each path argument, not a tree's depth: a tree
 * made with relative paths (`mkdir d; cd d`, repeated) can be deeper than any path that names
 * it, so the virtual path of a directory (and the real one in the upper) may be too.
 *  - struct cv_lpath: a path held inline up to PATH_MAX, on the heap beyond (so the common case
 *    allocates nothing); never silently cut: what does not fit is ENAMETOOLONG or ENOMEM.
 *  - cv_openat2_long, cv_fstatat_long: a relative path of any length, opened piece by piece (each
 *    piece under PATH_MAX, cut at a '/'), every piece with the caller's resolve flags. */
#ifndef CV_LONGPATH_H
#define CV_LONGPATH_H

#include <limits.h>
#include <linux/openat2.h>
#include <stddef.h>
#include <sys/stat.h>

/* A bound on virtual paths all the same (ENAMETOOLONG beyond): 512 Ki levels of "d/". */
#define CV_LPATH_MAX (1u << 20)

struct cv_lpath {
    char *s; /* the path: in[] or the heap */
    char in[PATH_MAX];
};

/* "" held inline. */
void cv_lpath_init(struct cv_lpath *p);
/* Back to "" (the heap copy freed). */
void cv_lpath_free(struct cv_lpath *p);
/* p = s[0..n). s may lie in p itself. 0, -ENAMETOOLONG or -ENOMEM (p then unchanged). */
int cv_lpath_setn(struct cv_lpath *p, const char *s, size_t n);
int cv_lpath_set(struct cv_lpath *p, const char *s);
/* p = dir + "/" + name ("/" + name for dir "/"); dir may be p->s. */
int cv_lpath_join(struct cv_lpath *p, const char *dir, const char *name);
/* p = the directory holding vpath, textually ("/" for "/" and "/x"); vpath may be p->s. */
int cv_lpath_parent(struct cv_lpath *p, const char *vpath);
/* Take over from's path (from is "" after). */
void cv_lpath_move(struct cv_lpath *to, struct cv_lpath *from);
/* A path freed when it goes out of scope. */
#define cv_lpath_scoped __attribute__((cleanup(cv_lpath_free)))

/* openat2(dirfd, rel, how) for a relative path of any length. fd or -errno. */
int cv_openat2_long(int dirfd, const char *rel, const struct open_how *how);
/* fstatat(dirfd, path, st, flags) for a path of any length: one longer than PATH_MAX (an
 * absolute one from "/") has its directories opened with no symlink followed. 0 or -errno. */
int cv_fstatat_long(int dirfd, const char *path, struct stat *st, int flags);

#endif
