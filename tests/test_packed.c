/* test_packed.c — packed examples (TRL's padding_free and packing) without cross-talk.
 *
 * 1. Model: tests/fixtures/packed (tools/make_packed_fixtures.py) holds six examples
 *    of the gqa_tied model's tokens packed into 2 rows of 160, and the loss and every
 *    gradient that transformers' LlamaForCausalLM gives running each example ALONE
 *    (float64).  ztrain's fp32 forward and backward of the packed rows, with each
 *    token's position inside its example, must equal them: loss and gradients within
 *    1e-6 relative (max |ours - ref| / max |ref| per tensor).  Without the positions
 *    the same rows give another loss (the examples see each other).
 *    The same examples as one stream of documents ending at eos, bin-packed by
 *    --packing's batcher, must give the same loss and gradients too.
 * 2. Kernels: attention (fp32 and the bf16-operand one) over packed sequences, forward
 *    and backward, equals each example run alone, with examples that start and end
 *    inside and across the 64-key tiles and beside a sliding window. */
#include <stdlib.h>
#include <string.h>

#include "../src/engine/engine.h"
#include "../src/io/hf_model.h"
#include "../src/train/weights.h"
#include "../src/io/safetensors.h"
#include "../src/kernels/kernels.h"
#include "../src/model/llama.h"
#include "../src/train/batches.h"
#include "test.h"
#include "tok_fixture.h"

static const char *FIX = "tests/fixtures/gqa_tied";

typedef struct packed {
    int B, T, n_targets, eos;
    double loss;
    int *in, *tg, *pos;
} packed;

static void read_rows(const cJSON *j, const char *key, int *dst, int B, int T)
{
    const cJSON *rows = cJSON_GetObjectItem(j, key);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            dst[b * T + t] = cJSON_GetArrayItem(cJSON_GetArrayItem(rows, b), t)->valueint;
}

static int read_packed(packed *p)
{
    cJSON *j = read_json("tests/fixtures/packed/examples.json");
    ZT_CHECK_MSG(j != NULL, "cannot read tests/fixtures/packed/examples.json");
    if (!j)
        return 0;
    p->B = cJSON_GetObjectItem(j, "B")->valueint;
    p->T = cJSON_GetObjectItem(j, "T")->valueint;
    p->n_targets = cJSON_GetObjectItem(j, "n_targets")->valueint;
    p->eos = cJSON_GetObjectItem(j, "eos")->valueint;
    p->loss = cJSON_GetObjectItem(j, "loss")->valuedouble;
    size_t n = (size_t)p->B * p->T;
    p->in = malloc(n * sizeof(int));
    p->tg = malloc(n * sizeof(int));
    p->pos = malloc(n * sizeof(int));
    read_rows(j, "input_ids", p->in, p->B, p->T);
    read_rows(j, "labels", p->tg, p->B, p->T);
    read_rows(j, "position_ids", p->pos, p->B, p->T);
    cJSON_Delete(j);
    return 1;
}

/* max|a - ref| / max|ref| */
static double rel_err(const float *a, const zt_st_tensor *ref, size_t n)
{
    double maxd = 0.0, maxr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = zt_load_f32(ref->data, ref->dtype, i), d = fabs((double)a[i] - r);
        maxd = d > maxd ? d : maxd;
        maxr = fabs(r) > maxr ? fabs(r) : maxr;
    }
    return maxd / (maxr > 0 ? maxr : 1.0);
}

