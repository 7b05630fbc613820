/* comm.c — collectives over Open MPI (see comm.h). */
#include "comm.h"

#include <assert.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/prof.h"
#include "comm_impl.h"
#include "watchdog.h"
#ifdef ZT_CUDA
#include "comm_nccl.h"
#endif

static MPI_Op bf16_sum_op = MPI_OP_NULL, f16_sum_op = MPI_OP_NULL;

/* MPI has no bf16 or fp16 type: they travel as 16-bit integers and a user op
 * adds them in fp32, rounding each partial sum back to the 16-bit type. */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *restrict a = in; /* MPI never passes overlapping buffers */
    uint16_t *restrict b = inout;
    #pragma omp simd
    for (int i = 0; i < *len; i++)
        b[i] = zt_f32_to_bf16(zt_bf16_to_f32(a[i]) + zt_bf16_to_f32(b[i]));
}

static void f16_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *restrict a = in;
    uint16_t *restrict b = inout;
    #pragma omp simd
    for (int i = 0; i < *len; i++)
        b[i] = zt_f32_to_f16(zt_f16_to_f32(a[i]) + zt_f16_to_f32(b[i]));
}

int zt_comm_init_mpi(int *argc, char ***argv, int *rank, int *world)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS)
        return ZT_EFAIL;
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, world);
    if (bf16_sum_op == MPI_OP_NULL) {
        MPI_Op_create(bf16_sum, 1, &bf16_sum_op);
        MPI_Op_create(f16_sum, 1, &f16_sum_op);
    }
    return ZT_OK;
}

void zt_comm_finalize_mpi(void)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return;
    if (bf16_sum_op != MPI_OP_NULL) {
        MPI_Op_free(&bf16_sum_op);
        MPI_Op_free(&f16_sum_op);
    }
    /* MPI_Finalize synchronises with the other ranks: a lost one would hang it */
    uint64_t seq = zt_watch_enter("finalize", ZT_SCOPE_WORLD, 0, 0, "shutdown", -1);
    zt_watch_block(seq);
    MPI_Finalize();
    zt_watch_unblock(seq);
}

void zt_comm_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

void zt_comm_set_timeout(double seconds) { zt_watch_set_timeout(seconds); }

/* Count a collective of `bytes` logical bytes over a scope of `size` ranks. */
static void count(zt_comm *c, zt_coll_kind k, int scope, int size, uint64_t bytes)
{
    uint64_t intra = bytes * (uint64_t)c->scope_local[scope] / (uint64_t)size;
    c->bytes[k] += bytes;
    c->calls[k]++;
    c->link_bytes[ZT_LINK_INTRA] += intra;
    c->link_bytes[ZT_LINK_INTER] += bytes - intra;
}

static MPI_Datatype mpi_type(zt_dtype dt) { return dt == ZT_F32 ? MPI_FLOAT : MPI_UINT16_T; }

static MPI_Op mpi_sum(zt_dtype dt)
{
    return dt == ZT_F32 ? MPI_SUM : dt == ZT_BF16 ? bf16_sum_op : f16_sum_op;
}

static MPI_Comm scope_comm(zt_comm *c, int scope)
{
    return *as_comm(scope == ZT_SCOPE_SHARD     ? c->shard_comm
                    : scope == ZT_SCOPE_REPLICA ? c->replica_comm
                                                : c->world_comm);
}

/* MPI counts are int: large buffers go in chunks of at most 2^30 elements. */
#define CHUNK ((size_t)1 << 30)

static void host_allgather(zt_comm *c, void *full, const void *shard, size_t n, zt_dtype dt)
{
    size_t es = zt_dtype_size(dt), per = n / (size_t)c->shard_size;
    if (c->shard_size == 1) { /* a group of one: a copy, no traffic */
        if (full != shard)
            memcpy(full, shard, n * es);
        return;
    }
    count(c, ZT_COLL_ALLGATHER, ZT_SCOPE_SHARD, c->shard_size, n * es);
    MPI_Comm comm = scope_comm(c, ZT_SCOPE_SHARD);
    uint64_t seq = enter(c, "allgather", ZT_SCOPE_SHARD, n * es);
    zt_watch_block(seq);
    double t0 = MPI_Wtime();
    if (per <= CHUNK) {
        MPI_Allgather(shard, (int)per, mpi_type(dt), full, (int)per, mpi_type(dt), comm);
        c->wait_s += MPI_Wtime() - t0;
        zt_watch_unblock(seq);
        return;
    }
    /* Huge shards: gather each member's shard in turn with broadcasts. */
    for (int r = 0; r < c->shard_size; r++) {
        char *dst = (char *)full + (size_t)r * per * es;
        if (r == c->shard_rank)
            memcpy(dst, shard, per * es);
        for (size_t off = 0; off < per; off += CHUNK) {
            size_t m = per - off < CHUNK ? per - off : CHUNK;
            MPI_Bcast(dst + off * es, (int)m, mpi_type(dt), r, comm);
        }
    }
    c->wait_s += MPI_Wtime() - t0;
    zt_watch_unblock(seq);
}

