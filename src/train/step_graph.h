/* step_graph.h — the training step captured as a graph once and replayed after
 * (docs/gpu.md, "The captured step"; backend.h, graph_begin).
 *
 * In fast mode on one rank the whole step (zero the gradients, every micro-batch's
 * forward and backward, the verdict and AdamW) queues the same launches on the same
 * buffers every step: the shapes are static, the engine's host bookkeeping (unit
 * phases, the choice of staging or in-place accumulation) repeats, and what changes
 * from step to step is either in device memory or behind fixed host memory:
 *   - the token ids: one pair of page-locked buffers per micro-batch (host_alloc),
 *     refilled before each launch; a captured upload reads them anew;
 *   - the learning rate and AdamW's t: the step's inputs in the device's scalars,
 *     uploaded before each launch (zt_engine_step_inputs);
 *   - the loss, the norm, the verdict: made on the device, copied aside inside the
 *     graph, their download queued after the launch (zt_engine_step_readback) and
 *     waited for before the next step (a graphed run does not run ahead).
 * So the first step runs directly (it grows every scratch to its size: nothing may
 * allocate inside a capture), the second is captured and launched, and every later
 * one is a launch between an upload and the readback: a handful of host calls. */
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
    int micro;               /* micro-batches per step: one pair of token buffers each */
    int **inputs, **targets; /* [micro]: page-locked (host_alloc), io_bytes each */
    size_t io_bytes;
    zt_graph *graph; /* the captured step, NULL before the capture */
    long steps;      /* steps taken through the graph's path so far */
    long launches;   /* launches of the captured step */
} zt_step_graph;

/* Off (on = 0): nothing allocated.  On: the token buffers of micro micro-batches of
 * io_bytes each, from be's host_alloc. */
int zt_step_graph_init(zt_step_graph *g, const zt_backend *be, int on, int micro, size_t io_bytes,
                       zt_err *err);
void zt_step_graph_free(zt_step_graph *g);
/* What the coming step is: warm-up first, then the capture, then replays. */
zt_graph_phase zt_step_graph_phase(const zt_step_graph *g);
/* Open the capture (the step's launches that follow are captured). */
int zt_step_graph_begin(zt_step_graph *g, zt_err *err);
/* After the step's launches: close the capture (ZT_GRAPH_CAPTURE) and launch the
 * captured step (capture, replay); the warm-up has run already.  Counts the step. */
int zt_step_graph_run(zt_step_graph *g, zt_graph_phase ph, zt_err *err);

#endif