/* Every gradient against the reference; the worst relative error. */
static double check_grads(zt_engine *eng, const zt_layout *lay, const zt_st_file *ref, double tol)
{
    zt_err err = {0};
    double worst = 0;
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        float **g = calloc((size_t)lay->nparams, sizeof *g);
        for (int k = 0; k < lay->nparams; k++)
            g[k] = malloc(lay->params[k].numel * sizeof(float));
        ZT_CHECK(zt_engine_full_grads(eng, g, &err) == ZT_OK);
        char name[200];
        snprintf(name, sizeof name, "grad.%s", p->name);
        const zt_st_tensor *t = zt_st_find(ref, name);
        ZT_CHECK_MSG(t != NULL, "reference gradient %s missing", name);
        if (t) {
            double e = rel_err(g[i], t, p->numel);
            worst = e > worst ? e : worst;
            ZT_CHECK_MSG(e <= tol, "%s: rel err %.3g > %.3g", name, e, tol);
        }
        for (int k = 0; k < lay->nparams; k++)
            free(g[k]);
        free(g);
    }
    return worst;
}

/* The gqa_tied model's fp32 forward and backward of B rows of T (positions pos)
 * against transformers running each example alone: loss and every gradient within
 * 1e-6 relative; without positions (cross-talk) the loss must differ. */
static void check_model(const char *what, int B, int T, const int *in, const int *tg, const int *pos, long n_targets,
                        double ref_loss, const zt_st_file *ref)
{
    zt_llama_config cfg;
    zt_layout lay;
    zt_comm comm;
    zt_engine *eng = NULL;
    zt_model m;
    zt_err err = {0};
    zt_comm_create_local(&comm);
    ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    ZT_CHECK(zt_engine_create(&eng, zt_backend_cpu(), &lay, ZT_PRECISION_ALL(ZT_F32), 0, NULL, &comm, &err) == ZT_OK);
    ZT_CHECK(zt_hf_load_params(FIX, &lay, eng, &err) == ZT_OK);
    zt_engine_refresh_gathered(eng);
    zt_param_owner own = zt_engine_param_owner(eng);
    ZT_CHECK(zt_model_init(&m, &cfg, &lay, &own, B, T, 0, &err) == ZT_OK);
    ZT_CHECK(zt_model_set_positions(&m, pos, &err) == ZT_OK);
    double loss_sum = 0;
    zt_engine_zero_grads(eng);
    ZT_CHECK_MSG(zt_model_forward_backward(&m, in, tg, 1.0f / (float)n_targets, &loss_sum, &err) == ZT_OK,
                 "%s", err.msg);
    double loss = loss_sum / n_targets;
    ZT_CHECK_MSG(fabs(loss - ref_loss) <= 1e-6 * ref_loss, "%s: loss %.9g, transformers %.9g", what, loss, ref_loss);
    double worst = check_grads(eng, &lay, ref, 1e-6);
    printf("     %s: loss rel err %.3g, worst gradient rel err %.3g\n", what, fabs(loss - ref_loss) / ref_loss, worst);
    /* the same rows without positions: one sequence a row, the examples see each other */
    ZT_CHECK(zt_model_set_positions(&m, NULL, &err) == ZT_OK);
    ZT_CHECK(zt_model_forward(&m, in, tg, &loss_sum, &err) == ZT_OK);
    ZT_CHECK_MSG(fabs(loss_sum / n_targets - ref_loss) > 1e-3, "%s: no cross-talk without positions?", what);
    zt_model_free(&m);
    zt_engine_destroy(eng);
    zt_layout_free(&lay);
}

