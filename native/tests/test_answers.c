/* The answer table (common/answers_fmt.h, supervisor/answers.c): what the supervisor records a
 * guest reads back through a read-only mapping, only while it is good (its generation, its
 * age, its whole key), a slot being written reads as a miss, and no guest can write it.
 *
 * Output: one line per failure, then "answers: N passed, M failed". */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/answers_fmt.h"
#include "supervisor/answers.h"
#include "supervisor/run.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void test_keys(void) {
    check(cv_ans_key_ok("/") == 1, "/ is a key");
    check(cv_ans_key_ok("/usr/lib") == 8, "a plain absolute path is a key");
    check(cv_ans_key_ok("/a/..b/.c") == 9, "names that start with dots are names");
    const char *bad[] = {"", "usr", "./usr", "/usr/", "//usr", "/usr//lib", "/usr/.", "/usr/./lib", "/usr/..",
                         "/usr/../etc"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        check(!cv_ans_key_ok(bad[i]), "\"%s\" is not a key (it may name something else)", bad[i]);
    char longp[CV_ANS_KEY_MAX + 2];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/', longp[sizeof longp - 1] = 0;
    check(!cv_ans_key_ok(longp), "a key longer than a slot holds is refused");
    longp[CV_ANS_KEY_MAX] = 0;
    check(cv_ans_key_ok(longp) == CV_ANS_KEY_MAX, "the longest key fits");
}

static int get(const struct cv_ans_head *t, const char *key, uint64_t now, int32_t *err, char *val) {
    uint32_t vlen = 0;
    int hit = cv_ans_get(t, key, (uint32_t)strlen(key), now, err, val, &vlen);
    if (hit) val[vlen] = 0;
    return hit;
}

/* The run's table as a guest maps it (read-only) and *fd, its fd; NULL (a failure counted). */
static const struct cv_ans_head *map_table(struct cv_run *r, int *fd) {
    *fd = cv_answers_fd(r);
    check(*fd >= 0, "a guest's fd of the table: %d", *fd);
    const struct cv_ans_head *t = *fd < 0 ? MAP_FAILED : mmap(NULL, CV_ANS_BYTES, PROT_READ, MAP_SHARED, *fd, 0);
    check(t != MAP_FAILED, "it maps read-only");
    if (t != MAP_FAILED) return t;
    if (*fd >= 0) close(*fd);
    return NULL;
}

/* body on a new run's table, as a guest maps it. */
static void with_table(void (*body)(struct cv_run *, const struct cv_ans_head *)) {
    struct cv_run *r = cv_run_new("/bin/true");
    int fd;
    const struct cv_ans_head *t = map_table(r, &fd);
    if (t) {
        body(r, t);
        munmap((void *)(uintptr_t)t, CV_ANS_BYTES);
        close(fd);
    }
    cv_run_free(r);
}

