/* step_graph.c — the training step captured as a graph (step_graph.h). */
#include "step_graph.h"

#include <string.h>

#include "../core/mem.h"

/* two sets of token buffers: step k reads set k % 2 */
static size_t table_bytes(int micro) { return 2 * (size_t)micro * sizeof(int *); }

int zt_step_graph_init(zt_step_graph *g, const zt_backend *be, int on, int micro, size_t io_bytes,
                       zt_err *err)
{
    memset(g, 0, sizeof *g);
    g->be = be;
    if (!on)
        return ZT_OK;
    g->micro = micro;
    g->io_bytes = io_bytes;
    g->inputs = zt_alloc(ZT_MEM_OTHER, table_bytes(micro));
    g->targets = zt_alloc(ZT_MEM_OTHER, table_bytes(micro));
    int ok = g->inputs && g->targets;
    for (int s = 0; ok && s < 2; s++)
        ok = (g->count[s] = be->host_alloc(ZT_MEM_OTHER, sizeof(double))) != NULL;
    for (int i = 0; ok && i < 2 * micro; i++) {
        g->inputs[i] = be->host_alloc(ZT_MEM_OTHER, io_bytes);
        g->targets[i] = be->host_alloc(ZT_MEM_OTHER, io_bytes);
        ok = g->inputs[i] && g->targets[i];
    }
    g->on = 1;
    if (!ok)
        return zt_fail(err, ZT_EFAIL,
                       "out of memory for the captured step's token buffers (%d micro-batches)", micro);
    return ZT_OK;
}

void zt_step_graph_free(zt_step_graph *g)
{
    if (!g->on)
        return;
    for (int k = 0; k < 3; k++) {
        zt_graph *gr = k < 2 ? g->passes[k] : g->update;
        if (gr)
            g->be->graph_free(gr);
    }
    for (int i = 0; i < 2 * g->micro; i++) {
        if (g->inputs)
            g->be->host_free(ZT_MEM_OTHER, g->inputs[i], g->io_bytes);
        if (g->targets)
            g->be->host_free(ZT_MEM_OTHER, g->targets[i], g->io_bytes);
    }
    for (int s = 0; s < 2; s++)
        if (g->count[s])
            g->be->host_free(ZT_MEM_OTHER, g->count[s], sizeof(double));
    zt_free(ZT_MEM_OTHER, g->inputs, table_bytes(g->micro));
    zt_free(ZT_MEM_OTHER, g->targets, table_bytes(g->micro));
    memset(g, 0, sizeof *g);
}

int zt_step_graph_set(const zt_step_graph *g) { return (int)(g->steps % 2); }

/* the coming step's piece, held in *slot once captured */
static zt_graph_phase phase_of(const zt_step_graph *g, const zt_graph *slot)
{
    if (!g->on)
        return ZT_GRAPH_OFF;
    if (slot)
        return ZT_GRAPH_REPLAY;
    return g->steps == 0 ? ZT_GRAPH_WARMUP : ZT_GRAPH_CAPTURE;
}

zt_graph_phase zt_step_graph_passes_phase(const zt_step_graph *g)
{
    return phase_of(g, g->on ? g->passes[zt_step_graph_set(g)] : NULL);
}

zt_graph_phase zt_step_graph_phase(const zt_step_graph *g) { return phase_of(g, g->update); }

int zt_step_graph_begin(zt_step_graph *g, zt_err *err)
{
    int rc = g->be->graph_begin(err);
    return rc ? zt_wrap(err, "capturing the step as a graph: ") : ZT_OK;
}

/* close the capture into *slot (capture), then launch it (capture, replay) */
static int run_piece(zt_step_graph *g, zt_graph_phase ph, zt_graph **slot, zt_err *err)
{
    if (ph == ZT_GRAPH_CAPTURE && g->be->graph_end(slot, err))
        return zt_wrap(err, "capturing the step as a graph: ");
    if (ph == ZT_GRAPH_CAPTURE || ph == ZT_GRAPH_REPLAY) {
        if (g->be->graph_launch(*slot, err))
            return zt_wrap(err, "launching the captured step: ");
        g->launches++;
    }
    return ZT_OK;
}

int zt_step_graph_run_passes(zt_step_graph *g, zt_graph_phase ph, zt_err *err)
{
    return run_piece(g, ph, &g->passes[zt_step_graph_set(g)], err);
}

int zt_step_graph_run(zt_step_graph *g, zt_graph_phase ph, zt_err *err)
{
    int rc = run_piece(g, ph, &g->update, err);
    if (rc == ZT_OK)
        g->steps++;
    return rc;
}
