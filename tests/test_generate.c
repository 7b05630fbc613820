/* test_generate.c — inference over the KV cache and the generation loop.
 *
 * Given tests/fixtures/generate (a byte-level Llama with GQA saved by transformers'
 * save_pretrained) and the greedy continuations LlamaForCausalLM.generate gave for
 * three prompts (tools/make_generate_fixture.py):
 *   - fp32 greedy decoding gives exactly those ids;
 *   - the cache path (prefill in uneven chunks, then one token at a time) gives the
 *     logits of the training model's full forward at every position: fp32 rel err
 *     <= 1e-5, bf16 compute <= 2e-2 (same operand rounding, other summation order);
 *   - sampling with a seed repeats itself, another seed differs, top_k 1 and a tiny
 *     top_p are greedy, and top-k / top-p keep exactly HF's candidates;
 *   - a stop string ends the text right after it; an eos id ends the ids.
 * The same greedy and cache checks run on tests/fixtures/generate_window, a Mistral
 * with sliding_window 8 (tools/make_mistral_fixtures.py): MistralForCausalLM.generate's
 * continuations run far past the window, so the cache must read only the last 8
 * positions for each new token, and the full forward must mask the same way.
 * And on tests/fixtures/llama3_rope (Llama 3.1's rope_scaling) and qwen2_bias (Qwen2's
 * q/k/v biases), whose greedy.json LlamaForCausalLM / Qwen2ForCausalLM.generate wrote
 * (tools/make_family_fixtures.py): the cache path must scale the frequencies and add the
 * biases as the full forward does. */
#include <cjson/cJSON.h>
#include <string.h>

#include "../src/core/mem.h"
#include "../src/infer/generate.h"
#include "../src/io/hf_model.h"
#include "../src/kernels/matmul.h"
#include "../src/model/llama.h"
#include "../src/train/trainer.h"
#include "../src/train/weights.h"
#include "test.h"

#define FIX "tests/fixtures/generate"
#define FIX_WINDOW "tests/fixtures/generate_window"
#define FIX_LLAMA3 "tests/fixtures/llama3_rope"
#define FIX_QWEN2 "tests/fixtures/qwen2_bias"
#define MAXP 3
#define MAXN 128

typedef struct greedy_fixture {
    int np;                      /* prompts */
    int prompt[MAXP][MAXN], plen[MAXP];
    int out[MAXP][MAXN], olen[MAXP];
} greedy_fixture;

static int read_ids(const cJSON *arr, int *ids)
{
    int n = 0;
    for (const cJSON *x = arr ? arr->child : NULL; x && n < MAXN; x = x->next)
        ids[n++] = x->valueint;
    return n;
}

static int load_greedy_from(const char *dir, greedy_fixture *g)
{
    memset(g, 0, sizeof *g);
    char path[256];
    snprintf(path, sizeof path, "%s/greedy.json", dir);
    FILE *f = fopen(path, "r");
    static char buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    ZT_CHECK_MSG(j != NULL, "cannot read %s", path);
    if (!j)
        return 0;
    const cJSON *ps = cJSON_GetObjectItem(j, "prompts"), *os = cJSON_GetObjectItem(j, "outputs");
    const cJSON *p = ps ? ps->child : NULL, *o = os ? os->child : NULL;
    for (; p && o && g->np < MAXP; p = p->next, o = o->next, g->np++) {
        g->plen[g->np] = read_ids(p, g->prompt[g->np]);
        g->olen[g->np] = read_ids(o, g->out[g->np]);
    }
    cJSON_Delete(j);
    ZT_CHECK(g->np == MAXP);
    return g->np;
}

static int load_greedy(greedy_fixture *g) { return load_greedy_from(FIX, g); }