static void test_packed_equals_examples_alone(void)
{
    packed p;
    zt_st_file *ref = NULL;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_st_open("tests/fixtures/packed/reference.safetensors", &ref, &err) == ZT_OK, "%s", err.msg);
    if (!ref || !read_packed(&p)) {
        zt_st_close(ref);
        return;
    }
    check_model("packed rows", p.B, p.T, p.in, p.tg, p.pos, p.n_targets, p.loss, ref);
    /* --packing: the same examples as one stream whose documents end at eos, bin-packed
     * by the batcher (another order inside the rows: the sum is the same) */
    const size_t n = (size_t)p.B * p.T;
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = p.in[i];
    zt_tokens tok = {ids, n, 256, NULL};
    zt_batcher b;
    ZT_CHECK(zt_batcher_init(&b, &tok, p.T, 0, 0, "test", &err) == ZT_OK);
    ZT_CHECK_MSG(zt_batcher_set_packing(&b, p.eos, p.B, 0, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK_MSG(b.nwin == (size_t)p.B, "%zu bins", b.nwin);
    ZT_CHECK(zt_batcher_count_targets(&b, 0, p.B) == p.n_targets);
    int *in = malloc(n * sizeof *in), *tg = malloc(n * sizeof *tg);
    zt_batcher_fill(&b, 0, p.B, in, tg);
    check_model("--packing", p.B, p.T, in, tg, b.pos, p.n_targets, p.loss, ref);
    zt_batcher_free(&b);
    zt_st_close(ref);
    free(ids), free(in), free(tg);
    free(p.in), free(p.tg), free(p.pos);
}

/* A table without the position entries refuses them by its name. */
static void test_table_without_positions_refuses(void)
{
    zt_backend be = *zt_backend_cpu();
    be.name = "test";
    be.attention_forward_pos = NULL;
    zt_model m;
    memset(&m, 0, sizeof m);
    m.be = &be;
    zt_err err = {0};
    int pos[1] = {0};
    ZT_CHECK(zt_model_set_positions(&m, pos, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "the test device's exact kernels do not take positions") != NULL, "%s", err.msg);
    ZT_CHECK(zt_model_set_positions(&m, NULL, &err) == ZT_OK);
}

/* Attention over rows of packed examples against each example alone (a row of its
 * own, positions 0..len-1), forward (out, lse) and backward (dqkv). */
static void check_kernel(int bf16, int window)
{
    enum { NH = 4, NKV = 2, HD = 32, T = 200 };
    static const int lens[] = {1, 63, 2, 70, 64}; /* one row of 200, in and across 64-key tiles */
    const int W = (NH + 2 * NKV) * HD, OW = NH * HD, n = sizeof lens / sizeof lens[0];
    float *qkv = malloc(sizeof(float) * T * W), *dout = malloc(sizeof(float) * T * OW);
    float *out = malloc(sizeof(float) * T * OW), *lse = malloc(sizeof(float) * NH * T);
    float *dqkv = malloc(sizeof(float) * T * W), *o1 = malloc(sizeof(float) * T * OW);
    float *l1 = malloc(sizeof(float) * NH * T), *d1 = malloc(sizeof(float) * T * W);
    void *pack = bf16 ? malloc(zt_attention16_pack_bytes(1, T, NKV, HD)) : NULL;
    int pos[T];
    for (int i = 0; i < T * W; i++)
        qkv[i] = (float)sin(0.37 * i + 0.1) * 0.8f;
    for (int i = 0; i < T * OW; i++)
        dout[i] = (float)cos(0.23 * i);
    for (int e = 0, at = 0; e < n; at += lens[e++])
        for (int k = 0; k < lens[e]; k++)
            pos[at + k] = k;
    if (bf16) {
        zt_attention16_forward_pos(out, NULL, lse, qkv, pack, pos, 1, T, NH, NKV, HD, window);
        zt_attention16_backward_pos(dqkv, dout, qkv, out, lse, pack, pos, 1, T, NH, NKV, HD, window);
    } else {
        zt_attention_forward_pos(out, NULL, lse, qkv, pos, 1, T, NH, NKV, HD, window);
        zt_attention_backward_pos(dqkv, dout, qkv, out, lse, pos, 1, T, NH, NKV, HD, window);
    }
    /* per example: max |packed - alone| / max |alone| of out, lse and dqkv */
    double worst = 0;
    for (int e = 0, at = 0; e < n; at += lens[e++]) {
        const int L = lens[e];
        if (bf16) {
            zt_attention16_forward(o1, NULL, l1, qkv + (size_t)at * W, pack, 1, L, NH, NKV, HD, window);
            zt_attention16_backward(d1, dout + (size_t)at * OW, qkv + (size_t)at * W, o1, l1, pack, 1, L, NH, NKV,
                                    HD, window);
        } else {
            zt_attention_forward(o1, l1, qkv + (size_t)at * W, 1, L, NH, NKV, HD, window);
            zt_attention_backward(d1, dout + (size_t)at * OW, qkv + (size_t)at * W, o1, l1, 1, L, NH, NKV, HD,
                                  window);
        }
        double d[3] = {0}, r[3] = {0};
        for (int i = 0; i < L * OW; i++)
            d[0] = fmax(d[0], fabs(out[(size_t)at * OW + i] - o1[i])), r[0] = fmax(r[0], fabs(o1[i]));
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < L; i++)
                d[1] = fmax(d[1], fabs(lse[(size_t)h * T + at + i] - l1[(size_t)h * L + i])),
                r[1] = fmax(r[1], fabs(l1[(size_t)h * L + i]));
        for (int i = 0; i < L * W; i++)
            d[2] = fmax(d[2], fabs(dqkv[(size_t)at * W + i] - d1[i])), r[2] = fmax(r[2], fabs(d1[i]));
        for (int k = 0; k < 3; k++)
            worst = fmax(worst, d[k] / fmax(r[k], 1e-30));
    }
    /* fp32: the same sums in another tiling; bf16 operands: probabilities rounded to
     * bf16 against another running max (one bf16 ulp, 2^-8) */
    const double tol = bf16 ? 1e-2 : 1e-6;
    ZT_CHECK_MSG(worst <= tol, "%s window %d: packed vs alone rel err %.3g", bf16 ? "bf16" : "fp32", window, worst);
    printf("     %s window %d: packed vs alone rel err %.3g\n", bf16 ? "bf16 operands" : "fp32", window, worst);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(o1), free(l1), free(d1), free(pack);
}

