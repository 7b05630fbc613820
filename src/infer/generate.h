/* generate.h — autoregressive generation: prefill the prompt into the KV cache, then
 * draw one token at a time and feed it back, handing each token's text to the
 * caller as soon as it is known (streaming).
 *
 * Stops, as Hugging Face's generate does: after max_new_tokens, after an end-of-
 * sequence id (which is kept in the ids but not shown as text), or once the text
 * generated so far contains the stop string (the text ends with it, as HF's
 * stop_strings leaves it). */
#ifndef ZT_GENERATE_H
#define ZT_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "infer.h"
#include "sample.h"

typedef struct zt_gen_params {
    int max_new_tokens;
    zt_sampling sampling;
    uint64_t seed;
    const char *stop;   /* NULL or "": none */
    const int *eos;     /* end-of-sequence ids (n_eos of them) */
    int n_eos;
} zt_gen_params;

/* How ids become text.  decode writes the bytes of one generated id into buf (at
 * most cap) and returns how many it has, which may exceed cap (then it is called
 * again with a buffer that large).  emit receives the text in order; NULL to
 * collect ids only. */
typedef struct zt_gen_text {
    size_t (*decode)(void *ctx, int id, char *buf, size_t cap);
    void (*emit)(void *ctx, const char *text, size_t n);
    void *ctx;
} zt_gen_text;

typedef enum zt_gen_stop { ZT_STOP_LENGTH, ZT_STOP_EOS, ZT_STOP_STRING } zt_gen_stop;

typedef struct zt_gen_result {
    int n;                  /* ids written to out_ids */
    zt_gen_stop stopped_by;
    double prefill_s;       /* the prompt's forward, through its logits */
    double decode_s;        /* every later forward and every draw */
} zt_gen_result;

/* Generate after prompt (n_prompt >= 1 ids) on a model whose cache holds at least
 * n_prompt + max_new_tokens positions; the cache is reset first.  out_ids has room
 * for max_new_tokens.  Errors: ZT_EINPUT for bad ids or settings, ZT_EFAIL when the
 * logits hold a NaN (never sampled from silently). */
int zt_generate(zt_infer *m, const int *prompt, int n_prompt, const zt_gen_params *p,
                const zt_gen_text *text, int *out_ids, zt_gen_result *res, zt_err *err);

/* The end-of-sequence ids of a Hugging Face directory, as generate reads them:
 * generation_config.json's eos_token_id when that file exists, else config.json's
 * (an id, a list of ids, or null / absent: none).  At most max ids. */
int zt_gen_read_eos(const char *dir, int vocab_size, int *ids, int max, int *n, zt_err *err);

/* generation_config.json's decoding settings, as transformers' GenerationConfig
 * reads them; a key the file lacks (or a directory without the file) is left -1,
 * so the caller applies its flag or the default. */
typedef struct zt_gen_defaults {
    int do_sample;       /* 0 / 1 */
    double temperature;
    int top_k;
    double top_p;
    int max_new_tokens;
    int max_length;      /* prompt + new tokens, used when max_new_tokens is absent */
} zt_gen_defaults;
int zt_gen_read_defaults(const char *dir, zt_gen_defaults *d, zt_err *err);

#endif
