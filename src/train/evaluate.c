/* evaluate.c — held-out evaluation during training (see evaluate.h). */
#include "evaluate.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "../core/mem.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t io_bytes(const zt_evaluator *ev) { return (size_t)ev->B * ev->T * sizeof(int); }
static size_t slots(const zt_evaluator *ev) { return (size_t)ev->rounds * ev->B; }

void zt_evaluator_free(zt_evaluator *ev)
{
    zt_free(ZT_MEM_OTHER, ev->inputs, io_bytes(ev));
    zt_free(ZT_MEM_OTHER, ev->targets, io_bytes(ev));
    zt_free(ZT_MEM_OTHER, ev->mine, slots(ev) * sizeof(double));
    zt_free(ZT_MEM_OTHER, ev->all, (size_t)ev->W * slots(ev) * sizeof(double));
    if (ev->have_model)
        zt_model_free(&ev->model);
    if (ev->have_batcher)
        zt_batcher_free(&ev->batcher);
    if (ev->have_tokens)
        zt_tokens_free(&ev->tokens);
    memset(ev, 0, sizeof *ev);
}

int zt_evaluator_open(zt_evaluator *ev, const char *path, const zt_llama_config *cfg, const zt_layout *lay,
                      const zt_param_owner *owner, int B, int T, int W, zt_err *err)
{
    memset(ev, 0, sizeof *ev);
    ev->B = B;
    ev->T = T;
    ev->V = cfg->vocab_size;
    ev->W = W;
    int rc = zt_tokens_load(path, &ev->tokens, err);
    if (rc)
        return zt_wrap(err, "--eval_data: ");
    ev->have_tokens = 1;
    if (ev->tokens.max_id >= cfg->vocab_size) {
        rc = zt_fail(err, ZT_EINPUT, "--eval_data %s: token id %d is outside the model's vocabulary (vocab_size %d)",
                     path, ev->tokens.max_id, cfg->vocab_size);
        goto fail;
    }
    if ((rc = zt_batcher_init(&ev->batcher, &ev->tokens, T, 0, 0, path, err)))
        goto fail;
    ev->have_batcher = 1;
    ev->nwin = (long)ev->batcher.nwin;
    long per_round = (long)B * W;
    ev->rounds = (ev->nwin + per_round - 1) / per_round;
    if ((rc = zt_model_init(&ev->model, cfg, lay, owner, B, T, 0, err)))
        goto fail;
    ev->have_model = 1;
    ev->inputs = zt_alloc(ZT_MEM_OTHER, io_bytes(ev));
    ev->targets = zt_alloc(ZT_MEM_OTHER, io_bytes(ev));
    ev->mine = zt_alloc(ZT_MEM_OTHER, slots(ev) * sizeof(double));
    ev->all = zt_alloc(ZT_MEM_OTHER, (size_t)W * slots(ev) * sizeof(double));
    if (!ev->inputs || !ev->targets || !ev->mine || !ev->all) {
        rc = zt_fail(err, ZT_EFAIL, "out of memory for evaluation buffers");
        goto fail;
    }
    return ZT_OK;
fail:
    zt_evaluator_free(ev);
    return rc;
}

int zt_evaluator_run(zt_evaluator *ev, zt_comm *comm, zt_eval_result *out, zt_err *err)
{
    const int B = ev->B, T = ev->T, W = ev->W, r = comm->rank;
    double t0 = now_s();
    int rc = ZT_OK;
    memset(ev->mine, 0, slots(ev) * sizeof(double));
    for (long k = 0; k < ev->rounds; k++) {
        long first = (k * W + r) * (long)B; /* this rank's first window in round k */
        for (int b = 0; b < B; b++) {
            long w = first + b < ev->nwin ? first + b : 0; /* past the end: window 0, not counted */
            zt_batcher_fill(&ev->batcher, w, 1, ev->inputs + (size_t)b * T, ev->targets + (size_t)b * T);
        }
        double unused;
        /* every rank runs this pass (ZeRO-3 gathers units collectively); a failure
         * is carried to the agreement below instead of leaving the others waiting */
        if (rc == ZT_OK)
            rc = zt_model_forward(&ev->model, ev->inputs, ev->targets, &unused, err);
        const float *logits = zt_model_logits(&ev->model); /* where the backend computes: its xent reads them */
        for (int b = 0; rc == ZT_OK && b < B && first + b < ev->nwin; b++)
            ev->mine[k * B + b] = ev->model.be->xent(NULL, NULL, logits + (size_t)b * T * ev->V,
                                                     ev->targets + (size_t)b * T, T, ev->V, 0.0f);
    }
    if ((rc = zt_comm_agree(comm, rc, err)))
        return rc; /* the failing rank reports it */
    zt_comm_allgather_bytes(comm, ev->all, ev->mine, slots(ev) * sizeof(double));
    /* window w sits in round k = w / (BW), on rank q = (w / B) % W, in row w % B */
    double sum = 0.0;
    for (long w = 0; w < ev->nwin; w++) {
        long k = w / ((long)B * W), q = (w / B) % W, b = w % B;
        sum += ev->all[(size_t)q * slots(ev) + (size_t)(k * B + b)];
    }
    out->tokens = ev->nwin * T;
    out->loss = sum / (double)out->tokens;
    out->perplexity = exp(out->loss);
    out->seconds = now_s() - t0;
    return ZT_OK;
}