static void test_attention_packed_fp32(void)
{
    check_kernel(0, 0);
    check_kernel(0, 50);
}

static void test_attention_packed_bf16_operands(void)
{
    ZT_CHECK(zt_attention16_supported(32));
    check_kernel(1, 0);
    check_kernel(1, 50);
}

/* RoPE with positions rotates each packed token as the example alone rotates it
 * (the same table row: bit for bit), forward and backward.  (In the model the
 * attention scores depend on relative positions only, so this is what pins the
 * positions themselves.) */
static void test_rope_positions(void)
{
    enum { NH = 2, NKV = 1, HD = 16, T = 40 };
    static const int lens[] = {7, 20, 13};
    const int W = (NH + 2 * NKV) * HD;
    float cos_t[T * HD / 2], sin_t[T * HD / 2], x[T * W], y[T * W];
    zt_rope_freqs f = {0};
    f.theta = 10000.0f;
    zt_rope_tables(cos_t, sin_t, T, HD, &f);
    int pos[T];
    for (int e = 0, at = 0; e < 3; at += lens[e++])
        for (int k = 0; k < lens[e]; k++)
            pos[at + k] = k;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < T * W; i++)
            x[i] = y[i] = (float)sin(0.71 * i);
        (pass ? zt_rope_backward_pos : zt_rope_forward_pos)(x, cos_t, sin_t, pos, 1, T, NH, NKV, HD);
        for (int e = 0, at = 0; e < 3; at += lens[e++])
            (pass ? zt_rope_backward : zt_rope_forward)(y + (size_t)at * W, cos_t, sin_t, 1, lens[e], NH, NKV, HD);
        ZT_CHECK_MSG(memcmp(x, y, sizeof x) == 0, "rope %s: packed tokens rotated otherwise than alone",
                     pass ? "backward" : "forward");
    }
}

/* Padding-free windows: a document starts at each window's start and after each
 * eos; positions count from there, and the step from an eos into the next document
 * is no target (counted out of the mean as well). */
