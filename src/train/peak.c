/* peak.c — the MFU peak: calibration, its cache, and the guard against MFU > 1 (peak.h).
 *
 * The cache file is one JSON object:
 *   {"version": 1, "peaks": [{"cpu": "AMD EPYC 7B13", "isa": "AVX2", "threads": 2,
 *     "dtype": "fp32", "gflops": 61.2, "how": "calibrated"}, ...]}
 * "how" is "calibrated" (best of the rounds) or "achieved" (raised by a training step).
 * A device's own peak (zt_peak_resolve_on) has its name as "cpu", "isa" "device" and
 * threads 0.
 * Anything else — not JSON, another shape, a wrong type, a peak that is not a positive
 * finite number — makes the whole file malformed: warned about, then replaced. */
#include "peak.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../kernels/matmul.h"

#define CACHE_MAX_BYTES (1u << 20)

void zt_peak_cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon || strncmp(line, "model name", 10) != 0)
            continue;
        const char *val = colon + 1 + (colon[1] == ' ');
        size_t n = strcspn(val, "\n");
        if (n > 0)
            snprintf(buf, cap, "%.*s", (int)n, val);
        break;
    }
    fclose(f);
}

static void cache_path(char *buf, size_t cap)
{
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n = x && *x ? snprintf(buf, cap, "%s/ztrain/peak.json", x)
            : h && *h ? snprintf(buf, cap, "%s/.cache/ztrain/peak.json", h)
                      : -1;
    if (n < 0 || (size_t)n >= cap)
        buf[0] = '\0';
}

static const char *dtype_key(zt_dtype dt) { return dt == ZT_BF16 ? "bf16" : "fp32"; }

/* ---- the cache file ---------------------------------------------------------- */

/* The peaks array of the cache, or NULL (absent file: *why ""; malformed: *why says
 * what).  On success *doc owns the tree. */
static cJSON *read_cache(const char *path, zt_json *doc, char *why, size_t cap)
{
    why[0] = '\0';
    struct stat st;
    if (stat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return NULL; /* no cache yet (or no cache directory: saving will say so) */
    zt_err err = {0};
    if (zt_json_parse_file(path, CACHE_MAX_BYTES, doc, &err) != ZT_OK) {
        snprintf(why, cap, "%.400s", err.msg);
        return NULL;
    }
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(doc->root, "version");
    cJSON *peaks = cJSON_GetObjectItemCaseSensitive(doc->root, "peaks");
    const char *bad = !cJSON_IsObject(doc->root)                        ? "not a JSON object"
                      : !cJSON_IsNumber(version) || version->valuedouble != 1 ? "\"version\" is not 1"
                      : !cJSON_IsArray(peaks)                           ? "\"peaks\" is not a list"
                                                                        : NULL;
    for (const cJSON *e = peaks && !bad ? peaks->child : NULL; e && !bad; e = e->next) {
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(e, "gflops");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "threads");
        if (!cJSON_IsObject(e) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "cpu")) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "isa")) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "dtype")) || !cJSON_IsNumber(t) ||
            t->valuedouble < 0 || t->valuedouble != floor(t->valuedouble))
            bad = "an entry lacks cpu, isa, dtype or a whole number of threads";
        else if (!cJSON_IsNumber(g) || !isfinite(g->valuedouble) || g->valuedouble <= 0)
            bad = "an entry's gflops is not a positive number";
    }
    if (bad) {
        snprintf(why, cap, "%s", bad);
        zt_json_free(doc);
        return NULL;
    }
    return peaks;
}

static int matches(const cJSON *e, const zt_peak *p)
{
    return !strcmp(cJSON_GetObjectItemCaseSensitive(e, "cpu")->valuestring, p->cpu) &&
           !strcmp(cJSON_GetObjectItemCaseSensitive(e, "isa")->valuestring, p->isa) &&
           !strcmp(cJSON_GetObjectItemCaseSensitive(e, "dtype")->valuestring, dtype_key(p->dtype)) &&
           cJSON_GetObjectItemCaseSensitive(e, "threads")->valuedouble == p->threads;
}

