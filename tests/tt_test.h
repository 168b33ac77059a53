/* tt_test.h - a tiny TAP producer for the unit tests.
 *
 * Each check prints one TAP line ("ok 3 - dense backward dx"), so automake's TAP
 * driver counts every check, not every program. tt_done() prints the plan and
 * returns the exit status for main().
 */
#ifndef TT_TEST_H
#define TT_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int tt_test_count, tt_test_failed;

static inline void tt_vreport(int ok, const char *directive, const char *fmt, va_list ap)
{
    tt_test_count++;
    if (!ok)
        tt_test_failed++;
    printf("%sok %d - ", ok ? "" : "not ", tt_test_count);
    vprintf(fmt, ap);
    if (directive)
        printf(" # %s", directive);
    printf("\n");
    fflush(stdout);
}

/* Reports one check; returns cond so callers can stop on failure. */
static inline int tt_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tt_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tt_vreport(cond, NULL, fmt, ap);
    va_end(ap);
    return cond;
}

/* Reports a check that could not run here, visibly. */
static inline void tt_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tt_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tt_vreport(1, "SKIP", fmt, ap);
    va_end(ap);
}

/* Diagnostic line (shown by the TAP driver, not counted). */
static inline void tt_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tt_diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static inline int tt_done(void)
{
    printf("1..%d\n", tt_test_count);
    return tt_test_failed ? 1 : 0;
}

#endif
