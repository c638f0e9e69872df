/* cv_dirsnap: merged listings of an upper and a lower directory, the slot table
 * and the getdents64 cursor.
 *
 * The layers are real directories in a private mkdtemp tree under /tmp: lower
 * only, upper only, shadowing, whiteouts (and `.wh.` names that are not), an
 * opaque upper, a skip callback, non-UTF-8 and 255-byte names, a 20 000-entry
 * lower with thousands of shadows and whiteouts. Every listing is read back
 * through cv_dirsnap_fill (into unaligned buffers of many sizes, down to one
 * record per call) and compared with lstat of the providing layer. The slot
 * table is filled past its slot and memory caps; a thread smoke test hammers
 * it. Last, lseek on real directories must accept cursor offsets.
 *
 * Output: one line per failure, then "dirsnap: N passed, M failed".
 * Exit status 0 only when M == 0. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "overlay/dirsnap.h"
#include "check.h"

#define BIG 20000 /* entries in the big lower directory (more only slows CI: creating files dominates) */

static char tmp[PATH_MAX];

/* ---------- helpers ---------- */

static const char *show(const char *p) { /* printable form of a name */
    static char b[4][200];
    static int k;
    char *o = b[k++ & 3];
    size_t n = 0;
    for (size_t i = 0; p[i] && n + 8 < sizeof b[0]; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c >= 0x7f) n += (size_t)snprintf(o + n, sizeof b[0] - n, "\\x%02x", c);
        else o[n++] = (char)c;
    }
    o[n] = 0;
    return o;
}

static char *at(const char *rel) { /* tmp/rel, one of a few static buffers */
    static char b[8][PATH_MAX];
    static int k;
    char *o = b[k++ & 7];
    if (snprintf(o, PATH_MAX, "%s/%s", tmp, rel) >= PATH_MAX) exit(1);
    return o;
}

static void must(int ok, const char *what) {
    if (!ok) {
        printf("FAIL setup: %s: %s\n", what, strerror(errno));
        exit(1);
    }
}

