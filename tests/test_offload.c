/* test_offload.c — offload's overlap and its delayed parameter update, on the
 * emulated device (docs/zero.md, Offload).
 *
 * The overlap is held structurally: the emulated device counts the host waits a
 * GPU would make (zt_backend_emu_waits), and its uploads on the copy queue land
 * only at the next copy_join, so an upload the host waited for shows as a wait,
 * and a gather that did not wait for its upload reads stale bytes.  The delayed
 * update is held to its definition: with θ_j the master after j updates, step s
 * computes with θ_max(0, s-2), and update s applies step s's gradient to θ_{s-1};
 * the test computes that sequence itself with an engine that has no delayed
 * update, by setting the parameters it differentiates at. */
#include <stdlib.h>
#include <string.h>

#include "../src/core/mem.h"
#include "../src/engine/engine.h"
#include "../src/io/hf_model.h"
#include "../src/io/tokens.h"
#include "../src/model/llama.h"
#include "../src/train/batches.h"
#include "../src/train/weights.h"
#include "test.h"

static const char *FIX = "tests/fixtures/gqa_tied";
static const char *TOKENS = "tests/fixtures/gqa_tied/tokens.npy";
enum { B = 2, T = 16, MAXP = 64, STEPS = 5 };

typedef struct rig {
    zt_llama_config cfg;
    zt_layout lay;
    zt_comm comm;
    zt_engine *eng;
    zt_model m;
    zt_tokens tok;
    zt_batcher bat;
} rig;

/* fp32 (the uploads read the master shards), and DeepSpeed's bf16 mode (fp32 master,
 * bf16 compute: they read the compute-dtype shards the host converts) */
static const zt_precision FP32 = {.load = ZT_F32, .master = ZT_F32, .compute = ZT_F32, .reduce = ZT_F32, .save = ZT_F32};
static const zt_precision BF16 = {.load = ZT_F32, .master = ZT_F32, .compute = ZT_BF16, .reduce = ZT_BF16,
                                  .save = ZT_F32};

