/* llama_lora.h — LoRA's adapters inside the Llama passes (llama_lora.c), for llama.c
 * alone: each does nothing where the projection is not targeted (or LoRA is off). */
#ifndef ZT_MODEL_LLAMA_LORA_H
#define ZT_MODEL_LLAMA_LORA_H

#include "llama.h"

/* whether projection kind has an adapter in this run */
int llama_lora_on(const zt_model *m, zt_param_kind kind);
/* y's columns (rows ld apart) += the adapter's part of projection kind of layer l */
int llama_lora_forward(zt_model *m, int l, const void *abase, zt_param_kind kind, float *y, size_t ld,
                       const void *x, zt_err *err);
/* dx += the adapter's input gradient; its dA, dB into gabase (beta gabeta) */
int llama_lora_backward(zt_model *m, int l, const void *abase, float *gabase, float gabeta, zt_param_kind kind,
                        float *dx, const void *dy, size_t ld, const void *x, zt_err *err);
/* q, k and v's adapters on qkv: forward (gabase NULL) or backward */
int llama_lora_qkv(zt_model *m, int l, const void *abase, float *gabase, float gabeta, float *qkv, float *dx,
                   const void *x, zt_err *err);
/* the adapters' part added to a bf16 product's output (qkv16 or gu16) */
int llama_lora_forward16(zt_model *m, int l, const void *abase, void *y16, size_t cols, const void *x, int qkv,
                         zt_err *err);

#endif
