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

typedef struct zt_comm {
    int rank, world;
    int shard_rank, shard_size;      /* within the shard group */
    int replica_rank, replica_size;  /* across groups */
    void *world_comm, *shard_comm, *replica_comm; /* MPI_Comm handles (opaque here) */
    uint64_t bytes[ZT_COLL_NKINDS];  /* logical bytes moved, per collective kind */
    uint64_t calls[ZT_COLL_NKINDS];
} zt_comm;

/* MPI_Init if needed (idempotent), and the world's rank and size. */
int zt_comm_init_mpi(int *argc, char ***argv, int *rank, int *world);
void zt_comm_finalize_mpi(void);
/* Abort every rank (after an error was printed) so none waits forever. */
void zt_comm_abort(int code);

/* One process, no MPI: every collective is a copy or nothing (tests, tools). */
void zt_comm_create_local(zt_comm *c);
/* Split the world into shard groups of group_size ranks (must divide world). */
int zt_comm_create(zt_comm *c, int group_size, zt_err *err);
void zt_comm_free(zt_comm *c);

/* full (n elements) <- concatenation of every shard-group member's shard (n/G each). */
void zt_comm_allgather(zt_comm *c, void *full, const void *shard, size_t n, zt_dtype dt);
/* shard (n/G) <- sum over the shard group of the matching slice of full (n). */
void zt_comm_reduce_scatter(zt_comm *c, void *shard, const void *full, size_t n, zt_dtype dt);
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