/* p's entry of the cache: its peak, or 0 (none, or a malformed file, warned about). */
static double cached(const zt_peak *p, FILE *warn)
{
    zt_json doc;
    char why[512];
    cJSON *peaks = read_cache(p->cache_path, &doc, why, sizeof why);
    if (!peaks) {
        if (why[0] && warn)
            fprintf(warn, "ztrain: warning: the peak cache %s is malformed (%s); recalibrating and "
                    "replacing it\n", p->cache_path, why);
        return 0.0;
    }
    double g = 0.0;
    for (const cJSON *e = peaks->child; e; e = e->next)
        if (matches(e, p))
            g = cJSON_GetObjectItemCaseSensitive(e, "gflops")->valuedouble;
    zt_json_free(&doc);
    return g;
}

/* Write p's entry into the cache (the others kept, a malformed file replaced). */
static void save(zt_peak *p, const char *how, FILE *warn)
{
    if (!p->cache_path[0])
        return;
    zt_json doc;
    char why[512], dir[1024];
    cJSON *old = read_cache(p->cache_path, &doc, why, sizeof why);
    cJSON *root = cJSON_CreateObject(), *peaks = cJSON_AddArrayToObject(root, "peaks");
    cJSON_AddNumberToObject(root, "version", 1);
    for (const cJSON *e = old ? old->child : NULL; e && peaks; e = e->next)
        if (!matches(e, p))
            cJSON_AddItemToArray(peaks, cJSON_Duplicate(e, 1));
    if (old)
        zt_json_free(&doc);
    cJSON *mine = cJSON_CreateObject();
    if (mine && peaks) {
        cJSON_AddStringToObject(mine, "cpu", p->cpu);
        cJSON_AddStringToObject(mine, "isa", p->isa);
        cJSON_AddNumberToObject(mine, "threads", p->threads);
        cJSON_AddStringToObject(mine, "dtype", dtype_key(p->dtype));
        cJSON_AddNumberToObject(mine, "gflops", p->gflops);
        cJSON_AddStringToObject(mine, "how", how);
        cJSON_AddItemToArray(peaks, mine);
    } else {
        cJSON_Delete(mine);
    }
    char *text = root && peaks ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    zt_err err = {0};
    snprintf(dir, sizeof dir, "%s", p->cache_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    int rc = !text ? zt_fail(&err, ZT_EFAIL, "out of memory") : slash ? zt_mkdirs(dir, &err) : ZT_OK;
    if (rc == ZT_OK) {
        zt_wpart parts[2] = {{text, strlen(text)}, {"\n", 1}};
        rc = zt_write_atomic(p->cache_path, parts, 2, &err);
    }
    cJSON_free(text);
    if (rc == ZT_OK)
        p->saved_gflops = p->gflops;
    else if (warn)
        fprintf(warn, "ztrain: warning: cannot write the peak cache %s: %s\n", p->cache_path, err.msg);
}

/* ---- public ---------------------------------------------------------------------- */

void zt_peak_resolve(zt_peak *p, zt_dtype compute, double given, int recalibrate, int save_ok, FILE *warn)
{
    memset(p, 0, sizeof *p);
    p->dtype = compute == ZT_BF16 ? ZT_BF16 : ZT_F32; /* fp16 compute runs fp32 products */
    p->threads = omp_get_max_threads();
    zt_peak_cpu_model(p->cpu, sizeof p->cpu);
    snprintf(p->isa, sizeof p->isa, "%s", zt_matmul_isa_name());
    cache_path(p->cache_path, sizeof p->cache_path);
    if (given > 0) {
        p->gflops = given;
        p->source = ZT_PEAK_GIVEN;
        return;
    }
    if (!recalibrate && p->cache_path[0] && (p->gflops = cached(p, warn)) > 0) {
        p->source = ZT_PEAK_CACHED;
        p->saved_gflops = p->gflops;
        return;
    }
    p->gflops = zt_matmul_peak_rounds(p->dtype, ZT_PEAK_ROUNDS, ZT_PEAK_ROUND_S, &p->slowest, &p->share);
    p->source = ZT_PEAK_CALIBRATED;
    p->busy = p->gflops > 0 && p->share < ZT_PEAK_MIN_SHARE;
    if (p->busy && warn)
        fprintf(warn, "ztrain: warning: the machine was busy while the %s peak was calibrated (at best this "
                "process had %.0f %% of its %d %s CPU time); %.4g GFLOP/s is used for this run but not "
                "cached, and MFU may read high: run ztrain env --recalibrate on a quiet machine\n",
                zt_dtype_name(p->dtype), 100.0 * p->share, p->threads,
                p->threads == 1 ? "thread's" : "threads'", p->gflops);
    if (p->gflops > 0 && save_ok && !p->busy)
        save(p, "calibrated", warn);
}

void zt_peak_resolve_on(zt_peak *p, const zt_backend *be, zt_dtype compute, double given, int recalibrate,
                        int save_ok, FILE *warn)
{
    if (!be || !be->matmul_peak) {
        zt_peak_resolve(p, compute, given, recalibrate, save_ok, warn);
        return;
    }
    memset(p, 0, sizeof *p);
    p->dtype = compute == ZT_BF16 ? ZT_BF16 : ZT_F32;
    snprintf(p->isa, sizeof p->isa, "device");
    cache_path(p->cache_path, sizeof p->cache_path);
    if (given > 0) {
        p->gflops = given;
        p->source = ZT_PEAK_GIVEN;
        snprintf(p->cpu, sizeof p->cpu, "%s", be->name);
        return;
    }
    /* the device's name comes with its measurement, so the cache is read after it only
     * when the measurement is cheap to repeat; a device measures in well under a second */
    zt_err err = {0};
    double g = 0.0;
    if (be->matmul_peak(p->dtype, &g, p->cpu, sizeof p->cpu, &err) || !(g > 0)) {
        if (warn)
            fprintf(warn, "ztrain: warning: the %s device's peak could not be measured (%s); MFU is not "
                    "reported\n", be->name, err.msg[0] ? err.msg : "no rate");
        p->gflops = 0.0;
        p->source = ZT_PEAK_CALIBRATED;
        return;
    }
    /* a cached entry above the measurement is a step that achieved more (zt_peak_admit) */
    double c = !recalibrate && p->cache_path[0] ? cached(p, warn) : 0.0;
    p->gflops = c > g ? c : g;
    p->source = c > g ? ZT_PEAK_CACHED : ZT_PEAK_CALIBRATED;
    p->saved_gflops = c;
    if (save_ok && !(c > g))
        save(p, "calibrated", warn);
}

double zt_peak_admit(zt_peak *p, double achieved, int save_ok, FILE *warn)
{
    /* also kept: achieved NaN, and a peak of 0 (its measurement failed: MFU is not
     * reported, rather than made 1 by the first step) */
    if (!(achieved > p->gflops) || !(p->gflops > 0))
        return p->gflops;
    if (p->raised++ == 0 && warn)
        fprintf(warn, "ztrain: warning: a step achieved %.4g GFLOP/s, above the %s peak of %.4g GFLOP/s "
                "(%s); the peak is raised to what was achieved, so MFU stays at most 1%s\n", achieved,
                p->source == ZT_PEAK_GIVEN ? "given" : p->source == ZT_PEAK_CACHED ? "cached" : "calibrated",
                p->gflops,
                p->source == ZT_PEAK_GIVEN ? "--peak_gflops is too low"
                                           : "it was measured while the machine was busy",
                p->source == ZT_PEAK_GIVEN ? "" : ", and the cache with it");
    p->gflops = achieved;
    /* rewrite the cache when the peak rose by 1 % since it was written: a few writes
     * in a run, not one per step */
    if (save_ok && p->source != ZT_PEAK_GIVEN && !p->busy && p->gflops > 1.01 * p->saved_gflops)
        save(p, "achieved", warn);
    return p->gflops;
}
