/* test_optim.c — AdamW's arithmetic and the lost-update audit on values whose
 * outcome is known by hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/dtype.h"
#include "../src/engine/optim.h"
#include "test.h"

/* torch.optim.AdamW, first step, in double: with m = (1-b1) g, v = (1-b2) g^2 the
 * bias-corrected step is lr * g / (|g| + eps / sqrt(1-b2)... ) ~ lr * sign(g). */
static void test_first_step_matches_torch_formula(void)
{
    float p[3] = {0.5f, -0.25f, 2.0f}, m[3] = {0}, v[3] = {0}, g[3] = {0.1f, -3.0f, 1e-3f};
    zt_adamw_step st = {1e-3, 0.1, 0.9, 0.999, 1e-8, 1, 1.0f, 0};
    float p0[3];
    memcpy(p0, p, sizeof p);
    zt_adamw_audit au = {0};
    zt_adamw_step_shard(p, m, v, g, NULL, ZT_F32, 3, &st, NULL, ZT_F32, &au);
    for (int i = 0; i < 3; i++) {
        double mi = 0.1 * g[i], vi = 0.001 * (double)g[i] * g[i];
        double want = p0[i] * (1 - 1e-3 * 0.1) - (1e-3 / 0.1) * mi / (sqrt(vi) / sqrt(0.001) + 1e-8);
        ZT_CHECK_CLOSE(p[i], want, 1e-6, 1e-6);
        ZT_CHECK_CLOSE(m[i], mi, 1e-6, 1e-9);
        ZT_CHECK_CLOSE(v[i], vi, 1e-6, 1e-12);
    }
    ZT_CHECK(au.updated == 3 && au.lost == 0);
}

/* The compute copy written in the same pass is the conversion of the new master,
 * and the master, moments and audit are those of a step without it. */
static void test_cast_copy_is_converted_master(void)
{
    enum { n = 1000 };
    static float p[2][n], m[2][n], v[2][n], g[n], f32c[n];
    static uint16_t bfc[n], f16c[n];
    for (int i = 0; i < n; i++) {
        p[0][i] = p[1][i] = (float)((i * 37) % 101 - 50) * 0.01f;
        m[0][i] = m[1][i] = 0.0f, v[0][i] = v[1][i] = 0.0f;
        g[i] = (float)((i * 53) % 97 - 48) * 1e-3f;
    }
    zt_adamw_step st = {1e-2, 0.01, 0.9, 0.999, 1e-8, 1, 0.5f, 0};
    zt_adamw_audit a0 = {0}, a1 = {0};
    zt_adamw_step_shard(p[0], m[0], v[0], g, NULL, ZT_F32, n, &st, NULL, ZT_F32, &a0);
    zt_adamw_step_shard(p[1], m[1], v[1], g, NULL, ZT_F32, n, &st, bfc, ZT_BF16, &a1);
    ZT_CHECK(memcmp(p[0], p[1], sizeof p[0]) == 0 && memcmp(m[0], m[1], sizeof m[0]) == 0);
    ZT_CHECK(memcmp(v[0], v[1], sizeof v[0]) == 0);
    ZT_CHECK(a0.updated == a1.updated && a0.lost == a1.lost && a0.ratio_sum == a1.ratio_sum);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += bfc[i] != zt_f32_to_bf16(p[1][i]);
    ZT_CHECK_MSG(bad == 0, "%d bf16 copies differ from the converted master", bad);
    /* once more, from the same state, into fp16 and fp32 copies */
    memcpy(p[1], p[0], sizeof p[0]);
    memcpy(m[1], m[0], sizeof m[0]);
    memcpy(v[1], v[0], sizeof v[0]);
    st.t = 2;
    zt_adamw_step_shard(p[0], m[0], v[0], g, NULL, ZT_F32, n, &st, f16c, ZT_F16, NULL);
    zt_adamw_step_shard(p[1], m[1], v[1], g, NULL, ZT_F32, n, &st, f32c, ZT_F32, NULL);
    bad = 0;
    for (int i = 0; i < n; i++)
        bad += f16c[i] != zt_f32_to_f16(p[0][i]) || f32c[i] != p[1][i] || p[0][i] != p[1][i];
    ZT_CHECK_MSG(bad == 0, "%d fp16/fp32 copies differ from the master", bad);
}

