/* step_graph.c — the training step captured as a graph (step_graph.h). */
#include "step_graph.h"

#include <string.h>

#include "../core/mem.h"

static size_t table_bytes(int micro) { return (size_t)micro * sizeof(int *); }

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
    for (int i = 0; ok && i < micro; i++) {
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
    if (g->graph)
        g->be->graph_free(g->graph);
    for (int i = 0; i < g->micro; i++) {
        if (g->inputs)
            g->be->host_free(ZT_MEM_OTHER, g->inputs[i], g->io_bytes);
        if (g->targets)
            g->be->host_free(ZT_MEM_OTHER, g->targets[i], g->io_bytes);
    }
    zt_free(ZT_MEM_OTHER, g->inputs, table_bytes(g->micro));
    zt_free(ZT_MEM_OTHER, g->targets, table_bytes(g->micro));
    memset(g, 0, sizeof *g);
}

zt_graph_phase zt_step_graph_phase(const zt_step_graph *g)
{
    if (!g->on)
        return ZT_GRAPH_OFF;
    if (g->graph)
        return ZT_GRAPH_REPLAY;
    return g->steps == 0 ? ZT_GRAPH_WARMUP : ZT_GRAPH_CAPTURE;
}

int zt_step_graph_begin(zt_step_graph *g, zt_err *err)
{
    int rc = g->be->graph_begin(err);
    return rc ? zt_wrap(err, "capturing the step as a graph: ") : ZT_OK;
}

int zt_step_graph_run(zt_step_graph *g, zt_graph_phase ph, zt_err *err)
{
    int rc = ZT_OK;
    if (ph == ZT_GRAPH_CAPTURE && (rc = g->be->graph_end(&g->graph, err)))
        return zt_wrap(err, "capturing the step as a graph: ");
    if (ph == ZT_GRAPH_CAPTURE || ph == ZT_GRAPH_REPLAY) {
        if ((rc = g->be->graph_launch(g->graph, err)))
            return zt_wrap(err, "launching the captured step: ");
        g->launches++;
    }
    g->steps++;
    return ZT_OK;
}