/* A 16-bit value as fp32 (exact) and an fp32 value rounded to it: bf16, or fp16 when
 * f16.  Called with a literal f16, so that each use compiles to one format's code. */
static inline float load16(uint16_t h, int f16) { return f16 ? zt_f16_to_f32(h) : zt_bf16_to_f32(h); }
static inline uint16_t store16(float x, int f16) { return f16 ? zt_f32_to_f16(x) : zt_f32_to_bf16(x); }

/* sum_slices for the 16-bit formats, one block of n <= SUM_BLOCK elements: one vector pass
 * per member over the block kept in fp32 (in L1), rounded after each addition, so each
 * loop is a straight line of lanes.  GCC does not vectorize the per-element form (its
 * inner loop over the members around the rounding): 8x slower for bf16, 2 % of a 2-rank
 * bf16 step. */
enum { SUM_BLOCK = 1024 };
static inline __attribute__((always_inline)) void sum_block16(uint16_t *restrict out,
                                                              const uint16_t *restrict in,
                                                              size_t per, size_t n, int G,
                                                              const int f16)
{
    float acc[SUM_BLOCK];
    #pragma omp simd
    for (size_t i = 0; i < n; i++)
        acc[i] = load16(in[i], f16);
    for (int j = 1; j < G; j++) {
        const uint16_t *restrict x = in + (size_t)j * per;
        #pragma omp simd
        for (size_t i = 0; i < n; i++)
            acc[i] = load16(store16(acc[i] + load16(x[i], f16), f16), f16);
    }
    #pragma omp simd
    for (size_t i = 0; i < n; i++)
        out[i] = store16(acc[i], f16);
}

/* shard[i] = sum over members j, in order, of slices[j * per + i]; a 16-bit sum
 * is rounded after each addition, as the 16-bit MPI ops above round. */
static void sum_slices(void *shard, const void *slices, size_t per, int G, zt_dtype dt)
{
    if (dt == ZT_F32) {
        float *restrict out = shard;
        const float *restrict in = slices;
        #pragma omp parallel for simd schedule(static) if (per >= 65536)
        for (size_t i = 0; i < per; i++) {
            float s = in[i];
            for (int j = 1; j < G; j++)
                s += in[(size_t)j * per + i];
            out[i] = s;
        }
    } else {
        const size_t blocks = (per + SUM_BLOCK - 1) / SUM_BLOCK;
        uint16_t *out = shard;
        const uint16_t *in = slices;
        const int f16 = dt == ZT_F16;
        #pragma omp parallel for schedule(static) if (per >= 65536)
        for (size_t b = 0; b < blocks; b++) {
            size_t i0 = b * SUM_BLOCK, n = per - i0 < SUM_BLOCK ? per - i0 : SUM_BLOCK;
            /* a literal format per call, so that each block's code is that format's */
            if (f16)
                sum_block16(out + i0, in + i0, per, n, G, 1);
            else
                sum_block16(out + i0, in + i0, per, n, G, 0);
        }
    }
}

/* Slices of more than CHUNK (2^30) elements, which MPI's int counts cannot hold:
 * one MPI_Reduce per member and chunk, in MPI's order, blocking (a unit of more
 * than G * 2^30 parameters is not overlapped). */
static void reduce_scatter_huge(zt_comm *c, void *shard, const void *full, size_t per, zt_dtype dt)
{
    size_t es = zt_dtype_size(dt);
    MPI_Comm comm = scope_comm(c, ZT_SCOPE_SHARD);
    uint64_t seq = enter(c, "reduce_scatter", ZT_SCOPE_SHARD, per * (size_t)c->shard_size * es);
    zt_watch_block(seq);
    double t0 = MPI_Wtime();
    for (int r = 0; r < c->shard_size; r++) {
        const char *src = (const char *)full + (size_t)r * per * es;
        for (size_t off = 0; off < per; off += CHUNK) {
            size_t m = per - off < CHUNK ? per - off : CHUNK;
            MPI_Reduce(src + off * es, (char *)shard + off * es, (int)m, mpi_type(dt), mpi_sum(dt),
                       r, comm);
        }
    }
    c->wait_s += MPI_Wtime() - t0;
    zt_watch_unblock(seq);
}