static void test_table(void) {
    struct cv_run *r = cv_run_new("/bin/true");
    cv_answers_put(r, cv_answers_gens(r), "/lib", 0, "usr/lib", 7);
    check(cv_answers_gens(r).gone == 0, "no table until a guest asks for one");
    int fd;
    const struct cv_ans_head *t = map_table(r, &fd);
    if (!t) {
        cv_run_free(r);
        return;
    }
    check(t->stamp == CV_ANS_STAMP && t->sets == CV_ANS_SETS && t->slot_size == sizeof(struct cv_ans_slot),
          "its head says its shape");

    /* What no guest may do with it. */
    check(write(fd, "x", 1) < 0 && errno == EBADF, "its fd is read-only");
    check(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED, "no writable mapping of it");
    check(mprotect((void *)(uintptr_t)t, 4096, PROT_READ | PROT_WRITE) < 0, "its mapping cannot be made writable");
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    int rw = open(self, O_RDWR);
    check(rw < 0 || (write(rw, "x", 1) < 0 && errno == EPERM), "reopened for writing, it still refuses writes");
    if (rw >= 0) {
        check(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0) == MAP_FAILED,
              "reopened for writing, no writable mapping");
        check(ftruncate(rw, 0) < 0, "reopened for writing, it cannot be cut");
        check(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) < 0, "or holed");
        close(rw);
    }

    int32_t err;
    char val[CV_ANS_VAL_MAX + 1];
    struct cv_ans_gens gen = cv_answers_gens(r);
    cv_answers_put(r, gen, "/lib", 0, "usr/lib", 7);
    cv_answers_put(r, gen, "/usr", EINVAL, NULL, 0);
    cv_answers_put(r, gen, "/usr/none", ENOENT, NULL, 0);
    check(get(t, "/lib", now_ns(), &err, val) && err == 0 && !strcmp(val, "usr/lib"), "a link's target reads back");
    check(get(t, "/usr", now_ns(), &err, val) && err == EINVAL, "not a link reads back");
    check(get(t, "/usr/none", now_ns(), &err, val) && err == ENOENT, "a missing name reads back");
    check(!get(t, "/li", now_ns(), &err, val) && !get(t, "/lib64", now_ns(), &err, val), "only the whole key");
    check(!get(t, "/lib", now_ns() + CV_ANS_TTL_NS, &err, val), "an old record is not served");
    check(!get(t, "/lib", 1, &err, val), "nor one from the future");

    cv_answers_put(r, gen, "/usr/none2", ENOENT, NULL, 0);
    cv_answers_named(r, "/usr/none2");
    check(!get(t, "/usr/none2", now_ns(), &err, val), "the name about to be made is no longer missing");
    check(get(t, "/usr/none", now_ns(), &err, val) && get(t, "/lib", now_ns(), &err, val),
          "no other name's record goes");
    cv_answers_changing(r, CV_ANS_MADE);
    check(!get(t, "/usr/none", now_ns(), &err, val), "names made anywhere end the missing names' records");
    check(get(t, "/lib", now_ns(), &err, val) && get(t, "/usr", now_ns(), &err, val), "and no other");
    cv_answers_put(r, cv_answers_gens(r), "/usr/none", ENOENT, NULL, 0);
    cv_answers_changing(r, CV_ANS_GONE);
    check(!get(t, "/lib", now_ns(), &err, val) && !get(t, "/usr", now_ns(), &err, val),
          "a name gone ends every existing name's record");
    check(get(t, "/usr/none", now_ns(), &err, val), "and no missing one's");
    cv_answers_put(r, gen, "/lib", 0, "usr/lib", 7);
    check(!get(t, "/lib", now_ns(), &err, val), "an answer computed before a change is born stale");
    cv_answers_put(r, cv_answers_gens(r), "/lib", 0, "usr/lib64", 9);
    check(get(t, "/lib", now_ns(), &err, val) && !strcmp(val, "usr/lib64"), "one computed after it is served");

    /* A full set gives a way up; every key still answers right or not at all. */
    char keys[CV_ANS_WAYS * 3][32];
    uint32_t want = cv_ans_hash("/lib", 4) & (CV_ANS_SETS - 1);
    size_t nk = 0;
    for (unsigned i = 0; nk < sizeof keys / sizeof *keys; i++) {
        char k[32];
        snprintf(k, sizeof k, "/k%u", i);
        if ((cv_ans_hash(k, (uint32_t)strlen(k)) & (CV_ANS_SETS - 1)) != want) continue;
        memcpy(keys[nk++], k, sizeof k);
        cv_answers_put(r, cv_answers_gens(r), k, 0, k + 1, strlen(k) - 1);
    }
    int wrong = 0, hits = 0;
    for (size_t i = 0; i < nk; i++)
        if (get(t, keys[i], now_ns(), &err, val)) hits++, wrong += err || strcmp(val, keys[i] + 1);
    check(!wrong && hits == CV_ANS_WAYS, "a set holds its last %u keys, right (%d hits, %d wrong)", CV_ANS_WAYS, hits,
          wrong);

    /* A set with empty ways gives up none of its records, whatever was written elsewhere between. */
    uint32_t set2 = cv_ans_hash("/m0", 3) & (CV_ANS_SETS - 1);
    cv_answers_put(r, cv_answers_gens(r), "/m0", 0, "first", 5);
    char second[32] = "";
    for (unsigned i = 1, others = 0; !second[0] || others < CV_ANS_WAYS - 1; i++) {
        char k[32];
        snprintf(k, sizeof k, "/m%u", i);
        int same = (cv_ans_hash(k, (uint32_t)strlen(k)) & (CV_ANS_SETS - 1)) == set2;
        if (same && others == CV_ANS_WAYS - 1 && !second[0]) memcpy(second, k, sizeof k);
        else if (!same && others < CV_ANS_WAYS - 1) others++;
        else continue;
        cv_answers_put(r, cv_answers_gens(r), k, 0, "x", 1);
    }
    check(get(t, "/m0", now_ns(), &err, val) && !strcmp(val, "first") && get(t, second, now_ns(), &err, val),
          "a set's second record goes in an empty way, not over its first");

    cv_answers_put(r, cv_answers_gens(r), "/dev/pts/9", ENOENT, NULL, 0);
    cv_answers_put(r, cv_answers_gens(r), "/sys/class/net/x", ENOENT, NULL, 0);
    check(!get(t, "/dev/pts/9", now_ns(), &err, val) && !get(t, "/sys/class/net/x", now_ns(), &err, val),
          "names the kernel makes by itself (a pty's slave, /sys) are not recorded");
    cv_answers_put(r, cv_answers_gens(r), "/x/../y", 0, "z", 1);
    check(!get(t, "/x/../y", now_ns(), &err, val), "a path that is not a key is not recorded");
    char big[CV_ANS_VAL_MAX + 2];
    memset(big, 'v', sizeof big);
    cv_answers_put(r, cv_answers_gens(r), "/big", 0, big, sizeof big);
    check(!get(t, "/big", now_ns(), &err, val), "a target longer than a slot holds is not recorded");

    munmap((void *)(uintptr_t)t, CV_ANS_BYTES);
    close(fd);
    cv_run_free(r);
}

