/* comm.h — the collective interface of the engine, on MPI.
 *
 * The world of W ranks is cut into shard groups of G consecutive ranks (G = W
 * unless hybrid sharding sets a smaller node size); ranks holding the same slice
 * in different groups form a replica group of W/G ranks.
 *   shard group:   rank r is member (r mod G) of group r / G
 *   replica group: ranks r, r + G, r + 2G, ...
 * Buffers are typed by zt_dtype; sums run in the buffer's dtype (bf16 is summed
 * pairwise in fp32 and rounded to bf16 after each addition, as a bf16 reduction
 * on an accelerator does).  Every collective adds the bytes of its full logical
 * buffer to a per-kind counter (twice for an all-reduce, which is a
 * reduce-scatter plus an all-gather), so tests can compare the traffic with
 * ZeRO's formulas (stages 0-2: 2 Psi per step, stage 3: 3 Psi).
 *
 * Machines: the ranks that share memory (MPI_Comm_split_type SHARED) form one
 * machine.  Each collective's logical bytes are also split by link: a group of
 * S members moves B bytes as S equal slices, one per member (the slice member j
 * sends to or receives from this rank), so the members on this rank's machine,
 * itself included (its own slice never leaves the machine), account for
 * B * local / S bytes and the rest crossed the network:
 *   link_bytes[ZT_LINK_INTRA] + link_bytes[ZT_LINK_INTER] = sum of bytes[].
 * On M machines of R ranks this gives FULL_SHARD 3 Psi (M-1)/M across machines
 * and HYBRID_SHARD (groups of R) only its replica all-reduce, 2 Psi/R (M-1)/M.
 *
 * The engine talks only to this interface; a NCCL backend would implement the
 * same calls. */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "../core/status.h"

typedef enum zt_coll_kind {
    ZT_COLL_ALLGATHER, ZT_COLL_REDUCE_SCATTER, ZT_COLL_ALLREDUCE, ZT_COLL_NKINDS
} zt_coll_kind;

enum { ZT_LINK_INTRA, ZT_LINK_INTER, ZT_NLINKS }; /* same machine, another machine */

/* Where the ranks run: machine ids are the lowest world rank on each machine. */
typedef struct zt_topology {
    int machines;          /* distinct machines */
    int machine_ranks;     /* ranks on each machine; 0 when machines differ in count or
                            * a machine's ranks are not consecutive world ranks */
    int machine_size;      /* ranks on this rank's machine */
} zt_topology;

typedef struct zt_comm {
    int rank, world;
    int shard_rank, shard_size;      /* within the shard group */
    int replica_rank, replica_size;  /* across groups */
    void *world_comm, *shard_comm, *replica_comm; /* MPI_Comm handles (opaque here) */
    uint64_t bytes[ZT_COLL_NKINDS];  /* logical bytes moved, per collective kind */
    uint64_t calls[ZT_COLL_NKINDS];
    uint64_t link_bytes[ZT_NLINKS];  /* the same bytes, split by link (see above) */
    int scope_local[3];              /* members of each scope on this rank's machine */
    zt_topology topo;
    /* what the trainer and engine are doing, for the flight recorder and the
     * watchdog's message (see watchdog.h): the 1-based step (0: setup), the phase
     * ("forward", "backward", "optimizer", ...; NULL: setup) and the unit (-1: none) */
    long step;
    const char *phase;
    int unit;
    void *board; /* the node's arrival board and its MPI window (comm.c) */
    /* seconds this rank spent inside the data collectives: blocked until one finished
     * (blocking calls and waits), and in the progress calls that let one move */
    double wait_s, progress_s;
} zt_comm;

/* MPI_Init if needed (idempotent), and the world's rank and size. */
int zt_comm_init_mpi(int *argc, char ***argv, int *rank, int *world);
void zt_comm_finalize_mpi(void);
/* Abort every rank (after an error was printed) so none waits forever. */
void zt_comm_abort(int code);

/* Collective over the world (after zt_comm_init_mpi): which ranks share a machine. */
int zt_comm_topology(zt_topology *t, zt_err *err);