_Static_assert(sizeof(MPI_Request) <= sizeof(((zt_comm_op *)0)->request), "MPI_Request storage");
static MPI_Request *op_request(zt_comm_op *op) { return (MPI_Request *)(void *)op->request; }

static void host_start_allgather(zt_comm *c, zt_comm_op *op, void *full, size_t n, zt_dtype dt)
{
    size_t es = zt_dtype_size(dt), per = n / (size_t)c->shard_size;
    memset(op, 0, sizeof *op);
    if (c->shard_size == 1)
        return;
    if (per > CHUNK) { /* the blocking path's broadcasts; the shard is read from its slot */
        host_allgather(c, full, (char *)full + (size_t)c->shard_rank * per * es, n, dt);
        return;
    }
    count(c, ZT_COLL_ALLGATHER, ZT_SCOPE_SHARD, c->shard_size, n * es);
    op->active = 1;
    op->kind = ZT_COLL_ALLGATHER;
    op->send = full;
    op->seq = enter(c, "allgather", ZT_SCOPE_SHARD, n * es);
    MPI_Iallgather(MPI_IN_PLACE, 0, mpi_type(dt), full, (int)per, mpi_type(dt),
                   scope_comm(c, ZT_SCOPE_SHARD), op_request(op));
}

static void host_start_reduce_scatter(zt_comm *c, zt_comm_op *op, void *shard, const void *full,
                                     void *slices, size_t n, zt_dtype dt)
{
    size_t es = zt_dtype_size(dt), per = n / (size_t)c->shard_size;
    memset(op, 0, sizeof *op);
    if (c->shard_size == 1) {
        if (shard != full)
            memcpy(shard, full, n * es);
        return;
    }
    count(c, ZT_COLL_REDUCE_SCATTER, ZT_SCOPE_SHARD, c->shard_size, n * es);
    if (per > CHUNK) {
        reduce_scatter_huge(c, shard, full, per, dt);
        return;
    }
    op->active = 1;
    op->kind = ZT_COLL_REDUCE_SCATTER;
    op->shard = shard;
    op->slices = slices;
    op->send = full;
    op->per = per;
    op->dt = dt;
    op->seq = enter(c, "reduce_scatter", ZT_SCOPE_SHARD, n * es);
    MPI_Ialltoall(full, (int)per, mpi_type(dt), slices, (int)per, mpi_type(dt),
                  scope_comm(c, ZT_SCOPE_SHARD), op_request(op));
}

static int host_test(zt_comm *c, zt_comm_op *op)
{
    int done = 1;
    if (op->active) {
        double t0 = MPI_Wtime();
        MPI_Test(op_request(op), &done, MPI_STATUS_IGNORE);
        c->progress_s += MPI_Wtime() - t0;
    }
    return done;
}

static void host_wait(zt_comm *c, zt_comm_op *op)
{
    if (!op->active)
        return;
    zt_watch_block(op->seq);
    double t0 = MPI_Wtime();
    MPI_Wait(op_request(op), MPI_STATUS_IGNORE);
    c->wait_s += MPI_Wtime() - t0;
    zt_watch_unblock(op->seq);
    if (op->kind == ZT_COLL_REDUCE_SCATTER)
        sum_slices(op->shard, op->slices, op->per, c->shard_size, op->dt);
    op->active = 0;
}

static void host_start_allreduce(zt_comm *c, zt_comm_op *op, void *buf, size_t n, zt_dtype dt, int scope)
{
    size_t es = zt_dtype_size(dt);
    memset(op, 0, sizeof *op);
    if (!c->world_comm)
        return;
    MPI_Comm comm = scope_comm(c, scope);
    int size = 1;
    MPI_Comm_size(comm, &size);
    if (size == 1)
        return;
    /* an all-reduce moves its buffer twice (reduce-scatter + all-gather): 2 Psi */
    count(c, ZT_COLL_ALLREDUCE, scope, size, 2 * n * es);
    if (n > CHUNK) { /* MPI's int counts: blocking, in chunks (such a unit is not overlapped) */
        uint64_t seq = enter(c, "allreduce", scope, n * es);
        zt_watch_block(seq);
        double t0 = MPI_Wtime();
        for (size_t off = 0; off < n; off += CHUNK) {
            size_t m = n - off < CHUNK ? n - off : CHUNK;
            MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * es, (int)m, mpi_type(dt), mpi_sum(dt), comm);
        }
        c->wait_s += MPI_Wtime() - t0;
        zt_watch_unblock(seq);
        return;
    }
    op->active = 1;
    op->kind = ZT_COLL_ALLREDUCE;
    op->send = buf;
    op->seq = enter(c, "allreduce", scope, n * es);
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), mpi_sum(dt), comm, op_request(op));
}

