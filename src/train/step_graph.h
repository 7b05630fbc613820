/* step_graph.h — the training step captured as a graph once and replayed after
 * (docs/gpu.md, "The captured step"; backend.h, graph_begin).
 *
 * In fast mode on one rank the whole step (zero the gradients, every micro-batch's
 * forward and backward, the verdict and AdamW) queues the same launches on the same
 * buffers every step: the shapes are static, the engine's host bookkeeping (unit
 * phases, the choice of staging or in-place accumulation) repeats, and what changes
 * from step to step is either in device memory or behind fixed host memory:
 *   - the token ids: two sets of page-locked buffers, one pair per micro-batch each
 *     (host_alloc); step k's passes read set k % 2, refilled before their launch; a
 *     captured upload reads them anew;
 *   - the step's count of targets (its gradient scale's, with fp16's loss scale the
 *     device keeps): one page-locked double per set beside the ids, uploaded into
 *     the device's step scalars by the captured passes (zt_engine_step_count);
 *   - the learning rate and AdamW's t: the step's inputs in the device's scalars,
 *     uploaded before the update's launch (zt_engine_step_inputs);
 *   - the loss, the norm, the verdict: made on the device, copied aside inside the
 *     update, their download queued after its launch (zt_engine_step_readback) and
 *     waited for after the next step's passes are launched (running ahead).
 * The step is captured in pieces so that it can run ahead: the passes (zero the
 * gradients, the micro-batches' forwards and backwards), one graph per token set,
 * and the update (the reduction, the verdict, AdamW), one graph, launched only after
 * the step before is read back (its lr and t depend on that step's skip).  Step n+1
 * writes its ids into the set step n's passes did not read, which their launch may
 * still be reading.  So the first step runs directly (it grows every scratch to its
 * size: nothing may allocate inside a capture), the second captures set 1's passes
 * and the update, the third set 0's passes, and every later one is two launches, an
 * upload and the readback: a handful of host calls. */
#ifndef ZT_STEP_GRAPH_H
#define ZT_STEP_GRAPH_H

#include <stddef.h>

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
    int on;                  /* 0: every step is the plain one */
    int micro;               /* micro-batches per step: one pair of token buffers each, per set */
    int **inputs, **targets; /* [2 * micro]: set s's micro-batch i at s * micro + i; page-locked
                              * (host_alloc), io_bytes each */
    size_t io_bytes;
    double *count[2];    /* set s's count of targets (host_alloc), refilled before its launch */
    zt_graph *passes[2]; /* the captured passes reading token set 0 and 1, NULL before */
    zt_graph *update;    /* the captured update, NULL before */
    long steps;          /* updates taken through the graph's path so far */
    long launches;       /* launches of captured pieces */
} zt_step_graph;

/* Off (on = 0): nothing allocated.  On: two sets of token buffers of micro
 * micro-batches of io_bytes each, from be's host_alloc. */
int zt_step_graph_init(zt_step_graph *g, const zt_backend *be, int on, int micro, size_t io_bytes,
                       zt_err *err);
void zt_step_graph_free(zt_step_graph *g);
/* The token set the coming step's passes read (steps % 2). */
int zt_step_graph_set(const zt_step_graph *g);
/* What the coming step's passes are: warm-up first, then a capture for each set,
 * then replays. */
zt_graph_phase zt_step_graph_passes_phase(const zt_step_graph *g);
/* What the coming step's update is: warm-up first, then the capture, then replays. */
zt_graph_phase zt_step_graph_phase(const zt_step_graph *g);
/* Open a capture (the launches that follow are captured). */
int zt_step_graph_begin(zt_step_graph *g, zt_err *err);
/* After the passes' launches: close their capture (ZT_GRAPH_CAPTURE) and launch the
 * set's captured passes (capture, replay); the warm-up has run already. */
int zt_step_graph_run_passes(zt_step_graph *g, zt_graph_phase ph, zt_err *err);
/* The same for the update's launches; counts the step. */
int zt_step_graph_run(zt_step_graph *g, zt_graph_phase ph, zt_err *err);

#endif
