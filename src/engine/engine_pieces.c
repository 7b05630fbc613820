/* engine_pieces.c — the engine's reductions in pieces (DeepSpeed's reduce_bucket),
 * split from engine.c along its design: engine.c decides when a unit's gradient is
 * reduced (grad_end, reduce_grads, the ticks of zt_engine_progress, finish_reduce);
 * this file cuts that reduction into pieces and runs them (engine_impl.h). */
#include "engine_impl.h"

#include <assert.h>

/* ---- reductions in pieces (reduce_bucket) ----------------------------------
 *
 * DeepSpeed's reduce bucket: unit u's full gradient src (P elements of src_dt,
 * the members' slices one after another) is reduce-scattered a piece at a time.
 * Piece k takes elements [k, k + n) of every member's slice, converted into a
 * slot of comm_full one slice after another; its reduce-scatter leaves this
 * member's [k, k + n) in the slot's part of comm_shard, summed over the group
 * (and the replicas) in the same order as the whole unit's would be.  Then into
 * the owner's accumulator: added (stages 2-3, over the micro-batches; stored by the
 * step's first, grad_store's rule, decided as the unit's pieces begin) or stored
 * at the front (stage 1's reduction at the step: piece k writes [k, k + n) of
 * grad only after every slice's [k, k + n) was read, and the pieces after it
 * read beyond k + n).
 *
 * With overlap (DeepSpeed's overlap_comm) the pieces run while the backward goes
 * on, at most ZT_PIECE_SLOTS in flight: grad_end starts the first, and each tick
 * after it (zt_engine_progress, after every matrix product) starts the next few,
 * each first finishing the piece that last used its slot.  "Few" spreads the
 * unit's pieces over as many ticks as the last unit's backward had, so they are
 * started before the next unit's grad_end needs them finished.  Ticks are the
 * same program points on every rank, so every rank starts the same collectives in
 * the same order; starting a piece when MPI_Test says the last one is done would
 * not be (it may say so on one rank and not yet on another).  Whatever is left
 * starts and finishes when the next reduction begins, or at the step
 * (finish_reduce).
 * The unit's staging is read until its last piece starts, so meanwhile the next
 * unit's backward fills the spare staging. */

static void piece_finish(zt_engine *eng)
{
    zt_pieces *pc = &eng->pieces;
    int s = pc->finished % ZT_PIECE_SLOTS;
    zt_comm *c = eng->comm;
    const zt_dtype rd = eng->prec.reduce, md = eng->prec.master;
    void *shard = (char *)eng->comm_shard + (size_t)s * eng->reduce_piece * zt_dtype_size(rd);
    char *dst = (char *)eng->units[pc->unit].grad + pc->k[s] * zt_dtype_size(md);
    zt_comm_wait(c, &pc->op[s]);
    if (c->replica_size > 1)
        zt_comm_allreduce(c, shard, pc->n[s], rd, ZT_SCOPE_REPLICA);
    if (pc->add)
        eng->be->accumulate(dst, md, shard, rd, pc->n[s]);
    else
        eng->be->convert(dst, md, shard, rd, pc->n[s]);
    pc->finished++;
}

void zt_eng_piece_start(zt_engine *eng)
{
    zt_pieces *pc = &eng->pieces;
    if (pc->started - pc->finished == ZT_PIECE_SLOTS)
        piece_finish(eng); /* the oldest piece holds the slot */
    int s = pc->started % ZT_PIECE_SLOTS;
    const zt_dtype rd = eng->prec.reduce;
    const size_t S = eng->units[pc->unit].shard_numel, G = (size_t)eng->group_size, rp = eng->reduce_piece;
    const size_t rs = zt_dtype_size(rd), ss = zt_dtype_size(pc->src_dt);
    const size_t k = pc->next, n = S - k < rp ? S - k : rp;
    char *full = (char *)eng->comm_full + (size_t)s * G * rp * rs;
    char *slices = (char *)eng->comm_slices + (size_t)s * G * rp * rs;
    char *shard = (char *)eng->comm_shard + (size_t)s * rp * rs;
    for (size_t j = 0; j < G; j++)
        eng->be->convert(full + j * n * rs, rd, (const char *)pc->src + (j * S + k) * ss, pc->src_dt, n);
    zt_comm_start_reduce_scatter(eng->comm, &pc->op[s], shard, full, slices, G * n, rd);
    pc->k[s] = k;
    pc->n[s] = n;
    pc->next += n;
    pc->started++;
    if (pc->next == S)
        pc->src = NULL; /* every piece is packed: the source is free */
}

void zt_eng_pieces_begin(zt_engine *eng, int u, const void *src, zt_dtype src_dt, int add)
{
    zt_pieces *pc = &eng->pieces;
    assert(pc->unit < 0 && "a reduction in pieces is still under way");
    pc->unit = u;
    pc->src = src;
    pc->src_dt = src_dt;
    pc->add = add && !eng->units[u].grad_empty; /* every piece of the step's first stores */
    if (add)
        eng->units[u].grad_empty = 0;
    pc->next = 0;
    pc->started = pc->finished = 0;
    size_t S = eng->units[u].shard_numel, left = (S + eng->reduce_piece - 1) / eng->reduce_piece - 1;
    pc->per_tick = eng->ticks_per_unit > 0 ? (int)((left + (size_t)eng->ticks_per_unit - 1) /
                                                   (size_t)eng->ticks_per_unit)
                                           : 1;
    zt_eng_piece_start(eng);
}

/* Start what is left, finish everything: the unit's reduction is complete. */
void zt_eng_pieces_end(zt_engine *eng)
{
    zt_pieces *pc = &eng->pieces;
    if (pc->unit < 0)
        return;
    while (pc->next < eng->units[pc->unit].shard_numel)
        zt_eng_piece_start(eng);
    while (pc->finished < pc->started)
        piece_finish(eng);
    int u = pc->unit;
    pc->unit = -1;
    pc->src = NULL;
    zt_offload_grad_done(eng, u);
}
