/* tune.c — the fastest candidate per shape, timed once (tune.h). */
#include "tune.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int zt_tune_setting(int *on, zt_err *err)
{
    const char *v = getenv("ZT_MATMUL_TUNE");
    if (!v || !v[0] || !strcmp(v, "1")) {
        *on = 1;
        return ZT_OK;
    }
    if (!strcmp(v, "0")) {
        *on = 0;
        return ZT_OK;
    }
    return zt_fail(err, ZT_EINPUT,
                   "ZT_MATMUL_TUNE=%s: expected 1 (time cuBLASLt's candidates once per shape, the default) or "
                   "0 (take the heuristic's first, for reproducible runs)",
                   v);
}

int zt_tune_fastest(int n, zt_tune_timer time, void *ctx)
{
    int best = 0;
    double best_t = -1.0;
    for (int i = 0; i < n; i++) {
        const double t = time(ctx, i);
        if (t >= 0.0 && (best_t < 0.0 || t < best_t))
            best = i, best_t = t;
    }
    return best;
}

int zt_tune_choose(zt_tune_cache *c, const void *key, size_t key_bytes, int n, zt_tune_timer time, void *ctx)
{
    assert(key_bytes <= ZT_TUNE_KEY_BYTES && n >= 1);
    for (int i = 0; i < c->used; i++)
        if (c->slot[i].key_bytes == key_bytes && !memcmp(c->slot[i].key, key, key_bytes))
            return c->slot[i].winner;
    const int winner = c->on && n > 1 ? zt_tune_fastest(n, time, ctx) : 0;
    int s;
    if (c->used < ZT_TUNE_SLOTS) {
        s = c->used++;
    } else { /* replace the oldest */
        s = c->next_evict;
        c->next_evict = (c->next_evict + 1) % ZT_TUNE_SLOTS;
    }
    memcpy(c->slot[s].key, key, key_bytes);
    c->slot[s].key_bytes = key_bytes;
    c->slot[s].winner = winner;
    return winner;
}
