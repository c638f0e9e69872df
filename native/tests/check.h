/* The tests' tally: check() counts a pass, or prints one FAIL line and counts a failure;
 * failf() counts a failure outright. After MAX_REPORTS failure lines the rest are only
 * counted. Each test ends with `<name>: N passed, M failed`. */
#ifndef CV_TEST_CHECK_H
#define CV_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#define MAX_REPORTS 60

static unsigned long passed, failed;

static void vfailf(const char *fmt, va_list ap) {
    failed++;
    if (failed > MAX_REPORTS) {
        if (failed == MAX_REPORTS + 1) printf("FAIL ... (further failures not printed)\n");
        return;
    }
    fputs("FAIL ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
}

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfailf(fmt, ap);
    va_end(ap);
}

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    if (ok) {
        passed++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vfailf(fmt, ap);
    va_end(ap);
}

#endif
