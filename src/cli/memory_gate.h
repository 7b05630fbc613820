/* memory_gate.h — refuse a run that cannot fit, before anything is allocated.
 *
 * Absurd sizes in config.json (hidden 1e9, vocab 2e9, 2e7 layers) or a batch of
 * a million used to allocate first and fail later with "out of memory" (exit 1),
 * after minutes and gigabytes.  The gate estimates the bytes per rank the run
 * would allocate -- the same size tables estimate-memory prints (the engine's
 * model state, the activations for B x T, the layout's own tables) -- and refuses
 * with exit 2, stating the estimate and the limit, when it exceeds the limit:
 * --max_memory per rank when given, else the machine's MemAvailable shared by the
 * ranks on this machine.  The estimate is first bounded from below in doubles
 * (parameters x master bytes / shard group + the fp32 logits, which fast mode's
 * training does not hold, + the tables), so an
 * absurd config is refused before even its layout table is built.  With offload
 * the device's share and the host's are checked apart, each against its own
 * limit; a run that would fit only with offload is told so. */
#ifndef ZT_CLI_MEMORY_GATE_H
#define ZT_CLI_MEMORY_GATE_H

#include <stddef.h>

#include "../core/status.h"
#include "../model/config.h"
#include "../model/lora.h"
#include "../plan/plan.h"

/* Bytes this rank may use: max_memory when > 0, else the least of
 * MemAvailable / ranks on this machine, the room the cgroup's memory limit
 * leaves (cgroup v2 memory.max, v1 memory.limit_in_bytes, less what the cgroup
 * uses; every ancestor's too) / ranks, and the address space ulimit -v
 * (RLIMIT_AS) leaves this process; 0 when none is known (no limit).  *why
 * names the bound that won. */
size_t zt_memory_limit(size_t max_memory, int ranks_here, char *why, size_t why_len);

/* init-model holds every parameter in fp32 and, for another dtype, its
 * converted copy: ZT_OK when that fits in limit (0: no limit), else ZT_EINPUT
 * stating both, before anything is allocated. */
int zt_memory_gate_init(const zt_llama_config *cfg, int dtype_bytes, size_t limit, const char *why, zt_err *err);

/* The same for a run on `device` (the plan's --device): on "cuda" the engine's
 * state and the activations live in GPU memory, so the limit is the free memory
 * of the rank's GPU (local_rank mod the count, as the backend picks it) shared by
 * the ranks on it; 0 (no limit) when no GPU can be asked, where opening the device
 * fails with its own message.  Other devices keep their buffers in host memory:
 * zt_memory_limit. */
size_t zt_memory_limit_on(const char *device, size_t max_memory, int ranks_here, int local_rank, char *why,
                          size_t why_len);

/* The activation bytes of training (train = 1) or evaluating (0) with batch B of T
 * tokens under plan p: the model's size table in the plan's kernel mode (fast mode's
 * training holds no (N, V) logits). */
size_t zt_plan_activation_bytes(const zt_llama_config *cfg, const zt_plan *p, int B, int T, int checkpointing,
                                int train);

/* ZT_OK when training (train = 1) or evaluating (0) cfg under plan p with batch B
 * of T tokens fits in limit bytes per rank (0: no limit); else ZT_EINPUT naming
 * the estimate, its parts and the limit.  lora (training; NULL: none): LoRA's
 * adapters, the base frozen: the engine's state and the activations as LoRA
 * allocates them (docs/lora.md). */
int zt_memory_gate(const zt_llama_config *cfg, const zt_plan *p, int B, int T, int checkpointing, int train,
                   const zt_lora *lora, size_t limit, const char *why, zt_err *err);

/* With offload (the plan's overlap.offload_optimizer), zt_memory_gate checks the
 * device's share of the estimate, and this the share offloaded to host memory
 * (zt_engine_bytes.host) against limit, the host's (zt_memory_limit with
 * --max_host_memory); ZT_OK without offload or limit. */
/* The host's limit for offloaded state: max_host_memory when > 0, else
 * zt_memory_limit's share of MemAvailable; *why names --max_host_memory. */
size_t zt_host_memory_limit(size_t max_host_memory, int ranks_here, char *why, size_t why_len);
int zt_memory_gate_host(const zt_llama_config *cfg, const zt_plan *p, size_t limit, const char *why, zt_err *err);

#endif