static void rig_open_prec(rig *r, int stage, const zt_overlap *ov, zt_precision prec)
{
    zt_err err = {0};
    memset(r, 0, sizeof *r);
    zt_comm_create_local(&r->comm);
    ZT_CHECK(zt_hf_read_config_dir(FIX, &r->cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&r->lay, &r->cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    ZT_CHECK_MSG(zt_engine_create(&r->eng, zt_backend_emu(), &r->lay, prec, stage, ov, &r->comm, &err) == ZT_OK, "%s",
                 err.msg);
    ZT_CHECK(zt_hf_load_params(FIX, &r->lay, r->eng, &err) == ZT_OK);
    zt_engine_refresh_gathered(r->eng);
    zt_param_owner own = zt_engine_param_owner(r->eng);
    ZT_CHECK(zt_model_init(&r->m, &r->cfg, &r->lay, &own, B, T, 0, &err) == ZT_OK);
    ZT_CHECK(zt_tokens_load(TOKENS, &r->tok, &err) == ZT_OK);
    ZT_CHECK(zt_batcher_init(&r->bat, &r->tok, T, 0, 0, TOKENS, &err) == ZT_OK);
}

static void rig_open(rig *r, int stage, const zt_overlap *ov) { rig_open_prec(r, stage, ov, FP32); }

static void rig_close(rig *r)
{
    zt_batcher_free(&r->bat);
    zt_tokens_free(&r->tok);
    zt_model_free(&r->m);
    zt_engine_destroy(r->eng);
    zt_layout_free(&r->lay);
}

/* The forward and backward of step s (1-based) on its own batch; the loss. */
static double backward(rig *r, int s)
{
    zt_err err = {0};
    int in[B * T], tg[B * T];
    zt_batcher_fill(&r->bat, (long)(s - 1) * B, B, in, tg);
    double loss = 0.0;
    zt_engine_zero_grads(r->eng);
    zt_engine_sync_backward(r->eng, 1);
    ZT_CHECK_MSG(zt_model_forward_backward(&r->m, in, tg, 1.0f / (B * T), &loss, &err) == ZT_OK, "%s", err.msg);
    zt_engine_sync_backward(r->eng, 0);
    return loss;
}

static const zt_adamw_hparams HP = {1e-2, 0.1, 0.9, 0.999, 1e-8};

static void step(rig *r)
{
    double norm = 0.0;
    ZT_CHECK(zt_engine_step(r->eng, &HP, 1e-2, 1.0, 1.0, &norm) == 0);
}

/* Every parameter in full, fp32 (the master), into fresh arrays. */
static void params(rig *r, float **vals)
{
    zt_err err = {0};
    ZT_CHECK(r->lay.nparams <= MAXP);
    for (int i = 0; i < r->lay.nparams; i++)
        vals[i] = malloc(r->lay.params[i].numel * sizeof(float));
    ZT_CHECK(zt_engine_full_params(r->eng, vals, &err) == ZT_OK);
}

static void set_params(rig *r, float **vals)
{
    for (int i = 0; i < r->lay.nparams; i++)
        zt_engine_set_param(r->eng, &r->lay.params[i], vals[i], ZT_F32);
    zt_engine_refresh_gathered(r->eng);
}

static void free_params(rig *r, float **vals)
{
    for (int i = 0; i < r->lay.nparams; i++) {
        free(vals[i]);
        vals[i] = NULL;
    }
}

static int same_params(rig *r, float **a, float **b)
{
    for (int i = 0; i < r->lay.nparams; i++)
        if (memcmp(a[i], b[i], r->lay.params[i].numel * sizeof(float)) != 0)
            return 0;
    return 1;
}

/* Stage 3 with the parameter shard on the host: every gather uploads the unit's
 * shard, on the copy queue, and the host never waits for it.  The host waits of
 * a forward and backward with offload are those without (the losses' readbacks,
 * the kernels that return a number) and one copy_wait, not one more per upload;
 * and the numbers are the same, so each gather did read its upload.  The
 * synchronous upload this replaced waited once per gather. */
static void stage3_uploads_do_not_wait(zt_precision prec, const char *what)
{
    long waits[2], uploads[2];
    double loss[2];
    for (int off = 0; off < 2; off++) {
        rig r;
        zt_overlap ov = {.offload_optimizer = off, .offload_params = off, .forward_prefetch = 1,
                         .backward_prefetch = ZT_BACKWARD_PREFETCH_PRE, .overlap_reduce = 1};
        rig_open_prec(&r, 3, &ov, prec);
        backward(&r, 1); /* a first pass: one-time conversions out of the count */
        step(&r);
        long w0 = zt_backend_emu_waits(), u0 = zt_engine_get_stats(r.eng).uploads_async;
        loss[off] = backward(&r, 2);
        waits[off] = zt_backend_emu_waits() - w0;
        uploads[off] = zt_engine_get_stats(r.eng).uploads_async - u0;
        rig_close(&r);
    }
    ZT_CHECK_MSG(uploads[0] == 0 && uploads[1] >= 2 * 2, "%s: uploads on the copy queue: %ld without offload, %ld "
                 "with (want 0, at least one per layer unit and pass)", what, uploads[0], uploads[1]);
    /* the one more: zero_grads joins the last step's gradient copies (copy_wait) */
    ZT_CHECK_MSG(waits[1] <= waits[0] + 1, "%s: host waits in a forward and backward: %ld with offload, %ld "
                 "without (%ld uploads): the host waited for uploads", what, waits[1], waits[0], uploads[1]);
    ZT_CHECK_MSG(loss[0] == loss[1], "%s: loss %.9g with offload, %.9g without", what, loss[1], loss[0]);
}

static void test_stage3_uploads_do_not_wait(void)
{
    stage3_uploads_do_not_wait(FP32, "fp32");
    stage3_uploads_do_not_wait(BF16, "bf16 compute");
}

/* Stage 2: the offloaded step updates on the host and queues every unit's upload
 * and gather without waiting for any: its host waits are the verdict's one read and
 * one per unit for its gradient shard's copy down (its marker), whatever the
 * number of uploads (the synchronous uploads waited once per unit more).  The parameters are those of
 * the step without offload, bit for bit. */
static void test_stage2_step_does_not_wait_per_unit(void)
{
    float *vals[2][MAXP] = {{0}};
    long waits[2];
    rig r[2];
    for (int off = 0; off < 2; off++) {
        zt_overlap ov = {.offload_optimizer = off, .overlap_reduce = 1};
        rig_open(&r[off], 2, &ov);
        backward(&r[off], 1);
        long w0 = zt_backend_emu_waits();
        step(&r[off]);
        waits[off] = zt_backend_emu_waits() - w0;
        params(&r[off], vals[off]);
    }
    int nunits = r[0].lay.nunits;
    /* the verdict: one read of the device's (async_step.h: the units' squares stay
     * there), the audit: on the host's cores, none */
    ZT_CHECK_MSG(nunits >= 3 && waits[1] <= nunits + 1, "host waits in the offloaded step: %ld for %d units "
                 "(want at most the verdict's read and one per unit's gradient copy)", waits[1], nunits);
    ZT_CHECK(same_params(&r[0], vals[0], vals[1]));
    /* the next forward reads what went up: the same loss */
    ZT_CHECK(backward(&r[0], 2) == backward(&r[1], 2));
    for (int off = 0; off < 2; off++) {
        free_params(&r[off], vals[off]);
        rig_close(&r[off]);
    }
}

/* Stages 2-3: the step waits for each unit's gradient shard just before updating
 * it, in the order they came down, so the host's AdamW of unit k runs while the
 * copies of the units after it are still queued: every unit's wait but the last
 * returns with a copy down still behind it (zt_backend_emu_overlapped_waits; a
 * single copy_wait for all of them at the start of the step makes none).  The emulated
 * device holds each copy down until a wait past it, so a unit updated before its
 * own shard landed would read stale bytes: the parameters are those of the step
 * without offload, bit for bit. */
static void step_overlaps_downloads(int stage, zt_precision prec, const char *what)
{
    float *vals[2][MAXP] = {{0}};
    long overlapped = 0;
    rig r[2];
    for (int off = 0; off < 2; off++) {
        zt_overlap ov = {.offload_optimizer = off, .offload_params = off && stage == 3, .overlap_reduce = 1};
        rig_open_prec(&r[off], stage, &ov, prec);
        for (int s = 1; s <= 2; s++) {
            backward(&r[off], s);
            long o0 = zt_backend_emu_overlapped_waits();
            step(&r[off]);
            if (off)
                overlapped += zt_backend_emu_overlapped_waits() - o0;
        }
        params(&r[off], vals[off]);
    }
    int nunits = r[0].lay.nunits;
    ZT_CHECK_MSG(nunits >= 3 && overlapped == 2 * (nunits - 1), "%s stage %d: %ld unit updates began with a later "
                 "unit's gradient still coming down, over 2 steps of %d units (want %d)", what, stage, overlapped,
                 nunits, 2 * (nunits - 1));
    ZT_CHECK_MSG(same_params(&r[0], vals[0], vals[1]), "%s stage %d: parameters differ with offload", what, stage);
    for (int off = 0; off < 2; off++) {
        free_params(&r[off], vals[off]);
        rig_close(&r[off]);
    }
}

static void test_step_overlaps_gradient_downloads(void)
{
    step_overlaps_downloads(2, FP32, "fp32");
    step_overlaps_downloads(2, BF16, "bf16 compute");
    step_overlaps_downloads(3, FP32, "fp32");
    step_overlaps_downloads(3, BF16, "bf16 compute");
}

/* The delayed update, against its definition computed here: an engine without it
 * differentiates at θ_{s-2} (its parameters set there) and then steps from
 * θ_{s-1} (set back), which is update s with the one-step lag.  Same losses at
 * every step (steps 1 and 2 at θ_0), same parameters after the last one (the
 * flush), and different from the run without the lag from step 3 on. */
static void test_delayed_update_lags_one_step(void)
{
    for (int stage = 1; stage <= 3; stage++) {
        double loss_dpu[STEPS + 1], loss_ref[STEPS + 1], loss_plain[STEPS + 1];
        rig d, ref, plain;
        zt_overlap ov_d = {.offload_optimizer = 1, .offload_params = stage == 3, .offload_delayed_update = 1};
        zt_overlap ov_r = {.offload_optimizer = 1, .offload_params = stage == 3};
        rig_open(&d, stage, &ov_d);
        rig_open(&ref, stage, &ov_r);
        rig_open(&plain, stage, &ov_r);
        float *prev[MAXP] = {0}, *cur[MAXP] = {0}; /* θ_{s-2}, θ_{s-1} */
        params(&ref, prev);
        params(&ref, cur);
        for (int s = 1; s <= STEPS; s++) {
            loss_dpu[s] = backward(&d, s);
            step(&d);
            loss_plain[s] = backward(&plain, s);
            step(&plain);
            set_params(&ref, prev); /* differentiate at θ_{s-2} */
            loss_ref[s] = backward(&ref, s);
            set_params(&ref, cur); /* update θ_{s-1} */
            step(&ref);
            free_params(&ref, prev);
            memcpy(prev, cur, sizeof prev);
            params(&ref, cur);
        }
        for (int s = 1; s <= STEPS; s++)
            ZT_CHECK_MSG(loss_dpu[s] == loss_ref[s], "stage %d step %d: loss %.9g with the delayed update, %.9g by "
                         "its definition", stage, s, loss_dpu[s], loss_ref[s]);
        ZT_CHECK(loss_dpu[1] == loss_plain[1] && loss_dpu[2] != loss_plain[2] && loss_dpu[3] != loss_plain[3]);
        float *got[MAXP] = {0};
        params(&d, got); /* flushes the update of the last step */
        ZT_CHECK_MSG(same_params(&d, got, cur), "stage %d: the parameters after %d delayed updates differ from "
                     "their definition's", stage, STEPS);
        ZT_CHECK(zt_engine_optimizer_steps(d.eng) == STEPS);
        free_params(&d, got);
        free_params(&ref, prev);
        free_params(&ref, cur);
        rig_close(&d);
        rig_close(&ref);
        rig_close(&plain);
    }
}

int main(void)
{
    ZT_RUN(test_stage3_uploads_do_not_wait);
    ZT_RUN(test_stage2_step_does_not_wait_per_unit);
    ZT_RUN(test_step_overlaps_gradient_downloads);
    ZT_RUN(test_delayed_update_lags_one_step);
    ZT_TEST_MAIN_END();
}
