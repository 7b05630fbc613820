/* attention_choice.h — which kernels run fast mode's attention (backend.h's _act16
 * entries) on a GPU: cuDNN's fused flash attention, or ztrain's own tensor-core kernels
 * (cuda/fast_attention.cu), and why (docs/gpu.md, "Attention through cuDNN").
 *
 * cuDNN is taken only where everything it needs holds: the build found its headers and
 * library (make cuda: the cuDNN shim, cuda/cudnn_attention.cc), the library loads at run
 * time and is recent enough, the device is a Hopper (compute capability 9.x, where its
 * flash kernels are the fast ones), and the shape is one its fused attention serves the
 * way the model calls it (causal, no sliding window, head size 64 or 128, whole groups
 * of query heads per kv head).  Anything else runs the own kernels, and the plan line
 * says which and why.  The rule is host logic only, so tests/test_attention_choice.c
 * checks it without a GPU; the CUDA backend fills in what it found
 * (cuda/fast_cudnn.cu). */
#ifndef ZT_ATTENTION_CHOICE_H
#define ZT_ATTENTION_CHOICE_H

#include <stddef.h>

#include "../core/status.h"

/* cuDNN's version number (major * 10000 + minor * 100 + patch) from which the fused
 * attention serves every shape below with no further limit: 9.6.0, where the frontend
 * stops requiring sequence lengths that are multiples of 64 for causal masks. */
#define ZT_CUDNN_MIN_VERSION 90600

typedef struct zt_attention_query {
    int forced_own;         /* ZT_ATTENTION=own */
    int built;              /* this ztrain has the cuDNN shim (make cuda found cuDNN) */
    const char *device;     /* the device's kind when it is not a CUDA GPU ("emu"); NULL on a GPU */
    int cc_major, cc_minor; /* the GPU's compute capability */
    const char *load_error; /* why libcudnn did not load; NULL when it did */
    long version;           /* the loaded libcudnn's version number */
    int hd, window, nh, nkv;
} zt_attention_query;

/* 1: cuDNN; 0: the own kernels, with the reason in why ("sm_80", "head_dim 96", ...). */
int zt_attention_choose(const zt_attention_query *q, char *why, size_t cap);

/* Whether ZT_ATTENTION forces the own kernels: unset, empty or "auto": no (cuDNN where
 * zt_attention_choose takes it); "own": yes (reproducible comparisons); anything else is
 * refused (ZT_EINPUT naming the variable). */
int zt_attention_setting(int *forced_own, zt_err *err);

/* The plan line's words for a choice: "attention cudnn" or "attention own kernels (why)". */
void zt_attention_describe(int cudnn, const char *why, char *out, size_t cap);

#endif
