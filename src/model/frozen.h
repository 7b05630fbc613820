/* frozen.h — a parameter owner without gradients: the loaded weights, whole, in
 * the compute dtype (evaluation, generation).
 *
 * Each unit is one flat buffer of its padded length, laid out as the layout says,
 * so the model reads the same views it reads from the engine's gathered copies.
 * Nothing else is held: no master copy, no gradients, no optimizer state, no
 * communication buffers.  A parameter set from a tensor of any dtype is widened
 * to fp32 and rounded once to the compute dtype, which is what the engine does
 * for an fp32 load and master dtype, so a forward pass gives the same numbers as
 * the engine's. */
#ifndef ZT_FROZEN_H
#define ZT_FROZEN_H

#include "../core/status.h"
#include "layout.h"
#include "param_owner.h"

typedef struct zt_frozen_params {
    const zt_backend *be; /* where the weights live and the model computes */
    const zt_layout *lay;
    zt_dtype dtype;
    void **units;      /* per unit: padded_numel elements of dtype (ZT_MEM_PARAMS, be's memory) */
    int *acquired;     /* per unit: acquire count, checked by release */
} zt_frozen_params;

int zt_frozen_init(zt_frozen_params *f, const zt_layout *lay, zt_dtype dtype, const zt_backend *be, zt_err *err);
void zt_frozen_free(zt_frozen_params *f);
/* Parameter p from its full tensor (p->numel elements of src_dt). */
void zt_frozen_set_param(zt_frozen_params *f, const zt_param *p, const void *src, zt_dtype src_dt);
/* The owner table over f (forward passes only; f must outlive the model). */
zt_param_owner zt_frozen_owner(zt_frozen_params *f);

#endif
