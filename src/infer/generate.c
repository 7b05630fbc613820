/* generate.c — the generation loop (see generate.h). */
#include "generate.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/json.h"
#include "../core/mem.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A growable byte buffer (accounted as scratch). */
typedef struct bytes {
    char *p;
    size_t n, cap;
} bytes;

static int bytes_reserve(bytes *b, size_t want)
{
    if (want <= b->cap)
        return ZT_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < want)
        cap *= 2;
    char *p = zt_alloc(ZT_MEM_OTHER, cap);
    if (!p)
        return ZT_EFAIL;
    if (b->n)
        memcpy(p, b->p, b->n);
    zt_free(ZT_MEM_OTHER, b->p, b->cap);
    b->p = p;
    b->cap = cap;
    return ZT_OK;
}

static void bytes_free(bytes *b) { zt_free(ZT_MEM_OTHER, b->p, b->cap); }

/* Append id's text to the generated text. */
static int append_text(const zt_gen_text *t, int id, bytes *out)
{
    if (bytes_reserve(out, out->n + 64))
        return ZT_EFAIL;
    size_t k = t->decode(t->ctx, id, out->p + out->n, out->cap - out->n);
    if (k > out->cap - out->n) {
        if (bytes_reserve(out, out->n + k))
            return ZT_EFAIL;
        k = t->decode(t->ctx, id, out->p + out->n, out->cap - out->n);
    }
    out->n += k;
    return ZT_OK;
}

/* Where the stop string ends in text, looking only at matches that end at or after
 * byte `from` (earlier ones were ruled out before); 0 when absent. */
static size_t stop_end(const bytes *text, size_t from, const char *stop)
{
    size_t len = strlen(stop);
    size_t start = from >= len - 1 ? from - (len - 1) : 0;
    for (size_t i = start; i + len <= text->n; i++)
        if (!memcmp(text->p + i, stop, len))
            return i + len;
    return 0;
}

int zt_generate(zt_infer *m, const int *prompt, int n_prompt, const zt_gen_params *p,
                const zt_gen_text *text, int *out_ids, zt_gen_result *res, zt_err *err)
{
    memset(res, 0, sizeof *res);
    if (n_prompt < 1)
        return zt_fail(err, ZT_EINPUT, "the prompt is empty: generation needs at least one token");
    if (p->max_new_tokens < 0 || (long)n_prompt + p->max_new_tokens > m->cap)
        return zt_fail(err, ZT_EINPUT, "a prompt of %d tokens plus %d new ones exceeds the %d-position context",
                       n_prompt, p->max_new_tokens, m->cap);
    zt_sampler sp;
    int rc = zt_sampler_init(&sp, m->cfg.vocab_size, p->sampling, p->seed, err);
    if (rc)
        return rc;
    const int want_text = text && text->decode && text->emit;
    const char *stop = p->stop && p->stop[0] ? p->stop : NULL;
    bytes gen = {0};
    zt_infer_reset(m);
    double t0 = now_s();
    rc = zt_infer_forward(m, prompt, n_prompt, err);
    res->prefill_s = now_s() - t0;
    double t1 = now_s();
    for (int k = 0; rc == ZT_OK && k < p->max_new_tokens; k++) {
        if (k > 0 && (rc = zt_infer_forward(m, &out_ids[k - 1], 1, err)))
            break;
        int id = zt_sampler_next(&sp, zt_infer_logits(m));
        if (id < 0) {
            rc = zt_fail(err, ZT_EFAIL, "the logits after %d new tokens hold a NaN or no finite value; "
                         "the model's weights or arithmetic overflowed", k);
            break;
        }
        out_ids[res->n++] = id;
        int eos = 0;
        for (int e = 0; e < p->n_eos; e++)
            eos |= id == p->eos[e];
        if (eos) {
            res->stopped_by = ZT_STOP_EOS;
            break;
        }
        if (!want_text)
            continue;
        /* the whole text is kept only when a stop string must be found in it */
        size_t from = stop ? gen.n : 0;
        if (!stop)
            gen.n = 0;
        if (append_text(text, id, &gen)) {
            rc = zt_fail(err, ZT_EFAIL, "out of memory for the generated text");
            break;
        }
        size_t end = stop ? stop_end(&gen, from, stop) : 0;
        text->emit(text->ctx, gen.p + from, (end ? end : gen.n) - from);
        if (end) {
            res->stopped_by = ZT_STOP_STRING;
            break;
        }
    }
    res->decode_s = now_s() - t1;
    bytes_free(&gen);
    zt_sampler_free(&sp);
    return rc;
}

