/* backend_open.c — a --device name to its table, on this rank's device (backend.h). */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#ifdef ZT_CUDA
#include "backend_cuda.h"
#endif

#ifdef ZT_CUDA
/* One GPU per rank: the rank's place on its machine picks it (ranks beyond the
 * count share, which only the staged comm path allows). */
static const zt_backend *open_cuda(int local_rank, int *devices, char *desc, size_t cap, zt_err *err)
{
    int n = 0;
    zt_err why = {0};
    if (zt_cuda_device_count(&n, &why) != ZT_OK || n == 0) {
        zt_fail(err, ZT_EINPUT, "no CUDA device is visible to this process%s%s", why.msg[0] ? ": " : "", why.msg);
        return NULL;
    }
    int dev = local_rank % n;
    zt_cuda_device info;
    if (zt_cuda_use_device(dev, err) != ZT_OK || zt_cuda_device_info(dev, &info, err) != ZT_OK)
        return NULL;
    const zt_backend *be = zt_backend_cuda(err);
    if (!be)
        return NULL;
    *devices = n;
    snprintf(desc, cap, "cuda:%d (%s, %.1f GiB)", dev, info.name, (double)info.total_bytes / (1024.0 * 1024 * 1024));
    return be;
}
#endif

const zt_backend *zt_backend_open(const char *device, int local_rank, int *devices, char *desc, size_t cap,
                                  zt_err *err)
{
    *devices = 0;
    if (!strcmp(device, "cpu")) {
        snprintf(desc, cap, "cpu");
        return zt_backend_cpu();
    }
    if (!strcmp(device, "emu")) {
        *devices = 1; /* one emulated device, which the machine's ranks share */
        snprintf(desc, cap, "emu:%d (CPU kernels behind opaque buffers)", local_rank);
        return zt_backend_emu();
    }
    if (!strcmp(device, "cuda")) {
#ifdef ZT_CUDA
        return open_cuda(local_rank, devices, desc, cap, err);
#else
        zt_fail(err, ZT_EINPUT, "this ztrain was built without CUDA (make cuda builds one with the CUDA backend); "
                "--device cpu runs here");
        return NULL;
#endif
    }
    zt_fail(err, ZT_EINPUT, "'%s': expected cpu or cuda", device);
    return NULL;
}

const zt_backend *zt_backend_in_mode(const zt_backend *be, zt_kernel_mode mode, zt_err *err)
{
    if (be->kernels == mode)
        return be;
    if (!strcmp(be->name, "emu"))
        return mode == ZT_KERNELS_FAST ? zt_backend_emu_fast() : zt_backend_emu();
#ifdef ZT_CUDA
    if (!strcmp(be->name, "cuda"))
        return zt_backend_cuda_mode(mode);
#endif
    zt_fail(err, ZT_EINPUT, "--kernels %s: the %s device has exact kernels only",
            mode == ZT_KERNELS_FAST ? "fast" : "exact", be->name);
    return NULL;
}