/* The watchdog's limit on how long one collective may block (seconds, > 0;
 * default 600, as NCCL's); past it the rank prints what it waits for and its
 * flight recorder, and the job is aborted (watchdog.h). */
void zt_comm_set_timeout(double seconds);

/* One process, no MPI: every collective is a copy or nothing (tests, tools). */
void zt_comm_create_local(zt_comm *c);
/* Split the world into shard groups of group_size ranks (must divide world). */
int zt_comm_create(zt_comm *c, int group_size, zt_err *err);
void zt_comm_free(zt_comm *c);

/* full (n elements) <- concatenation of every shard-group member's shard (n/G each). */
void zt_comm_allgather(zt_comm *c, void *full, const void *shard, size_t n, zt_dtype dt);
/* shard (n/G) <- sum over the shard group of the matching slice of full (n).
 *
 * It runs as an all-to-all of the slices into `slices` (scratch of n elements in
 * dt: member j's slice lands at j*n/G) and a sum over members in rank order,
 * here, on this rank.  On one machine Open MPI's MPI_Reduce_scatter_block moved
 * the same bytes 3x slower (docs/performance.md), and the fixed order makes the
 * sum the same whatever algorithm MPI picks.  Every member sums its own slice, so
 * the reduction's work is spread evenly. */
void zt_comm_reduce_scatter(zt_comm *c, void *shard, const void *full, void *slices, size_t n,
                            zt_dtype dt);

/* A collective in flight.  zt_comm_start_* begins it, zt_comm_test lets MPI move
 * its data while the caller computes (call it between pieces of work: with one
 * thread per rank, MPI advances a nonblocking collective only inside MPI calls),
 * and zt_comm_wait finishes it.  Until then its buffers belong to MPI.  The
 * results are exactly those of the blocking calls above. */
typedef struct zt_comm_op {
    int active;                 /* started, not yet waited for */
    zt_coll_kind kind;
    uint64_t request[2];        /* the MPI_Request, opaque here */
    void *shard;                /* reduce-scatter: where the sum goes (n/G) */
    const void *slices;         /* reduce-scatter: the members' slices (n) */
    const void *send;           /* the buffer MPI reads until the op is done */
    size_t per;                 /* n / G */
    uint64_t seq;               /* its number in the flight recorder */
    zt_dtype dt;
} zt_comm_op;

/* In place: this member's shard is already at its slot of full (offset
 * shard_rank * n/G); the others' shards arrive in theirs. */
void zt_comm_start_allgather(zt_comm *c, zt_comm_op *op, void *full, size_t n, zt_dtype dt);
/* As zt_comm_reduce_scatter; full and slices must stay untouched until the wait. */
void zt_comm_start_reduce_scatter(zt_comm *c, zt_comm_op *op, void *shard, const void *full,
                                  void *slices, size_t n, zt_dtype dt);
/* buf (n) <- sum of buf over the scope's ranks, in place (MPI's sum; the blocking
 * zt_comm_allreduce runs the same call, so both give the same bits). */
void zt_comm_start_allreduce(zt_comm *c, zt_comm_op *op, void *buf, size_t n, zt_dtype dt, int scope);
/* 1 when op's data has moved (or op is idle); the reduce-scatter's sum is left to the wait. */
int zt_comm_test(zt_comm *c, zt_comm_op *op);
void zt_comm_wait(zt_comm *c, zt_comm_op *op);
/* buf (n) <- sum of buf over the shard group (scope 0), the replica group (1) or the world (2). */
void zt_comm_allreduce(zt_comm *c, void *buf, size_t n, zt_dtype dt, int scope);
/* Sum of a double over a scope, not counted as traffic (norms, losses). */
double zt_comm_sum_double(zt_comm *c, double x, int scope);
/* World all-gather of `bytes` bytes per rank into all (world * bytes), not counted. */
void zt_comm_allgather_bytes(zt_comm *c, void *all, const void *mine, size_t bytes);
/* Max of an int over the world (agreeing on a status). */
int zt_comm_max_int(zt_comm *c, int x);

enum { ZT_SCOPE_SHARD = 0, ZT_SCOPE_REPLICA = 1, ZT_SCOPE_WORLD = 2 };

const char *zt_coll_kind_name(zt_coll_kind k);

#endif