/* The same reader over a private copy whose slot is half written. */
static void test_torn(void) {
    size_t size = CV_ANS_BYTES;
    struct cv_ans_head *t = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) {
        failf("mmap: %s", strerror(errno));
        return;
    }
    t->gone_gen = 7;
    uint32_t h = cv_ans_hash("/a", 2);
    struct cv_ans_slot *s = cv_ans_set(t, h);
    *s = (struct cv_ans_slot){.seq = 2, .hash = h, .gen = 7, .born = now_ns(), .err = 0, .klen = 2, .vlen = 1};
    memcpy(s->key, "/a", 2);
    s->val[0] = 'b';
    int32_t err;
    char val[CV_ANS_VAL_MAX + 1];
    check(!get(t, "/a", now_ns(), &err, val), "a whole slot without its hint is not looked at");
    cv_ans_hints(t, CV_ANS_HINT_SLOTS, CV_ANS_SETS, h)[0] = h;
    check(get(t, "/a", now_ns(), &err, val) && !strcmp(val, "b"), "a whole slot reads");
    s->seq = 3;
    check(!get(t, "/a", now_ns(), &err, val), "a slot being written does not");
    s->seq = 4, s->vlen = CV_ANS_VAL_MAX + 1;
    check(!get(t, "/a", now_ns(), &err, val), "a forged length does not");
    munmap(t, size);
}

/* The old inodes of copied-up files, which a multi-threaded guest's shim checks an fd against
 * before it asks: listed before the count moves, those copied before the table was made too,
 * and "cannot tell" past what the list holds. */
static void test_copied(void) {
    struct cv_run *r = cv_run_new("/bin/true");
    r->copied_cap = CV_ANS_COPIED + 1;
    r->copied = calloc(r->copied_cap, sizeof *r->copied);
    if (!r->copied) {
        cv_run_free(r);
        return;
    }
    r->copied[r->ncopied++] = (struct cv_copied){.dev = 1, .ino = 10};
    cv_answers_copied(r);
    int fd;
    const struct cv_ans_head *t = map_table(r, &fd);
    if (!t) {
        cv_run_free(r);
        return;
    }
    check(t->copies == 1 && cv_ans_was_copied(t, 1, 10), "a copy made before the table is listed");
    check(!cv_ans_was_copied(t, 1, 11) && !cv_ans_was_copied(t, 2, 10), "no other inode is");
    r->copied[r->ncopied++] = (struct cv_copied){.dev = 1, .ino = 11};
    cv_answers_copied(r);
    check(t->copies == 2 && cv_ans_was_copied(t, 1, 11), "a later one is listed when the count moves");
    for (; r->ncopied < CV_ANS_COPIED; r->ncopied++) r->copied[r->ncopied] = (struct cv_copied){.dev = 3, .ino = r->ncopied};
    cv_answers_copied(r);
    check(!cv_ans_was_copied(t, 9, 9) && cv_ans_was_copied(t, 3, CV_ANS_COPIED - 1), "a full list still tells");
    r->copied[r->ncopied++] = (struct cv_copied){.dev = 4, .ino = 4};
    cv_answers_copied(r);
    check(cv_ans_was_copied(t, 9, 9), "past what it holds, any file may have been copied (the guest asks)");
    munmap((void *)(uintptr_t)t, CV_ANS_BYTES);
    close(fd);
    cv_run_free(r);
}

/* A getdents64 record (d_ino, d_off, d_reclen, d_type, name) at buf: its length. */
static size_t record(char *buf, uint64_t off, const char *name) {
    size_t len = (19 + strlen(name) + 1 + 7) & ~(size_t)7;
    memset(buf, 0, len);
    uint64_t ino = off + 1000;
    uint16_t reclen = (uint16_t)len;
    memcpy(buf, &ino, 8);
    memcpy(buf + 8, &off, 8);
    memcpy(buf + 16, &reclen, 2);
    buf[18] = 8; /* DT_REG */
    memcpy(buf + 19, name, strlen(name));
    return len;
}