static int open_model_from(const char *dir, zt_infer *m, zt_dtype dt, int cap)
{
    zt_err err = {0};
    int rc = zt_infer_open(m, dir, dt, cap, 2, zt_backend_cpu(), &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    return rc == ZT_OK;
}

static int open_model(zt_infer *m, zt_dtype dt, int cap) { return open_model_from(FIX, m, dt, cap); }

static void check_greedy(const char *dir)
{
    greedy_fixture g;
    zt_infer m;
    if (!load_greedy_from(dir, &g) || !open_model_from(dir, &m, ZT_F32, 128))
        return;
    for (int k = 0; k < g.np; k++) {
        int ids[MAXN];
        zt_gen_params p = {g.olen[k], {0.0, 0, 1.0}, 0, NULL, NULL, 0};
        zt_gen_result res;
        zt_err err = {0};
        int rc = zt_generate(&m, g.prompt[k], g.plen[k], &p, NULL, ids, &res, &err);
        ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
        ZT_CHECK(res.n == g.olen[k] && res.stopped_by == ZT_STOP_LENGTH);
        int first_diff = -1;
        for (int i = 0; i < res.n && first_diff < 0; i++)
            if (ids[i] != g.out[k][i])
                first_diff = i;
        ZT_CHECK_MSG(first_diff < 0, "%s prompt %d: token %d is %d, HF generated %d", dir, k, first_diff,
                     ids[first_diff], g.out[k][first_diff]);
    }
    zt_infer_free(&m);
}

static void test_greedy_matches_hf_generate(void) { check_greedy(FIX); }
static void test_greedy_past_the_window_matches_hf_generate(void) { check_greedy(FIX_WINDOW); }
static void test_greedy_llama3_rope_and_qwen2_bias_match_hf_generate(void)
{
    check_greedy(FIX_LLAMA3);
    check_greedy(FIX_QWEN2);
}

/* The training model's logits (T, V) for one sequence, in the given compute dtype,
 * with the engine as the owner (an independent path to the same weights). */
static int full_forward(const char *dir, const int *tokens, int T, zt_dtype compute, float *logits)
{
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout lay;
    zt_engine *eng = NULL;
    zt_model model;
    zt_comm comm;
    zt_comm_create_local(&comm);
    zt_precision prec = {.load = ZT_F32, .master = ZT_F32, .compute = compute, .reduce = compute,
                         .save = ZT_F32};
    int rc = zt_hf_read_config_dir(dir, &cfg, &err);
    if (!rc) rc = zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err);
    if (!rc) rc = zt_engine_create(&eng, zt_backend_cpu(), &lay, prec, 0, NULL, &comm, &err);
    if (!rc) rc = zt_hf_load_params(dir, &lay, eng, &err);
    if (!rc) zt_engine_refresh_gathered(eng);
    zt_param_owner owner = rc ? (zt_param_owner){0} : zt_engine_param_owner(eng);
    if (!rc) rc = zt_model_init(&model, &cfg, &lay, &owner, 1, T, 0, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    if (rc)
        return 0;
    int targets[MAXN] = {0};
    double loss;
    rc = zt_model_forward(&model, tokens, targets, &loss, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    memcpy(logits, zt_model_logits(&model), (size_t)T * cfg.vocab_size * sizeof(float));
    zt_model_free(&model);
    zt_engine_destroy(eng);
    zt_layout_free(&lay);
    return rc == ZT_OK;
}

static double rel_err(const float *a, const float *b, int n)
{
    double d = 0.0, s = 0.0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return d / (s > 0 ? s : 1.0);
}

/* Prefill 5, then 11 (crossing no boundary the full forward has), then one token at
 * a time: every step's last logits equal the full forward's row. */
static void check_cache_vs_full(const char *dir, zt_dtype compute, double tol)
{
    enum { T = 48, MAXV = 256 };
    static float full[T * MAXV];
    int tokens[T];
    const char *text = "This program is free software: you can redistrib";
    for (int i = 0; i < T; i++)
        tokens[i] = (unsigned char)text[i];
    zt_infer m;
    if (!open_model_from(dir, &m, compute, T))
        return;
    const int V = m.cfg.vocab_size;
    ZT_CHECK(V <= MAXV);
    if (V > MAXV || !full_forward(dir, tokens, T, compute, full)) {
        zt_infer_free(&m);
        return;
    }
    zt_err err = {0};
    double worst = 0.0;
    int pos = 0, chunks[] = {5, 11};
    for (int c = 0; pos < T; c++) {
        int n = c < 2 ? chunks[c] : 1;
        int rc = zt_infer_forward(&m, tokens + pos, n, &err);
        ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
        if (rc)
            break;
        pos += n;
        worst = fmax(worst, rel_err(zt_infer_logits(&m), full + (size_t)(pos - 1) * V, V));
    }
    ZT_CHECK_MSG(worst <= tol, "%s %s: cache logits differ from the full forward by %.3g (> %.3g)", dir,
                 zt_dtype_name(compute), worst, tol);
    /* the cache is full: one more token is refused, not written past the end */
    ZT_CHECK(zt_infer_forward(&m, tokens, 1, &err) == ZT_EINPUT);
    zt_infer_free(&m);
}

/* On the emulated device (kernels/backend_emu.c: buffers the host cannot read) the
 * weights are loaded through to_device and the logits come back through to_host:
 * the same bits as on the CPU, token after token. */
static void test_emulated_device_same_logits(void)
{
    enum { T = 24, V = 256 };
    const char *text = "This program is free sof";
    zt_infer a, b;
    zt_err err = {0};
    if (!open_model(&a, ZT_BF16, T))
        return;
    int rc = zt_infer_open(&b, FIX, ZT_BF16, T, 2, zt_backend_emu(), &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    if (rc == ZT_OK) {
        ZT_CHECK(zt_infer_logits(&b) != b.logits); /* a host copy, not the device's buffer */
        for (int pos = 0; pos < T; pos += pos ? 1 : 8) {
            int n = pos ? 1 : 8, tok[8];
            for (int i = 0; i < n; i++)
                tok[i] = (unsigned char)text[pos + i];
            ZT_CHECK(zt_infer_forward(&a, tok, n, &err) == ZT_OK && zt_infer_forward(&b, tok, n, &err) == ZT_OK);
            ZT_CHECK_MSG(!memcmp(zt_infer_logits(&a), zt_infer_logits(&b), V * sizeof(float)),
                         "position %d: the emulated device's logits differ", pos + n - 1);
        }
        zt_infer_free(&b);
    }
    zt_infer_free(&a);
}

static void test_cache_matches_full_forward_fp32(void) { check_cache_vs_full(FIX, ZT_F32, 1e-5); }
static void test_cache_matches_full_forward_bf16(void) { check_cache_vs_full(FIX, ZT_BF16, 2e-2); }
static void test_window_cache_matches_full_forward(void)
{
    check_cache_vs_full(FIX_WINDOW, ZT_F32, 1e-5);
    check_cache_vs_full(FIX_WINDOW, ZT_BF16, 2e-2);
}

static void test_families_cache_matches_full_forward(void)
{
    check_cache_vs_full(FIX_LLAMA3, ZT_F32, 1e-5);
    check_cache_vs_full(FIX_LLAMA3, ZT_BF16, 2e-2);
    check_cache_vs_full(FIX_QWEN2, ZT_F32, 1e-5);
    check_cache_vs_full(FIX_QWEN2, ZT_BF16, 2e-2);
}

static int run(zt_infer *m, const int *prompt, int np, zt_gen_params p, int *ids)
{
    zt_gen_result res;
    zt_err err = {0};
    int rc = zt_generate(m, prompt, np, &p, NULL, ids, &res, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    return rc == ZT_OK ? res.n : 0;
}

static void test_sampling_is_reproducible(void)
{
    greedy_fixture g;
    zt_infer m;
    if (!load_greedy(&g) || !open_model(&m, ZT_F32, 128))
        return;
    enum { N = 40 };
    int a[N], b[N], c[N];
    zt_gen_params p = {N, {1.0, 0, 1.0}, 7, NULL, NULL, 0};
    run(&m, g.prompt[1], g.plen[1], p, a);
    run(&m, g.prompt[1], g.plen[1], p, b);
    p.seed = 8;
    run(&m, g.prompt[1], g.plen[1], p, c);
    ZT_CHECK_MSG(!memcmp(a, b, sizeof a), "seed 7 gave two different continuations");
    ZT_CHECK_MSG(memcmp(a, c, sizeof a) != 0, "seeds 7 and 8 gave the same 40 tokens");
    ZT_CHECK_MSG(memcmp(a, g.out[1], sizeof a) != 0, "temperature 1 sampled exactly the greedy tokens");
    /* top_k 1 and a tiny top_p leave only the most likely token: greedy again */
    zt_gen_params k1 = {N, {0.7, 1, 1.0}, 7, NULL, NULL, 0}, p0 = {N, {1.3, 0, 1e-6}, 7, NULL, NULL, 0};
    run(&m, g.prompt[1], g.plen[1], k1, a);
    run(&m, g.prompt[1], g.plen[1], p0, b);
    ZT_CHECK(!memcmp(a, g.out[1], sizeof a));
    ZT_CHECK(!memcmp(b, g.out[1], sizeof b));
    zt_infer_free(&m);
}

/* Draw many times from fixed logits and count what comes out. */
static void draw_counts(zt_sampling s, const float *logits, int V, int draws, int *count)
{
    zt_sampler sp;
    zt_err err = {0};
    int rc = zt_sampler_init(&sp, V, s, 123, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    if (rc)
        return;
    memset(count, 0, (size_t)V * sizeof *count);
    for (int i = 0; i < draws; i++) {
        int id = zt_sampler_next(&sp, logits);
        ZT_CHECK(id >= 0 && id < V);
        if (id >= 0 && id < V)
            count[id]++;
    }
    zt_sampler_free(&sp);
}

static void test_top_k_top_p_keep_hf_candidates(void)
{
    /* probabilities 0.5, 0.3, 0.2 (ids 2, 0, 1) and a token that can never be drawn */
    float logits[4] = {logf(0.3f), logf(0.2f), logf(0.5f), -INFINITY};
    int count[4];
    enum { D = 4000 };
    /* top_k 2: ids 2 and 0, renormalised to 0.625 / 0.375 */
    draw_counts((zt_sampling){1.0, 2, 1.0}, logits, 4, D, count);
    ZT_CHECK(count[1] == 0 && count[3] == 0);
    ZT_CHECK_MSG(fabs(count[2] / (double)D - 0.625) < 0.03, "top_k 2 drew id 2 %d of %d times", count[2], D);
    /* top_p 0.6: ascending cumulative 0.2, 0.5, 1.0; drop where <= 0.4: only id 1 */
    draw_counts((zt_sampling){1.0, 0, 0.6}, logits, 4, D, count);
    ZT_CHECK(count[1] == 0 && count[3] == 0 && count[0] > 0);
    ZT_CHECK_MSG(fabs(count[2] / (double)D - 0.625) < 0.03, "top_p 0.6 drew id 2 %d of %d times", count[2], D);
    /* top_p 0.45: drop where <= 0.55, i.e. ids 1 and 0: only id 2 */
    draw_counts((zt_sampling){1.0, 0, 0.45}, logits, 4, D, count);
    ZT_CHECK(count[2] == D);
    /* no filter: all three in proportion */
    draw_counts((zt_sampling){1.0, 0, 1.0}, logits, 4, D, count);
    ZT_CHECK_MSG(fabs(count[1] / (double)D - 0.2) < 0.03 && count[3] == 0, "id 1 drawn %d of %d times",
                 count[1], D);
    /* a NaN logit is reported, never sampled from */
    zt_sampler sp;
    zt_err err = {0};
    float bad[4] = {0.0f, NAN, 1.0f, 2.0f};
    if (zt_sampler_init(&sp, 4, (zt_sampling){0.0, 0, 1.0}, 1, &err) == ZT_OK) {
        ZT_CHECK(zt_sampler_next(&sp, bad) == -1);
        zt_sampler_free(&sp);
    }
    ZT_CHECK(zt_sampler_init(&sp, 4, (zt_sampling){1.0, 0, 0.0}, 1, &err) == ZT_EINPUT &&
             strstr(err.msg, "--top_p"));
    ZT_CHECK(zt_sampler_init(&sp, 4, (zt_sampling){-1.0, 0, 1.0}, 1, &err) == ZT_EINPUT &&
             strstr(err.msg, "--temperature"));
}

typedef struct sink {
    char text[1024];
    size_t n;
} sink;

static size_t byte_decode(void *ctx, int id, char *buf, size_t cap)
{
    (void)ctx;
    if (cap)
        buf[0] = (char)id;
    return 1;
}

static void collect(void *ctx, const char *t, size_t n)
{
    sink *s = ctx;
    memcpy(s->text + s->n, t, n);
    s->n += n;
}

static void test_stop_string_and_eos(void)
{
    greedy_fixture g;
    zt_infer m;
    if (!load_greedy(&g) || !open_model(&m, ZT_F32, 128))
        return;
    const int *want = g.out[2];
    int ids[MAXN];
    zt_gen_result res;
    zt_err err = {0};
    /* the stop string is greedy bytes 10..12: the text ends with byte 12 */
    char stop[4] = {(char)want[10], (char)want[11], (char)want[12], 0};
    int first = 10; /* where these 3 bytes first occur in the continuation */
    for (int i = 0; i + 2 < 10; i++)
        if (!memcmp((char[]){(char)want[i], (char)want[i + 1], (char)want[i + 2]}, stop, 3)) {
            first = i;
            break;
        }
    sink s = {{0}, 0};
    zt_gen_text text = {byte_decode, collect, &s};
    zt_gen_params p = {40, {0.0, 0, 1.0}, 0, stop, NULL, 0};
    int rc = zt_generate(&m, g.prompt[2], g.plen[2], &p, &text, ids, &res, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    ZT_CHECK(res.stopped_by == ZT_STOP_STRING && res.n == first + 3 && s.n == (size_t)first + 3);
    for (int i = 0; i < (int)s.n && i < first + 3; i++)
        ZT_CHECK((unsigned char)s.text[i] == want[i]);
    /* eos: the 6th greedy token; generation ends there, and its text is not shown */
    int eos = want[5], at = 0;
    while (want[at] != eos)
        at++;
    s.n = 0;
    zt_gen_params pe = {40, {0.0, 0, 1.0}, 0, NULL, &eos, 1};
    rc = zt_generate(&m, g.prompt[2], g.plen[2], &pe, &text, ids, &res, &err);
    ZT_CHECK(rc == ZT_OK && res.stopped_by == ZT_STOP_EOS && res.n == at + 1 && ids[at] == eos &&
             s.n == (size_t)at);
    /* a prompt longer than the context is refused before anything runs */
    zt_gen_params big = {100, {0.0, 0, 1.0}, 0, NULL, NULL, 0};
    ZT_CHECK(zt_generate(&m, g.prompt[2], g.plen[2], &big, NULL, ids, &res, &err) == ZT_EINPUT);
    zt_infer_free(&m);
}

int main(void)
{
    ZT_RUN(test_greedy_matches_hf_generate);
    ZT_RUN(test_cache_matches_full_forward_fp32);
    ZT_RUN(test_cache_matches_full_forward_bf16);
    ZT_RUN(test_greedy_past_the_window_matches_hf_generate);
    ZT_RUN(test_window_cache_matches_full_forward);
    ZT_RUN(test_greedy_llama3_rope_and_qwen2_bias_match_hf_generate);
    ZT_RUN(test_families_cache_matches_full_forward);
    ZT_RUN(test_sampling_is_reproducible);
    ZT_RUN(test_top_k_top_p_keep_hf_candidates);
    ZT_RUN(test_stop_string_and_eos);
    ZT_RUN(test_emulated_device_same_logits);
    zt_matmul_shutdown();
    ZT_TEST_MAIN_END();
}