/* ---- devices: the staged path and the NCCL path ---------------------------
 *
 * The staged path copies a collective's input to a host lane (to_host, which
 * waits for the kernels that wrote it), runs the host path above on the lane and
 * copies the result back at the wait (to_device).  The host path counts the
 * bytes and keeps the flight recorder, so both are exactly as on the host, and
 * so are the numbers.  A started collective's device buffers are free as soon as
 * it is started (its send is the host copy); its result lands at the wait. */

const char *zt_comm_path_name(zt_comm_path p)
{
    return p == ZT_COMM_STAGED ? "staged MPI" : p == ZT_COMM_NCCL ? "NCCL" : p == ZT_COMM_EMU ? "emulated NCCL"
                                                                                           : "host MPI";
}

/* the paths whose collectives the device queues: the host neither copies nor waits */
static int device_path(const zt_comm *c) { return c->path == ZT_COMM_NCCL || c->path == ZT_COMM_EMU; }

int zt_comm_capturable(const zt_comm *c) { return c->world == 1 || device_path(c); }

int zt_comm_in_flight(const zt_comm *c) { return c->in_flight; }

zt_comm_traffic zt_comm_traffic_now(const zt_comm *c)
{
    zt_comm_traffic t;
    memcpy(t.bytes, c->bytes, sizeof t.bytes);
    memcpy(t.calls, c->calls, sizeof t.calls);
    memcpy(t.link_bytes, c->link_bytes, sizeof t.link_bytes);
    return t;
}

void zt_comm_traffic_since(const zt_comm *c, const zt_comm_traffic *before, zt_comm_traffic *out)
{
    for (int k = 0; k < ZT_COLL_NKINDS; k++) {
        out->bytes[k] = c->bytes[k] - before->bytes[k];
        out->calls[k] = c->calls[k] - before->calls[k];
    }
    for (int l = 0; l < ZT_NLINKS; l++)
        out->link_bytes[l] = c->link_bytes[l] - before->link_bytes[l];
}

void zt_comm_traffic_add(zt_comm *c, const zt_comm_traffic *d)
{
    for (int k = 0; k < ZT_COLL_NKINDS; k++) {
        c->bytes[k] += d->bytes[k];
        c->calls[k] += d->calls[k];
    }
    for (int l = 0; l < ZT_NLINKS; l++)
        c->link_bytes[l] += d->link_bytes[l];
}

size_t zt_comm_staging_bytes(const zt_comm *c)
{
    size_t b = 0;
    for (int i = 0; i < ZT_COMM_LANES; i++)
        b += c->lane_bytes[i];
    return b;
}

/* A free lane of at least `bytes`, grown when none is: 1 + its index.  The
 * engine holds at most three collectives at once (a prefetch, a reduction and a
 * blocking call), so a busy fourth is a broken invariant; out of host memory in
 * the middle of a collective leaves no way to go on either. */
static int lane_take(zt_comm *c, size_t bytes)
{
    int pick = -1;
    for (int i = 0; i < ZT_COMM_LANES && pick < 0; i++)
        if (!c->lane_busy[i] && c->lane_bytes[i] >= bytes)
            pick = i;
    for (int i = 0; i < ZT_COMM_LANES && pick < 0; i++) /* none is large enough: grow a free one */
        if (!c->lane_busy[i])
            pick = i;
    if (pick < 0) {
        fprintf(stderr, "ztrain: comm invariant broken: more than %d staged collectives at once\n", ZT_COMM_LANES);
        abort();
    }
    if (c->lane_bytes[pick] < bytes) {
        if (c->lane[pick])
            c->dev.host_free(ZT_MEM_COMM, c->lane[pick], c->lane_bytes[pick]);
        c->lane_bytes[pick] = 0;
        if (!(c->lane[pick] = c->dev.host_alloc(ZT_MEM_COMM, bytes))) {
            fprintf(stderr, "ztrain: error: rank %d: out of host memory for a %zu-byte staging buffer\n", c->rank,
                    bytes);
            if (c->world_comm)
                zt_comm_abort(1);
            abort();
        }
        c->lane_bytes[pick] = bytes;
    }
    c->lane_busy[pick] = 1;
    return pick + 1;
}

