/* engine.h — the owner of every parameter byte: master shards, gradients,
 * optimizer state and the gathered compute-dtype copies the model reads.
 *
 * Per unit u (layout.h) and rank r of a shard group of size G:
 *   master[u]   padded_numel/G elements, master dtype      (ZT_MEM_PARAMS)
 *   grad[u]     same shape, master dtype, accumulated over micro-steps (ZT_MEM_GRADS)
 *   m[u], v[u]  same shape, optimizer dtype = master dtype (ZT_MEM_OPTIM)
 *   gathered[u] padded_numel elements, compute dtype       (ZT_MEM_GATHERED)
 * The model brackets its use of a unit with acquire/release (forward and
 * backward) and its weight gradients with grad_begin/grad_end: grad_begin hands
 * out a zeroed fp32 staging buffer for the unit's full gradient; grad_end rounds
 * it to the reduce dtype, reduces it over the group (identity for one process),
 * divides by the data-parallel size and adds the owned slice into grad[u] in the
 * master dtype.  When a unit's master and compute dtypes agree and it is not
 * sharded, gathered[u] aliases master[u] (no second copy).
 *
 * This file is the single-process engine of the foundation; sharding over MPI
 * plugs in at the marked reduce / gather points without changing the model. */
#ifndef ZT_ENGINE_H
#define ZT_ENGINE_H

#include <stddef.h>

#include "../core/dtype.h"
#include "../core/status.h"
#include "../model/layout.h"
#include "optim.h"

typedef struct zt_precision {
    zt_dtype load;     /* torch_dtype: weights are rounded to it when loaded */
    zt_dtype master;   /* flat params, gradient accumulation and optimizer state */
    zt_dtype compute;  /* gathered params and matrix-product inputs */
    zt_dtype reduce;   /* gradient reduction */
    zt_dtype save;     /* dtype of the saved model */
} zt_precision;

typedef struct zt_unit_state {
    size_t shard_numel;     /* padded_numel / G */
    void *master, *grad, *m, *v;
    void *gathered;
    int gathered_alias;     /* gathered == master */
    float *staging;         /* fp32 full gradient while the unit's backward runs */
} zt_unit_state;

typedef struct zt_engine {
    const zt_layout *lay;
    zt_precision prec;
    int group_size, group_rank; /* shard group (1, 0 in the foundation) */
    zt_unit_state *units;
    float *staging_root;        /* root unit's staging (open across the whole backward) */
    float *staging_layers;      /* shared by non-root units, one open at a time */
    size_t staging_root_numel, staging_layers_numel;
    long optimizer_steps;       /* t of AdamW, counts applied steps */
    double last_grad_norm;
} zt_engine;

int zt_engine_init(zt_engine *eng, const zt_layout *lay, zt_precision prec, zt_err *err);
void zt_engine_free(zt_engine *eng);

/* Set one parameter from a full tensor of numel elements (any dtype): rounded to
 * the load dtype, stored in the master dtype (the owned slice only). */
void zt_engine_set_param(zt_engine *eng, const zt_param *p, const void *src, zt_dtype src_dt);
/* Read a parameter's full value as fp32 (for saving and tests). */
void zt_engine_get_param(const zt_engine *eng, const zt_param *p, float *dst);
/* Read a parameter's accumulated gradient as fp32 (tests). */
void zt_engine_get_grad(const zt_engine *eng, const zt_param *p, float *dst);

/* Refresh every gathered buffer from the masters (after loading or a step). */
void zt_engine_refresh_gathered(zt_engine *eng);

/* The model's hooks. */
const void *zt_engine_acquire(zt_engine *eng, int unit);
void zt_engine_release(zt_engine *eng, int unit);
float *zt_engine_grad_begin(zt_engine *eng, int unit);
void zt_engine_grad_end(zt_engine *eng, int unit);

void zt_engine_zero_grads(zt_engine *eng);

/* Clip by the global gradient norm and take one AdamW step at learning rate lr.
 * Returns the pre-clip global L2 norm (fp32 semantics) in *grad_norm. */
void zt_engine_step(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                    double *grad_norm);

#endif
