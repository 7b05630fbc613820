// offload_bandwidth.cu — the host-device link offload runs over (docs/zero.md,
// Offload): copies between page-locked host memory (cudaMallocHost, what the
// engine's offloaded state and staging use) and device memory, each way, and the
// same from ordinary (pageable) host memory for comparison.  Prints one line per
// case: "h2d pinned 256 MiB: 52.3 GB/s" (GB = 1e9 bytes), the best of 5 rounds
// timed with events on one stream.  Built and run by bench/offload.sh on a GPU.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "offload_bandwidth: %s: %s\n", #x, cudaGetErrorString(e_));           \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static double best_gbs(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    double best = 0;
    for (int r = 0; r < 6; r++) { // round 0 warms up
        CK(cudaEventRecord(a, s));
        CK(cudaMemcpyAsync(dst, src, bytes, kind, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        double gbs = (double)bytes / (ms * 1e-3) / 1e9;
        if (r > 0 && gbs > best)
            best = gbs;
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return best;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
    size_t bytes = mib << 20;
    void *dev, *pinned, *pageable = malloc(bytes);
    CK(cudaMalloc(&dev, bytes));
    CK(cudaMallocHost(&pinned, bytes));
    if (!pageable)
        return 1;
    memset(pageable, 1, bytes);
    memset(pinned, 1, bytes);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    printf("h2d pinned %zu MiB: %.1f GB/s\n", mib, best_gbs(dev, pinned, bytes, cudaMemcpyHostToDevice, s));
    printf("d2h pinned %zu MiB: %.1f GB/s\n", mib, best_gbs(pinned, dev, bytes, cudaMemcpyDeviceToHost, s));
    printf("h2d pageable %zu MiB: %.1f GB/s\n", mib, best_gbs(dev, pageable, bytes, cudaMemcpyHostToDevice, s));
    printf("d2h pageable %zu MiB: %.1f GB/s\n", mib, best_gbs(pageable, dev, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(pinned));
    CK(cudaFree(dev));
    free(pageable);
    return 0;
}
