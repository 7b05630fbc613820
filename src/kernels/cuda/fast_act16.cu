/* fast_act16.cu — the fast table's bf16-gu SwiGLU (fast.h; the kernels and launchers in
 * act16.cuh): FMA contraction allowed and the hardware exp (__expf, a few ulp), within
 * one bf16 rounding of the exact entries (act16.cu). */
#include "act16.cuh"
#include "fast.h"

void zt_cu_fast_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    act16_swiglu_forward<true>(h16, gu16, N, F);
}

void zt_cu_fast_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    act16_swiglu_backward<true>(dgu16, dh, gu16, N, F);
}