static void test_batcher_padding_free(void)
{
    enum { EOS = 9, T = 8 };
    int32_t ids[] = {5, 6, EOS, 7, 8, 1, EOS, EOS, 2, 3, 4, 5, 6, EOS, 1, 2, 3};
    zt_tokens tok = {ids, sizeof ids / sizeof ids[0], 9, NULL};
    zt_batcher b;
    zt_err err = {0};
    ZT_CHECK(zt_batcher_init(&b, &tok, T, 0, 0, "test", &err) == ZT_OK);
    ZT_CHECK(zt_batcher_set_padding_free(&b, EOS, 2, &err) == ZT_OK);
    int in[2 * T], tg[2 * T];
    zt_batcher_fill(&b, 0, 2, in, tg);
    static const int want_pos[2 * T] = {0, 1, 2, 0, 1, 2, 3, 0, /* window 1 starts a document */ 0, 1, 2, 3, 4, 5, 0, 1};
    static const int want_tg[2 * T] = {6, EOS, -100, 8, 1, EOS, -100, -100, 3, 4, 5, 6, EOS, -100, 2, 3};
    ZT_CHECK(memcmp(b.pos, want_pos, sizeof want_pos) == 0);
    ZT_CHECK(memcmp(tg, want_tg, sizeof want_tg) == 0);
    ZT_CHECK(zt_batcher_count_targets(&b, 0, 2) == 12);
    zt_batcher_free(&b);
}

/* --packing: documents (ending at eos) placed best-fit decreasing; each row holds its
 * documents from position 0, no target from a document's last token, then padding. */
static void test_batcher_packing_fill(void)
{
    enum { EOS = 9, T = 8 };
    /* documents of 3, 5, 2 and 1 tokens: 5 opens bin 0 (room 3), 3 fills it, 2 opens
     * bin 1 (room 6), 1 joins it */
    int32_t ids[] = {5, 6, EOS, 1, 2, 3, 4, EOS, 7, EOS, 8};
    zt_tokens tok = {ids, sizeof ids / sizeof ids[0], 10, NULL};
    zt_batcher b;
    zt_err err = {0};
    ZT_CHECK(zt_batcher_init(&b, &tok, T, 0, 0, "test", &err) == ZT_OK);
    ZT_CHECK(zt_batcher_set_packing(&b, EOS, 2, 0, &err) == ZT_OK);
    ZT_CHECK(b.nwin == 2);
    int in[2 * T], tg[2 * T];
    zt_batcher_fill(&b, 0, 2, in, tg);
    static const int want_in[2 * T] = {1, 2, 3, 4, EOS, 5, 6, EOS, 7, EOS, 8, EOS, EOS, EOS, EOS, EOS};
    static const int want_tg[2 * T] = {2, 3, 4, EOS, -100, 6, EOS, -100, EOS, -100, -100, -100, -100, -100, -100, -100};
    static const int want_pos[2 * T] = {0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 0, 0, 0, 0, 0, 0};
    ZT_CHECK(memcmp(in, want_in, sizeof want_in) == 0);
    ZT_CHECK(memcmp(tg, want_tg, sizeof want_tg) == 0);
    ZT_CHECK(memcmp(b.pos, want_pos, sizeof want_pos) == 0);
    ZT_CHECK(zt_batcher_count_targets(&b, 0, 2) == 7);
    zt_batcher_free(&b);
    /* under a loss mask (prompt/completion records) a target whose token is masked
     * out leaves the loss too: here the 2 of document 1 and the eos of document 2 */
    uint8_t mask[sizeof ids / sizeof ids[0]] = {1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1};
    tok.loss_mask = mask;
    ZT_CHECK(zt_batcher_init(&b, &tok, T, 0, 0, "test", &err) == ZT_OK);
    ZT_CHECK(zt_batcher_set_packing(&b, EOS, 2, 0, &err) == ZT_OK);
    zt_batcher_fill(&b, 0, 2, in, tg);
    static const int want_masked[2 * T] = {-100, 3,    4,    EOS,  -100, 6,    EOS,  -100,
                                           -100, -100, -100, -100, -100, -100, -100, -100};
    ZT_CHECK(memcmp(tg, want_masked, sizeof want_masked) == 0);
    ZT_CHECK(zt_batcher_count_targets(&b, 0, 2) == 5);
    zt_batcher_free(&b);
}

