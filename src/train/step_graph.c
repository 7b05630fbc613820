/* step_graph.c — the training step captured as a graph (step_graph.h). */
#include "step_graph.h"

#include <assert.h>
#include <string.h>

#include "../core/mem.h"

/* sets sets of token buffers: a step reads the set of its slot in the trainer's ring */
static size_t table_bytes(int sets, int micro) { return (size_t)sets * micro * sizeof(int *); }

int zt_step_graph_init(zt_step_graph *g, const zt_backend *be, zt_comm *comm, int on, int micro, size_t io_bytes,
                       int sets, zt_err *err)
{
    memset(g, 0, sizeof *g);
    g->be = be;
    g->comm = comm;
    if (!on)
        return ZT_OK;
    g->micro = micro;
    g->io_bytes = io_bytes;
    g->sets = sets < 2 ? 2 : sets;
    g->inputs = zt_alloc(ZT_MEM_OTHER, table_bytes(g->sets, micro));
    g->targets = zt_alloc(ZT_MEM_OTHER, table_bytes(g->sets, micro));
    g->passes = zt_alloc(ZT_MEM_OTHER, (size_t)g->sets * sizeof *g->passes);
    g->count = be->host_alloc(ZT_MEM_OTHER, (size_t)g->sets * sizeof *g->count);
    int ok = g->inputs && g->targets && g->passes && g->count;
    if (ok) { /* so that a failure part way frees only what was allocated */
        memset(g->passes, 0, (size_t)g->sets * sizeof *g->passes);
        memset(g->inputs, 0, table_bytes(g->sets, micro));
        memset(g->targets, 0, table_bytes(g->sets, micro));
    }
    for (int i = 0; ok && i < g->sets * micro; i++) {
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
    for (int k = 0; g->inputs && g->targets && g->passes && k < g->sets; k++)
        if (g->passes[k])
            g->be->graph_free(g->passes[k]);
    if (g->update)
        g->be->graph_free(g->update);
    for (int i = 0; g->passes && i < g->sets * g->micro; i++) {
        if (g->inputs && g->inputs[i])
            g->be->host_free(ZT_MEM_OTHER, g->inputs[i], g->io_bytes);
        if (g->targets && g->targets[i])
            g->be->host_free(ZT_MEM_OTHER, g->targets[i], g->io_bytes);
    }
    if (g->count)
        g->be->host_free(ZT_MEM_OTHER, g->count, (size_t)g->sets * sizeof *g->count);
    zt_free(ZT_MEM_OTHER, g->inputs, table_bytes(g->sets, g->micro));
    zt_free(ZT_MEM_OTHER, g->targets, table_bytes(g->sets, g->micro));
    zt_free(ZT_MEM_OTHER, g->passes, (size_t)g->sets * sizeof *g->passes);
    memset(g, 0, sizeof *g);
}

/* the coming step's piece, held in *slot once captured */
static zt_graph_phase phase_of(const zt_step_graph *g, const zt_graph *slot)
{
    if (!g->on)
        return ZT_GRAPH_OFF;
    if (slot)
        return ZT_GRAPH_REPLAY;
    return g->steps == 0 ? ZT_GRAPH_WARMUP : ZT_GRAPH_CAPTURE;
}

zt_graph_phase zt_step_graph_passes_phase(const zt_step_graph *g, int set)
{
    assert(!g->on || (set >= 0 && set < g->sets));
    return phase_of(g, g->on ? g->passes[set] : NULL);
}

zt_graph_phase zt_step_graph_phase(const zt_step_graph *g) { return phase_of(g, g->update); }

/* A collective started and not waited for: a capture may neither begin nor end with
 * one (a CUDA capture cannot join a stream forked before it, nor end with one forked) */
static int check_joined(const zt_step_graph *g, const char *when, zt_err *err)
{
    int n = g->comm ? zt_comm_in_flight(g->comm) : 0;
    if (n)
        return zt_fail(err, ZT_EFAIL, "capturing the step as a graph: %d collective%s in flight %s the capture "
                       "(each must be waited for inside the piece that starts it)", n, n == 1 ? "" : "s", when);
    return ZT_OK;
}

int zt_step_graph_begin(zt_step_graph *g, zt_err *err)
{
    if (check_joined(g, "at the start of", err))
        return ZT_EFAIL;
    if (g->comm)
        g->at_begin = zt_comm_traffic_now(g->comm);
    int rc = g->be->graph_begin(err);
    return rc ? zt_wrap(err, "capturing the step as a graph: ") : ZT_OK;
}

/* close the capture into *slot (capture), then launch it (capture, replay); piece
 * indexes traffic[] (0 the passes, whichever set: every set's passes queue the same
 * collectives; 1 the update): a capture keeps what it counted, a replay counts it
 * again (a capture's own launch was counted when its collectives were queued) */
static int run_piece(zt_step_graph *g, zt_graph_phase ph, zt_graph **slot, int piece, zt_err *err)
{
    if (ph == ZT_GRAPH_CAPTURE) {
        if (g->be->graph_end(slot, err))
            return zt_wrap(err, "capturing the step as a graph: ");
        if (check_joined(g, "at the end of", err))
            return ZT_EFAIL;
        if (g->comm)
            zt_comm_traffic_since(g->comm, &g->at_begin, &g->traffic[piece]);
    }
    if (ph == ZT_GRAPH_CAPTURE || ph == ZT_GRAPH_REPLAY) {
        if (g->be->graph_launch(*slot, err))
            return zt_wrap(err, "launching the captured step: ");
        g->launches++;
        if (g->comm && ph == ZT_GRAPH_REPLAY)
            zt_comm_traffic_add(g->comm, &g->traffic[piece]);
        if (g->comm)
            zt_comm_graph_launched(g->comm);
    }
    return ZT_OK;
}

int zt_step_graph_run_passes(zt_step_graph *g, int set, zt_graph_phase ph, zt_err *err)
{
    if (ph == ZT_GRAPH_OFF)
        return ZT_OK;
    return run_piece(g, ph, &g->passes[set], 0, err);
}

int zt_step_graph_run(zt_step_graph *g, zt_graph_phase ph, zt_err *err)
{
    int rc = run_piece(g, ph, &g->update, 1, err);
    if (rc == ZT_OK)
        g->steps++;
    return rc;
}