static long listing(const struct cv_ans_head *t, const struct cv_ans_id *id, int64_t pos, size_t cap, char *out,
                    int64_t *last) {
    *last = -1;
    return cv_ans_listing(t, id, pos, now_ns(), out, cap, last);
}

static void test_listing(struct cv_run *r, const struct cv_ans_head *t) {
    char recs[256], out[256];
    size_t a = record(recs, 10, "a"), b = record(recs + a, 20, "bbbbbbbbb"), c = record(recs + a + b, 30, "c");
    size_t len = a + b + c;
    struct cv_ans_id id = {7, 8, 9}, other = {7, 8, 10};
    int64_t last;
    check(listing(t, &id, 0, sizeof out, out, &last) == -1, "no listing before it is published");
    uint64_t serial = cv_answers_serial(r), at = cv_answers_put_listing(r, recs, len);
    cv_answers_put_did(r, &id, serial, CV_ANS_DIRS_ONLY, at, len);
    check(listing(t, &id, 0, sizeof out, out, &last) == (long)len && !memcmp(out, recs, len) && last == 30,
          "the whole listing from the start, as the kernel gave it");
    check(listing(t, &id, 10, sizeof out, out, &last) == (long)(b + c) && !memcmp(out, recs + a, b + c),
          "what follows the record read last");
    check(listing(t, &id, 30, sizeof out, out, &last) == 0 && last == -1, "the end: nothing, and no offset to move to");
    check(listing(t, &id, a + b - 1, sizeof out, out, &last) == -1 && listing(t, &id, 15, sizeof out, out, &last) == -1,
          "an offset that names no record is the kernel's to answer");
    check(listing(t, &id, 0, a + b - 1, out, &last) == (long)a && last == 10, "as many records as fit");
    check(listing(t, &id, 10, b - 1, out, &last) == -1, "not one fits: the kernel's EINVAL");
    check(listing(t, &other, 0, sizeof out, out, &last) == -1, "another directory's is not given");
    cv_answers_dir_changing(r, 8, 9);
    check(listing(t, &id, 0, sizeof out, out, &last) == -1, "gone once the directory is about to change");

    /* twice the same offset: which record came last cannot be told */
    size_t d = record(recs + len, 30, "d");
    serial = cv_answers_serial(r), at = cv_answers_put_listing(r, recs, len + d);
    cv_answers_put_did(r, &id, serial, CV_ANS_DIRS_ONLY, at, len + d);
    check(listing(t, &id, 20, sizeof out, out, &last) == (long)(c + d), "records after a unique offset");
    check(listing(t, &id, 30, sizeof out, out, &last) == -1, "an offset two records have is the kernel's");

    /* the ring: a listing stays good until the writer claims its bytes again */
    serial = cv_answers_serial(r), at = cv_answers_put_listing(r, recs, len);
    cv_answers_put_did(r, &id, serial, CV_ANS_DIRS_ONLY, at, len);
    static char big[CV_ANS_LIST_MAX];
    for (;;) { /* as many as fit before the ring comes round to it (a listing never wraps) */
        uint64_t end = t->list_end, off = end & (CV_ANS_LIST_BYTES - 1);
        uint64_t next = (off + sizeof big > CV_ANS_LIST_BYTES ? end + CV_ANS_LIST_BYTES - off : end) + sizeof big;
        if (next > at + CV_ANS_LIST_BYTES) break;
        check(cv_answers_put_listing(r, big, sizeof big) != UINT64_MAX, "a long listing is kept");
    }
    check(listing(t, &id, 0, sizeof out, out, &last) == (long)len, "good while the ring has not come round");
    cv_answers_put_listing(r, big, sizeof big);
    check(listing(t, &id, 0, sizeof out, out, &last) == -1, "overwritten: not served, though its record is good");
    check(cv_answers_put_listing(r, big, CV_ANS_LIST_MAX + 8) == UINT64_MAX, "a listing longer than the table keeps is not");
}

/* An entry's lstat, as published, by its directory's identity and its name. */
static int entry(const struct cv_ans_head *t, const struct cv_ans_id *dir, const char *name, uint64_t *ino) {
    struct statx st;
    uint32_t bits;
    int got = cv_ans_ent_get(t, dir, name, (uint32_t)strlen(name), now_ns(), &st, &bits);
    if (got) *ino = st.stx_ino;
    return got;
}