static char *lane_buf(zt_comm *c, int lane) { return c->lane[lane - 1]; }
static void lane_give(zt_comm *c, int lane) { c->lane_busy[lane - 1] = 0; }

/* The staged op's result goes back to the device and its lane is free again. */
static void staged_finish(zt_comm *c, zt_comm_op *op)
{
    if (!op->lane)
        return;
    c->dev.to_device(op->dev_result, lane_buf(c, op->lane) + op->host_offset, op->dev_bytes);
    lane_give(c, op->lane);
    op->lane = 0;
}

static int scope_size(zt_comm *c, int scope)
{
    int size = 1;
    if (c->world_comm)
        MPI_Comm_size(scope_comm(c, scope), &size);
    return size;
}

int zt_comm_set_device(zt_comm *c, zt_comm_path path, const zt_comm_device *dev, zt_err *err)
{
    if (path == ZT_COMM_HOST) {
        c->path = path;
        return ZT_OK;
    }
    c->dev = *dev;
    c->path = path;
    if (path == ZT_COMM_STAGED)
        return ZT_OK;
    if (path == ZT_COMM_EMU) {
        if (dev->queue_host && dev->host_address)
            return ZT_OK;
        c->path = ZT_COMM_HOST;
        return zt_fail(err, ZT_EINPUT, "--comm_backend nccl: only --device cuda runs NCCL, and --device emu its "
                       "stand-in; this device queues no collectives");
    }
#ifdef ZT_CUDA
    return zt_nccl_init(c, err);
#else
    c->path = ZT_COMM_HOST;
    return zt_fail(err, ZT_EINPUT, "--comm_backend nccl: this ztrain was built without CUDA (make cuda builds "
                   "one with NCCL)");
#endif
}

/* ---- the emulated NCCL (comm.h) -----------------------------------------------
 * A collective queued on the emulated device: what its run needs, copied at the queue
 * (a capture keeps this copy, as a CUDA graph keeps a kernel's arguments).  The run is
 * the device's side: the host path's MPI call (and sum over the slices) on the
 * buffers' host addresses, entered in the flight recorder and watched as a blocking
 * call, since the host runs it; at a graph's replay it runs again, in the graph's
 * order, with no host call of the engine's around it. */
enum { EMU_SCALARS = ZT_COLL_NKINDS }; /* sum_doubles' kind */
typedef struct emu_coll_a {
    zt_comm *c;
    int kind, scope;
    void *recv;        /* all-gather: full; reduce-scatter: the shard; all-reduce, scalars: buf */
    const void *send;  /* all-gather: the shard (at its slot: in place); reduce-scatter: full */
    void *slices;      /* reduce-scatter: the members' slices (n) */
    size_t per;        /* elements per member (all-gather, reduce-scatter) or of the buffer */
    zt_dtype dt;
    size_t bytes;      /* the flight recorder's */
} emu_coll_a;

static void emu_coll_run(const void *p)
{
    static const char *names[] = {"allgather", "reduce_scatter", "allreduce", "sum_doubles"};
    const emu_coll_a *a = p;
    zt_comm *c = a->c;
    void *recv = c->dev.host_address(a->recv);
    const void *send = c->dev.host_address(a->send);
    const size_t es = a->kind == EMU_SCALARS ? sizeof(double) : zt_dtype_size(a->dt);
    MPI_Comm comm = scope_comm(c, a->scope);
    if (a->per > CHUNK) { /* MPI's int counts; no unit of a model we train comes near */
        fprintf(stderr, "ztrain: emulated NCCL: a collective of %zu elements per rank, over 2^30\n", a->per);
        zt_comm_abort(1);
    }
    uint64_t seq = enter(c, names[a->kind], a->scope, a->bytes);
    zt_watch_block(seq);
    double t0 = MPI_Wtime();
    if (a->kind == ZT_COLL_ALLGATHER) {
        int in_place = (const char *)send == (const char *)recv + (size_t)c->shard_rank * a->per * es;
        MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)a->per, mpi_type(a->dt), recv, (int)a->per,
                      mpi_type(a->dt), comm);
    } else if (a->kind == ZT_COLL_REDUCE_SCATTER) {
        void *slices = c->dev.host_address(a->slices);
        MPI_Alltoall(send, (int)a->per, mpi_type(a->dt), slices, (int)a->per, mpi_type(a->dt), comm);
        sum_slices(recv, slices, a->per, c->shard_size, a->dt);
    } else if (a->kind == ZT_COLL_ALLREDUCE) {
        MPI_Allreduce(MPI_IN_PLACE, recv, (int)a->per, mpi_type(a->dt), mpi_sum(a->dt), comm);
    } else {
        MPI_Allreduce(MPI_IN_PLACE, recv, (int)a->per, MPI_DOUBLE, MPI_SUM, comm); /* sum_double's call */
    }
    c->wait_s += MPI_Wtime() - t0;
    zt_watch_unblock(seq);
}

