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
 * Devices (zt_comm_set_device): the data collectives' buffers may live in a
 * device's memory.  The staged path copies each collective's bytes to host
 * staging buffers, runs the same MPI calls on them and copies the result back,
 * so its numbers are the host path's bit for bit and any number of ranks may
 * share a device; the NCCL path (make cuda) runs NCCL on a stream of its own,
 * ordered against the compute stream with events (comm_nccl.c).  Both count
 * bytes and calls exactly as the host path does.  Scalars (sum_double, max_int,
 * allgather_bytes) are host data on every path, except sum_doubles, whose few
 * doubles live where the data collectives' buffers do.
 *
 * The emulated NCCL (ZT_COMM_EMU, --device emu --comm_backend nccl): the emulated
 * device's stand-in for NCCL, so that the host logic of a captured step on several
 * ranks runs without GPUs.  Each collective is counted and queued as NCCL's is (no
 * host wait, no staging), through the device's queue_host (backend.h): its MPI call
 * runs on the emulated device's memory when the device reaches it, at once or, inside
 * a capture, at each launch of the graph.  Its numbers are the host path's (the same
 * MPI calls and sum over the slices); what only NCCL on GPUs shows is in docs/gpu.md.
 *
 * A captured step (docs/gpu.md, "The captured step") may hold the collectives of the
 * device paths (NCCL, the emulated NCCL) and none of the staged path's, whose copies
 * wait for the device; every collective it starts must be waited for inside it (a
 * CUDA capture must join the collectives' stream back), which zt_comm_in_flight
 * lets the caller check.
 *
 * The engine talks only to this interface. */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "../core/mem.h"
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
    int machine_rank;      /* this rank's place among them (0-based): picks its device */
} zt_topology;

/* Where the data collectives' buffers live (see the top of this file). */
typedef enum zt_comm_path {
    ZT_COMM_HOST,    /* host memory: MPI on the buffers themselves */
    ZT_COMM_STAGED,  /* device memory, through host staging buffers and MPI */
    ZT_COMM_NCCL,    /* device memory, NCCL on its own stream (make cuda) */
    ZT_COMM_EMU,     /* the emulated device's memory, collectives queued on it (see above) */
} zt_comm_path;

/* "host MPI", "staged MPI", "NCCL", "emulated NCCL" */
const char *zt_comm_path_name(zt_comm_path p);

/* What the comm layer needs from the device that holds the buffers (the
 * backend's entries of the same names, kernels/backend.h). */
typedef struct zt_comm_device {
    void (*to_host)(void *dst_host, const void *src, size_t bytes);
    void (*to_device)(void *dst, const void *src_host, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);   /* device to device */
    void *(*host_alloc)(zt_mem_cat cat, size_t bytes);
    void (*host_free)(zt_mem_cat cat, void *p, size_t bytes);
    void *stream;                    /* the compute stream (a cudaStream_t), NCCL only */
    /* the emulated NCCL only (backend.h, queue_host and host_address) */
    void (*queue_host)(void (*run)(const void *args), const void *args, size_t bytes);
    void *(*host_address)(const void *buf);
} zt_comm_device;

/* The staged path's host buffers: one per collective that may be in flight or
 * running at once (a prefetch, a reduction, a blocking call between them). */
#define ZT_COMM_LANES 4

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
    /* devices (zt_comm_set_device): the path, the device's entries, the staged
     * path's host buffers (ZT_MEM_COMM, grown to the largest collective) and the
     * NCCL state (comm_nccl.c) */
    zt_comm_path path;
    zt_comm_device dev;
    void *lane[ZT_COMM_LANES];
    size_t lane_bytes[ZT_COMM_LANES];
    int lane_busy[ZT_COMM_LANES];
    void *nccl;
    int in_flight;                   /* device paths: collectives started, not yet waited for */
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

/* Put the data collectives on a device's buffers (after zt_comm_create or
 * create_local, before the first collective; ZT_COMM_HOST undoes nothing and
 * needs no dev).  NCCL is collective over the world (its unique ids travel over
 * MPI) and fails with ZT_EINPUT in a build without CUDA; staged needs only dev. */
