/* tools/cuda_emu/cuda_bf16.h — the bf16 type of CUDA's header, for tools/cuda_emu: two
 * bytes holding the top half of an fp32 (the kernels write its bits with core/dtype.h's
 * zt_f32_to_bf16 and hand the tiles to mma_sync.h's primitives). */
#ifndef ZT_CUDA_EMU_BF16_H
#define ZT_CUDA_EMU_BF16_H

#include <stdint.h>

struct __nv_bfloat16 {
    uint16_t bits;
};

#endif
