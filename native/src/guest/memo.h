/* The guest module's memory of one notification (cv_guest_memo_begin): when two readers look at
 * one call (an embedder's hook, then the handler), the second gets the first one's copy of the
 * guest's memory, fds and /proc links, so what was decided on is what is acted on. Internal to
 * guest/: callers see only guest.h. */
#ifndef CV_GUEST_MEMO_H
#define CV_GUEST_MEMO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cv_guest_memo;

enum cv_memo_kind { CV_MEMO_MEM, CV_MEMO_STR, CV_MEMO_FD, CV_MEMO_LINK, CV_MEMO_OPEN };

/* A remembered answer: 1 and *rc (and buf, *fd) filled, or 0 (not remembered: read it, then
 * cv_memo_put). MEM: key is the address, len the bytes wanted (served from any remembered range
 * that holds them). STR: key the address, len the buffer's size. FD: key the guest's fd number,
 * *fd a new copy. LINK and OPEN: what names /proc/<tid>/<what>, key the open flags. */
int cv_memo_get(struct cv_guest_memo *m, int kind, uint64_t key, const char *what, void *buf, size_t len,
                ssize_t *rc, int *fd);
/* Remember an answer (data: rc bytes for STR and LINK, len for MEM; fd: a copy is kept). */
void cv_memo_put(struct cv_guest_memo *m, int kind, uint64_t key, const char *what, const void *data, size_t len,
                 ssize_t rc, int fd);
/* Forget what a write to [addr, addr+len) or a change of the guest's fd gfd (-1: none) made
 * stale. */
void cv_memo_forget(struct cv_guest_memo *m, uint64_t addr, size_t len, int gfd);

struct cv_guest_memo *cv_memo_new(void);
void cv_memo_free(struct cv_guest_memo *m);

#endif