/* A weight of 1.0 in bf16 has a half-ulp of 2^-8; an Adam step of ~1e-3 cannot land. */
static void test_bf16_audit_counts_lost_updates(void)
{
    uint16_t p[4], m[4] = {0}, v[4] = {0}, g[4];
    float pv[4] = {1.0f, 1.0f, 0.001f, 1.0f}, gv[4] = {0.5f, -0.5f, 0.5f, 0.0f};
    for (int i = 0; i < 4; i++) {
        p[i] = zt_f32_to_bf16(pv[i]);
        g[i] = zt_f32_to_bf16(gv[i]);
    }
    zt_adamw_step st = {1e-3, 0.0, 0.9, 0.999, 1e-8, 1, 1.0f, 0};
    zt_adamw_audit au = {0};
    zt_adamw_step_shard(p, m, v, g, NULL, ZT_BF16, 4, &st, NULL, ZT_F32, &au);
    /* element 3 has a zero gradient: no intended change, not counted */
    ZT_CHECK(au.updated == 3);
    /* the two weights at 1.0 keep their value; the small weight (half-ulp ~2e-6) moves */
    ZT_CHECK(au.lost == 2);
    ZT_CHECK(zt_bf16_to_f32(p[0]) == 1.0f && zt_bf16_to_f32(p[1]) == 1.0f);
    ZT_CHECK(zt_bf16_to_f32(p[2]) < 0.001f);
    /* |delta| / half-ulp: 1e-3 / 2^-8 = 0.256 for each weight at 1.0 */
    double ratio_small = 1e-3 / ldexp(1.0, -10 - 7 - 1); /* 0.001 = 1.024 * 2^-10: half-ulp 2^(-10-7-1) */
    ZT_CHECK_CLOSE(au.ratio_sum, 2 * 0.256 + ratio_small, 1e-3, 1e-9);
}

/* A weight at exactly zero (LoRA's B before its first step): its update is measured
 * against half an ulp of the value it lands on (adamw.h), not of zero, whose half ulp is
 * the smallest subnormal (a ratio of 2^127 x |delta|).  An Adam first step of 1e-3 =
 * 1.024 * 2^-10 lands on bf16's nearest value, of the same exponent: 1e-3 / 2^(-10-7-1);
 * in fp32, 1e-3 / 2^(-10-23-1). */
static void test_audit_zero_weight(void)
{
    zt_adamw_step st = {1e-3, 0.0, 0.9, 0.999, 1e-8, 1, 1.0f, 0};
    uint16_t p16 = 0, m16 = 0, v16 = 0, g16 = zt_f32_to_bf16(0.5f);
    zt_adamw_audit au = {0};
    zt_adamw_step_shard(&p16, &m16, &v16, &g16, NULL, ZT_BF16, 1, &st, NULL, ZT_F32, &au);
    ZT_CHECK(au.updated == 1 && au.lost == 0 && p16 != 0);
    ZT_CHECK_CLOSE(au.ratio_sum, 1e-3 / ldexp(1.0, -18), 1e-3, 1e-9);
    float p = 0, m = 0, v = 0, g = 0.5f;
    zt_adamw_audit a32 = {0};
    zt_adamw_step_shard(&p, &m, &v, &g, NULL, ZT_F32, 1, &st, NULL, ZT_F32, &a32);
    ZT_CHECK(a32.updated == 1 && a32.lost == 0);
    ZT_CHECK_CLOSE(a32.ratio_sum, 1e-3 / ldexp(1.0, -34), 1e-6, 1e-9);
}

/* Kahan compensation keeps what rounding drops: 20 steps of ~1e-3 on a bf16
 * weight at 1.0 move it by ~0.02, as an fp32 master would, while the plain bf16
 * master does not move at all. */
static void test_kahan_accumulates_sub_ulp_updates(void)
{
    uint16_t p_plain = zt_f32_to_bf16(1.0f), p_comp = p_plain, c = 0;
    uint16_t m1 = 0, v1 = 0, m2 = 0, v2 = 0, g = zt_f32_to_bf16(0.5f);
    float p32 = 1.0f, m32 = 0, v32 = 0, g32 = 0.5f;
    for (long t = 1; t <= 20; t++) {
        zt_adamw_step st = {1e-3, 0.0, 0.9, 0.999, 1e-8, t, 1.0f, 0};
        zt_adamw_step_shard(&p_plain, &m1, &v1, &g, NULL, ZT_BF16, 1, &st, NULL, ZT_F32, NULL);
        zt_adamw_step_shard(&p_comp, &m2, &v2, &g, &c, ZT_BF16, 1, &st, NULL, ZT_F32, NULL);
        zt_adamw_step_shard(&p32, &m32, &v32, &g32, NULL, ZT_F32, 1, &st, NULL, ZT_F32, NULL);
    }
    ZT_CHECK(zt_bf16_to_f32(p_plain) == 1.0f);
    float kahan = zt_bf16_to_f32(p_comp) + zt_bf16_to_f32(c);
    ZT_CHECK_CLOSE(kahan, p32, 1e-4, 1e-6);
    ZT_CHECK(p32 < 0.985f);
}

