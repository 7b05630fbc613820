/* sample.c — greedy choice and temperature / top-k / top-p sampling (see sample.h). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/mem.h"
#include "../core/rng.h"

int zt_sampler_init(zt_sampler *sp, int V, zt_sampling s, uint64_t seed, zt_err *err)
{
    memset(sp, 0, sizeof *sp);
    if (!(s.temperature >= 0.0) || !isfinite(s.temperature))
        return zt_fail(err, ZT_EINPUT, "--temperature: expected a finite number >= 0 (0 = greedy), got %g",
                       s.temperature);
    if (s.top_k < 0)
        return zt_fail(err, ZT_EINPUT, "--top_k: expected >= 0 (0 = off), got %d", s.top_k);
    if (!(s.top_p > 0.0 && s.top_p <= 1.0))
        return zt_fail(err, ZT_EINPUT, "--top_p: expected a value in (0, 1] (1 = off), got %g", s.top_p);
    sp->s = s;
    sp->V = V;
    sp->rng = seed;
    sp->scores = zt_alloc(ZT_MEM_OTHER, (size_t)V * sizeof(float));
    sp->order = zt_alloc(ZT_MEM_OTHER, (size_t)V * sizeof(int));
    if (!sp->scores || !sp->order) {
        zt_sampler_free(sp);
        return zt_fail(err, ZT_EFAIL, "out of memory for the sampler");
    }
    return ZT_OK;
}

void zt_sampler_free(zt_sampler *sp)
{
    zt_free(ZT_MEM_OTHER, sp->scores, (size_t)sp->V * sizeof(float));
    zt_free(ZT_MEM_OTHER, sp->order, (size_t)sp->V * sizeof(int));
    memset(sp, 0, sizeof *sp);
}

/* descending score, then ascending id: a total order, so the sort is deterministic */
static int by_score_desc(const void *a, const void *b, void *ctx)
{
    const float *s = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    if (s[i] != s[j])
        return s[i] > s[j] ? -1 : 1;
    return (i > j) - (i < j);
}

int zt_sampler_next(zt_sampler *sp, const float *logits)
{
    const int V = sp->V;
    int best = -1;
    for (int i = 0; i < V; i++) {
        if (isnan(logits[i]))
            return -1;
        if (logits[i] > -INFINITY && (best < 0 || logits[i] > logits[best]))
            best = i;
    }
    if (best < 0 || sp->s.temperature == 0.0)
        return best;

    float *s = sp->scores;
    const float temp = (float)sp->s.temperature;
    for (int i = 0; i < V; i++)
        s[i] = logits[i] / temp;
    int kept = V; /* order[0..kept) are the candidates once sorted */
    if (sp->s.top_k > 0 || sp->s.top_p < 1.0) { /* order the candidates */
        for (int i = 0; i < V; i++)
            sp->order[i] = i;
        qsort_r(sp->order, (size_t)V, sizeof(int), by_score_desc, s);
        if (sp->s.top_k > 0 && sp->s.top_k < V) {
            /* remove scores < the k-th largest; ties with it stay, as HF's comparison keeps them */
            float kth = s[sp->order[sp->s.top_k - 1]];
            while (kept > sp->s.top_k && s[sp->order[kept - 1]] < kth)
                kept--;
        }
        if (sp->s.top_p < 1.0) {
            /* softmax over the candidates, then the ascending cumulative sum from the
             * least likely: drop while it stays <= 1 - top_p; the most likely stays */
            float mx = s[sp->order[0]];
            double z = 0.0;
            for (int r = 0; r < kept; r++)
                z += exp((double)(s[sp->order[r]] - mx));
            double cum = 0.0, limit = 1.0 - sp->s.top_p;
            int keep_from_top = kept;
            for (int r = kept - 1; r > 0; r--) {
                cum += exp((double)(s[sp->order[r]] - mx)) / z;
                if (cum > limit)
                    break;
                keep_from_top = r;
            }
            kept = keep_from_top;
        }
    }
    /* draw from softmax over the candidates: the first whose cumulative weight passes u */
    const int sorted = sp->s.top_k > 0 || sp->s.top_p < 1.0;
    float mx = s[best];
    double z = 0.0;
    for (int r = 0; r < kept; r++)
        z += exp((double)(s[sorted ? sp->order[r] : r] - mx));
    double u = zt_rand_uniform(&sp->rng) * z, cum = 0.0;
    int last = best;
    for (int r = 0; r < kept; r++) {
        int id = sorted ? sp->order[r] : r;
        double w = exp((double)(s[id] - mx));
        if (w == 0.0)
            continue;
        last = id;
        cum += w;
        if (cum > u)
            return id;
    }
    return last; /* u within rounding of z: the last candidate with weight */
}