static void emu_queue(zt_comm *c, int kind, int scope, void *recv, const void *send, void *slices, size_t per,
                      zt_dtype dt, size_t bytes)
{
    emu_coll_a a = {c, kind, scope, recv, send, slices, per, dt, bytes};
    c->dev.queue_host(emu_coll_run, &a, sizeof a);
}

/* A device path's collective (NCCL, the emulated NCCL): the host path's counting, then
 * the collective queued on the device.  NCCL enters it in the flight recorder here (the
 * watchdog follows its event); the emulated one does so when it runs. */
static void device_start(zt_comm *c, zt_comm_op *op, zt_coll_kind k, int scope, int size, void *recv,
                         const void *send, void *slices, size_t count_n, size_t bytes, zt_dtype dt)
{
    memset(op, 0, sizeof *op);
    op->prof = -1;
    count(c, k, scope, size, k == ZT_COLL_ALLREDUCE ? 2 * bytes : bytes);
    op->kind = k;
    op->send = send;
    c->in_flight++;
    if (c->path == ZT_COMM_EMU) {
        emu_queue(c, k, scope, recv, send, slices, count_n, dt, bytes);
        op->active = 1;
        return;
    }
#ifdef ZT_CUDA
    op->seq = enter(c, zt_coll_kind_name(k), scope, bytes);
    zt_nccl_start(c, op, k, scope, recv, send, count_n, dt);
#endif
}

static void allgather_blocking(zt_comm *c, void *full, const void *shard, size_t n, zt_dtype dt)
{
    size_t es = zt_dtype_size(dt), per = n / (size_t)c->shard_size;
    if (c->path == ZT_COMM_HOST) {
        host_allgather(c, full, shard, n, dt);
        return;
    }
    if (c->shard_size == 1) {
        if (full != shard)
            c->dev.copy(full, shard, n * es);
        return;
    }
    if (device_path(c)) {
        zt_comm_op op;
        device_start(c, &op, ZT_COLL_ALLGATHER, ZT_SCOPE_SHARD, c->shard_size, full, shard, NULL, per, n * es, dt);
        zt_comm_wait(c, &op);
        return;
    }
    int lane = lane_take(c, (n + per) * es);
    char *h = lane_buf(c, lane);
    c->dev.to_host(h + n * es, shard, per * es);
    host_allgather(c, h, h + n * es, n, dt);
    c->dev.to_device(full, h, n * es);
    lane_give(c, lane);
}

static void start_allgather(zt_comm *c, zt_comm_op *op, void *full, size_t n, zt_dtype dt)
{
    size_t es = zt_dtype_size(dt), per = n / (size_t)c->shard_size, mine = (size_t)c->shard_rank * per * es;
    if (c->path == ZT_COMM_HOST || c->shard_size == 1) {
        host_start_allgather(c, op, full, n, dt); /* a group of one: nothing to move */
        return;
    }
    if (device_path(c)) {
        device_start(c, op, ZT_COLL_ALLGATHER, ZT_SCOPE_SHARD, c->shard_size, full, (char *)full + mine, NULL, per,
                     n * es, dt);
        return;
    }
    int lane = lane_take(c, n * es);
    char *h = lane_buf(c, lane);
    c->dev.to_host(h + mine, (const char *)full + mine, per * es);
    host_start_allgather(c, op, h, n, dt);
    op->lane = lane;
    op->dev_result = full;
    op->dev_bytes = n * es;
    op->host_offset = 0;
}

