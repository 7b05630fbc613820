/* sample.h — choosing the next token from logits, as Hugging Face's generate does.
 *
 * temperature 0 is greedy decoding: the first index of the largest logit (torch's
 * argmax).  Otherwise the logits pass HF's warpers in HF's order, then one token is
 * drawn from the softmax of what is left:
 *   temperature  scores = logits / temperature
 *   top_k > 0    scores below the k-th largest become -inf (ties with it stay)
 *   top_p < 1    sort ascending, cumulative softmax; tokens whose cumulative
 *                probability is <= 1 - top_p become -inf (the most likely one stays)
 * The draw uses the project's seeded generator (splitmix64): the same seed, model
 * and prompt give the same tokens. */
#ifndef ZT_SAMPLE_H
#define ZT_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

typedef struct zt_sampling {
    double temperature; /* 0: greedy */
    int top_k;          /* 0: off */
    double top_p;       /* 1: off; in (0, 1] */
} zt_sampling;

typedef struct zt_sampler {
    zt_sampling s;
    int V;
    uint64_t rng;
    float *scores;      /* (V) */
    int *order;         /* (V) token ids by descending score */
} zt_sampler;

/* ZT_EINPUT when a setting is out of range (naming the flag). */
int zt_sampler_init(zt_sampler *sp, int V, zt_sampling s, uint64_t seed, zt_err *err);
void zt_sampler_free(zt_sampler *sp);

/* The next token from logits (V).  -1 when the logits hold a NaN or no finite
 * value (the caller reports it; a NaN never turns into a token silently). */
int zt_sampler_next(zt_sampler *sp, const float *logits);

#endif
