/* test.h — a tiny test harness.
 *
 * A test file defines functions `static void test_xxx(void)` and lists them in
 * main with ZT_RUN(test_xxx).  Checks record failures and keep going, so one run
 * shows every broken expectation; ZT_TEST_MAIN_END prints one line per test and
 * exits non-zero if any check failed.  tests/run aggregates the binaries into
 * the closing "N passed, N failed" line CI reads. */
#ifndef ZT_TEST_H
#define ZT_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int zt_test_failed_checks;   /* failures within the current test */
static int zt_tests_passed, zt_tests_failed;

#define ZT_CHECK(cond)                                                                   \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
            zt_test_failed_checks++;                                                     \
        }                                                                                \
    } while (0)

#define ZT_CHECK_MSG(cond, ...)                                                          \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            zt_test_failed_checks++;                                                     \
        }                                                                                \
    } while (0)

/* |a - b| <= tol * max(|b|, floor): relative error with a floor for values near 0. */
#define ZT_CHECK_CLOSE(a, b, tol, floor)                                                 \
    do {                                                                                 \
        double zt_a_ = (a), zt_b_ = (b);                                                 \
        double zt_s_ = fabs(zt_b_) > (floor) ? fabs(zt_b_) : (floor);                    \
        if (!(fabs(zt_a_ - zt_b_) <= (tol) * zt_s_)) {                                   \
            fprintf(stderr, "  %s:%d: %s = %.9g, expected %s = %.9g (rel err %.3g > %.3g)\n", \
                    __FILE__, __LINE__, #a, zt_a_, #b, zt_b_,                            \
                    fabs(zt_a_ - zt_b_) / zt_s_, (double)(tol));                         \
            zt_test_failed_checks++;                                                     \
        }                                                                                \
    } while (0)

#define ZT_RUN(fn)                                                                       \
    do {                                                                                 \
        zt_test_failed_checks = 0;                                                       \
        fn();                                                                            \
        if (zt_test_failed_checks) {                                                     \
            printf("FAIL %s\n", #fn);                                                    \
            zt_tests_failed++;                                                           \
        } else {                                                                         \
            printf("ok   %s\n", #fn);                                                    \
            zt_tests_passed++;                                                           \
        }                                                                                \
        fflush(stdout);                                                                  \
    } while (0)

#define ZT_TEST_MAIN_END()                                                               \
    do {                                                                                 \
        printf("%d passed, %d failed\n", zt_tests_passed, zt_tests_failed);              \
        return zt_tests_failed ? 1 : 0;                                                  \
    } while (0)

#endif
