/* evaluate.c — held-out evaluation during training (see evaluate.h). */
#include "evaluate.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "../core/mem.h"
#include "../kernels/backend.h"

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
    zt_free(ZT_MEM_OTHER, ev->pos, ev->pos ? io_bytes(ev) : 0);
    zt_free(ZT_MEM_OTHER, ev->mine, slots(ev) * sizeof(double));
    zt_free(ZT_MEM_OTHER, ev->all, (size_t)ev->W * slots(ev) * sizeof(double));
    if (ev->have_model)
        zt_model_free(&ev->model);
    if (ev->have_tokens)
        zt_tokens_free(&ev->tokens);
    memset(ev, 0, sizeof *ev);
}

int zt_evaluator_open(zt_evaluator *ev, const char *path, const char *mask_path, const zt_llama_config *cfg,
                      const zt_layout *lay, const zt_param_owner *owner, int B, int T, int W, long max_windows,
                      const char *flag, zt_err *err)
{
    memset(ev, 0, sizeof *ev);
    ev->B = B;
    ev->T = T;
    ev->V = cfg->vocab_size;
    ev->W = W;
    int rc = zt_tokens_load(path, &ev->tokens, err);
    if (rc)
        return zt_wrap(err, "--%s: ", flag);
    ev->have_tokens = 1;
    if (mask_path && (rc = zt_tokens_load_mask(mask_path, &ev->tokens, err))) {
        zt_wrap(err, "--%s: ", flag);
        goto fail;
    }
    if (ev->tokens.max_id >= cfg->vocab_size) {
        rc = zt_fail(err, ZT_EINPUT, "--%s %s: token id %d is outside the model's vocabulary (vocab_size %d)",
                     flag, path, ev->tokens.max_id, cfg->vocab_size);
        goto fail;
    }
    if (ev->tokens.n < 2) {
        rc = zt_fail(err, ZT_EINPUT, "--%s %s: %zu token%s is too short: evaluation needs at least 2 (a token "
                     "and the one that follows it)", flag, path, ev->tokens.n, ev->tokens.n == 1 ? "" : "s");
        goto fail;
    }
    /* ceil((n - 1) / T) windows: the last may hold fewer than T targets */
    ev->nwin = (long)((ev->tokens.n - 2) / (size_t)T) + 1;
    if (max_windows > 0 && max_windows < ev->nwin)
        ev->nwin = max_windows;
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

/* Targets of window w: T, or fewer for the last window of the stream. */
static int window_len(const zt_evaluator *ev, long w)
{
    size_t left = ev->tokens.n - 1 - (size_t)w * ev->T;
    return left < (size_t)ev->T ? (int)left : ev->T;
}

/* Whether target t of window w counts: always, or under a loss mask (SFT
 * records) only where its token is a completion token. */
static int counted(const zt_evaluator *ev, long w, int t)
{
    const size_t at = (size_t)w * ev->T + (size_t)t;
    if (ev->pos && ev->tokens.ids[at] == ev->doc_eos) /* padding-free: no target across documents */
        return 0;
    return !ev->tokens.loss_mask || ev->tokens.loss_mask[at + 1];
}

int zt_evaluator_set_padding_free(zt_evaluator *ev, int32_t eos, zt_err *err)
{
    ev->doc_eos = eos;
    if (!(ev->pos = zt_alloc(ZT_MEM_OTHER, io_bytes(ev))))
        return zt_fail(err, ZT_EFAIL, "out of memory for the padding-free positions");
    return zt_model_set_positions(&ev->model, ev->pos, err);
}

/* The targets of window w that count: its length, less the prompt tokens. */
static long window_count(const zt_evaluator *ev, long w)
{
    int len = window_len(ev, w);
    long c = 0;
    for (int t = 0; t < len; t++)
        c += counted(ev, w, t);
    return c;
}

/* Row b of inputs/targets: window w, padded with token 0 past its length; a
 * masked-out target is ZT_IGNORE_INDEX (no loss, as in training). */
static void fill_row(const zt_evaluator *ev, long w, int *inputs, int *targets, int *pos)
{
    const int32_t *src = ev->tokens.ids + (size_t)w * ev->T;
    int len = window_len(ev, w);
    for (int t = 0; t < ev->T; t++) {
        inputs[t] = t < len ? src[t] : 0;
        targets[t] = t >= len ? 0 : counted(ev, w, t) ? src[t + 1] : ZT_IGNORE_INDEX;
        if (pos) /* padding-free: a document starts at the window's start and after each eos */
            pos[t] = t == 0 || inputs[t - 1] == ev->doc_eos ? 0 : pos[t - 1] + 1;
    }
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
            fill_row(ev, w, ev->inputs + (size_t)b * T, ev->targets + (size_t)b * T,
                     ev->pos ? ev->pos + (size_t)b * T : NULL);
        }
        double unused;
        /* every rank runs this pass (ZeRO-3 gathers units collectively); a failure
         * is carried to the agreement below instead of leaving the others waiting */
        if (rc == ZT_OK)
            rc = zt_model_forward(&ev->model, ev->inputs, ev->targets, &unused, err);
        const float *logits = zt_model_logits(&ev->model); /* where the backend computes: its xent reads them */
        for (int b = 0; rc == ZT_OK && b < B && first + b < ev->nwin; b++)
            ev->mine[k * B + b] = ev->model.be->xent(NULL, NULL, logits + (size_t)b * T * ev->V,
                                                     ev->targets + (size_t)b * T, window_len(ev, first + b), ev->V,
                                                     0.0f);
    }
    if ((rc = zt_comm_agree(comm, rc, err)))
        return rc; /* the failing rank reports it */
    zt_comm_allgather_bytes(comm, ev->all, ev->mine, slots(ev) * sizeof(double));
    /* window w sits in round k = w / (BW), on rank q = (w / B) % W, in row w % B */
    double sum = 0.0;
    long tokens = 0;
    for (long w = 0; w < ev->nwin; w++) {
        long k = w / ((long)B * W), q = (w / B) % W, b = w % B;
        sum += ev->all[(size_t)q * slots(ev) + (size_t)(k * B + b)];
        tokens += window_count(ev, w);
    }
    if (tokens == 0) /* every target a prompt token: no completion to evaluate (the same on every rank) */
        return zt_fail(err, ZT_EINPUT, "evaluation: the records' completions hold no token to evaluate (every "
                       "target is a prompt token)");
    out->tokens = tokens; /* the mean is per token: a short last window weighs its length */
    out->loss = sum / (double)out->tokens;
    out->perplexity = exp(out->loss);
    out->seconds = now_s() - t0;
    return ZT_OK;
}
