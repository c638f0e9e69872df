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
 * its sequence did not move.
 *
 * It also holds the lstat of the entries of host directories whose view is the kernel's (no
 * upper twin, no read-only layer's, no hidden entry), published by the supervisor when a guest
 * looks in one (handlers/statpub.c). A directory is known by its real identity (mount id, dev,
 * inode: what the shim's statx of a dirfd tells): its record holds the serial its entries were
 * published under, and is killed (serial 0) before the sandbox first changes anything in it,
 * which always makes its upper twin first (overlay/layers.c, overlay/copyup.c). Records mapping
 * a directory's virtual path to its identity are good while the table's tree generation, which
 * a rename or a symlink moves on before it runs, is the one they were made under. A directory's
 * record may also point at its listing (what getdents64 gave the supervisor, whole), which the
 * shim serves to the guest's own getdents64 on an fd of that directory. All of them last
 * CV_ANS_TTL_NS at most (the host's own changes). */
#ifndef CV_ANSWERS_FMT_H
#define CV_ANSWERS_FMT_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define CV_ANS_MAGIC "/.cvisor-answers"
/* Opened (notified, ENOENT) by a guest that saw `copies` move: the supervisor makes its read-only
 * fds of the files copied up since opens of their copies, as overlayfs fds follow a copy-up.
 * A multi-threaded guest names the one fd it is about to read: CV_FOLLOW_MAGIC "/<fd>". */
#define CV_FOLLOW_MAGIC "/.cvisor-follow-copies"
#define CV_ANS_STAMP 0x3673726577736e61ull /* "answrs6" */
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
    uint64_t tree_gen; /* atomic: for the directory path records */
    uint64_t list_end; /* atomic: the listing arena's bytes claimed so far (see cv_ans_listing) */
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

#define CV_ANS_DIR_SETS 1024u  /* a power of two; CV_ANS_WAYS each */
#define CV_ANS_ENT_SETS 4096u  /* of the entries' index: a power of two; CV_ANS_WAYS each */
#define CV_ANS_ENTS 16384u     /* the entries' ring */
#define CV_ANS_DIR_ENTRIES 1024 /* published of one directory at most */

/* The identity of a real directory: what statx of an fd of it says. */
struct cv_ans_id {
    uint64_t mnt, dev, ino;
};

static inline struct cv_ans_id cv_ans_id_of(const struct statx *st) {
    return (struct cv_ans_id){st->stx_mnt_id, makedev(st->stx_dev_major, st->stx_dev_minor), st->stx_ino};
}

struct cv_ans_dir { /* a directory's virtual path: its identity */
    uint32_t seq, hash; /* as in cv_ans_slot */
    uint64_t gen, born; /* gen: the tree generation */
    struct cv_ans_id id;
    uint32_t klen, pad;
    char key[CV_ANS_KEY_MAX + 1]; /* the directory's absolute, symlink-free virtual path */
};

/* What a directory's publication holds: its subdirectories alone, every entry, every entry
 * with the xattr bits. */
enum { CV_ANS_DIRS_ONLY = 0, CV_ANS_ENTRIES = 1, CV_ANS_XATTRS = 2 };

struct cv_ans_did { /* a directory's identity: under which serial its entries are published */
    uint32_t seq, hash;
    uint64_t serial, born; /* serial 0: none (any more) */
    struct cv_ans_id id;
    uint32_t level;    /* what was published: CV_ANS_DIRS_ONLY, CV_ANS_ENTRIES, CV_ANS_XATTRS */
    uint32_t list_len; /* its listing, list_len bytes at list_at in the arena (0: none) */
    uint64_t list_at;
};

#define CV_ANS_NO_SELINUX 1u /* lgetxattr(entry, "security.selinux") says ENODATA */
#define CV_ANS_NO_ACL 2u     /* lgetxattr(entry, "system.posix_acl_access") says ENODATA */
#define CV_ANS_NO_DEFAULT 4u /* lgetxattr(entry, "system.posix_acl_default") says ENODATA */
/* statx fills stx_mtime and stx_ctime only when asked for one of them (Linux 6.13+, where they
 * may be fine-grained), as it fills stx_btime only when asked */
#define CV_ANS_TIMES_ASKED 8u

/* Entries are kept small, so that a walk touches few pages of the table: names up to
 * CV_ANS_NAME_MAX bytes (a longer one is not published), and struct statx up to stx_mnt_id, the
 * last field a mask within STATX_BASIC_STATS | STATX_BTIME | STATX_MNT_ID fills (the kernel
 * zeroes the rest). */
#define CV_ANS_NAME_MAX 95u
#define CV_ANS_STX_BYTES (offsetof(struct statx, stx_mnt_id) + sizeof(uint64_t))

struct cv_ans_ent {
    uint32_t seq, hash;
    uint64_t serial, born; /* its directory's publication */
    struct cv_ans_id dir;
    uint16_t nlen, bits; /* CV_ANS_NO_*, CV_ANS_TIMES_ASKED */
    char name[CV_ANS_NAME_MAX + 1];
    uint64_t stx[CV_ANS_STX_BYTES / 8]; /* lstat of the entry: STATX_BASIC_STATS | STATX_BTIME asked */
};

#define CV_ANS_SLOTS_END (sizeof(struct cv_ans_head) + (uint64_t)CV_ANS_SETS * CV_ANS_WAYS * sizeof(struct cv_ans_slot))
#define CV_ANS_COPIED_END (CV_ANS_SLOTS_END + (uint64_t)CV_ANS_COPIED * sizeof(struct cv_ans_copied))
/* Directory path records and entries are written in the order they are made, into rings, so
 * that a publication fills pages of the table one after the other (a page nothing wrote yet is
 * one the kernel makes, zeroed, at the writer's fault and at each reader's) and a walk reads them
 * in that order; a 4-way index by hash finds them. An index way is 0 (none) or the record's
 * number + 1 in its low CV_ANS_RING_NUM_BITS, the rest of the record's hash above them: a way
 * whose bits differ is not looked at. A way whose record the ring wrote over since names another
 * key's, which the reader's check of the record turns away. */
#define CV_ANS_RING_NUM_BITS 15u
#define CV_ANS_RING_NUM_MASK ((1u << CV_ANS_RING_NUM_BITS) - 1)
#define CV_ANS_DIRS_RING (CV_ANS_DIR_SETS * CV_ANS_WAYS) /* path records */
#define CV_ANS_DIR_INDEX_AT CV_ANS_COPIED_END
#define CV_ANS_DIRS_AT (CV_ANS_DIR_INDEX_AT + (uint64_t)CV_ANS_DIR_SETS * CV_ANS_WAYS * sizeof(uint32_t))
#define CV_ANS_DIRS_END (CV_ANS_DIRS_AT + (uint64_t)CV_ANS_DIRS_RING * sizeof(struct cv_ans_dir))
#define CV_ANS_DIDS_END (CV_ANS_DIRS_END + (uint64_t)CV_ANS_DIR_SETS * CV_ANS_WAYS * sizeof(struct cv_ans_did))
#define CV_ANS_ENT_INDEX_AT CV_ANS_DIDS_END
#define CV_ANS_ENTS_AT (CV_ANS_ENT_INDEX_AT + (uint64_t)CV_ANS_ENT_SETS * CV_ANS_WAYS * sizeof(uint32_t))
#define CV_ANS_ENTS_END (CV_ANS_ENTS_AT + (uint64_t)CV_ANS_ENTS * sizeof(struct cv_ans_ent))
/* A published directory's listing: the getdents64 records the kernel gave the supervisor, whole
 * and in order, in a ring of CV_ANS_LIST_BYTES (a power of two); a listing never wraps. */
#define CV_ANS_LIST_BYTES (4u << 20)
#define CV_ANS_LIST_MAX (256u << 10) /* a longer listing is not published */
/* Hints, after the ring: for each way of each set of the path records and the directory
 * identities, the hash of the record the supervisor last wrote there. A reader
 * looks at a record only where its hint matches, so a miss (what most look-ups are) touches
 * the hints' few pages, not a page of records each: a page of the table nothing wrote yet is
 * one the kernel makes, zeroed, at the reader's fault (~250 faults, ~0.5 ms of a bash -c true
 * in the sandbox). A hint is only that: the record is checked as before. */
enum {
    CV_ANS_HINT_SLOTS = 0,
    CV_ANS_HINT_DIDS = CV_ANS_SETS * CV_ANS_WAYS,
    CV_ANS_HINTS = CV_ANS_HINT_DIDS + CV_ANS_DIR_SETS * CV_ANS_WAYS,
};
#define CV_ANS_HINTS_AT (CV_ANS_ENTS_END + (uint64_t)CV_ANS_LIST_BYTES)
#define CV_ANS_BYTES (CV_ANS_HINTS_AT + (uint64_t)CV_ANS_HINTS * sizeof(uint32_t))

/* The hints of the set hash falls in, among `sets` sets of the kind that starts at `kind`. */
static inline volatile uint32_t *cv_ans_hints(const struct cv_ans_head *t, uint32_t kind, uint32_t sets,
                                              uint32_t hash) {
    volatile uint32_t *all = (volatile uint32_t *)(void *)((char *)(uintptr_t)t + CV_ANS_HINTS_AT);
    return all + kind + (hash & (sets - 1)) * CV_ANS_WAYS;
}

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

/* FNV-1a, a byte at a time: the hash of a key's prefix is the hash so far. */
#define CV_ANS_HASH_SEED 2166136261u
static inline uint32_t cv_ans_hash_step(uint32_t h, char c) { return (h ^ (unsigned char)c) * 16777619u; }

static inline uint32_t cv_ans_hash(const char *s, uint32_t len) {
    uint32_t h = CV_ANS_HASH_SEED;
    for (uint32_t i = 0; i < len; i++) h = cv_ans_hash_step(h, s[i]);
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

/* The record for key (len bytes, whose cv_ans_hash is hash) good now: 1 with *err and the
 * target in val (*vlen bytes), else 0. A torn or forged slot reads as a miss. */
static inline int cv_ans_get_hashed(const struct cv_ans_head *t, const char *key, uint32_t len, uint32_t hash,
                                    uint64_t now, int32_t *err, char val[CV_ANS_VAL_MAX + 1], uint32_t *vlen) {
    uint64_t gone = __atomic_load_n(&t->gone_gen, __ATOMIC_ACQUIRE);
    uint64_t made = __atomic_load_n(&t->made_gen, __ATOMIC_ACQUIRE);
    struct cv_ans_slot *s = cv_ans_set(t, hash);
    const volatile uint32_t *hint = cv_ans_hints(t, CV_ANS_HINT_SLOTS, CV_ANS_SETS, hash);
    for (uint32_t w = 0; w < CV_ANS_WAYS; w++, s++) {
        if (hint[w] != hash) continue;
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

static inline int cv_ans_get(const struct cv_ans_head *t, const char *key, uint32_t len, uint64_t now,
                             int32_t *err, char val[CV_ANS_VAL_MAX + 1], uint32_t *vlen) {
    return cv_ans_get_hashed(t, key, len, cv_ans_hash(key, len), now, err, val, vlen);
}

static inline uint32_t cv_ans_bytes_hash(uint32_t h, const void *p, uint32_t len) {
    const unsigned char *b = (const unsigned char *)p;
    for (uint32_t i = 0; i < len; i++) h = cv_ans_hash_step(h, (char)b[i]);
    return h;
}

/* By dev and inode alone: the supervisor kills a directory's record knowing only those. */
static inline uint32_t cv_ans_did_hash(const struct cv_ans_id *id) {
    return cv_ans_bytes_hash(cv_ans_bytes_hash(CV_ANS_HASH_SEED, &id->dev, 8), &id->ino, 8);
}

static inline uint32_t cv_ans_ent_hash(const struct cv_ans_id *dir, const char *name, uint32_t len) {
    return cv_ans_bytes_hash(cv_ans_hash(name, len), dir, sizeof *dir);
}

/* The index ways of the set hash falls in, among `sets` sets of the index at `at`. */
static inline volatile uint32_t *cv_ans_ring_ways(const struct cv_ans_head *t, uint64_t at, uint32_t sets,
                                                  uint32_t hash) {
    volatile uint32_t *all = (volatile uint32_t *)(void *)((char *)(uintptr_t)t + at);
    return all + (hash & (sets - 1)) * CV_ANS_WAYS;
}

/* The number of the record an index way names for hash in a ring of n: UINT32_MAX when none,
 * another hash's, or out of the ring. */
static inline uint32_t cv_ans_ring_num(uint32_t way, uint32_t hash, uint32_t n) {
    uint32_t num = (way & CV_ANS_RING_NUM_MASK) - 1;
    return !way || ((way ^ hash) & ~CV_ANS_RING_NUM_MASK) || num >= n ? UINT32_MAX : num;
}

/* The record of `size` bytes an index way names for hash in the ring of n at `at`: NULL as above. */
static inline void *cv_ans_ring_at(const struct cv_ans_head *t, uint64_t at, uint32_t size, uint32_t n, uint32_t way,
                                   uint32_t hash) {
    uint32_t num = cv_ans_ring_num(way, hash, n);
    return num == UINT32_MAX ? NULL : (char *)(uintptr_t)t + at + (uint64_t)num * size;
}

static inline struct cv_ans_dir *cv_ans_dir_at(const struct cv_ans_head *t, uint32_t way, uint32_t hash) {
    return cv_ans_ring_at(t, CV_ANS_DIRS_AT, sizeof(struct cv_ans_dir), CV_ANS_DIRS_RING, way, hash);
}

static inline struct cv_ans_did *cv_ans_did_set(const struct cv_ans_head *t, uint32_t hash) {
    struct cv_ans_did *base = (struct cv_ans_did *)(void *)((char *)(uintptr_t)t + CV_ANS_DIRS_END);
    return base + (hash & (CV_ANS_DIR_SETS - 1)) * CV_ANS_WAYS;
}

static inline struct cv_ans_ent *cv_ans_ent_at(const struct cv_ans_head *t, uint32_t way, uint32_t hash) {
    return cv_ans_ring_at(t, CV_ANS_ENTS_AT, sizeof(struct cv_ans_ent), CV_ANS_ENTS, way, hash);
}

static inline int cv_ans_young(uint64_t born, uint64_t now) { return now >= born && now - born < CV_ANS_TTL_NS; }

static inline int cv_ans_same_id(const struct cv_ans_id *a, const struct cv_ans_id *b) {
    return a->mnt == b->mnt && a->dev == b->dev && a->ino == b->ino;
}

/* The identity of the directory at virtual path key (len bytes, whose cv_ans_hash is hash), good
 * now: 1 with *id. */
static inline int cv_ans_dir_get_hashed(const struct cv_ans_head *t, const char *key, uint32_t len, uint32_t hash,
                                        uint64_t now, struct cv_ans_id *id) {
    uint64_t gen = __atomic_load_n(&t->tree_gen, __ATOMIC_ACQUIRE);
    const volatile uint32_t *ways = cv_ans_ring_ways(t, CV_ANS_DIR_INDEX_AT, CV_ANS_DIR_SETS, hash);
    for (uint32_t w = 0; w < CV_ANS_WAYS; w++) {
        struct cv_ans_dir *d = cv_ans_dir_at(t, __atomic_load_n(&ways[w], __ATOMIC_ACQUIRE), hash);
        if (!d) continue;
        uint32_t seq = __atomic_load_n(&d->seq, __ATOMIC_ACQUIRE);
        if ((seq & 1) || d->hash != hash || d->klen != len || d->gen != gen || !cv_ans_young(d->born, now)) continue;
        int same = 1;
        for (uint32_t i = 0; i < len && same; i++) same = d->key[i] == key[i];
        if (!same) continue;
        struct cv_ans_id got = d->id;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&d->seq, __ATOMIC_RELAXED) != seq) return 0;
        *id = got;
        return 1;
    }
    return 0;
}

static inline int cv_ans_dir_get(const struct cv_ans_head *t, const char *key, uint32_t len, uint64_t now,
                                 struct cv_ans_id *id) {
    return cv_ans_dir_get_hashed(t, key, len, cv_ans_hash(key, len), now, id);
}

/* The record of the directory id, good now: the serial its entries are published under (0:
 * none), what was published (*level) and where its listing lies (*at, *len; *len 0: none).
 * level and at (with len) may be NULL. */
static inline uint64_t cv_ans_did_get(const struct cv_ans_head *t, const struct cv_ans_id *id, uint64_t now,
                                      uint32_t *level, uint64_t *at, uint32_t *len) {
    uint32_t hash = cv_ans_did_hash(id);
    struct cv_ans_did *d = cv_ans_did_set(t, hash);
    const volatile uint32_t *hint = cv_ans_hints(t, CV_ANS_HINT_DIDS, CV_ANS_DIR_SETS, hash);
    for (uint32_t w = 0; w < CV_ANS_WAYS; w++, d++) {
        if (hint[w] != hash) continue;
        uint32_t seq = __atomic_load_n(&d->seq, __ATOMIC_ACQUIRE);
        if ((seq & 1) || d->hash != hash || !d->serial || !cv_ans_young(d->born, now)) continue;
        struct cv_ans_id got = d->id;
        uint64_t serial = d->serial, where = d->list_at;
        uint32_t lv = d->level, n = d->list_len;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&d->seq, __ATOMIC_RELAXED) != seq || !cv_ans_same_id(&got, id)) continue;
        if (level) *level = lv;
        if (at) /* a forged length or place reads as no listing */
            *at = where, *len = n <= CV_ANS_LIST_MAX && (where & (CV_ANS_LIST_BYTES - 1)) + n <= CV_ANS_LIST_BYTES ? n : 0;
        return serial;
    }
    return 0;
}

/* The published listing of the directory id, good now: its serial (0: none) and where it lies. */
static inline uint64_t cv_ans_did_list(const struct cv_ans_head *t, const struct cv_ans_id *id, uint64_t now,
                                       uint64_t *at, uint32_t *len) {
    *len = 0;
    uint64_t serial = cv_ans_did_get(t, id, now, NULL, at, len);
    return *len ? serial : 0;
}

/* The listing of id read at `at` under serial is still what the table publishes (read after
 * the copy): it is written over once the writer claimed past at + CV_ANS_LIST_BYTES, and its
 * identity record changes when it is killed or published anew. */
static inline int cv_ans_listing_still(const struct cv_ans_head *t, const struct cv_ans_id *id, uint64_t now,
                                       uint64_t serial, uint64_t at) {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint64_t again_at;
    uint32_t again_len;
    return __atomic_load_n(&t->list_end, __ATOMIC_RELAXED) <= at + CV_ANS_LIST_BYTES &&
           cv_ans_did_list(t, id, now, &again_at, &again_len) == serial && again_at == at;
}

/* getdents64 from the published listing of the directory id, for an fd at offset pos (0: the
 * start; else the d_off of the record read last): the records that follow, as many as fit in cap
 * bytes, as the kernel gives them, and *last the d_off of the last one copied. The bytes copied
 * (0: the end), or -1 when the table cannot tell (no listing, pos names no record or more than
 * one, not one record fits: the kernel's EINVAL, or the listing changed while it was read). buf
 * may be written even then. */
static inline long cv_ans_listing(const struct cv_ans_head *t, const struct cv_ans_id *id, int64_t pos,
                                  uint64_t now, char *buf, size_t cap, int64_t *last) {
    uint64_t at;
    uint32_t len;
    uint64_t serial = cv_ans_did_list(t, id, now, &at, &len);
    if (!serial) return -1;
    /* records of d_ino (8), d_off (8), d_reclen (2), d_type (1), the name; each 8-aligned */
    const volatile uint64_t *b =
        (const volatile uint64_t *)(const void *)((const char *)t + CV_ANS_ENTS_END + (at & (CV_ANS_LIST_BYTES - 1)));
    uint32_t from = 0, rl;
    if (pos) {
        int found = 0;
        for (uint32_t o = 0; o < len; o += rl) {
            rl = (uint32_t)(b[o / 8 + 2] & 0xffff);
            if (rl < 24 || rl % 8 || rl > len - o) return -1;
            if ((int64_t)b[o / 8 + 1] != pos) continue;
            if (found++) return -1;
            from = o + rl;
        }
        if (!found) return -1;
    }
    size_t w = 0;
    for (uint32_t o = from; o < len; o += rl) {
        rl = (uint32_t)(b[o / 8 + 2] & 0xffff);
        if (rl < 24 || rl % 8 || rl > len - o) return -1;
        if (rl > cap - w) break;
        for (uint32_t i = 0; i < rl; i += 8) {
            uint64_t word = b[(o + i) / 8];
            __builtin_memcpy(buf + w + i, &word, 8);
        }
        *last = (int64_t)b[o / 8 + 1];
        w += rl;
    }
    if (!w && from < len) return -1;
    return cv_ans_listing_still(t, id, now, serial, at) ? (long)w : -1;
}

/* Whether the published listing of the directory id holds name (len bytes): 1 it does, 0 it
 * does not, -1 the table cannot tell (no listing, one longer than CV_ANS_HOLDS_MAX, a record that
 * does not parse, or the listing changed while it was read). A look-up scans the listing: past
 * ~500 names that costs an open of a name that exists about what a notification does. */
#define CV_ANS_HOLDS_MAX (16u << 10)
static inline int cv_ans_listing_holds(const struct cv_ans_head *t, const struct cv_ans_id *id, const char *name,
                                       uint32_t len, uint64_t now) {
    uint64_t at;
    uint32_t n;
    uint64_t serial = cv_ans_did_list(t, id, now, &at, &n);
    if (!serial || n > CV_ANS_HOLDS_MAX) return -1;
    const volatile unsigned char *b =
        (const volatile unsigned char *)(const void *)((const char *)t + CV_ANS_ENTS_END + (at & (CV_ANS_LIST_BYTES - 1)));
    int found = 0;
    for (uint32_t o = 0, rl; o < n && !found; o += rl) {
        rl = (uint32_t)b[o + 16] | (uint32_t)b[o + 17] << 8; /* d_reclen, after d_ino and d_off */
        if (rl < 24 || rl % 8 || rl > n - o) return -1;
        const volatile unsigned char *nm = b + o + 19; /* d_name, after d_type */
        uint32_t room = rl - 19, i = 0;
        while (i < len && i < room && nm[i] == (unsigned char)name[i]) i++;
        found = i == len && i < room && !nm[i];
    }
    return cv_ans_listing_still(t, id, now, serial, at) ? found : -1;
}

/* The entry `name` (len bytes) of the directory id, good now: 1 with its lstat and bits. */
static inline int cv_ans_ent_get(const struct cv_ans_head *t, const struct cv_ans_id *dir, const char *name,
                                 uint32_t len, uint64_t now, struct statx *stx, uint32_t *bits) {
    uint64_t serial = len <= CV_ANS_NAME_MAX ? cv_ans_did_get(t, dir, now, NULL, NULL, NULL) : 0;
    if (!serial) return 0;
    uint32_t hash = cv_ans_ent_hash(dir, name, len);
    const volatile uint32_t *ways = cv_ans_ring_ways(t, CV_ANS_ENT_INDEX_AT, CV_ANS_ENT_SETS, hash);
    for (uint32_t w = 0; w < CV_ANS_WAYS; w++) {
        struct cv_ans_ent *e = cv_ans_ent_at(t, __atomic_load_n(&ways[w], __ATOMIC_ACQUIRE), hash);
        if (!e) continue;
        uint32_t seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
        if ((seq & 1) || e->hash != hash || e->nlen != len || e->serial != serial || !cv_ans_young(e->born, now))
            continue;
        if (!cv_ans_same_id(&e->dir, dir)) continue;
        int same = 1;
        for (uint32_t i = 0; i < len && same; i++) same = e->name[i] == name[i];
        if (!same) continue;
        const volatile uint64_t *from = e->stx;
        volatile uint64_t *to = (volatile uint64_t *)(void *)stx; /* by words: no memcpy call */
        for (size_t i = 0; i < sizeof *stx / 8; i++) to[i] = i < CV_ANS_STX_BYTES / 8 ? from[i] : 0;
        uint32_t x = e->bits;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) != seq) return 0;
        /* killed meanwhile: what was read may be what the change is about to replace */
        if (cv_ans_did_get(t, dir, now, NULL, NULL, NULL) != serial) return 0;
        *bits = x;
        return 1;
    }
    return 0;
}

#endif