/* transformers' optimization.py, the lr lambdas get_scheduler builds for Trainer
 * (no lr_scheduler_kwargs), transcribed here as the reference: cosine_with_restarts
 * is _get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda with
 * num_cycles 1, polynomial is get_polynomial_decay_schedule_with_warmup's lambda
 * with lr_end 1e-7 and power 1.0 (LambdaLR multiplies the lambda by lr_init). */
static double hf_hard_restarts(long step, long warmup, long total, double cycles)
{
    if (step < warmup)
        return (double)step / (double)(warmup > 1 ? warmup : 1);
    double progress = (double)(step - warmup) / (double)(total - warmup > 1 ? total - warmup : 1);
    if (progress >= 1.0)
        return 0.0;
    double f = 0.5 * (1.0 + cos(M_PI * fmod(cycles * progress, 1.0)));
    return f > 0.0 ? f : 0.0;
}

static double hf_polynomial(long step, long warmup, long total, double lr_init, double lr_end, double power)
{
    if (step < warmup)
        return (double)step / (double)(warmup > 1 ? warmup : 1);
    if (step > total)
        return lr_end / lr_init;
    double lr_range = lr_init - lr_end;
    double decay_steps = (double)(total - warmup);
    double pct_remaining = 1.0 - (double)(step - warmup) / decay_steps;
    double decay = lr_range * pow(pct_remaining, power) + lr_end;
    return decay / lr_init;
}

static void test_schedules_match_transformers(void)
{
    const long totals[] = {1, 7, 10, 100}, warmups[] = {0, 1, 3, 10};
    const double lrs[] = {5e-5, 1e-3, 2e-7};
    for (int ti = 0; ti < 4; ti++)
        for (int wi = 0; wi < 4; wi++) {
            long S = totals[ti], w = warmups[wi];
            if (w >= S)
                continue; /* transformers' polynomial divides by S - w */
            for (long u = 0; u <= S + 2; u++) {
                ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_COSINE_RESTARTS, u, S, w), hf_hard_restarts(u, w, S, 1.0), 1e-12,
                               1e-15);
                for (int li = 0; li < 3; li++)
                    ZT_CHECK_CLOSE(zt_lr_value(ZT_LR_POLYNOMIAL, NULL, lrs[li], u, S, w),
                                   lrs[li] * hf_polynomial(u, w, S, lrs[li], 1e-7, 1.0), 1e-12, 1e-18);
                /* constant_with_warmup: u/w, then 1 */
                ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_CONSTANT_WARMUP, u, S, w), u < w ? (double)u / (double)w : 1.0,
                               1e-12, 1e-15);
            }
        }
    /* a point worked by hand: S=10, w=2, u=6 is halfway, lr 1e-3 -> (1e-3 - 1e-7) * 0.5 + 1e-7 */
    ZT_CHECK_CLOSE(zt_lr_value(ZT_LR_POLYNOMIAL, NULL, 1e-3, 6, 10, 2), 0.5e-3 + 0.5e-7, 1e-12, 1e-18);
    ZT_CHECK(zt_lr_value(ZT_LR_POLYNOMIAL, NULL, 1e-3, 11, 10, 2) == 1e-7);
    ZT_CHECK(zt_lr_factor(ZT_LR_COSINE_RESTARTS, 10, 10, 2) == 0.0);
    zt_lr_schedule s;
    ZT_CHECK(zt_lr_schedule_parse("cosine_with_restarts", &s) == 0 && s == ZT_LR_COSINE_RESTARTS);
    ZT_CHECK(zt_lr_schedule_parse("polynomial", &s) == 0 && s == ZT_LR_POLYNOMIAL);
    ZT_CHECK(!strcmp(zt_lr_schedule_name(ZT_LR_POLYNOMIAL), "polynomial"));
}

