/* Opens made ahead of a walk (shim/prefetch.c <-> handlers/prefetch.c).
 *
 * find, tar, ls -R and git status open every directory (tar every file) of a tree, one
 * notification each. When the shim's read-only open of a host directory or file is notified,
 * it adds CV_O_PREFETCH to the flags (a bit the kernel drops from open's flags) and passes, in
 * the mode argument (ignored without O_CREAT), the address of its struct cv_pf_ask: the fd
 * numbers it holds free for the supervisor, and what it holds there already. The supervisor
 * answers the open as ever and, when the guest is walking a tree whose view is the host's,
 * opens the next objects of that walk (in the listing's order, or in name order when the other
 * was not followed: ls -R) itself, read-only, publishes the directories among them
 * (handlers/statpub.c), and sends them all in one message (SCM_RIGHTS) over a socket it puts at
 * the number the ask gave (ADDFD with SETFD, one round trip: an ADDFD each would cost one each),
 * writing which free slot each is for into the ask. The shim moves them there when the open
 * returns, and serves a later open of one of them by moving its fd down to the number a native
 * open gives (fcntl F_DUPFD) and closing the slot: a new open file of that object, as the
 * guest's own open would have made.
 *
 * Nothing here is trusted: the supervisor chooses what to open from its own view, the fds are
 * what a read-only open the filter continues gives, and a guest that forges the ask only
 * misplaces its own fds. */
#ifndef CV_PREFETCH_PROTO_H
#define CV_PREFETCH_PROTO_H

#include <stdint.h>

#define CV_O_PREFETCH 0x20000000
#define CV_PF_MAGIC 0x66707663u /* "cvpf" */
#define CV_PF_SLOTS 64

enum {
    CV_PF_FREE = 0,
    CV_PF_HELD = 1,
    CV_PF_OFF = 2,  /* not a number the supervisor may fill */
    CV_PF_SENT = 3, /* written by the supervisor: the next fd of its message is this slot's */
};

struct cv_pf_slot {
    int32_t fd;     /* the guest's fd number of this slot */
    uint32_t state; /* CV_PF_FREE, CV_PF_HELD, CV_PF_OFF */
    uint32_t flags; /* HELD: the open file's status flags (O_NONBLOCK) */
    uint32_t pad;
    uint64_t dev, ino; /* HELD: the object's identity (dev as makedev) */
};

struct cv_pf_ask {
    uint32_t magic;  /* CV_PF_MAGIC */
    uint32_t hits;   /* opens the shim served since its last ask: the walk's pace */
    /* kept by the supervisor from one ask to the next: */
    uint32_t placed; /* how many it placed last */
    uint32_t window; /* how many it meant to */
    uint32_t files;  /* it placed files (a walk that opens them: tar) */
    uint32_t idle;   /* kept by the shim: opens it could have asked with since the window closed */
    int32_t sock;    /* a free fd number where the supervisor puts the socket it sends them over */
    uint32_t taken;  /* set by the supervisor: it read this ask (hits counted) */
    uint32_t sorted; /* kept by the supervisor: the walk goes in name order (ls -R), not the listing's */
    uint32_t turned; /* kept by the supervisor: the order was turned at the last ask */
    struct cv_pf_slot slot[CV_PF_SLOTS];
};

#endif
