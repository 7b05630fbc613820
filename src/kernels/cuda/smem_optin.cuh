/* smem_optin.cuh — the attention kernels' opt-in to more than 48 KB of dynamic shared
 * memory (attention.cu, fast_attention.cu), made once per kernel and device. */
#ifndef ZT_CUDA_SMEM_OPTIN_CUH
#define ZT_CUDA_SMEM_OPTIN_CUH

#include "common.cuh"

/* Opt kernel K into smem bytes of dynamic shared memory (above the default 48 KB), once:
 * cudaFuncSetAttribute is a host call into the driver, and a launch repeats it for
 * nothing once K has the attribute, so each instantiation remembers what it set on the
 * device it set it on and calls again only when a launch needs more (the exact
 * attention's size grows with the head dimension) or the device changed.  The backend
 * is driven from one host thread (zt_cu is one stream), so the memo needs no lock.
 * More than the device allows: `what` and both sizes on stderr, then abort (a broken
 * invariant: the plan checked the head size). */
template <auto K>
static void zt_cu_allow_smem(size_t smem, const char *what)
{
    static size_t set;
    static int set_device = -1;
    if (smem <= set && set_device == zt_cu.device)
        return;
    if (smem > (size_t)zt_cu.max_smem_optin) {
        fprintf(stderr, "ztrain: CUDA %s needs %zu bytes of shared memory per block, the device allows %d\n", what,
                smem, zt_cu.max_smem_optin);
        abort();
    }
    ZT_CU(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    set = smem, set_device = zt_cu.device;
}

#endif
