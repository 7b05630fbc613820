/* fast_table.cu — the fast kernels in the table's shape: which backend.h entries the
 * fast mode replaces, in one place (fast.h). */
#include "entries.cuh"
#include "fast.h"

void zt_cu_fast_overlay(zt_backend *t)
{
    t->attention_scratch_bytes = zt_cu_fast_attention_scratch_bytes;
    t->attention_forward = zt_cu_fast_attention_forward;
    t->attention_backward = zt_cu_fast_attention_backward;
    t->rmsnorm_forward = zt_cu_fast_rmsnorm_forward;
    t->rmsnorm_backward = zt_cu_fast_rmsnorm_backward;
    t->swiglu_forward = zt_cu_fast_swiglu_forward;
    t->swiglu_backward = zt_cu_fast_swiglu_backward;
    t->embed_backward = zt_cu_fast_embed_backward;
    /* the fused entries: one kernel or one epilogue where the exact table composes */
    t->rmsnorm_residual_forward = zt_cu_fast_rmsnorm_residual_forward;
    t->matmul_out = zt_cu_fast_matmul_out;
    t->lmhead_xent = zt_cu_fast_lmhead_xent;
    /* the bf16 activations (act16.cuh; the attention: cuDNN's or fast_attention.cu's, fast_cudnn.cu) */
    t->linear_act16 = zt_cu_fast_linear_act16;
    t->attention_forward_act16 = zt_cu_cudnn_attention_forward_act16;
    t->attention_backward_act16 = zt_cu_cudnn_attention_backward_act16;
    t->swiglu_forward_act16 = zt_cu_fast_swiglu_forward_act16;
    t->swiglu_backward_act16 = zt_cu_fast_swiglu_backward_act16;
    /* packed examples: a captured step would replay one positions buffer for every
     * micro-batch, so the fast table takes none (the model refuses them by name) */
    t->rope_forward_pos = nullptr;
    t->rope_backward_pos = nullptr;
    t->attention_forward_pos = nullptr;
    t->attention_backward_pos = nullptr;
}
