/* peak.h — the matrix-product peak that MFU divides by: calibrated, cached, and never
 * below what a run achieves, so a reported MFU is never above 1.
 *
 * MFU = (training FLOPs per token x tokens per second per device) / peak.  The peak is
 * the best rate of oneDNN's square products in the compute dtype at this process's
 * thread count (kernels/matmul.h: the best of ZT_PEAK_ROUNDS timed rounds, each at
 * least ZT_PEAK_ROUND_S seconds, after a warm-up).  Another process on the machine
 * only slows a round down, so the best round is the peak when any round had the
 * machine to itself, and the spread between the best and the slowest round says how
 * quiet the machine was.  A load that lasts through every round would make every
 * round slow and the peak too low (docs/performance.md, the AMX section), so the
 * calibration also measures this process's share of its threads' CPU time: when no
 * round had ZT_PEAK_MIN_SHARE of it, the machine was busy throughout, and the peak is
 * used for this run but not cached (nor raised in the cache), with a warning.
 *
 * Calibrations are cached per (CPU model, oneDNN ISA, threads, dtype) in
 * $XDG_CACHE_HOME/ztrain/peak.json, else ~/.cache/ztrain/peak.json, written
 * atomically; a run reads its entry instead of calibrating again, and
 * `ztrain env --recalibrate` measures anew.  A cache that cannot be read as this
 * format is reported as a warning and replaced by a new calibration, never an error.
 *
 * A step that achieves more than the peak (a calibration taken under load, or a peak
 * given too low with --peak_gflops) raises the peak to what was achieved: that step's
 * MFU is 1, a warning says so once, and a calibrated peak's cache entry is raised too,
 * so the next run starts from it.  Each JSONL record carries the peak its MFU used. */
#ifndef ZT_PEAK_H
#define ZT_PEAK_H

#include <stdio.h>

#include "../core/dtype.h"
#include "../kernels/backend.h"

#define ZT_PEAK_ROUNDS 5
#define ZT_PEAK_ROUND_S 0.2
/* A calibration whose quietest round had less of its threads' CPU time than this was
 * shared with other processes all along.  Quiet, the share is 1.00 (2 threads and 1); one busy
 * process beside 2 threads on 2 cores left them 0.64-0.72; 0.8 leaves room for a host
 * that steals some of a VM's time. */
#define ZT_PEAK_MIN_SHARE 0.8

typedef enum zt_peak_source {
    ZT_PEAK_GIVEN,      /* --peak_gflops */
    ZT_PEAK_CACHED,     /* read from the cache file */
    ZT_PEAK_CALIBRATED, /* measured by this process */
} zt_peak_source;

typedef struct zt_peak {
    double gflops;          /* the peak MFU divides by (GFLOP/s) */
    zt_peak_source source;
    int raised;             /* times a step achieved more and raised it */
    double saved_gflops;    /* the value last written to (or read from) the cache */
    double slowest;         /* calibrated now: the slowest round's rate (0 otherwise) */
    double share;           /* calibrated now: the quietest round's share of CPU time */
    int busy;               /* calibrated now with share < ZT_PEAK_MIN_SHARE: never cached */
    /* the cache key */
    char cpu[128], isa[48];
    int threads;            /* 0: a device's own peak (cpu names the device) */
    zt_dtype dtype;         /* of the products timed: fp32 or bf16 (fp16 runs fp32 ones) */
    char cache_path[1024];  /* "" when neither XDG_CACHE_HOME nor HOME is set */
} zt_peak;

/* "model name" of /proc/cpuinfo ("unknown" without one). */
void zt_peak_cpu_model(char *buf, size_t cap);

/* The peak for compute dtype `compute` at the current OpenMP thread count: given > 0
 * is taken as it is (--peak_gflops); otherwise the cache's entry, or (none, a
 * malformed cache, or recalibrate) a calibration, which is then cached.  Warnings
 * (a malformed or unwritable cache) go to warn when it is not NULL.  save: this
 * process may write the cache (one rank per machine should). */
void zt_peak_resolve(zt_peak *p, zt_dtype compute, double given, int recalibrate, int save, FILE *warn);

/* The same for the device of backend be: a device that runs its products itself
 * (be->matmul_peak, the CUDA table) measures its own peak, cached under its name
 * (the entry's "cpu" is the device, "isa" "device", threads 0); a table whose
 * products run on the host's cores takes the CPU's (zt_peak_resolve).  A device
 * whose measurement fails gives a peak of 0 (MFU not reported) and a warning. */
void zt_peak_resolve_on(zt_peak *p, const zt_backend *be, zt_dtype compute, double given, int recalibrate,
                        int save, FILE *warn);

/* A step achieved `achieved` GFLOP/s: when that is above the peak, raise the peak to
 * it (warning on warn the first time), and with save, raise the cache entry of a
 * calibrated or cached peak.  Returns the peak to divide by (>= achieved). */
double zt_peak_admit(zt_peak *p, double achieved, int save, FILE *warn);

#endif