/* One strategy's bins (split: bfd_split) against TRL's: each bin's segments, in
 * order, are [example, first token, length]; example e starts at at[e] in ids. */
static void check_bins(const cJSON *bins, const size_t *at, int T, int32_t *ids, size_t n, int split)
{
    zt_tokens tok = {ids, n, 10, NULL};
    zt_batcher b;
    zt_err err = {0};
    ZT_CHECK(zt_batcher_init(&b, &tok, T, 0, 0, "test", &err) == ZT_OK);
    ZT_CHECK(zt_batcher_set_packing(&b, 1, 1, split, &err) == ZT_OK);
    ZT_CHECK_MSG(b.nwin == (size_t)cJSON_GetArraySize(bins), "split %d: %zu bins, TRL %d", split, b.nwin,
                 cJSON_GetArraySize(bins));
    int bad = -1;
    for (int w = 0; bad < 0 && w < cJSON_GetArraySize(bins) && (size_t)w < b.nwin; w++) {
        const cJSON *bin = cJSON_GetArrayItem(bins, w);
        if (b.bin_off[w + 1] - b.bin_off[w] != (size_t)cJSON_GetArraySize(bin))
            bad = w;
        for (int k = 0; bad < 0 && k < cJSON_GetArraySize(bin); k++) {
            const cJSON *seg = cJSON_GetArrayItem(bin, k);
            const size_t d = b.bin_docs[b.bin_off[w] + k];
            const size_t start = at[cJSON_GetArrayItem(seg, 0)->valueint] + (size_t)cJSON_GetArrayItem(seg, 1)->valueint;
            if (b.doc_start[d] != start || b.doc_len[d] != cJSON_GetArrayItem(seg, 2)->valueint)
                bad = w;
        }
    }
    ZT_CHECK_MSG(bad < 0, "split %d: bin %d differs from TRL's", split, bad);
    zt_batcher_free(&b);
}

/* The bins of tests/fixtures/packed/bfd.json (tools/make_bfd_fixture.py): TRL's own
 * pack_dataset(strategy="bfd" and "bfd_split") on 300 examples, some longer than
 * the window (truncated, or cut into pieces). */
static void test_batcher_packing_as_trl(void)
{
    enum { EOS = 1 };
    cJSON *j = read_json("tests/fixtures/packed/bfd.json");
    ZT_CHECK_MSG(j != NULL, "cannot read tests/fixtures/packed/bfd.json");
    if (!j)
        return;
    const int T = cJSON_GetObjectItem(j, "seq_length")->valueint;
    const cJSON *lens = cJSON_GetObjectItem(j, "lengths");
    const int ne = cJSON_GetArraySize(lens);
    size_t *at = malloc((size_t)ne * sizeof *at), n = 0;
    for (int i = 0; i < ne; i++) {
        at[i] = n;
        n += (size_t)cJSON_GetArrayItem(lens, i)->valueint;
    }
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < ne; i++) /* example i: len - 1 tokens, then eos */
        for (int k = 0, len = cJSON_GetArrayItem(lens, i)->valueint; k < len; k++)
            ids[at[i] + k] = k + 1 < len ? 2 + i % 7 : EOS;
    check_bins(cJSON_GetObjectItem(j, "bfd"), at, T, ids, n, 0);
    check_bins(cJSON_GetObjectItem(j, "bfd_split"), at, T, ids, n, 1);
    free(ids), free(at);
    cJSON_Delete(j);
}

int main(void)
{
    ZT_RUN(test_batcher_packing_fill);
    ZT_RUN(test_batcher_packing_as_trl);
    ZT_RUN(test_batcher_padding_free);
    ZT_RUN(test_rope_positions);
    ZT_RUN(test_packed_equals_examples_alone);
    ZT_RUN(test_table_without_positions_refuses);
    ZT_RUN(test_attention_packed_fp32);
    ZT_RUN(test_attention_packed_bf16_operands);
    ZT_TEST_MAIN_END();
}
