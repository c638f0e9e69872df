/* The answer table: a run's shared, read-only record of answers the supervisor already gave,
 * which the shim (shim/shim.c) serves again inside the guest without a notification.
 *
 * One memfd per run, sealed against any new write (F_SEAL_FUTURE_WRITE): the supervisor writes
 * through its own mapping, each guest maps it read-only (it asks for it by opening
 * CV_ANS_MAGIC, a notified call). It holds only what the supervisor told this run's guests, so
 * reading it shows a guest nothing new, and a guest that forged its own copy could only fool
 * itself.
 *
 * It holds, keyed by the absolute, symlink-free virtual path the guest wrote, what readlink
 * said (a symlink's target, or EINVAL) and that a name does not exist (ENOENT, from readlink or
 * an open without O_CREAT). A record is good while the table's generation for its kind is the
 * one read before the answer was computed (a rename or a symlink moves it on; a call that makes
 * or removes one name ends that name's record alone: handlers/dispatch.c), and for
 * CV_ANS_TTL_NS after it was written (a change the supervisor does not make: the host's,
 * another run's of the same sandbox). Each slot is a seqlock: a reader copies it, then checks
 * its sequence did not move. */
#ifndef CV_ANSWERS_FMT_H
#define CV_ANSWERS_FMT_H

#include <errno.h>
#include <stdint.h>

#define CV_ANS_MAGIC "/.cvisor-answers"
/* Opened (notified, ENOENT) by a guest that saw `copies` move: the supervisor makes its read-only
 * fds of the files copied up since opens of their copies, as overlayfs fds follow a copy-up.
 * A multi-threaded guest names the one fd it is about to read: CV_FOLLOW_MAGIC "/<fd>". */
#define CV_FOLLOW_MAGIC "/.cvisor-follow-copies"
#define CV_ANS_STAMP 0x3273726577736e61ull /* "answrs2" */
#define CV_ANS_SETS 4096u                  /* a power of two */
#define CV_ANS_WAYS 4u
#define CV_ANS_KEY_MAX 255u
#define CV_ANS_VAL_MAX 255u
#define CV_ANS_TTL_NS 1000000000ull
#define CV_ANS_COPIED 1024u /* old inodes of copied-up files the table lists; past that a guest asks */

struct cv_ans_head {
    uint64_t stamp;
    uint32_t sets, ways;
    uint32_t slot_size, key_max;
    uint64_t gone_gen; /* atomic: for records of existing names */
    uint64_t made_gen; /* atomic: for ENOENT records */
    uint64_t copies;   /* atomic: host and layer files copied up this run: the shim's cue to follow */
    uint64_t ncopied;  /* atomic: the distinct old inodes among them, listed after the slots */
    uint64_t pad;
};

struct cv_ans_slot {
    uint32_t seq; /* atomic: odd while the supervisor writes the slot */
    uint32_t hash;
    uint64_t gen;  /* the table's generation for its kind when the answer was computed */
    uint64_t born; /* CLOCK_MONOTONIC ns then */
    int32_t err;   /* 0: val is the link's target; else the errno (ENOENT: the name is missing) */
    uint16_t klen, vlen;
    char key[CV_ANS_KEY_MAX + 1];
    char val[CV_ANS_VAL_MAX + 1];
};

struct cv_ans_copied {
    uint64_t dev, ino; /* written before ncopied counts it, then never again */
};

#define CV_ANS_SLOTS_END (sizeof(struct cv_ans_head) + (uint64_t)CV_ANS_SETS * CV_ANS_WAYS * sizeof(struct cv_ans_slot))
#define CV_ANS_BYTES (CV_ANS_SLOTS_END + (uint64_t)CV_ANS_COPIED * sizeof(struct cv_ans_copied))

static inline struct cv_ans_copied *cv_ans_copied_list(const struct cv_ans_head *t) {
    return (struct cv_ans_copied *)(void *)((char *)(uintptr_t)t + CV_ANS_SLOTS_END);
}

/* Whether a file of inode (dev, ino) was copied up this run: 1 also when the list is too long
 * to tell (the supervisor checks). */
static inline int cv_ans_was_copied(const struct cv_ans_head *t, uint64_t dev, uint64_t ino) {
    uint64_t n = __atomic_load_n(&t->ncopied, __ATOMIC_ACQUIRE);
    if (n > CV_ANS_COPIED) return 1;
    const struct cv_ans_copied *c = cv_ans_copied_list(t);
    for (uint64_t i = 0; i < n; i++)
        if (c[i].ino == ino && c[i].dev == dev) return 1;
    return 0;
}

static inline uint32_t cv_ans_hash(const char *s, uint32_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (uint32_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static inline struct cv_ans_slot *cv_ans_set(const struct cv_ans_head *t, uint32_t hash) {
    return (struct cv_ans_slot *)(void *)((char *)(uintptr_t)t + sizeof *t) + (hash & (CV_ANS_SETS - 1)) * CV_ANS_WAYS;
}

/* A path the table may hold: absolute, no "." or ".." component, no empty one, no trailing
 * '/', and short enough. Its length, or 0. */
static inline uint32_t cv_ans_key_ok(const char *p) {
    if (p[0] != '/') return 0;
    uint32_t i = 0;
    for (; p[i]; i++) {
        if (i >= CV_ANS_KEY_MAX) return 0;
        if (p[i] != '/') continue;
        const char *c = p + i + 1;
        if (c[0] == '/' || (c[0] == '.' && (c[1] == '/' || !c[1] || (c[1] == '.' && (c[2] == '/' || !c[2])))))
            return 0;
        if (!c[0] && i > 0) return 0;
    }
    return i;
}

/* The record for key (len bytes) good now: 1 with *err and the target in val (*vlen bytes),
 * else 0. A torn or forged slot reads as a miss. */
static inline int cv_ans_get(const struct cv_ans_head *t, const char *key, uint32_t len, uint64_t now,
                             int32_t *err, char val[CV_ANS_VAL_MAX + 1], uint32_t *vlen) {
    uint64_t gone = __atomic_load_n(&t->gone_gen, __ATOMIC_ACQUIRE);
    uint64_t made = __atomic_load_n(&t->made_gen, __ATOMIC_ACQUIRE);
    uint32_t hash = cv_ans_hash(key, len);
    struct cv_ans_slot *s = cv_ans_set(t, hash);
    for (uint32_t w = 0; w < CV_ANS_WAYS; w++, s++) {
        uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        if ((seq & 1) || s->hash != hash || s->klen != len || s->gen != (s->err == ENOENT ? made : gone)) continue;
        uint64_t born = s->born;
        if (now < born || now - born >= CV_ANS_TTL_NS) continue;
        int same = 1;
        for (uint32_t i = 0; i < len && same; i++) same = s->key[i] == key[i];
        if (!same) continue;
        int32_t e = s->err;
        uint32_t n = s->vlen;
        if (n > CV_ANS_VAL_MAX) continue;
        for (uint32_t i = 0; i < n; i++) val[i] = s->val[i];
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) != seq) return 0;
        *err = e, *vlen = n;
        return 1;
    }
    return 0;
}

#endif