/* eos_token_id: an int, a list of ints, or null. */
static int eos_from(const zt_json *j, const char *path, int V, int *ids, int max, int *n, zt_err *err)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j->root, "eos_token_id");
    *n = 0;
    if (!e || cJSON_IsNull(e))
        return ZT_OK;
    const cJSON *item = cJSON_IsArray(e) ? e->child : e;
    for (; item; item = cJSON_IsArray(e) ? item->next : NULL) {
        double v = cJSON_IsNumber(item) ? item->valuedouble : -1.0;
        if (!(v >= 0 && v < V && v == (double)(int)v) || *n == max)
            return zt_fail(err, ZT_EINPUT, "%s: eos_token_id: expected a token id in [0, %d) or a list of "
                           "at most %d of them", path, V, max);
        ids[(*n)++] = (int)v;
    }
    return ZT_OK;
}

int zt_gen_read_eos(const char *dir, int vocab_size, int *ids, int max, int *n, zt_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (access(path, F_OK) != 0)
        snprintf(path, sizeof path, "%s/config.json", dir);
    zt_json j;
    int rc = zt_json_parse_file(path, 1 << 20, &j, err);
    if (rc)
        return rc;
    if (!cJSON_IsObject(j.root))
        rc = zt_fail(err, ZT_EINPUT, "%s: expected a JSON object", path);
    else
        rc = eos_from(&j, path, vocab_size, ids, max, n, err);
    zt_json_free(&j);
    return rc;
}

/* A number key of generation_config.json: -1 when absent or null; ZT_EINPUT
 * when it is not a number in [lo, hi]. */
static int gen_number(const cJSON *root, const char *path, const char *key, double lo, double hi, double *out,
                      zt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = -1;
    if (!v || cJSON_IsNull(v))
        return ZT_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return zt_fail(err, ZT_EINPUT, "%s: %s: expected a number in [%g, %g]", path, key, lo, hi);
    *out = v->valuedouble;
    return ZT_OK;
}

int zt_gen_read_defaults(const char *dir, zt_gen_defaults *d, zt_err *err)
{
    char path[4096];
    *d = (zt_gen_defaults){-1, -1, -1, -1, -1, -1};
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (access(path, F_OK) != 0)
        return ZT_OK;
    zt_json j;
    int rc = zt_json_parse_file(path, 1 << 20, &j, err);
    if (rc)
        return rc;
    double k = -1, mnt = -1, ml = -1;
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(j.root, "do_sample");
    if (!cJSON_IsObject(j.root))
        rc = zt_fail(err, ZT_EINPUT, "%s: expected a JSON object", path);
    else if (ds && !cJSON_IsBool(ds) && !cJSON_IsNull(ds))
        rc = zt_fail(err, ZT_EINPUT, "%s: do_sample: expected true or false", path);
    if (!rc && !(rc = gen_number(j.root, path, "temperature", 0, 1e6, &d->temperature, err)) &&
        !(rc = gen_number(j.root, path, "top_k", 0, 1 << 30, &k, err)) &&
        !(rc = gen_number(j.root, path, "top_p", 0, 1, &d->top_p, err)) &&
        !(rc = gen_number(j.root, path, "max_new_tokens", 0, 1 << 24, &mnt, err)))
        rc = gen_number(j.root, path, "max_length", 0, 1 << 24, &ml, err);
    d->do_sample = cJSON_IsBool(ds) ? cJSON_IsTrue(ds) : -1;
    d->top_k = (int)k;
    d->max_new_tokens = (int)mnt;
    d->max_length = (int)ml;
    zt_json_free(&j);
    return rc;
}
