/* The tests' tally: check() counts a pass, or prints one FAIL line and counts a failure.
 * Each test ends with `<name>: N passed, M failed`. */
#ifndef CV_TEST_CHECK_H
#define CV_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static unsigned long passed, failed;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
}

#endif
