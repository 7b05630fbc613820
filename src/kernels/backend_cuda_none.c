/* backend_cuda_none.c — backend_cuda.h in a build without CUDA (plain `make`): no
 * table, and every question about devices answered with why not.  `make cuda`
 * compiles src/kernels/cuda/ instead of this file. */
#include "backend_cuda.h"

#include "attention_choice.h"

#include <string.h>

#define NO_CUDA "this ztrain was built without CUDA (make cuda)"

int zt_cuda_device_count(int *count, zt_err *err)
{
    *count = 0;
    return zt_fail(err, ZT_EFAIL, NO_CUDA);
}

int zt_cuda_device_info(int dev, zt_cuda_device *info, zt_err *err)
{
    (void)dev;
    memset(info, 0, sizeof *info);
    return zt_fail(err, ZT_EFAIL, NO_CUDA);
}

int zt_cuda_matmul_peak_tflops(int dev, zt_dtype compute, double *tflops, zt_err *err)
{
    (void)dev, (void)compute;
    *tflops = 0.0;
    return zt_fail(err, ZT_EFAIL, NO_CUDA);
}

int zt_cuda_use_device(int dev, zt_err *err)
{
    (void)dev;
    return zt_fail(err, ZT_EFAIL, NO_CUDA);
}

const zt_backend *zt_backend_cuda(zt_err *err)
{
    zt_fail(err, ZT_EFAIL, NO_CUDA);
    return NULL;
}

void *zt_cuda_stream(void) { return NULL; }

int zt_cuda_upload(void *dev_dst, const void *host_src, size_t bytes, zt_err *err)
{
    (void)dev_dst, (void)host_src, (void)bytes;
    return zt_fail(err, ZT_EFAIL, NO_CUDA);
}

int zt_cuda_download(void *host_dst, const void *dev_src, size_t bytes, zt_err *err)
{
    (void)host_dst, (void)dev_src, (void)bytes;
    return zt_fail(err, ZT_EFAIL, NO_CUDA);
}

int zt_cuda_synchronize(zt_err *err) { return zt_fail(err, ZT_EFAIL, NO_CUDA); }

const zt_prof_clock *zt_cuda_prof_clock(void) { return NULL; }

void zt_cuda_attention_plan(int B, int T, int nh, int nkv, int hd, int window, char *out, size_t cap)
{
    (void)B, (void)T, (void)nh, (void)nkv, (void)hd, (void)window;
    zt_attention_describe(0, "built without CUDA", out, cap);
}

void zt_cuda_shutdown(void) {}

const zt_backend *zt_backend_cuda_mode(zt_kernel_mode mode)
{
    (void)mode;
    return NULL;
}

int zt_cuda_graph_begin(zt_err *err) { return zt_fail(err, ZT_EFAIL, NO_CUDA); }

int zt_cuda_graph_end(zt_cuda_graph **graph, zt_err *err)
{
    *graph = NULL;
    return zt_fail(err, ZT_EFAIL, NO_CUDA);
}

int zt_cuda_graph_launch(const zt_cuda_graph *graph, zt_err *err)
{
    (void)graph;
    return zt_fail(err, ZT_EFAIL, NO_CUDA);
}

void zt_cuda_graph_free(zt_cuda_graph *graph) { (void)graph; }