static void put(struct cv_run *r, uint64_t serial, const struct cv_ans_id *dir, const char *name, uint64_t ino) {
    struct statx st = {.stx_ino = ino, .stx_mode = S_IFREG | 0644};
    cv_answers_put_entry(r, serial, dir, name, &st, 0);
}

static void test_entries(struct cv_run *r, const struct cv_ans_head *t) {
    struct cv_ans_id dir = {7, 8, 9}, other = {7, 8, 10};
    uint64_t ino = 0, serial = cv_answers_serial(r);
    char name[32];
    for (int i = 0; i < 40; i++) { /* more than one index set holds: found through the ring */
        snprintf(name, sizeof name, "file-%d", i);
        put(r, serial, &dir, name, 1000 + (uint64_t)i);
    }
    check(!entry(t, &dir, "file-3", &ino), "no entry before its directory's record says its serial");
    cv_answers_put_did(r, &dir, serial, CV_ANS_ENTRIES, UINT64_MAX, 0);
    int all = 1;
    for (int i = 0; i < 40 && all; i++) {
        snprintf(name, sizeof name, "file-%d", i);
        all = entry(t, &dir, name, &ino) && ino == 1000 + (uint64_t)i;
    }
    check(all, "each entry by its name");
    check(!entry(t, &dir, "file-40", &ino) && !entry(t, &other, "file-3", &ino),
          "a name not published, or another directory's, is not found");
    put(r, serial, &dir, "file-3", 2003);
    check(entry(t, &dir, "file-3", &ino) && ino == 2003, "published again: the new one");
    /* the ring comes round: what it wrote over is not served, the rest is */
    uint64_t serial2 = cv_answers_serial(r);
    for (uint32_t i = 0; i < CV_ANS_ENTS - 20; i++) {
        snprintf(name, sizeof name, "n%u", i);
        put(r, serial2, &other, name, i);
    }
    cv_answers_put_did(r, &other, serial2, CV_ANS_ENTRIES, UINT64_MAX, 0);
    /* (the index holds as many as the ring: some ways of older ones went to newer keys too) */
    int kept = 1;
    for (uint32_t i = CV_ANS_ENTS - 120; i < CV_ANS_ENTS - 20 && kept; i++) {
        snprintf(name, sizeof name, "n%u", i);
        kept = entry(t, &other, name, &ino) && ino == i;
    }
    check(!entry(t, &dir, "file-0", &ino) && !entry(t, &dir, "file-20", &ino) && kept,
          "the oldest entries are written over and not served, the newest are");
    /* directory path records: the same ring and index */
    uint64_t gen = __atomic_load_n(&t->tree_gen, __ATOMIC_ACQUIRE);
    struct cv_ans_id got;
    cv_answers_put_dir(r, gen, "/usr/share/doc", &dir);
    check(cv_ans_dir_get(t, "/usr/share/doc", 14, now_ns(), &got) && cv_ans_same_id(&got, &dir) &&
              !cv_ans_dir_get(t, "/usr/share/do", 13, now_ns(), &got),
          "a directory's identity by its path, not by a prefix of it");
    cv_answers_put_dir(r, gen, "/usr/share/doc", &other);
    check(cv_ans_dir_get(t, "/usr/share/doc", 14, now_ns(), &got) && cv_ans_same_id(&got, &other),
          "recorded again: the new identity");
    for (uint32_t i = 0; i < CV_ANS_DIRS_RING; i++) {
        snprintf(name, sizeof name, "/d/%u", i);
        cv_answers_put_dir(r, gen, name, &dir);
    }
    check(!cv_ans_dir_get(t, "/usr/share/doc", 14, now_ns(), &got) && cv_ans_dir_get(t, "/d/4000", 7, now_ns(), &got),
          "the ring came round: the oldest path record is not served, a new one is");
}

static void test_watched(void) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        failf("socketpair: %s", strerror(errno));
        return;
    }
    const int32_t nrs[] = {SYS_openat};
    struct cv_run *r = cv_run_new("/bin/true");
    check(cv_run_set_hook(r, nrs, 1, sv[0]) == 0, "a hook on openat");
    int fd = cv_answers_fd(r);
    check(fd == -ENOENT, "a run whose hook watches a call the shim serves keeps no table (%d)", fd);
    if (fd >= 0) close(fd);
    cv_run_free(r);
    close(sv[1]);
}

int main(void) {
    test_keys();
    test_table();
    test_torn();
    test_copied();
    with_table(test_listing);
    with_table(test_entries);
    test_watched();
    printf("answers: %lu passed, %lu failed\n", passed, failed);
    return failed != 0;
}