int zt_comm_set_device(zt_comm *c, zt_comm_path path, const zt_comm_device *dev, zt_err *err);
/* Whether a captured step may hold this rank's collectives: one process, or a device
 * path that queues them on the device (NCCL, the emulated NCCL); not the host's or
 * the staged path's, which run them on the host. */
int zt_comm_capturable(const zt_comm *c);
/* Device paths: collectives started and not yet waited for (0 elsewhere). */
int zt_comm_in_flight(const zt_comm *c);

/* The traffic counters (bytes, calls, link bytes).  A device path counts a collective
 * when it is queued, so a graph's replay, which queues nothing on the host, adds what
 * its capture counted (train/step_graph.c). */
typedef struct zt_comm_traffic {
    uint64_t bytes[ZT_COLL_NKINDS], calls[ZT_COLL_NKINDS], link_bytes[ZT_NLINKS];
} zt_comm_traffic;
zt_comm_traffic zt_comm_traffic_now(const zt_comm *c);
/* *out = now - before, counter by counter */
void zt_comm_traffic_since(const zt_comm *c, const zt_comm_traffic *before, zt_comm_traffic *out);
void zt_comm_traffic_add(zt_comm *c, const zt_comm_traffic *d);
/* After a launch of a captured graph that holds collectives: on NCCL, one flight-recorder
 * entry ("graph") and a marker after the launch handed to the watchdog, which times the
 * job out if the device never passes it (the captured collectives are not seen one by
 * one); the emulated NCCL enters and watches each collective as it runs; nothing
 * elsewhere. */
void zt_comm_graph_launched(zt_comm *c);

/* Host bytes the staged path holds now (its lanes), for the memory report. */
size_t zt_comm_staging_bytes(const zt_comm *c);

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
    int lane;                   /* staged: 1 + the host buffer it runs in (0: none) */
    int captured;               /* NCCL: started inside a capture (its event is a ring's) */
    void *dev_result;           /* staged: where the result goes back to on the device */
    size_t dev_bytes;           /*   and how many bytes */
    size_t host_offset;         /*   from this offset of the lane */
    zt_coll_kind kind;
    uint64_t request[2];        /* the MPI_Request, opaque here */
    void *shard;                /* reduce-scatter: where the sum goes (n/G) */
    const void *slices;         /* reduce-scatter: the members' slices (n) */
    const void *send;           /* the buffer the collective reads until the op is done
                                 * (staged: the host copy, so the device's is free) */
    size_t per;                 /* n / G */
    uint64_t seq;               /* its number in the flight recorder */
    zt_dtype dt;
    int prof;                   /* the profiler's event (core/prof.h), -1: none */
    size_t prof_bytes;          /*   and the bytes it moves */
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
/* n doubles (at most ZT_COMM_SCALARS) summed over a scope in place, where the data
 * collectives' buffers live: device memory on a device path (the asynchronous
 * step's sum of squares, engine/async_step.c), host memory on the host path.  Not
 * counted as traffic, as sum_double.  The host and staged paths run sum_double's
 * MPI call (so its bits), the staged one between a copy down and a copy up (two
 * host waits); NCCL sums on its stream, ordered after the compute stream and
 * before what the compute stream queues next, and the host does not wait. */
#define ZT_COMM_SCALARS 8
void zt_comm_sum_doubles(zt_comm *c, double *buf, int n, int scope);
/* World all-gather of `bytes` bytes per rank into all (world * bytes), not counted. */
void zt_comm_allgather_bytes(zt_comm *c, void *all, const void *mine, size_t bytes);
/* Max of an int over the world (agreeing on a status). */
int zt_comm_max_int(zt_comm *c, int x);
/* Every rank learns whether any rank failed: a rank that failed returns its own
 * rc (and keeps its message); a rank whose rc was ZT_OK returns the worst status
 * of any rank (a max over the world: ZT_OK < ZT_EFAIL < ZT_EINPUT < ZT_EINTERRUPT)
 * with an empty message, so each error is printed once, by the rank it happened
 * on.  Collective: every rank of the world calls it. */
int zt_comm_agree(zt_comm *c, int rc, zt_err *err);

enum { ZT_SCOPE_SHARD = 0, ZT_SCOPE_REPLICA = 1, ZT_SCOPE_WORLD = 2 };

const char *zt_coll_kind_name(zt_coll_kind k);

#endif
