/* test_peak.c — what MFU divides by on a device that runs its products itself
 * (train/peak.h: zt_peak_resolve_on).  A table with matmul_peak (the CUDA one on a
 * GPU) gives the peak, cached under the device's name beside the CPU's entries; a
 * step that achieves more raises it, and the next run starts from the raised
 * value; a failed measurement reports no MFU rather than a wrong one.  The table
 * here is the CPU's with a stand-in measurement, so the bookkeeping runs without a
 * GPU; tests/gpu/check.sh runs the real one. */
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/backend.h"
#include "../src/train/peak.h"
#include "test.h"
#include "tmpdir.h"

static char tmpdir[64];
static double stub_gflops;
static int stub_calls;

static int stub_peak(zt_dtype compute, double *gflops, char *what, size_t cap, zt_err *err)
{
    stub_calls++;
    if (stub_gflops <= 0) {
        *gflops = 0;
        return zt_fail(err, ZT_EFAIL, "stand-in device lost");
    }
    *gflops = compute == ZT_BF16 ? stub_gflops : stub_gflops / 4;
    snprintf(what, cap, "Stand-in GPU, sm_90");
    return ZT_OK;
}

static zt_backend device_table(void)
{
    zt_backend be = *zt_backend_cpu();
    be.name = "stand-in";
    be.matmul_peak = stub_peak;
    return be;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static void test_device_peak_is_measured_and_cached(void)
{
    zt_backend be = device_table();
    zt_peak p;
    stub_gflops = 900000.0;
    stub_calls = 0;
    zt_peak_resolve_on(&p, &be, ZT_BF16, 0.0, 0, 1, NULL);
    ZT_CHECK(stub_calls == 1 && p.gflops == 900000.0 && p.source == ZT_PEAK_CALIBRATED);
    ZT_CHECK(p.threads == 0 && !strcmp(p.cpu, "Stand-in GPU, sm_90") && !strcmp(p.isa, "device"));
    /* fp16 compute runs fp32 products, as on the CPU */
    zt_peak_resolve_on(&p, &be, ZT_F16, 0.0, 0, 1, NULL);
    ZT_CHECK(p.dtype == ZT_F32 && p.gflops == 225000.0);
    const char *text = read_all(tmpdir_path(tmpdir, "ztrain/peak.json"));
    ZT_CHECK_MSG(text && strstr(text, "\"Stand-in GPU, sm_90\"") && strstr(text, "\"device\"") &&
                     strstr(text, "900000") && strstr(text, "225000"),
                 "cache: %s", text ? text : "(none)");

    /* a step above the peak raises it (MFU stays at most 1) and the cache with it */
    zt_peak_resolve_on(&p, &be, ZT_BF16, 0.0, 0, 1, NULL);
    ZT_CHECK(zt_peak_admit(&p, 950000.0, 1, NULL) == 950000.0);
    zt_peak_resolve_on(&p, &be, ZT_BF16, 0.0, 0, 1, NULL);
    ZT_CHECK_MSG(p.gflops == 950000.0 && p.source == ZT_PEAK_CACHED, "after a raise: %g (source %d)", p.gflops,
                 (int)p.source);
    /* --recalibrate (env) measures anew and replaces it */
    zt_peak_resolve_on(&p, &be, ZT_BF16, 0.0, 1, 1, NULL);
    ZT_CHECK(p.gflops == 900000.0 && p.source == ZT_PEAK_CALIBRATED);
    /* a measurement above the cached value wins */
    stub_gflops = 990000.0;
    zt_peak_resolve_on(&p, &be, ZT_BF16, 0.0, 0, 1, NULL);
    ZT_CHECK(p.gflops == 990000.0 && p.source == ZT_PEAK_CALIBRATED);
    /* --peak_gflops is taken as given, without measuring */
    stub_calls = 0;
    zt_peak_resolve_on(&p, &be, ZT_BF16, 1234.0, 0, 1, NULL);
    ZT_CHECK(stub_calls == 0 && p.gflops == 1234.0 && p.source == ZT_PEAK_GIVEN);
}

static void test_failed_measurement_reports_no_mfu(void)
{
    zt_backend be = device_table();
    zt_peak p;
    stub_gflops = 0.0;
    char warn[512] = {0};
    FILE *w = fmemopen(warn, sizeof warn, "w");
    zt_peak_resolve_on(&p, &be, ZT_BF16, 0.0, 0, 1, w);
    fclose(w);
    ZT_CHECK(p.gflops == 0.0);
    ZT_CHECK_MSG(strstr(warn, "stand-in device's peak could not be measured (stand-in device lost)") &&
                     strstr(warn, "MFU is not reported"),
                 "warning: %s", warn);
    /* a step cannot turn the missing peak into an MFU of 1 */
    ZT_CHECK(zt_peak_admit(&p, 5000.0, 1, NULL) == 0.0);
}

/* A table whose products run on the host's cores has no matmul_peak: the CPU's
 * peak, keyed by the CPU model and thread count, as zt_peak_resolve gives it. */
static void test_host_tables_take_the_cpu_peak(void)
{
    zt_peak p;
    zt_peak_resolve_on(&p, zt_backend_emu(), ZT_F32, 77.0, 0, 1, NULL);
    ZT_CHECK(p.threads > 0 && p.gflops == 77.0 && p.source == ZT_PEAK_GIVEN && strcmp(p.isa, "device") != 0);
    ZT_CHECK(zt_backend_cpu()->matmul_peak == NULL && zt_backend_emu()->matmul_peak == NULL);
}

int main(void)
{
    if (!tmpdir_make(tmpdir, sizeof tmpdir, "zt_peak_")) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    setenv("XDG_CACHE_HOME", tmpdir, 1);
    ZT_RUN(test_device_peak_is_measured_and_cached);
    ZT_RUN(test_failed_measurement_reports_no_mfu);
    ZT_RUN(test_host_tables_take_the_cpu_peak);
    tmpdir_remove(tmpdir);
    ZT_TEST_MAIN_END();
}
