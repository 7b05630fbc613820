/* test_eval_mask.c — evaluation of prompt-completion records (zt_eval_args.mask_path,
 * the loss mask the SFT cache writes): only targets whose mask is 1 count, as in
 * training.  Each window's loss is a sum over its targets, so for a mask M and its
 * complement M' the two masked evaluations add up to the unmasked one:
 *   L_M * |M| + L_M' * |M'| = L * N,   |M| + |M'| = N,
 * which holds only if the masked targets are left out of the sums (not merely of
 * the counts).  A mask of ones is the unmasked evaluation; a mask of zeros has
 * nothing to evaluate (ZT_EINPUT).  On the gqa_tied fixture's 1,024 tokens. */
#include <math.h>
#include <string.h>

#include "../src/io/tokens.h"
#include "../src/train/trainer.h"
#include "test.h"
#include "tmpdir.h"

static const char *FIX = "tests/fixtures/gqa_tied";
static const char *TOKENS = "tests/fixtures/gqa_tied/tokens.npy";
enum { N_TOK = 1024, B = 2, T = 16 };

static int eval_with(const char *mask, double *loss, long *tokens, zt_err *err)
{
    zt_eval_args a = {FIX, TOKENS, T, B, 0, ZT_F32, NULL, mask};
    return zt_eval(&a, loss, tokens, err);
}

static void test_masked_losses_partition_the_unmasked(void)
{
    char dir[64], m_path[128], c_path[128], ones_path[128], zeros_path[128];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_evalmask_") != NULL);
    tmpdir_join(m_path, sizeof m_path, dir, "m.npy");
    tmpdir_join(c_path, sizeof c_path, dir, "c.npy");
    tmpdir_join(ones_path, sizeof ones_path, dir, "ones.npy");
    tmpdir_join(zeros_path, sizeof zeros_path, dir, "zeros.npy");
    static int32_t m[N_TOK], c[N_TOK], ones[N_TOK], zeros[N_TOK];
    long want_m = 0;
    for (int i = 0; i < N_TOK; i++) {
        m[i] = (i * 7 + i / 5) % 3 != 0; /* runs of both kinds, across window edges */
        c[i] = !m[i];
        ones[i] = 1;
        zeros[i] = 0;
        want_m += i >= 1 && m[i]; /* token 0 is never a target */
    }
    zt_err err = {0};
    ZT_CHECK(zt_tokens_write_npy(m_path, m, N_TOK, &err) == ZT_OK);
    ZT_CHECK(zt_tokens_write_npy(c_path, c, N_TOK, &err) == ZT_OK);
    ZT_CHECK(zt_tokens_write_npy(ones_path, ones, N_TOK, &err) == ZT_OK);
    ZT_CHECK(zt_tokens_write_npy(zeros_path, zeros, N_TOK, &err) == ZT_OK);

    double all = 0, lm = 0, lc = 0, l1 = 0;
    long n_all = 0, n_m = 0, n_c = 0, n_1 = 0;
    ZT_CHECK_MSG(eval_with(NULL, &all, &n_all, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK_MSG(eval_with(m_path, &lm, &n_m, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK_MSG(eval_with(c_path, &lc, &n_c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK_MSG(eval_with(ones_path, &l1, &n_1, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(n_all == N_TOK - 1);
    ZT_CHECK_MSG(n_m == want_m && n_m + n_c == n_all, "counted %ld + %ld of %ld (want %ld)", n_m, n_c, n_all, want_m);
    double sum = lm * (double)n_m + lc * (double)n_c, whole = all * (double)n_all;
    ZT_CHECK_MSG(fabs(sum - whole) <= 1e-9 * whole, "masked sums %.12g + complement = %.12g, unmasked %.12g", lm * n_m,
                 sum, whole);
    ZT_CHECK_MSG(fabs(lm - all) > 1e-6, "the mask changed nothing: %.9g", lm);
    ZT_CHECK(l1 == all && n_1 == n_all);

    double l0 = 0;
    long n0 = 0;
    zt_err e0 = {0};
    ZT_CHECK(eval_with(zeros_path, &l0, &n0, &e0) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(e0.msg, "no token to evaluate"), "%s", e0.msg);
    tmpdir_remove(dir);
}

int main(void)
{
    ZT_RUN(test_masked_losses_partition_the_unmasked);
    ZT_TEST_MAIN_END();
}
