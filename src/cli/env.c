/* env.c — `ztrain env`: what a bug report needs — versions of ztrain, MPI and
 * oneDNN, the CPU and its vector features, threads, and the measured peak of
 * fp32 and bf16 matrix products (the denominators of MFU); then the GPUs: each
 * CUDA device's name, compute capability and memory and the measured peaks of its
 * cuBLASLt products, or one line saying why there are none (no device, or a build
 * without CUDA). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../io/table.h"
#include "../kernels/backend_cuda.h"
#include "../kernels/matmul.h"
#include "../train/peak.h"
#include "commands.h"
#include "flags.h"

/* The vector extensions this binary was compiled for: the kernels pick fused
 * multiply-adds and AVX-512 paths at compile time (vmath.h, attention16.c), so
 * these decide the exact rounding as much as oneDNN's run-time ISA does; the
 * numerical digests (tests/cli/digests.sh) are recorded per pair. */
static const char *build_isa(void) {
    static const char isa[] = ""
#ifdef __AVX2__
           " avx2"
#endif
#ifdef __FMA__
           " fma"
#endif
#ifdef __AVX512F__
           " avx512f"
#endif
#ifdef __AVX512BF16__
           " avx512_bf16"
#endif
        ;
    return isa[0] ? isa + 1 : "baseline";
}

static void cpu_info(char *model, size_t model_len, char *features, size_t feat_len)
{
    static const char *wanted[] = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                                   "avx512_vnni", "amx_bf16", "amx_tile", "avx_vnni"};
    snprintf(model, model_len, "unknown");
    features[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[8192];
    int got_model = 0, got_flags = 0;
    while (fgets(line, sizeof line, f) && !(got_model && got_flags)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char *val = colon + 2 <= line + strlen(line) ? colon + 2 : colon + 1;
        val[strcspn(val, "\n")] = '\0';
        if (!got_model && !strncmp(line, "model name", 10)) {
            snprintf(model, model_len, "%s", val);
            got_model = 1;
        } else if (!got_flags && !strncmp(line, "flags", 5)) {
            for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
                char pat[64];
                snprintf(pat, sizeof pat, " %s ", wanted[i]);
                char padded[8200];
                snprintf(padded, sizeof padded, " %s ", val);
                if (strstr(padded, pat)) {
                    size_t len = strlen(features);
                    snprintf(features + len, feat_len - len, "%s%s", len ? " " : "", wanted[i]);
                }
            }
            got_flags = 1;
        }
    }
    fclose(f);
}

/* One line per CUDA device, and with measure its peaks (bf16 operands with fp32
 * accumulation, and fp32 without TF32: 8192^3 products, a few seconds per device). */
static void gpu_info(int measure)
{
    zt_err gerr = {0};
    int n = 0;
    if (zt_cuda_device_count(&n, &gerr)) {
        printf("gpu:           none: %s\n", gerr.msg);
        return;
    }
    printf("gpus:          %d\n", n);
    for (int d = 0; d < n; d++) {
        zt_cuda_device g;
        if (zt_cuda_device_info(d, &g, &gerr)) {
            printf("gpu %d:         unreadable: %s\n", d, gerr.msg);
            continue;
        }
        printf("gpu %d:         %s, compute capability %d.%d, %d SMs, %.1f GiB (%.1f GiB free)\n", d, g.name,
               g.cc_major, g.cc_minor, g.sm_count, (double)g.total_bytes / (1 << 30),
               (double)g.free_bytes / (1 << 30));
        if (!measure)
            continue;
        static const struct { zt_dtype dt; const char *what; } kinds[] = {{ZT_BF16, "bf16"}, {ZT_F32, "fp32"}};
        for (int k = 0; k < 2; k++) {
            double tflops = 0.0;
            if (zt_cuda_matmul_peak_tflops(d, kinds[k].dt, &tflops, &gerr))
                printf("gpu %d peak %s matmul: not measured: %s\n", d, kinds[k].what, gerr.msg);
            else
                printf("gpu %d peak %s matmul: %.1f TFLOP/s\n", d, kinds[k].what, tflops);
        }
    }
}

int zt_cmd_env(int argc, char **argv, zt_err *err)
{
    int threads = 0, measure = 1, recalibrate = 0;
    zt_flag flags[] = {
        {"threads", ZT_FLAG_INT, &threads, "threads for the peak measurement (default: all usable cores)", 0, 4096, 0},
        {"measure", ZT_FLAG_BOOL, &measure, "show the matrix-product peaks MFU divides by: cached, else calibrated "
         "and cached; and measure each GPU's (default true)", 1, 0, 0},
        {"recalibrate", ZT_FLAG_BOOL, &recalibrate, "measure the peaks anew and replace their cache entries", 1, 0, 0},
    };
    const int nflags = (int)(sizeof flags / sizeof flags[0]);
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, nflags, "usage: ztrain env [--threads N] [--measure false] [--recalibrate]");
        return ZT_OK;
    }
    int rc = zt_flags_parse(flags, nflags, argc, argv, "ztrain env", err);
    if (rc)
        return rc;
    if (recalibrate && !measure)
        return zt_fail(err, ZT_EINPUT, "ztrain env: --recalibrate measures the peaks; it cannot go with --measure false");
    int n = zt_cli_set_threads(threads);
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    mpi[strcspn(mpi, ",\n")] = '\0';
    char model[256], features[512];
    cpu_info(model, sizeof model, features, sizeof features);
    printf("ztrain:        %s\n", zt_version());
    printf("mpi:           %s\n", mpi);
    printf("onednn:        %s (isa: %s)\n", zt_matmul_dnnl_version(), zt_matmul_isa_name());
    printf("build isa:     %s\n", build_isa());
    printf("cpu:           %s\n", model);
    printf("cpu features:  %s\n", features);
    printf("native bf16:   %s\n", zt_matmul_has_native_bf16() ? "yes" : "no");
    printf("bf16 products: %s\n", zt_matmul_bf16_path_name());
    printf("threads:       %d\n", n);
    printf("table data:    %s\n", zt_table_supported() ? "Parquet and Arrow (Apache Arrow's libraries)"
                                                         : "none: built without Apache Arrow (scripts/setup.sh, make)");
    if (measure) {
        static const zt_dtype dts[] = {ZT_F32, ZT_BF16};
        for (int i = 0; i < 2; i++) {
            zt_peak p;
            zt_peak_resolve(&p, dts[i], 0.0, recalibrate, 1, stderr);
            printf("peak %s matmul: %.1f GFLOP/s", zt_dtype_name(dts[i]), p.gflops);
            if (p.source == ZT_PEAK_CACHED)
                printf(" (cached in %s; --recalibrate to measure again)\n", p.cache_path);
            else
                printf(" (calibrated: best of %d rounds of %.1f s, slowest %.1f%s%s)\n", ZT_PEAK_ROUNDS,
                       ZT_PEAK_ROUND_S, p.slowest,
                       p.busy                ? "; the machine was busy, not cached"
                       : p.cache_path[0] ? "; cached in "
                                         : "; no cache directory",
                       p.busy ? "" : p.cache_path);
        }
    }
    gpu_info(measure);
    return ZT_OK;
}
