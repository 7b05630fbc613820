/* prof.h — the profiler's recorder: timed events of a run's profiled steps, the
 * Chrome trace they make (`train --profile FILE.json`), and the table by kernel
 * class printed at the end of the run.
 *
 * Who records what:
 *   - every backend entry (kernels/prof_backend.c wraps the table, so each entry
 *     is covered once, at the dispatch), with the FLOPs or bytes of its shapes;
 *   - every collective (comm.c, comm_nccl.c);
 *   - the phases: step, data, forward, backward, optimizer, log (trainer, model).
 * An event is a begin and an end mark on a queue.  Marks on the host are its
 * monotonic clock; marks on a device queue come from a clock the device installs
 * (kernels/cuda: CUDA events recorded on the stream), which are only read at the
 * profiled step's end (zt_prof_step_end waits for the device once, there): no
 * other synchronisation is added inside a step.
 *
 * Tracks (the trace's tid): 1 the compute queue (the host thread on the CPU, the
 * device's stream on a GPU), 2 collectives run by the host (MPI), 3 collectives
 * on a device queue of their own (NCCL's stream).  pid is the rank.
 *
 * One recorder per process, used from the thread that runs the steps only.  When
 * no profile is open, or outside the step range, zt_prof_begin returns -1 after
 * one test and zt_prof_end(-1, ...) does nothing. */
#ifndef ZT_PROF_H
#define ZT_PROF_H

#include <stdio.h>

#include "status.h"

/* queues for zt_prof_begin: the compute queue, the host's collectives; any other
 * pointer is a device queue (a cudaStream_t) the installed clock can mark */
#define ZT_PROF_COMPUTE ((void *)0)
#define ZT_PROF_HOST_COMM ((void *)1)

/* What a device installs to time its queues.  mark records a point on queue q
 * (NULL: its compute queue) and returns the mark's id (>= 0), or -1 when it
 * cannot; sync waits for every mark recorded; elapsed_us gives the µs from mark a
 * to mark b (both synced); reset lets the ids be reused (called after a step is
 * resolved). */
typedef struct zt_prof_clock {
    const char *what; /* "CUDA events", for the trace */
    long (*mark)(void *q);
    int (*sync)(zt_err *err);
    int (*elapsed_us)(long a, long b, double *us, zt_err *err);
    void (*reset)(void);
} zt_prof_clock;

/* "A-B", "A" or "A-" (to the end) of 1-based optimizer steps into *a, *b (b = 0:
 * no end).  ZT_EINPUT naming --profile_steps otherwise. */
int zt_prof_parse_steps(const char *s, long *a, long *b, zt_err *err);

/* Open the recorder: the trace goes to path (rank 0; rank r > 0 writes
 * path.rank<r>.json) for steps a..b (b = 0: every step from a).  The path is
 * checked now: a special file (a device, a FIFO, a directory) or a folder that
 * cannot take the file is ZT_EINPUT naming it, before any step runs. */
int zt_prof_open(const char *path, long a, long b, int rank, zt_err *err);
int zt_prof_enabled(void);
/* A device's clock for its queues (NULL: the host's clock for every queue). */
void zt_prof_set_clock(const zt_prof_clock *clock);

/* Around each optimizer step (1-based).  step_end resolves the step's marks
 * (waiting for the device, once) into times; an error is the device's. */
void zt_prof_step_begin(long step);
int zt_prof_step_end(zt_err *err);

/* An event named name (a string that outlives the run: a literal) of category
 * cat ("kernel", "collective", "phase", "memory", "transfer") on queue q; the
 * handle for zt_prof_end, or -1 when not recording.  end takes the event's work:
 * flops (products, attention) or bytes moved (elementwise), 0 for none. */
int zt_prof_begin(const char *name, const char *cat, void *q);
void zt_prof_end(int h, double flops, double bytes);

/* At the end of the run: write the trace (every write checked; an error names the
 * file) and print the table by kernel class to table (NULL: no table), then free
 * everything.  zt_prof_close frees without writing (a failed run). */
int zt_prof_finish(FILE *table, zt_err *err);
void zt_prof_close(void);

#endif
