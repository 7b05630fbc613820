/* test_optim.c — AdamW's arithmetic and the lost-update audit on values whose
 * outcome is known by hand. */
#include <string.h>

#include "../src/core/dtype.h"
#include "../src/engine/optim.h"
#include "test.h"

/* torch.optim.AdamW, first step, in double: with m = (1-b1) g, v = (1-b2) g^2 the
 * bias-corrected step is lr * g / (|g| + eps / sqrt(1-b2)... ) ~ lr * sign(g). */
static void test_first_step_matches_torch_formula(void)
{
    float p[3] = {0.5f, -0.25f, 2.0f}, m[3] = {0}, v[3] = {0}, g[3] = {0.1f, -3.0f, 1e-3f};
    zt_adamw_step st = {1e-3, 0.1, 0.9, 0.999, 1e-8, 1, 1.0f};
    float p0[3];
    memcpy(p0, p, sizeof p);
    zt_adamw_audit au = {0};
    zt_adamw_step_shard(p, m, v, g, NULL, ZT_F32, 3, &st, &au);
    for (int i = 0; i < 3; i++) {
        double mi = 0.1 * g[i], vi = 0.001 * (double)g[i] * g[i];
        double want = p0[i] * (1 - 1e-3 * 0.1) - (1e-3 / 0.1) * mi / (sqrt(vi) / sqrt(0.001) + 1e-8);
        ZT_CHECK_CLOSE(p[i], want, 1e-6, 1e-6);
        ZT_CHECK_CLOSE(m[i], mi, 1e-6, 1e-9);
        ZT_CHECK_CLOSE(v[i], vi, 1e-6, 1e-12);
    }
    ZT_CHECK(au.updated == 3 && au.lost == 0);
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
    zt_adamw_step st = {1e-3, 0.0, 0.9, 0.999, 1e-8, 1, 1.0f};
    zt_adamw_audit au = {0};
    zt_adamw_step_shard(p, m, v, g, NULL, ZT_BF16, 4, &st, &au);
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

/* Kahan compensation keeps what rounding drops: 20 steps of ~1e-3 on a bf16
 * weight at 1.0 move it by ~0.02, as an fp32 master would, while the plain bf16
 * master does not move at all. */
static void test_kahan_accumulates_sub_ulp_updates(void)
{
    uint16_t p_plain = zt_f32_to_bf16(1.0f), p_comp = p_plain, c = 0;
    uint16_t m1 = 0, v1 = 0, m2 = 0, v2 = 0, g = zt_f32_to_bf16(0.5f);
    float p32 = 1.0f, m32 = 0, v32 = 0, g32 = 0.5f;
    for (long t = 1; t <= 20; t++) {
        zt_adamw_step st = {1e-3, 0.0, 0.9, 0.999, 1e-8, t, 1.0f};
        zt_adamw_step_shard(&p_plain, &m1, &v1, &g, NULL, ZT_BF16, 1, &st, NULL);
        zt_adamw_step_shard(&p_comp, &m2, &v2, &g, &c, ZT_BF16, 1, &st, NULL);
        zt_adamw_step_shard(&p32, &m32, &v32, &g32, NULL, ZT_F32, 1, &st, NULL);
    }
    ZT_CHECK(zt_bf16_to_f32(p_plain) == 1.0f);
    float kahan = zt_bf16_to_f32(p_comp) + zt_bf16_to_f32(c);
    ZT_CHECK_CLOSE(kahan, p32, 1e-4, 1e-6);
    ZT_CHECK(p32 < 0.985f);
}

int main(void)
{
    ZT_RUN(test_first_step_matches_torch_formula);
    ZT_RUN(test_bf16_audit_counts_lost_updates);
    ZT_RUN(test_kahan_accumulates_sub_ulp_updates);
    ZT_TEST_MAIN_END();
}
