/* test_attention_choice.c — which kernels run fast mode's attention on a GPU
 * (kernels/attention_choice.h): cuDNN's fused attention only where everything it needs
 * holds, else the own kernels with the reason the plan line prints, and the
 * ZT_ATTENTION switch.  Host logic only: the GPU's answers are given, as the CUDA
 * backend (cuda/fast_cudnn.cu) fills them in. */
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/attention_choice.h"
#include "test.h"

/* an H200 with cuDNN 9.19 and the 1B model's shape: every condition holds */
static zt_attention_query h200(void)
{
    zt_attention_query q = {.built = 1, .cc_major = 9, .cc_minor = 0, .version = 91900, .hd = 64, .nh = 32,
                            .nkv = 8};
    return q;
}

/* the choice and the plan line's words for q */
static int choose(const zt_attention_query *q, char *words, size_t cap)
{
    char why[160];
    const int c = zt_attention_choose(q, why, sizeof why);
    zt_attention_describe(c, why, words, cap);
    return c;
}

static void check_own(const zt_attention_query *q, const char *expect)
{
    char words[256];
    ZT_CHECK_MSG(choose(q, words, sizeof words) == 0 && !strcmp(words, expect), "got \"%s\", expected \"%s\"", words,
                 expect);
}

static void test_cudnn_where_everything_holds(void)
{
    char words[256];
    zt_attention_query q = h200();
    ZT_CHECK(choose(&q, words, sizeof words) == 1);
    ZT_CHECK(!strcmp(words, "attention cudnn"));
    q.hd = 128, q.nh = 16, q.nkv = 16; /* head size 128, no grouping */
    ZT_CHECK(choose(&q, words, sizeof words) == 1);
    q = h200(), q.cc_minor = 2, q.version = ZT_CUDNN_MIN_VERSION; /* any 9.x, the oldest release taken */
    ZT_CHECK(choose(&q, words, sizeof words) == 1);
    q.version = 91002; /* 9.10.2: past the two refused */
    ZT_CHECK(choose(&q, words, sizeof words) == 1);
}

static void test_own_kernels_and_why(void)
{
    zt_attention_query q = h200();
    q.built = 0;
    check_own(&q, "attention own kernels (built without cuDNN)");
    q = h200(), q.cc_major = 8;
    check_own(&q, "attention own kernels (sm_80)");
    q = h200(), q.cc_major = 10;
    check_own(&q, "attention own kernels (sm_100)");
    q = h200(), q.load_error = "libcudnn.so.9: cannot open shared object file";
    check_own(&q, "attention own kernels (libcudnn not found: libcudnn.so.9: cannot open shared object file)");
    q = h200(), q.version = 90502;
    check_own(&q, "attention own kernels (cuDNN 9.5.2 older than 9.6.0)");
    q = h200(), q.version = 91001;
    check_own(&q, "attention own kernels (cuDNN 9.10.1 has known attention bugs)");
    q = h200(), q.hd = 96;
    check_own(&q, "attention own kernels (head_dim 96)");
    q = h200(), q.hd = 32;
    check_own(&q, "attention own kernels (head_dim 32)");
    q = h200(), q.window = 4096;
    check_own(&q, "attention own kernels (sliding window 4096)");
    q = h200(), q.nh = 12, q.nkv = 8;
    check_own(&q, "attention own kernels (12 heads over 8 kv heads)");
    q = h200(), q.device = "emu";
    check_own(&q, "attention own kernels (device emu)");
}

/* the first reason that holds is said: asked, then the device, the build, the GPU, the
 * library, the shape */
static void test_reason_order(void)
{
    zt_attention_query q = h200();
    q.forced_own = 1, q.built = 0, q.cc_major = 8, q.hd = 96;
    check_own(&q, "attention own kernels (ZT_ATTENTION=own)");
    q.forced_own = 0, q.device = "emu";
    check_own(&q, "attention own kernels (device emu)");
    q.device = NULL;
    check_own(&q, "attention own kernels (built without cuDNN)");
    q.built = 1;
    check_own(&q, "attention own kernels (sm_80)");
    q.cc_major = 9, q.load_error = "gone";
    check_own(&q, "attention own kernels (libcudnn not found: gone)");
    q.load_error = NULL;
    check_own(&q, "attention own kernels (head_dim 96)");
}

static void test_switch(void)
{
    zt_err err = {0};
    int own = -1;
    unsetenv("ZT_ATTENTION");
    ZT_CHECK(zt_attention_setting(&own, &err) == ZT_OK && own == 0);
    setenv("ZT_ATTENTION", "auto", 1);
    ZT_CHECK(zt_attention_setting(&own, &err) == ZT_OK && own == 0);
    setenv("ZT_ATTENTION", "", 1);
    ZT_CHECK(zt_attention_setting(&own, &err) == ZT_OK && own == 0);
    setenv("ZT_ATTENTION", "own", 1);
    ZT_CHECK(zt_attention_setting(&own, &err) == ZT_OK && own == 1);
    setenv("ZT_ATTENTION", "cudnn", 1);
    ZT_CHECK(zt_attention_setting(&own, &err) == ZT_EINPUT);
    ZT_CHECK(strstr(err.msg, "ZT_ATTENTION=cudnn") && strstr(err.msg, "auto") && strstr(err.msg, "own"));
    unsetenv("ZT_ATTENTION");
}

int main(void)
{
    ZT_RUN(test_cudnn_where_everything_holds);
    ZT_RUN(test_own_kernels_and_why);
    ZT_RUN(test_reason_order);
    ZT_RUN(test_switch);
    ZT_TEST_MAIN_END();
}
