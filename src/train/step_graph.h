/* step_graph.h — the training step captured as a graph once and replayed after
 * (docs/gpu.md, "The captured step"; backend.h, graph_begin).
 *
 * In fast mode on one rank the whole step (zero the gradients, every micro-batch's
 * forward and backward, the verdict and AdamW) queues the same launches on the same
 * buffers every step: the shapes are static, the engine's host bookkeeping (unit
 * phases, the choice of staging or in-place accumulation) repeats, and what changes
 * from step to step is either in device memory or behind fixed host memory:
 *   - the token ids: `sets` sets of page-locked buffers, one pair per micro-batch
 *     each (host_alloc), one per slot of the trainer's ring of steps (the steps it
 *     keeps in flight and one more); a step's passes read the set of its slot,
 *     refilled before their launch; a captured upload reads them anew;
 *   - the step's count of targets (its gradient scale's, with fp16's loss scale the
 *     device keeps): one page-locked double per set beside the ids, uploaded into
 *     the device's step scalars by the captured passes (zt_engine_step_count);
 *   - the learning rate and AdamW's t: taken by the device's verdict from the
 *     schedule on the device (zt_engine_set_schedule), so a replay needs no upload
 *     and may be launched before the steps before it are read back;
 *   - the loss, the norm, the verdict: made on the device, copied into the step's
 *     readback slot (its slot in the same ring) after the update's launch and downloaded
 *     (zt_engine_step_readback), waited for at the next logged step (running ahead).
 * The step is captured in pieces: the passes (zero the gradients, the micro-batches'
 * forwards and backwards), one graph per token set, and the update (the reduction,
 * the verdict, AdamW), one graph.  Step n+1 writes its ids into a set that no step
 * still in flight reads.  So the first step runs directly (it grows every scratch to
 * its size: nothing may allocate inside a capture), the next ones capture the update
 * and each set's passes in turn, and every later one is two launches, the numbers'
 * copy and their download: a handful of host calls.
 *
 * On several ranks the collectives are in the graphs too, on the device paths that
 * queue them (NCCL; the emulated device's stand-in, comm.h): the engine's host side
 * (which units gather, reduce, in which order, into which buffers) repeats as on one
 * rank, and the verdict's sum over the ranks is an in-place sum in device memory
 * (zt_comm_sum_doubles).  Each piece must wait for every collective it starts (a CUDA
 * capture joins NCCL's stream back before it ends): a capture that leaves one in
 * flight fails.  A device path counts a collective's traffic when it is queued, so a
 * piece's replay adds what its capture counted, and the step's record carries the
 * same bytes and calls as a plain step's. */
#ifndef ZT_STEP_GRAPH_H
#define ZT_STEP_GRAPH_H

#include <stddef.h>

#include "../comm/comm.h"
#include "../core/status.h"
#include "../kernels/backend.h"

/* What the host does for a step. */
typedef enum zt_graph_phase {
    ZT_GRAPH_OFF,     /* the plain step (zt_engine_step) */
    ZT_GRAPH_WARMUP,  /* the step's launches run directly, through the graph's buffers */
    ZT_GRAPH_CAPTURE, /* the same launches captured, then launched */
    ZT_GRAPH_REPLAY   /* a launch of the captured step */
} zt_graph_phase;

typedef struct zt_step_graph {
    const zt_backend *be;
    zt_comm *comm;           /* the ranks' collectives (their traffic counters, the watchdog) */
    int on;                  /* 0: every step is the plain one */
    int micro;               /* micro-batches per step: one pair of token buffers each, per set */
    int sets;                /* token sets: the trainer's ring of steps (a step reads the set of its slot) */
    int **inputs, **targets; /* [sets * micro]: set s's micro-batch i at s * micro + i; page-locked
                              * (host_alloc), io_bytes each */
    size_t io_bytes;
    double *count;       /* [sets]: set s's count of targets at count + s (one host_alloc), refilled
                          * before its launch */
    zt_graph **passes;   /* [sets]: the captured passes reading each token set, NULL before */
    zt_graph *update;    /* the captured update, NULL before */
    zt_comm_traffic at_begin;    /* the counters when the open capture began */
    zt_comm_traffic traffic[2];  /* what each piece's capture counted: 0 the passes (any set), 1 the update */
    long steps;          /* updates taken through the graph's path so far */
    long launches;       /* launches of captured pieces */
} zt_step_graph;

/* Off (on = 0): nothing allocated.  On: `sets` sets (at least 2) of token buffers of
 * micro micro-batches of io_bytes each, from be's host_alloc: one more than the steps
 * the trainer keeps in flight, so that a step's ids never go into a set that a step
 * not yet read back may still be uploading from. */
int zt_step_graph_init(zt_step_graph *g, const zt_backend *be, zt_comm *comm, int on, int micro, size_t io_bytes,
                       int sets,                       zt_err *err);
void zt_step_graph_free(zt_step_graph *g);
/* What the coming step's passes, reading token set `set` (its place in the trainer's
 * ring of steps, below sets), are: warm-up first, then a capture for each set, then
 * replays. */
zt_graph_phase zt_step_graph_passes_phase(const zt_step_graph *g, int set);
/* What the coming step's update is: warm-up first, then the capture, then replays. */
zt_graph_phase zt_step_graph_phase(const zt_step_graph *g);
/* Open a capture (the launches that follow are captured). */
int zt_step_graph_begin(zt_step_graph *g, zt_err *err);
/* After the passes' launches: close their capture (ZT_GRAPH_CAPTURE) and launch the
 * set's captured passes (capture, replay); the warm-up has run already. */
int zt_step_graph_run_passes(zt_step_graph *g, int set, zt_graph_phase ph, zt_err *err);
/* The same for the update's launches; counts the step. */
int zt_step_graph_run(zt_step_graph *g, zt_graph_phase ph, zt_err *err);

#endif