static void mkd(const char *rel) { must(mkdir(at(rel), 0755) == 0, rel); }
static void mkf(const char *rel, const char *content) {
    int fd = open(at(rel), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    must(fd >= 0, rel);
    if (content) must(write(fd, content, strlen(content)) == (ssize_t)strlen(content), rel);
    close(fd);
}
static void mkl(const char *rel, const char *target) { must(symlink(target, at(rel)) == 0, rel); }
static void mkp(const char *rel) { must(mkfifo(at(rel), 0644) == 0, rel); }

static int dopen(const char *rel) {
    int fd = open(at(rel), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    must(fd >= 0, rel);
    return fd;
}

static size_t rl(size_t namelen) { return (19 + namelen + 1 + 7) & ~(size_t)7; }

/* One record as read back from a fill. */
struct rec {
    uint64_t ino;
    uint64_t off;
    unsigned char type;
    char name[256];
};
struct recs {
    struct rec *r;
    size_t n, cap;
};

/* Parse n bytes of records (any alignment) from a fill that started at entry
 * first, checking each record's framing and d_off. */
static void parse(const char *what, const unsigned char *p, size_t n, uint32_t slot, uint32_t first,
                  struct recs *out) {
    size_t pos = 0, base = out->n;
    while (pos < n) {
        if (n - pos < 24) {
            failf("%s: %zu stray bytes after the records", what, n - pos);
            return;
        }
        uint64_t ino, off;
        uint16_t reclen;
        memcpy(&ino, p + pos, 8);
        memcpy(&off, p + pos + 8, 8);
        memcpy(&reclen, p + pos + 16, 2);
        const char *name = (const char *)p + pos + 19;
        size_t len = strnlen(name, n - pos - 19);
        if (reclen % 8 || reclen != rl(len) || reclen > n - pos) {
            failf("%s: record at %zu: reclen %u for a %zu-byte name (%zu bytes left)", what, pos, reclen, len,
                  n - pos);
            return;
        }
        int pad_ok = 1;
        for (size_t k = 19 + len; k < reclen; k++) pad_ok &= p[pos + k] == 0;
        check(pad_ok, "%s: record %s: padding not zero", what, show(name));
        if (out->n == out->cap) {
            out->cap = out->cap ? out->cap * 2 : 64;
            out->r = realloc(out->r, out->cap * sizeof *out->r);
            must(out->r != NULL, "realloc");
        }
        uint32_t idx = first + (uint32_t)(out->n - base);
        check(cv_dirsnap_off_slot(off) == slot && cv_dirsnap_off_idx(off) == idx + 1 &&
                  off == cv_dirsnap_off(slot, idx + 1),
              "%s: entry %u d_off %#llx decodes to slot %u index %u, expected %u %u", what, idx,
              (unsigned long long)off, cv_dirsnap_off_slot(off), cv_dirsnap_off_idx(off), slot, idx + 1);
        struct rec *r = &out->r[out->n++];
        r->ino = ino;
        r->off = off;
        r->type = p[pos + 18];
        memcpy(r->name, name, len + 1);
        pos += reclen;
    }
}

/* The whole listing through fill with buffers of buflen bytes (0: exactly one
 * record per call), placed at an odd address. */
static void read_all(const char *what, const struct cv_dirsnap *s, uint32_t slot, size_t buflen, struct recs *out) {
    out->n = 0;
    size_t cnt = cv_dirsnap_count(s);
    unsigned char *mem = malloc((buflen ? buflen : 512) + 1);
    must(mem != NULL, "malloc");
    unsigned char *buf = mem + 1;
    uint32_t i = 0;
    for (size_t calls = 0; calls <= cnt + 1; calls++) {
        size_t len = buflen;
        if (!buflen) len = i < cnt ? rl(strlen(cv_dirsnap_entry(s, i)->name)) : 64;
        uint32_t next = 0xdeadbeef;
        size_t before = out->n;
        ssize_t r = cv_dirsnap_fill(s, slot, i, buf, len, &next);
        if (r == 0) {
            check(i >= cnt && next == i, "%s: fill returned 0 at %u of %zu (next %u)", what, i, cnt, next);
            break;
        }
        if (r == -EINVAL) {
            size_t need = rl(strlen(cv_dirsnap_entry(s, i)->name));
            check(i < cnt && need > len && next == i,
                  "%s: -EINVAL at %u with len %zu, record needs %zu (next %u)", what, i, len, need, next);
            break;
        }
        if (r < 0 || (size_t)r > len) {
            failf("%s: fill at %u returned %zd for len %zu", what, i, r, len);
            break;
        }
        parse(what, buf, (size_t)r, slot, i, out);
        check(next == i + (out->n - before), "%s: next %u after %zu records from %u", what, next,
              out->n - before, i);
        if (!buflen) check(out->n - before == 1, "%s: exact-size buffer at %u held %zu records", what, i,
                           out->n - before);
        /* the batch was maximal: the next record would not have fitted */
        if (next < cnt)
            check((size_t)r + rl(strlen(cv_dirsnap_entry(s, next)->name)) > len,
                  "%s: fill stopped at %u with room left (%zd of %zu)", what, next, r, len);
        i = next;
    }
    free(mem);
}

/* Expected entry: name, and the host object (relative to tmp) giving ino and type. */
struct exp {
    const char *name;
    const char *host;
};

static unsigned char dt_of(const struct stat *st) { return (unsigned char)IFTODT(st->st_mode); }

/* s lists ".", ".." (of top) then exactly e[0..n), whatever the buffer size. */
static void expect(const char *what, const struct cv_dirsnap *s, const char *top, const struct exp *e, size_t n) {
    static const size_t sizes[] = {65536, 0, 24, 31, 32, 40, 100, 280, 333, 4096};
    struct recs all = {0}, other = {0};
    read_all(what, s, 7, sizes[0], &all);
    check(cv_dirsnap_count(s) == n + 2 && all.n == n + 2, "%s: %zu entries (count %zu), expected %zu", what,
          all.n, cv_dirsnap_count(s), n + 2);
    struct stat st, pst;
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s/..", at(top));
    must(stat(at(top), &st) == 0 && stat(parent, &pst) == 0, top);
    if (all.n >= 2) {
        check(!strcmp(all.r[0].name, ".") && all.r[0].ino == st.st_ino && all.r[0].type == DT_DIR,
              "%s: entry 0 is %s ino %llu type %u, expected . ino %llu dir", what, show(all.r[0].name),
              (unsigned long long)all.r[0].ino, all.r[0].type, (unsigned long long)st.st_ino);
        check(!strcmp(all.r[1].name, "..") && all.r[1].ino == pst.st_ino && all.r[1].type == DT_DIR,
              "%s: entry 1 is %s ino %llu type %u, expected .. ino %llu dir", what, show(all.r[1].name),
              (unsigned long long)all.r[1].ino, all.r[1].type, (unsigned long long)pst.st_ino);
    }
    for (size_t k = 0; k < n && k + 2 < all.n; k++) {
        const struct rec *r = &all.r[k + 2];
        struct stat hs;
        must(lstat(at(e[k].host), &hs) == 0, e[k].host);
        check(!strcmp(r->name, e[k].name) && r->ino == hs.st_ino && r->type == dt_of(&hs),
              "%s: entry %zu is %s ino %llu type %u, expected %s ino %llu type %u (%s)", what, k + 2, show(r->name),
              (unsigned long long)r->ino, r->type, show(e[k].name), (unsigned long long)hs.st_ino, dt_of(&hs),
              show(e[k].host));
    }
    /* the accessor agrees */
    for (uint32_t k = 0; k < all.n; k++) {
        const struct cv_dirent *d = cv_dirsnap_entry(s, k);
        check(d && !strcmp(d->name, all.r[k].name) && d->ino == all.r[k].ino && d->type == all.r[k].type &&
                  d->off == 0 && d->reclen == rl(strlen(d->name)),
              "%s: cv_dirsnap_entry(%u) differs from the filled record", what, k);
    }
    check(cv_dirsnap_entry(s, (uint32_t)cv_dirsnap_count(s)) == NULL, "%s: entry past the end", what);
    /* every other buffer size reproduces the same list */
    for (size_t z = 1; z < sizeof sizes / sizeof *sizes; z++) {
        read_all(what, s, 7, sizes[z], &other);
        if (sizes[z] && sizes[z] < rl(1)) {
            check(other.n == 0, "%s: %zu records with a %zu-byte buffer", what, other.n, sizes[z]);
            continue;
        }
        size_t longest = 0;
        for (size_t k = 0; k < all.n; k++)
            if (rl(strlen(all.r[k].name)) > longest) longest = rl(strlen(all.r[k].name));
        if (sizes[z] && sizes[z] < longest) continue; /* stops (-EINVAL) at the first record too big */
        int same = other.n == all.n;
        for (size_t k = 0; same && k < all.n; k++)
            same = !strcmp(other.r[k].name, all.r[k].name) && other.r[k].ino == all.r[k].ino &&
                   other.r[k].type == all.r[k].type && other.r[k].off == all.r[k].off;
        check(same, "%s: buffer of %zu bytes gives %zu records, differing from the %zu of one big read", what,
              sizes[z], other.n, all.n);
    }
    free(all.r);
    free(other.r);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(p);
}

/* ---------- the trees ---------- */

static char name255[256];

static void make_trees(void) {
    snprintf(tmp, sizeof tmp, "/tmp/cv-dirsnap-XXXXXX");
    must(mkdtemp(tmp) != NULL, "mkdtemp");
    /* 1: kinds of entries */
    mkd("lo1"), mkf("lo1/f", "x"), mkd("lo1/d"), mkl("lo1/l", "f"), mkp("lo1/p");
    mkd("up1"), mkf("up1/g", NULL), mkd("up1/e"), mkl("up1/m", "/nowhere");
    /* 2: shadowing */
    mkd("lo2"), mkf("lo2/a", NULL), mkf("lo2/b", NULL), mkd("lo2/s"), mkf("lo2/z", NULL);
    mkd("up2"), mkd("up2/b"), mkf("up2/c", NULL), mkf("up2/s", NULL);
    /* 3: whiteouts */
    mkd("lo3");
    const char *lo3[] = {"a", "b", "c", "q", "x", "y", ".wh.host", ".wh..wh..opq"};
    for (size_t k = 0; k < sizeof lo3 / sizeof *lo3; k++) {
        char p[64];
        snprintf(p, sizeof p, "lo3/%s", lo3[k]);
        mkf(p, NULL);
    }
    mkd("up3"), mkf("up3/.wh.a", NULL), mkf("up3/.wh.b", NULL), mkf("up3/.wh.gone", NULL);
    mkf("up3/.wh.x", "not empty"), mkd("up3/.wh.y"), mkf("up3/c", NULL), mkf("up3/n", NULL);
    mkf("up3/.wh.", NULL), mkf("up3/.wh..", NULL), mkf("up3/.wh...", NULL);
    /* 4, 5: opaque, and an opaque marker that is a directory (not opaque) */
    mkd("lo4"), mkf("lo4/a", NULL), mkf("lo4/b", NULL);
    mkd("up4"), mkf("up4/.wh..wh..opq", NULL), mkf("up4/u", NULL), mkf("up4/.wh.a", NULL);
    mkd("up5"), mkd("up5/.wh..wh..opq"), mkf("up5/v", NULL);
    /* 6: names that are not UTF-8 */
    for (size_t k = 0; k < 255; k++) name255[k] = (char)(0x80 + k % 0x7f);
    char p[PATH_MAX];
    mkd("lo6"), mkf("lo6/\xff\xfe", NULL), mkf("lo6/caf\xe9", NULL), mkf("lo6/plain", NULL);
    mkf("lo6/\x01" "ctl", NULL), mkf("lo6/\xc3\x28", NULL);
    snprintf(p, sizeof p, "lo6/%s", name255), mkf(p, NULL);
    mkd("up6"), mkd("up6/caf\xe9"), mkf("up6/.wh.\xff\xfe", NULL), mkf("up6/\xe2\x82", NULL);
    snprintf(p, sizeof p, "up6/.wh.%.*s", 250, name255), mkf(p, NULL); /* deletes nothing: a prefix only */
}

static void make_big(void) {
    mkd("lo7"), mkd("up7");
    int lo = dopen("lo7"), up = dopen("up7");
    char n[32];
    for (int i = 0; i < BIG; i++) {
        snprintf(n, sizeof n, "f%06d", i);
        must(mknodat(lo, n, S_IFREG | 0644, 0) == 0, "lo7 entry");
        if (i % 7 == 0) must(mkdirat(up, n, 0755) == 0, "up7 shadow");
        if (i % 10 == 3) {
            snprintf(n, sizeof n, ".wh.f%06d", i);
            must(mknodat(up, n, S_IFREG | 0644, 0) == 0, "up7 whiteout");
        }
    }
    for (int i = 0; i < 1000; i++) {
        snprintf(n, sizeof n, "u%05d", i);
        must(mknodat(up, n, S_IFREG | 0644, 0) == 0, "up7 entry");
    }
    close(lo);
    close(up);
}

/* ---------- cases ---------- */

#define N(a) (sizeof a / sizeof *a)

static struct cv_dirsnap *build(const char *what, const char *up, const char *lo,
                                int (*skip)(const char *, void *), void *arg) {
    int u = up ? dopen(up) : -1, l = lo ? dopen(lo) : -1;
    struct cv_dirsnap *s = cv_dirsnap_build(u, l, skip, arg);
    check(s != NULL, "%s: build failed: %s", what, strerror(errno));
    if (s) check(cv_dirsnap_matches(s, u, l) == 1, "%s: does not match its own layers", what);
    if (u >= 0) close(u);
    if (l >= 0) close(l);
    return s;
}

static void test_layers(void) {
    struct cv_dirsnap *s;
    const struct exp lower_only[] = {{"d", "lo1/d"}, {"f", "lo1/f"}, {"l", "lo1/l"}, {"p", "lo1/p"}};
    if ((s = build("lower only", NULL, "lo1", NULL, NULL))) expect("lower only", s, "lo1", lower_only, N(lower_only));
    cv_dirsnap_unref(s);

    const struct exp upper_only[] = {{"e", "up1/e"}, {"g", "up1/g"}, {"m", "up1/m"}};
    if ((s = build("upper only", "up1", NULL, NULL, NULL))) expect("upper only", s, "up1", upper_only, N(upper_only));
    cv_dirsnap_unref(s);

    const struct exp shadow[] = {{"b", "up2/b"}, {"c", "up2/c"}, {"s", "up2/s"}, {"a", "lo2/a"}, {"z", "lo2/z"}};
    if ((s = build("shadowing", "up2", "lo2", NULL, NULL))) {
        expect("shadowing", s, "up2", shadow, N(shadow));
        int u = dopen("up2"), l = dopen("lo2"), o = dopen("lo1");
        check(cv_dirsnap_matches(s, u, l) == 1 && !cv_dirsnap_matches(s, -1, l) && !cv_dirsnap_matches(s, l, u) &&
                  !cv_dirsnap_matches(s, u, -1) && !cv_dirsnap_matches(s, u, o),
              "shadowing: cv_dirsnap_matches accepts other layers");
        close(u), close(l), close(o);
    }
    cv_dirsnap_unref(s);

    /* whiteouts: .wh.a, .wh.b delete; .wh.gone deletes nothing; .wh.x (not empty) and
     * .wh.y (a directory) delete too (any entry by that name is a whiteout, as for the
     * resolver's look-ups and OCI readers); lower .wh. names never show, and a lower opaque
     * marker means nothing */
    const struct exp wh[] = {{"c", "up3/c"}, {"n", "up3/n"}, {"q", "lo3/q"}};
    if ((s = build("whiteouts", "up3", "lo3", NULL, NULL))) expect("whiteouts", s, "up3", wh, N(wh));
    cv_dirsnap_unref(s);
    /* whiteouts need no lower: upper alone lists none of them */
    const struct exp wh_up[] = {{"c", "up3/c"}, {"n", "up3/n"}};
    if ((s = build("whiteouts, no lower", "up3", NULL, NULL, NULL)))
        expect("whiteouts, no lower", s, "up3", wh_up, N(wh_up));
    cv_dirsnap_unref(s);
    /* the lower's own .wh. names are hidden too */
    const struct exp lo3_only[] = {{"a", "lo3/a"}, {"b", "lo3/b"}, {"c", "lo3/c"}, {"q", "lo3/q"},
                                   {"x", "lo3/x"}, {"y", "lo3/y"}};
    if ((s = build("lower with .wh. names", NULL, "lo3", NULL, NULL)))
        expect("lower with .wh. names", s, "lo3", lo3_only, N(lo3_only));
    cv_dirsnap_unref(s);

    const struct exp opaque[] = {{"u", "up4/u"}};
    if ((s = build("opaque", "up4", "lo4", NULL, NULL))) expect("opaque", s, "up4", opaque, N(opaque));
    cv_dirsnap_unref(s);
    const struct exp not_opaque[] = {{"v", "up5/v"}, {"a", "lo4/a"}, {"b", "lo4/b"}};
    if ((s = build("opaque marker is a directory", "up5", "lo4", NULL, NULL)))
        expect("opaque marker is a directory", s, "up5", not_opaque, N(not_opaque));
    cv_dirsnap_unref(s);

    char lo255[300], *n255 = name255;
    snprintf(lo255, sizeof lo255, "lo6/%s", name255);
    const struct exp utf[] = {{"caf\xe9", "up6/caf\xe9"}, {"\xe2\x82", "up6/\xe2\x82"},
                              {"\x01" "ctl", "lo6/\x01" "ctl"},
                              {"plain", "lo6/plain"}, {n255, lo255}, {"\xc3\x28", "lo6/\xc3\x28"}};
    if ((s = build("non-UTF-8", "up6", "lo6", NULL, NULL))) {
        expect("non-UTF-8", s, "up6", utf, N(utf));
        /* 255-byte name: the biggest record, exactly 280 bytes */
        const struct cv_dirent *d = cv_dirsnap_entry(s, 6);
        check(d && strlen(d->name) == 255 && d->reclen == 280, "non-UTF-8: the 255-byte name's record is %u bytes",
              d ? d->reclen : 0);
    }
    cv_dirsnap_unref(s);
}

struct skipper {
    const char *const *hide;
    size_t n;
    int calls, dots;
};

static int skip_cb(const char *name, void *arg) {
    struct skipper *k = arg;
    k->calls++;
    if (!strcmp(name, ".") || !strcmp(name, "..")) k->dots++;
    for (size_t i = 0; i < k->n; i++)
        if (!strcmp(name, k->hide[i])) return 1;
    return 0;
}

static void test_skip(void) {
    const char *hide1[] = {"c", "a", "nothing"};
    struct skipper k = {hide1, N(hide1), 0, 0};
    struct cv_dirsnap *s = build("skip", "up2", "lo2", skip_cb, &k);
    const struct exp e1[] = {{"b", "up2/b"}, {"c", "up2/c"}, {"s", "up2/s"}, {"z", "lo2/z"}};
    if (s) expect("skip", s, "up2", e1, N(e1));
    cv_dirsnap_unref(s);
    check(k.calls == 2 && k.dots == 0, "skip: %d calls, %d for . or ..", k.calls, k.dots);
    /* only the lower's names are asked about: the upper's own entry of a skipped name shows */
    const char *hide2[] = {"s", "b", "c", "z"};
    struct skipper k2 = {hide2, N(hide2), 0, 0};
    const struct exp e2[] = {{"b", "up2/b"}, {"c", "up2/c"}, {"s", "up2/s"}, {"a", "lo2/a"}};
    if ((s = build("skip the lower only", "up2", "lo2", skip_cb, &k2)))
        expect("skip the lower only", s, "up2", e2, N(e2));
    cv_dirsnap_unref(s);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static struct cv_dirsnap *test_big(void) {
    make_big();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct cv_dirsnap *s = build("100k", "up7", "lo7", NULL, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!s) return NULL;
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    /* the expected names: upper shadows (dirs) and u*, then the lower's survivors */
    size_t n = 0;
    char **want = malloc((BIG + 1000) * sizeof *want);
    unsigned char *type = malloc(BIG + 1000);
    must(want && type, "malloc");
    for (int i = 0; i < BIG; i += 7) want[n] = malloc(16), snprintf(want[n], 16, "f%06d", i), type[n++] = DT_DIR;
    for (int i = 0; i < 1000; i++) want[n] = malloc(16), snprintf(want[n], 16, "u%05d", i), type[n++] = DT_REG;
    for (int i = 0; i < BIG; i++)
        if (i % 7 && i % 10 != 3) want[n] = malloc(16), snprintf(want[n], 16, "f%06d", i), type[n++] = DT_REG;
    printf("dirsnap: 100k lower + %zu upper entries built in %.1f ms (ASan), %zu listed, %zu bytes\n",
           (size_t)(BIG / 7 + 1 + 1000 + BIG / 10), ms, cv_dirsnap_count(s), cv_dirsnap_size(s));
    check(ms < 5000, "100k: build took %.0f ms", ms);
    check(cv_dirsnap_count(s) == n + 2, "100k: %zu entries, expected %zu", cv_dirsnap_count(s), n + 2);
    size_t sizes[] = {32768, 4096, 0};
    struct recs r = {0};
    for (size_t z = 0; z < N(sizes); z++) {
        char what[64];
        snprintf(what, sizeof what, "100k, %zu-byte buffers", sizes[z]);
        read_all(what, s, 0x7fffffff, sizes[z], &r);
        size_t bad = 0;
        for (size_t k = 0; k < n && k + 2 < r.n; k++)
            if (strcmp(r.r[k + 2].name, want[k]) || r.r[k + 2].type != type[k]) {
                if (!bad) failf("%s: entry %zu is %s type %u, expected %s type %u", what, k + 2, r.r[k + 2].name,
                                r.r[k + 2].type, want[k], type[k]);
                bad++;
            }
        check(r.n == n + 2 && bad == 0, "%s: %zu records, %zu wrong", what, r.n, bad);
    }
    /* no duplicates */
    char **names = malloc(r.n * sizeof *names);
    for (size_t k = 0; k < r.n; k++) names[k] = r.r[k].name;
    qsort(names, r.n, sizeof *names, cmp_str);
    size_t dup = 0;
    for (size_t k = 1; k < r.n; k++) dup += !strcmp(names[k - 1], names[k]);
    check(dup == 0, "100k: %zu duplicate names", dup);
    free(names);
    free(r.r);
    for (size_t k = 0; k < n; k++) free(want[k]);
    free(want);
    free(type);
    return s;
}

static void test_fill_edges(void) {
    struct cv_dirsnap *s = build("fill edges", "up2", "lo2", NULL, NULL);
    if (!s) return;
    unsigned char buf[600];
    uint32_t next = 99;
    ssize_t r = cv_dirsnap_fill(s, 5, 0, buf, 0, &next);
    check(r == -EINVAL && next == 0, "fill len 0: %zd next %u, expected -EINVAL 0", r, next);
    r = cv_dirsnap_fill(s, 5, 0, buf, 23, &next);
    check(r == -EINVAL && next == 0, "fill len 23: %zd next %u, expected -EINVAL", r, next);
    r = cv_dirsnap_fill(s, 5, 0, buf, 24, &next);
    check(r == 24 && next == 1, "fill len 24 at 0: %zd next %u, expected 24 1 (\".\")", r, next);
    r = cv_dirsnap_fill(s, 5, 1, buf, 47, &next);
    check(r == 24 && next == 2, "fill len 47 at 1: %zd next %u, expected 24 2 (\"..\")", r, next);
    r = cv_dirsnap_fill(s, 5, 0, buf, sizeof buf, NULL); /* next may be NULL */
    check(r == 7 * 24, "fill everything: %zd bytes, expected %d", r, 7 * 24);
    uint32_t cnt = (uint32_t)cv_dirsnap_count(s);
    r = cv_dirsnap_fill(s, 5, cnt, buf, sizeof buf, &next);
    check(r == 0 && next == cnt, "fill at the end: %zd next %u", r, next);
    r = cv_dirsnap_fill(s, 5, cnt + 10, buf, 0, &next);
    check(r == 0 && next == cnt + 10, "fill past the end with len 0: %zd next %u", r, next);
    r = cv_dirsnap_fill(s, 5, UINT32_MAX, buf, sizeof buf, &next);
    check(r == 0, "fill at index 0xffffffff: %zd", r);
    cv_dirsnap_unref(s);
}

static void test_cursor(void) {
    uint64_t o = cv_dirsnap_off(12345, 7);
    check(o == ((12345ULL << 32) | 7) && cv_dirsnap_off_slot(o) == 12345 && cv_dirsnap_off_idx(o) == 7,
          "cursor (12345, 7): %#llx", (unsigned long long)o);
    o = cv_dirsnap_off(CV_DIRSNAP_SLOT_MAX, UINT32_MAX);
    check(o <= INT64_MAX && (int64_t)o > 0 && cv_dirsnap_off_slot(o) == CV_DIRSNAP_SLOT_MAX &&
              cv_dirsnap_off_idx(o) == UINT32_MAX,
          "cursor (max, max): %#llx is not a positive loff_t", (unsigned long long)o);
    check(cv_dirsnap_off(1, 0) != 0 && cv_dirsnap_off_slot(0) == 0 && cv_dirsnap_off_idx(0) == 0,
          "cursor: offset 0 is only the start");
}

static void test_errors(void) {
    errno = 0;
    check(cv_dirsnap_build(-1, -1, NULL, NULL) == NULL && errno == EINVAL, "build(-1, -1): errno %d", errno);
    int f = open(at("lo1/f"), O_RDONLY | O_CLOEXEC);
    errno = 0;
    struct cv_dirsnap *s = cv_dirsnap_build(f, -1, NULL, NULL);
    check(s == NULL && errno == ENOTDIR, "build(file, -1): %p errno %d", (void *)s, errno);
    cv_dirsnap_unref(s);
    errno = 0;
    s = cv_dirsnap_build(-1, f, NULL, NULL);
    check(s == NULL && errno == ENOTDIR, "build(-1, file): %p errno %d", (void *)s, errno);
    cv_dirsnap_unref(s);
    close(f);
    check(cv_dirsnap_build(-1, 9999, NULL, NULL) == NULL && errno == EBADF, "build(-1, bad fd): errno %d", errno);
    cv_dirsnap_unref(NULL);

    /* the caller's fd offset is untouched, and the listing is complete anyway */
    int l = dopen("lo2");
    char b[64] __attribute__((aligned(8)));
    ssize_t n = getdents64(l, b, sizeof b);
    off_t pos = lseek(l, 0, SEEK_CUR);
    s = cv_dirsnap_build(-1, l, NULL, NULL);
    check(n > 0 && pos > 0 && lseek(l, 0, SEEK_CUR) == pos, "build moved the caller's offset (%lld -> %lld)",
          (long long)pos, (long long)lseek(l, 0, SEEK_CUR));
    check(s && cv_dirsnap_count(s) == 6, "listing from a half-read fd: %zu entries, expected 6",
          s ? cv_dirsnap_count(s) : 0);
    cv_dirsnap_unref(s);
    close(l);

    /* a readable directory without search permission (the procfs reopen); as root, the
     * thread drops its fs capabilities with setfsuid (and leaves the root group) */
    mkd("lo8"), mkf("lo8/one", NULL), mkf("lo8/two", NULL);
    int d = dopen("lo8");
    must(chmod(at("lo8"), 0404) == 0, "chmod");
    int root = geteuid() == 0;
    if (root) setfsgid(65534), setfsuid(65534);
    int denied = openat(d, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) < 0 && errno == EACCES;
    s = cv_dirsnap_build(-1, d, NULL, NULL);
    if (root) setfsuid(0), setfsgid(0);
    check(denied, "lo8: openat(fd, \".\") was not denied: the case tests nothing");
    check(s && cv_dirsnap_count(s) == 4 && !strcmp(cv_dirsnap_entry(s, 2)->name, "one") &&
              !strcmp(cv_dirsnap_entry(s, 3)->name, "two"),
          "readable, unsearchable lower: %s", s ? "wrong listing" : strerror(errno));
    cv_dirsnap_unref(s);
    must(chmod(at("lo8"), 0755) == 0, "chmod");
    close(d);
}

/* ---------- the slot table ---------- */

static void test_table(struct cv_dirsnap *big) {
    struct cv_dirsnap *small = build("table", "up2", "lo2", NULL, NULL);
    if (!small) return;
    uint32_t a = cv_dirsnap_store(small);
    check(a >= 1 && a <= CV_DIRSNAP_SLOT_MAX, "store: slot %u", a);
    struct cv_dirsnap *g = cv_dirsnap_get(a);
    check(g == small, "get(%u) is %p, expected %p", a, (void *)g, (void *)small);
    cv_dirsnap_unref(g);
    check(cv_dirsnap_get(0) == NULL && cv_dirsnap_get(CV_DIRSNAP_SLOT_MAX + 1u) == NULL &&
              cv_dirsnap_get(UINT32_MAX) == NULL,
          "get of an impossible slot");
    check(cv_dirsnap_get(a ^ (1u << CV_DIRSNAP_SLOT_BITS)) == NULL, "get of another generation of %u", a);
    uint32_t b = cv_dirsnap_store(small);
    check(b != a && cv_dirsnap_get(b) == small, "second store of one snapshot: slot %u (first %u)", b, a);
    cv_dirsnap_unref(small);
    cv_dirsnap_drop(a);
    check(cv_dirsnap_get(a) == NULL, "get after drop");
    cv_dirsnap_drop(a);  /* twice: ignored */
    cv_dirsnap_drop(0);
    cv_dirsnap_drop(UINT32_MAX);
    cv_dirsnap_drop(b);

    /* the slot cap: one more store than there are slots evicts the least recently used */
    uint32_t *slots = malloc((CV_DIRSNAP_SLOTS + 2) * sizeof *slots);
    must(slots != NULL, "malloc");
    for (unsigned k = 0; k < CV_DIRSNAP_SLOTS; k++) slots[k] = cv_dirsnap_store(small);
    size_t live = 0, distinct = 1;
    for (unsigned k = 0; k < CV_DIRSNAP_SLOTS; k++) {
        struct cv_dirsnap *x = cv_dirsnap_get(slots[k]);
        live += x == small;
        cv_dirsnap_unref(x);
    }
    /* gets above touched every slot in order: slots[0] is again the least recent */
    uint32_t *sorted = malloc(CV_DIRSNAP_SLOTS * sizeof *sorted);
    memcpy(sorted, slots, CV_DIRSNAP_SLOTS * sizeof *sorted);
    for (unsigned k = 1; k < CV_DIRSNAP_SLOTS; k++)
        for (unsigned j = k; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            uint32_t t = sorted[j];
            sorted[j] = sorted[j - 1], sorted[j - 1] = t;
        }
    for (unsigned k = 1; k < CV_DIRSNAP_SLOTS; k++) distinct += sorted[k] != sorted[k - 1];
    free(sorted);
    check(live == CV_DIRSNAP_SLOTS && distinct == CV_DIRSNAP_SLOTS, "%u stores: %zu live, %zu distinct slots",
          CV_DIRSNAP_SLOTS, live, distinct);
    struct cv_dirsnap *held = cv_dirsnap_get(slots[1]); /* slots[1] becomes the most recent */
    slots[CV_DIRSNAP_SLOTS] = cv_dirsnap_store(small);
    g = cv_dirsnap_get(slots[0]);
    check(g == NULL, "slot cap: the least recently used slot survived one store too many");
    cv_dirsnap_unref(g);
    g = cv_dirsnap_get(slots[2]); /* now slots[2] is recent, slots[3] the least */
    check(g == small, "slot cap: the second least recently used slot was evicted too");
    cv_dirsnap_unref(g);
    slots[CV_DIRSNAP_SLOTS + 1] = cv_dirsnap_store(small);
    g = cv_dirsnap_get(slots[3]);
    check(g == NULL, "slot cap: LRU order ignores get");
    cv_dirsnap_unref(g);
    g = cv_dirsnap_get(slots[1]);
    check(g == small && held == small, "slot cap: the slot got most recently was evicted");
    cv_dirsnap_unref(g);
    /* a held snapshot outlives the eviction of its slot */
    for (unsigned k = 0; k < CV_DIRSNAP_SLOTS + 2; k++) cv_dirsnap_drop(slots[k]);
    check(cv_dirsnap_get(slots[1]) == NULL, "dropped slot still there");
    const struct exp shadow[] = {{"b", "up2/b"}, {"c", "up2/c"}, {"s", "up2/s"}, {"a", "lo2/a"}, {"z", "lo2/z"}};
    cv_dirsnap_unref(small); /* only held's reference remains (and ASan watches it) */
    expect("held after eviction", held, "up2", shadow, N(shadow));
    cv_dirsnap_unref(held);

    /* an evicted snapshot whose only reference was the table's is freed (ASan: no leak);
     * one still held stays valid */
    struct cv_dirsnap *t = build("table", "up1", NULL, NULL, NULL);
    uint32_t ts = cv_dirsnap_store(t);
    cv_dirsnap_unref(t);
    held = cv_dirsnap_get(ts);
    uint32_t other = cv_dirsnap_store(held);
    for (unsigned k = 0; k < CV_DIRSNAP_SLOTS; k++) slots[k] = cv_dirsnap_store(held);
    check(cv_dirsnap_get(ts) == NULL && cv_dirsnap_get(other) == NULL, "evicted slots still answer");
    for (unsigned k = 0; k < CV_DIRSNAP_SLOTS; k++) cv_dirsnap_drop(slots[k]);
    const struct exp upper_only[] = {{"e", "up1/e"}, {"g", "up1/g"}, {"m", "up1/m"}};
    expect("held, table emptied", held, "up1", upper_only, N(upper_only));
    cv_dirsnap_unref(held);

    /* the memory cap */
    if (big) {
        size_t sz = cv_dirsnap_size(big), fit = CV_DIRSNAP_MEM_CAP / sz;
        check(sz > (size_t)BIG * 24 && fit >= 2 && fit < CV_DIRSNAP_SLOTS, "100k snapshot: %zu bytes, %zu fit", sz,
              fit);
        for (size_t k = 0; k <= fit && k < CV_DIRSNAP_SLOTS; k++) slots[k] = cv_dirsnap_store(big);
        size_t alive = 0;
        for (size_t k = 1; k <= fit && k < CV_DIRSNAP_SLOTS; k++) {
            struct cv_dirsnap *x = cv_dirsnap_get(slots[k]);
            alive += x == big;
            cv_dirsnap_unref(x);
        }
        check(cv_dirsnap_get(slots[0]) == NULL && alive == fit,
              "memory cap: %zu x %zu bytes stored, first %s, %zu of the last %zu live", fit + 1, sz,
              "should be evicted", alive, fit);
        for (size_t k = 0; k <= fit && k < CV_DIRSNAP_SLOTS; k++) cv_dirsnap_drop(slots[k]);
        printf("dirsnap: memory cap %zu MB holds %zu copies of the 100k snapshot (%zu bytes each)\n",
               CV_DIRSNAP_MEM_CAP >> 20, fit, sz);
    }
    free(slots);
}

/* ---------- threads ---------- */

#define THREADS 6
#define ROUNDS 4000
#define KEEP 40

static struct cv_dirsnap *shared[3];
static uint32_t recent[THREADS][KEEP]; /* read racily by other threads: atomics */

struct worker {
    int id;
    unsigned long bad, own_missing, foreign;
};

static void *work(void *arg) {
    struct worker *w = arg;
    unsigned seed = (unsigned)w->id * 7919u + 1;
    uint32_t mine[KEEP] = {0};
    unsigned char buf[64];
    for (int r = 0; r < ROUNDS; r++) {
        struct cv_dirsnap *s = shared[r % 3];
        int k = r % KEEP;
        if (mine[k]) cv_dirsnap_drop(mine[k]);
        mine[k] = cv_dirsnap_store(s);
        __atomic_store_n(&recent[w->id][k], mine[k], __ATOMIC_RELAXED);
        struct cv_dirsnap *g = cv_dirsnap_get(mine[k]);
        if (g != s) w->own_missing++;
        if (g && (cv_dirsnap_fill(g, mine[k], 0, buf, sizeof buf, NULL) <= 0 || memcmp(buf + 19, ".", 2)))
            w->bad++;
        cv_dirsnap_unref(g);
        /* someone else's slot: gone or one of the shared snapshots, never garbage */
        seed = seed * 1103515245u + 12345u;
        uint32_t their = __atomic_load_n(&recent[(seed >> 8) % THREADS][(seed >> 16) % KEEP], __ATOMIC_RELAXED);
        g = cv_dirsnap_get(their);
        if (g) {
            w->foreign++;
            if (g != shared[0] && g != shared[1] && g != shared[2]) w->bad++;
            else if (cv_dirsnap_count(g) < 2 || strcmp(cv_dirsnap_entry(g, 1)->name, "..")) w->bad++;
            cv_dirsnap_ref(g);
            cv_dirsnap_unref(g);
        }
        cv_dirsnap_unref(g);
    }
    for (int k = 0; k < KEEP; k++) cv_dirsnap_drop(mine[k]);
    return NULL;
}

static void test_threads(void) {
    shared[0] = build("threads", "up2", "lo2", NULL, NULL);
    shared[1] = build("threads", NULL, "lo1", NULL, NULL);
    shared[2] = build("threads", "up6", "lo6", NULL, NULL);
    if (!shared[0] || !shared[1] || !shared[2]) return;
    pthread_t th[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.id = i};
        must(pthread_create(&th[i], NULL, work, &w[i]) == 0, "pthread_create");
    }
    unsigned long bad = 0, missing = 0, foreign = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        bad += w[i].bad, missing += w[i].own_missing, foreign += w[i].foreign;
    }
    check(bad == 0 && missing == 0, "threads: %lu bad answers, %lu own slots missing", bad, missing);
    printf("dirsnap: %d threads x %d store/get/drop rounds, %lu foreign gets answered\n", THREADS, ROUNDS, foreign);
    for (int i = 0; i < 3; i++) {
        check(cv_dirsnap_count(shared[i]) >= 2, "threads: snapshot %d damaged", i);
        cv_dirsnap_unref(shared[i]);
    }
}

/* ---------- lseek on real directories ---------- */

static const char *fs_name(long t) {
    switch (t) {
    case EXT4_SUPER_MAGIC: return "ext4";
    case TMPFS_MAGIC: return "tmpfs";
    case BTRFS_SUPER_MAGIC: return "btrfs";
    case XFS_SUPER_MAGIC: return "xfs";
    case OVERLAYFS_SUPER_MAGIC: return "overlayfs";
    case 0x65735546: return "fuse";
    case NFS_SUPER_MAGIC: return "nfs";
    default: return "other";
    }
}

static void test_lseek(void) {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, ".");
    const char *dirs[] = {tmp, at("lo7"), cwd, "/dev/shm"};
    const uint64_t offs[] = {(12345ULL << 32) | 7, cv_dirsnap_off(CV_DIRSNAP_SLOT_MAX, UINT32_MAX),
                             cv_dirsnap_off(1, 1)};
    char seen[256] = "";
    for (size_t i = 0; i < N(dirs); i++) {
        int fd = open(dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
            check(i == 3, "lseek: open %s: %s", dirs[i], strerror(errno));
            continue;
        }
        struct statfs sf;
        const char *fs = fstatfs(fd, &sf) == 0 ? fs_name((long)sf.f_type) : "?";
        if (i == 3 && strcmp(fs, "tmpfs")) { /* only as an extra tmpfs sample */
            close(fd);
            continue;
        }
        for (size_t k = 0; k < N(offs); k++) {
            off_t r = lseek(fd, (off_t)offs[k], SEEK_SET);
            off_t cur = lseek(fd, 0, SEEK_CUR);
            check(r == (off_t)offs[k] && cur == (off_t)offs[k], "lseek %s (%s) to %#llx: %lld, then at %lld (%s)",
                  dirs[i], fs, (unsigned long long)offs[k], (long long)r, (long long)cur,
                  r < 0 ? strerror(errno) : "ok");
        }
        /* and back to the start */
        check(lseek(fd, 0, SEEK_SET) == 0, "lseek %s back to 0", dirs[i]);
        close(fd);
        size_t l = strlen(seen);
        snprintf(seen + l, sizeof seen - l, "%s%s %s", l ? ", " : "", i == 0 ? "/tmp" : i == 1 ? "/tmp (100k dir)"
                 : i == 2 ? "cwd" : "/dev/shm", fs);
    }
    printf("dirsnap: lseek to cursor offsets checked on: %s\n", seen);
}

int main(void) {
    make_trees();
    test_layers();
    test_skip();
    test_fill_edges();
    test_cursor();
    test_errors();
    struct cv_dirsnap *big = test_big();
    test_table(big);
    cv_dirsnap_unref(big);
    test_threads();
    test_lseek();
    if (chdir("/") < 0 || nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
        printf("FAIL cleanup of %s: %s\n", tmp, strerror(errno));
    printf("dirsnap: %lu passed, %lu failed\n", passed, failed);
    return failed ? 1 : 0;
}
