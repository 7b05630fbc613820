/* param_owner.h — what the model needs from whoever owns its parameters.
 *
 * The model holds activations only.  Its parameters live in units (layout.h),
 * owned by someone else: the ZeRO engine while training (sharded, gathered on
 * demand, gradients reduced over ranks), or a plain copy of the loaded weights
 * for evaluation and generation (frozen.h).  The model reaches them through this
 * table and nothing else, so it never knows whether a unit is sharded, where its
 * gradient goes, or that an optimizer exists.
 *
 * One micro-batch, as the model drives it:
 *   forward   acquire(root, FORWARD); per layer unit: acquire(u, FORWARD) ... release(u)
 *   backward  grad_begin(root); per layer unit, last to first:
 *             acquire(u, BACKWARD), grad_begin(u) ... grad_end(u), release(u);
 *             grad_end(root), release(root)
 *   forward only: release(root) after the logits
 * and between its matrix products progress(), the owner's tick (collectives in
 * flight move on it).  When a pass fails midway, reset() returns every unit to
 * idle, whatever it was doing, so the owner is usable again (or can be freed).
 *
 * Acquired parameters are elements of dtype `compute` at the layout's offsets of
 * the unit (the padding holds zeros); they stay valid until the unit's release.
 * A gradient buffer is fp32, the unit's padded length; it is the owner's again at
 * grad_end.  grad_begin says in *fresh what it holds:
 *   fresh 1  the parameters' elements are undefined (a staging buffer, or an
 *            accumulator with nothing in it yet this step: no one cleared it), and
 *            the padding beyond them holds zeros.  The model's first write of each
 *            parameter's gradient overwrites it (beta 0, or the entry's overwrite
 *            form; where an entry can only add, the model clears just what that
 *            entry writes first), later writes in the same pass add.
 *   fresh 0  it holds a sum (zeros included) to add onto: every write adds.
 * 0 + x == x, so both give the same bits as adding onto a cleared buffer.  An
 * owner that keeps no gradients (grad_begin NULL) serves forward passes only.
 */
#ifndef ZT_PARAM_OWNER_H
#define ZT_PARAM_OWNER_H

#include "../core/dtype.h"
#include "../kernels/backend.h"

typedef enum zt_pass { ZT_PASS_FORWARD, ZT_PASS_BACKWARD } zt_pass;

typedef struct zt_param_owner_ops {
    const void *(*acquire)(void *ctx, int unit, zt_pass pass);
    void (*release)(void *ctx, int unit);
    float *(*grad_begin)(void *ctx, int unit, int *fresh); /* NULL: no gradients (forward only) */
    void (*grad_end)(void *ctx, int unit);     /* the unit's gradient is complete */
    void (*progress)(void *ctx);
    void (*reset)(void *ctx);
} zt_param_owner_ops;

/* An ops table from its six functions in the order above, named at each slot:
 *   static const zt_param_owner_ops ops = ZT_PARAM_OWNER_OPS(acq, rel, gb, ge, prog, reset); */
#define ZT_PARAM_OWNER_OPS(acquire_, release_, grad_begin_, grad_end_, progress_, reset_)                  \
    {.acquire = acquire_, .release = release_, .grad_begin = grad_begin_, .grad_end = grad_end_,        \
     .progress = progress_, .reset = reset_}

typedef struct zt_param_owner {
    const zt_param_owner_ops *ops;
    void *ctx;
    zt_dtype compute;          /* dtype of acquired parameters and of the products' arithmetic */
    const zt_backend *backend; /* where the buffers live and the kernels run */
    int act16;                 /* bf16 activations asked (the plan's activations part, which the
                                * trainer sets); the model keeps them with bf16 operands only */
} zt_param_owner;

/* The activations an owner asks for where no plan says (a library caller, a test): the
 * table's preset, bf16 with a fast table (plan.h: --kernels fast's). */
static inline int zt_owner_preset_act16(const zt_backend *be) { return be->kernels == ZT_KERNELS_FAST; }

#endif
