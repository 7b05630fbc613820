/* comm_nccl.h — the NCCL path of the comm layer (make cuda only; see comm.h).
 *
 * Internal to src/comm: comm.c counts each collective and enters it in the
 * flight recorder, then hands it here.  NCCL runs on a stream of its own; each
 * collective first waits (on the device) for an event recorded on the compute
 * stream, so it reads what the kernels before it wrote, and records its own
 * event, which zt_nccl_wait makes the compute stream wait for.  The host never
 * blocks: prefetched all-gathers and reduce-scatters run beside the kernels, as
 * FSDP's streams do. */
#ifndef ZT_COMM_NCCL_H
#define ZT_COMM_NCCL_H

#include "comm.h"

/* One NCCL communicator per scope of more than one rank (shard group, replica
 * group, world); each scope's unique id is made by its first member and
 * broadcast over the scope's MPI communicator.  Collective over the world. */
int zt_nccl_init(zt_comm *c, zt_err *err);
void zt_nccl_free(zt_comm *c);
/* Start collective k over scope on NCCL's stream: count elements per rank for an
 * all-gather / reduce-scatter (the shard), of the buffer for an all-reduce. */
void zt_nccl_start(zt_comm *c, zt_comm_op *op, zt_coll_kind k, int scope, void *recv, const void *send,
                   size_t count, zt_dtype dt);
/* zt_comm_sum_doubles on the device: n fp64 summed in place over scope on NCCL's
 * stream, the compute stream ordered after it (seq: its flight-recorder entry,
 * handed to the watchdog as zt_nccl_wait does). */
void zt_nccl_sum_doubles(zt_comm *c, double *buf, int n, int scope, uint64_t seq);
/* 1 when op's collective has finished on the device (or op is idle). */
int zt_nccl_test(zt_comm *c, zt_comm_op *op);
/* Order the compute stream after op (the host does not wait).  Inside a capture of the
 * compute stream (cudaStreamIsCapturing), start and wait fork NCCL's stream off the
 * capture and join it back with events made at init, and nothing goes to the watchdog. */
void zt_nccl_wait(zt_comm *c, zt_comm_op *op);
/* After a graph's launch on the compute stream: a marker there for the watchdog, as
 * flight-recorder entry seq (zt_comm_graph_launched). */
void zt_nccl_launched(zt_comm *c, uint64_t seq);

#endif