/* Every schedule, at its defaults and under lr_scheduler_kwargs, against the lr
 * sequences transformers' get_scheduler gives (tests/fixtures/schedules/lr.txt, written
 * by tools/make_schedule_fixtures.py with transformers 5.25): relative error at most
 * 1e-12, room for reordered double arithmetic (measured: 1.9e-16 at worst). */
static void test_schedules_match_get_scheduler_fixture(void)
{
    FILE *f = fopen("tests/fixtures/schedules/lr.txt", "r");
    ZT_CHECK(f != NULL);
    if (!f)
        return;
    char line[8192], name[64], kwjson[256];
    int cases = 0;
    double worst = 0.0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        long S, w;
        int n, off;
        double lr;
        ZT_CHECK(sscanf(line, "%63s %ld %ld %lf %255s %d%n", name, &S, &w, &lr, kwjson, &n, &off) == 6);
        zt_lr_schedule s;
        zt_lr_kwargs kw;
        zt_err err = {0};
        ZT_CHECK_MSG(zt_lr_schedule_parse(name, &s) == 0, "%s", name);
        ZT_CHECK_MSG(zt_lr_kwargs_parse(kwjson, s, lr, &kw, &err) == ZT_OK, "%s %s: %s", name, kwjson, err.msg);
        const char *p = line + off;
        for (long u = 0; u < n; u++) {
            char *end;
            double want = strtod(p, &end);
            ZT_CHECK(end != p);
            p = end;
            double got = zt_lr_value(s, &kw, lr, u, S, w);
            double rel = fabs(got - want) / (fabs(want) > 1e-30 ? fabs(want) : 1e-30);
            worst = rel > worst ? rel : worst;
            ZT_CHECK_MSG(fabs(got - want) <= 1e-12 * fabs(want) + 1e-300, "%s %s S=%ld w=%ld lr=%g u=%ld: %.17g vs %.17g",
                         name, kwjson, S, w, lr, u, got, want);
        }
        cases++;
    }
    fclose(f);
    ZT_CHECK(cases >= 500);
    printf("  %d cases, worst relative error %.3g\n", cases, worst);
}

/* --lr_scheduler_kwargs refusals name the key, as get_scheduler's TypeError and
 * ValueErrors do */
static void test_schedule_kwargs_refused(void)
{
    static const struct { const char *sched, *json, *hint; } cases[] = {
        {"linear", "{\"num_cycles\": 2}", "num_cycles is not an argument of lr_scheduler_type linear"},
        {"cosine", "{\"min_lr\": 1e-6}", "min_lr is not an argument of lr_scheduler_type cosine"},
        {"cosine_with_min_lr", "{}", "needs --lr_scheduler_kwargs"},
        {"cosine_with_min_lr", "{\"min_lr\": 1e-6, \"min_lr_rate\": 0.1}", "not both"},
        {"warmup_stable_decay", "{\"decay_type\": \"cosine\"}", "num_decay_steps"},
        {"warmup_stable_decay", "{\"num_decay_steps\": 2.5}", "num_decay_steps: expected an integer"},
        {"warmup_stable_decay", "{\"num_decay_steps\": 2, \"decay_type\": \"exp\"}", "decay_type: expected"},
        {"inverse_sqrt", "{\"timescale\": 0}", "timescale: expected a positive integer"},
        {"polynomial", "[1]", "expected a JSON object"},
        {"polynomial", "{\"power\": \"2\"}", "power: expected a number"},
        {"cosine", "{\"num_cycles\": ", "--lr_scheduler_kwargs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zt_lr_schedule s;
        zt_lr_kwargs kw;
        zt_err err = {0};
        ZT_CHECK(zt_lr_schedule_parse(cases[i].sched, &s) == 0);
        ZT_CHECK_MSG(zt_lr_kwargs_parse(cases[i].json, s, 1e-3, &kw, &err) == ZT_EINPUT && strstr(err.msg, cases[i].hint),
                     "%s %s: %s", cases[i].sched, cases[i].json, err.msg);
    }
}

int main(void)
{
    ZT_RUN(test_schedules_match_get_scheduler_fixture);
    ZT_RUN(test_schedule_kwargs_refused);
    ZT_RUN(test_schedules_match_transformers);
    ZT_RUN(test_first_step_matches_torch_formula);
    ZT_RUN(test_cast_copy_is_converted_master);
    ZT_RUN(test_bf16_audit_counts_lost_updates);
    ZT_RUN(test_audit_zero_weight);
    ZT_RUN(test_kahan_accumulates_sub_ulp_updates);
    ZT_TEST_MAIN_END();
}