static void start_reduce_scatter(zt_comm *c, zt_comm_op *op, void *shard, const void *full, void *slices, size_t n,
                                 zt_dtype dt)
{
    size_t es = zt_dtype_size(dt), per = n / (size_t)c->shard_size;
    if (c->path == ZT_COMM_HOST) {
        host_start_reduce_scatter(c, op, shard, full, slices, n, dt);
        return;
    }
    if (c->shard_size == 1) {
        memset(op, 0, sizeof *op);
        if (shard != full)
            c->dev.copy(shard, full, n * es);
        return;
    }
    if (device_path(c)) { /* NCCL sums on the device without the slices; the emulated one in them */
        device_start(c, op, ZT_COLL_REDUCE_SCATTER, ZT_SCOPE_SHARD, c->shard_size, shard, full, slices, per, n * es,
                     dt);
        return;
    }
    /* the lane: full (n), the slices (n), the shard (n / G) */
    int lane = lane_take(c, (2 * n + per) * es);
    char *h = lane_buf(c, lane);
    c->dev.to_host(h, full, n * es);
    host_start_reduce_scatter(c, op, h + 2 * n * es, h, h + n * es, n, dt);
    op->lane = lane;
    op->dev_result = shard;
    op->dev_bytes = per * es;
    op->host_offset = 2 * n * es;
}

static void start_allreduce(zt_comm *c, zt_comm_op *op, void *buf, size_t n, zt_dtype dt, int scope)
{
    size_t es = zt_dtype_size(dt);
    int size = scope_size(c, scope);
    if (c->path == ZT_COMM_HOST || size == 1) {
        host_start_allreduce(c, op, buf, n, dt, scope); /* a scope of one: nothing to do */
        return;
    }
    if (device_path(c)) {
        device_start(c, op, ZT_COLL_ALLREDUCE, scope, size, buf, buf, NULL, n, n * es, dt);
        return;
    }
    int lane = lane_take(c, n * es);
    char *h = lane_buf(c, lane);
    c->dev.to_host(h, buf, n * es);
    host_start_allreduce(c, op, h, n, dt, scope);
    op->lane = lane;
    op->dev_result = buf;
    op->dev_bytes = n * es;
    op->host_offset = 0;
}

/* ---- the profiler's events (core/prof.h) ----------------------------------------------
 * A collective the host runs (MPI, the staged path) is one event on the host's
 * collectives track, from its start to the return of its wait; on the NCCL path
 * comm_nccl.c times it on NCCL's stream instead. */
static int prof_begin(const zt_comm *c, const char *name)
{
    return device_path(c) ? -1 : zt_prof_begin(name, "collective", ZT_PROF_HOST_COMM);
}

void zt_comm_allgather(zt_comm *c, void *full, const void *shard, size_t n, zt_dtype dt)
{
    int h = prof_begin(c, "allgather");
    allgather_blocking(c, full, shard, n, dt);
    zt_prof_end(h, 0.0, (double)(n * zt_dtype_size(dt)));
}

void zt_comm_start_allgather(zt_comm *c, zt_comm_op *op, void *full, size_t n, zt_dtype dt)
{
    int h = prof_begin(c, "allgather");
    start_allgather(c, op, full, n, dt);
    op->prof = h;
    op->prof_bytes = n * zt_dtype_size(dt);
}

void zt_comm_start_reduce_scatter(zt_comm *c, zt_comm_op *op, void *shard, const void *full, void *slices,
                                  size_t n, zt_dtype dt)
{
    int h = prof_begin(c, "reduce_scatter");
    start_reduce_scatter(c, op, shard, full, slices, n, dt);
    op->prof = h;
    op->prof_bytes = n * zt_dtype_size(dt);
}

void zt_comm_start_allreduce(zt_comm *c, zt_comm_op *op, void *buf, size_t n, zt_dtype dt, int scope)
{
    int h = prof_begin(c, "allreduce");
    start_allreduce(c, op, buf, n, dt, scope);
    op->prof = h;
    op->prof_bytes = n * zt_dtype_size(dt);
}

int zt_comm_test(zt_comm *c, zt_comm_op *op)
{
    if (c->path == ZT_COMM_EMU) /* queued in the device's order: done before anything queued after it */
        return 1;
#ifdef ZT_CUDA
    if (c->path == ZT_COMM_NCCL)
        return zt_nccl_test(c, op);
#endif
    return host_test(c, op);
}

void zt_comm_wait(zt_comm *c, zt_comm_op *op)
{
    if (device_path(c)) { /* the device orders what follows after it; the host does not wait */
        c->in_flight -= op->active;
#ifdef ZT_CUDA
        if (c->path == ZT_COMM_NCCL)
            zt_nccl_wait(c, op);
#endif
        op->active = 0;
        return;
    }
    host_wait(c, op);
    staged_finish(c, op);
    zt_prof_end(op->prof, 0.0, (double)op->prof_bytes);
    op->prof = -1;
}

