/* weights_cmp.h — compare two saved models tensor by tensor (tests only).
 *
 * weights_diff is the largest, over tensors, of max|a - b| / max|b|: the
 * relative error the tests state tolerances in.  A missing model, a tensor
 * missing from b or a size mismatch is INFINITY, so no comparison can pass by
 * comparing nothing. */
#ifndef ZT_WEIGHTS_CMP_H
#define ZT_WEIGHTS_CMP_H

#include <math.h>

#include "../src/io/safetensors.h"

static inline double weights_diff(const zt_weights *a, const zt_weights *b)
{
    if (!a || !b)
        return INFINITY;
    double worst = 0;
    for (int i = 0; i < zt_weights_count(a); i++) {
        const zt_st_tensor *ta = zt_weights_get(a, i), *tb = zt_weights_find(b, ta->name, NULL);
        if (!tb || tb->numel != ta->numel)
            return INFINITY;
        double md = 0, mr = 0;
        for (int64_t k = 0; k < ta->numel; k++) {
            double x = zt_load_f32(ta->data, ta->dtype, (size_t)k);
            double y = zt_load_f32(tb->data, tb->dtype, (size_t)k);
            md = fmax(md, fabs(x - y));
            mr = fmax(mr, fabs(y));
        }
        worst = fmax(worst, md / (mr > 0 ? mr : 1));
    }
    return worst;
}

/* The same for two model directories. */
static inline double weights_diff_dirs(const char *da, const char *db)
{
    zt_weights *a = NULL, *b = NULL;
    zt_err err;
    if (zt_weights_open(da, &a, &err) == ZT_OK)
        zt_weights_open(db, &b, &err);
    double d = weights_diff(a, b);
    zt_weights_close(a);
    zt_weights_close(b);
    return d;
}

#endif
