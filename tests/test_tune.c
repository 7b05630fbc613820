/* test_tune.c — the choice among cuBLASLt's candidates (kernels/tune.h) as host code:
 * a fake timer stands in for the GPU's, so the cache (one timing per shape), the
 * switch (ZT_MATMUL_TUNE=0: the heuristic's first, never timed) and the pick of the
 * fastest are checked without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/tune.h"
#include "test.h"

/* times[i] for candidate i; counts every call */
typedef struct fake_timer {
    const double *times;
    int calls;
} fake_timer;

static double fake_time(void *ctx, int cand)
{
    fake_timer *f = ctx;
    f->calls++;
    return f->times[cand];
}

typedef struct shape {
    int M, N, K, trans;
} shape;

static void test_fastest_of_given_times(void)
{
    const double t[] = {3.0, 1.5, 2.0, 1.5, 4.0};
    fake_timer f = {t, 0};
    ZT_CHECK(zt_tune_fastest(5, fake_time, &f) == 1); /* the earlier of the two 1.5s */
    ZT_CHECK(f.calls == 5);
    const double failing[] = {-1.0, 5.0, -1.0, 2.5};
    fake_timer g = {failing, 0};
    ZT_CHECK(zt_tune_fastest(4, fake_time, &g) == 3); /* a failed candidate is never the fastest */
    const double none[] = {-1.0, -1.0};
    fake_timer h = {none, 0};
    ZT_CHECK(zt_tune_fastest(2, fake_time, &h) == 0);
}

static void test_each_shape_timed_once(void)
{
    zt_tune_cache *c = calloc(1, sizeof *c);
    c->on = 1;
    const double t1[] = {2.0, 0.5, 1.0}, t2[] = {0.1, 0.9, 0.2};
    fake_timer f = {t1, 0};
    shape a = {1024, 4096, 2048, 1}, b = {1024, 4096, 2048, 0};
    ZT_CHECK(zt_tune_choose(c, &a, sizeof a, 3, fake_time, &f) == 1);
    ZT_CHECK(f.calls == 3);
    f.times = t2; /* the machine's moment changed: the cached winner stands */
    for (int i = 0; i < 4; i++)
        ZT_CHECK(zt_tune_choose(c, &a, sizeof a, 3, fake_time, &f) == 1);
    ZT_CHECK(f.calls == 3);
    ZT_CHECK(zt_tune_choose(c, &b, sizeof b, 3, fake_time, &f) == 0); /* another shape: timed */
    ZT_CHECK(f.calls == 6);
    ZT_CHECK(zt_tune_choose(c, &a, sizeof a, 3, fake_time, &f) == 1);
    ZT_CHECK(f.calls == 6);
    free(c);
}

static void test_cache_full_replaces_oldest(void)
{
    zt_tune_cache *c = calloc(1, sizeof *c);
    c->on = 1;
    const double t[] = {1.0, 0.5};
    fake_timer f = {t, 0};
    for (int i = 0; i <= ZT_TUNE_SLOTS; i++) {
        shape s = {i + 1, 8, 8, 0};
        ZT_CHECK(zt_tune_choose(c, &s, sizeof s, 2, fake_time, &f) == 1);
    }
    ZT_CHECK(f.calls == 2 * (ZT_TUNE_SLOTS + 1));
    shape newest = {ZT_TUNE_SLOTS + 1, 8, 8, 0}, oldest = {1, 8, 8, 0};
    zt_tune_choose(c, &newest, sizeof newest, 2, fake_time, &f);
    ZT_CHECK(f.calls == 2 * (ZT_TUNE_SLOTS + 1)); /* kept */
    zt_tune_choose(c, &oldest, sizeof oldest, 2, fake_time, &f);
    ZT_CHECK(f.calls == 2 * (ZT_TUNE_SLOTS + 2)); /* replaced, so timed again */
    free(c);
}

static void test_switch_off_takes_the_first_untimed(void)
{
    zt_err err;
    int on = -1;
    unsetenv("ZT_MATMUL_TUNE");
    ZT_CHECK(zt_tune_setting(&on, &err) == ZT_OK && on == 1);
    setenv("ZT_MATMUL_TUNE", "0", 1);
    ZT_CHECK(zt_tune_setting(&on, &err) == ZT_OK && on == 0);
    setenv("ZT_MATMUL_TUNE", "1", 1);
    ZT_CHECK(zt_tune_setting(&on, &err) == ZT_OK && on == 1);
    setenv("ZT_MATMUL_TUNE", "off", 1);
    ZT_CHECK(zt_tune_setting(&on, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "ZT_MATMUL_TUNE=off") != NULL, "%s", err.msg);
    unsetenv("ZT_MATMUL_TUNE");

    zt_tune_cache *c = calloc(1, sizeof *c);
    c->on = 0;
    const double t[] = {9.0, 0.1};
    fake_timer f = {t, 0};
    shape a = {64, 64, 64, 0};
    ZT_CHECK(zt_tune_choose(c, &a, sizeof a, 2, fake_time, &f) == 0);
    ZT_CHECK(f.calls == 0);
    free(c);
}

int main(void)
{
    ZT_RUN(test_fastest_of_given_times);
    ZT_RUN(test_each_shape_timed_once);
    ZT_RUN(test_cache_full_replaces_oldest);
    ZT_RUN(test_switch_off_takes_the_first_untimed);
    ZT_TEST_MAIN_END();
}