void zt_comm_allreduce(zt_comm *c, void *buf, size_t n, zt_dtype dt, int scope)
{
    zt_comm_op op;
    zt_comm_start_allreduce(c, &op, buf, n, dt, scope);
    zt_comm_wait(c, &op);
}

void zt_comm_reduce_scatter(zt_comm *c, void *shard, const void *full, void *slices, size_t n,
                            zt_dtype dt)
{
    zt_comm_op op;
    zt_comm_start_reduce_scatter(c, &op, shard, full, slices, n, dt);
    zt_comm_wait(c, &op);
}

double zt_comm_sum_double(zt_comm *c, double x, int scope)
{
    double y = x;
    if (!c->world_comm)
        return x;
    uint64_t seq = enter(c, "sum_double", scope, sizeof x);
    int h = zt_prof_begin("sum_double", "collective", ZT_PROF_HOST_COMM);
    zt_watch_block(seq);
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, scope_comm(c, scope));
    zt_watch_unblock(seq);
    zt_prof_end(h, 0.0, sizeof x);
    return y;
}

void zt_comm_sum_doubles(zt_comm *c, double *buf, int n, int scope)
{
    assert(n > 0 && n <= ZT_COMM_SCALARS);
    if (!c->world_comm || scope_size(c, scope) == 1)
        return;
    if (c->path == ZT_COMM_EMU) { /* queued as NCCL's all-reduce is; entered when it runs */
        emu_queue(c, EMU_SCALARS, scope, buf, buf, NULL, (size_t)n, ZT_F32, (size_t)n * sizeof *buf);
        return;
    }
    uint64_t seq = enter(c, "sum_doubles", scope, (size_t)n * sizeof *buf);
#ifdef ZT_CUDA
    if (c->path == ZT_COMM_NCCL) { /* on NCCL's stream: the host never holds the numbers */
        zt_nccl_sum_doubles(c, buf, n, scope, seq);
        return;
    }
#endif
    double x[ZT_COMM_SCALARS], y[ZT_COMM_SCALARS];
    if (c->path == ZT_COMM_HOST)
        memcpy(x, buf, (size_t)n * sizeof *x);
    else
        c->dev.to_host(x, buf, (size_t)n * sizeof *x);
    int h = zt_prof_begin("sum_doubles", "collective", ZT_PROF_HOST_COMM);
    zt_watch_block(seq);
    MPI_Allreduce(x, y, n, MPI_DOUBLE, MPI_SUM, scope_comm(c, scope)); /* sum_double's call */
    zt_watch_unblock(seq);
    zt_prof_end(h, 0.0, (double)((size_t)n * sizeof *x));
    if (c->path == ZT_COMM_HOST)
        memcpy(buf, y, (size_t)n * sizeof *y);
    else
        c->dev.to_device(buf, y, (size_t)n * sizeof *y);
}

void zt_comm_allgather_bytes(zt_comm *c, void *all, const void *mine, size_t bytes)
{
    if (!c->world_comm) {
        memcpy(all, mine, bytes);
        return;
    }
    uint64_t seq = enter(c, "allgather_bytes", ZT_SCOPE_WORLD, bytes * (size_t)c->world);
    int h = zt_prof_begin("allgather_bytes", "collective", ZT_PROF_HOST_COMM);
    zt_watch_block(seq);
    MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, scope_comm(c, ZT_SCOPE_WORLD));
    zt_watch_unblock(seq);
    zt_prof_end(h, 0.0, (double)(bytes * (size_t)c->world));
}

void zt_comm_graph_launched(zt_comm *c)
{
#ifdef ZT_CUDA
    if (c->path == ZT_COMM_NCCL && c->world > 1)
        zt_nccl_launched(c, enter(c, "graph", ZT_SCOPE_WORLD, 0));
#else
    (void)c;
#endif
}

int zt_comm_agree(zt_comm *c, int rc, zt_err *err)
{
    int worst = zt_comm_max_int(c, rc);
    if (worst != ZT_OK && rc == ZT_OK)
        return zt_fail(err, worst, "%s", "");
    return rc;
}

int zt_comm_max_int(zt_comm *c, int x)
{
    int y = x;
    if (!c->world_comm)
        return x;
    uint64_t seq = enter(c, "max_int", ZT_SCOPE_WORLD, sizeof x);
    zt_watch_block(seq);
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MAX, scope_comm(c, ZT_SCOPE_WORLD));
    zt_watch_unblock(seq);
    return y;
}

const char *zt_coll_kind_name(zt_coll_kind k)
{
    static const char *names[] = {"allgather", "reduce_scatter", "allreduce"};
    return names[k];
}
