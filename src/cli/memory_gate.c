/* memory_gate.c — see memory_gate.h. */
#include "memory_gate.h"

#include <stdio.h>
#include <string.h>

#include "../core/memlimit.h"
#include "../engine/engine.h"
#include "../kernels/backend_cuda.h"
#include "../model/layout.h"
#include "../model/llama.h"

/* bytes as GB, MB or KB (powers of 1000, as --max_memory 8GB and --max_shard_size read them) */
static const char *human(char *buf, size_t len, double b)
{
    if (b >= 1e9)
        snprintf(buf, len, "%.2f GB", b / 1e9);
    else if (b >= 1e6)
        snprintf(buf, len, "%.2f MB", b / 1e6);
    else
        snprintf(buf, len, "%.2f KB", b / 1e3);
    return buf;
}

static size_t meminfo_share(int ranks_here, char *why, size_t why_len);

/* The cgroup and ulimit -v bounds over a MemAvailable share of `limit` bytes
 * (0: none known): the least wins, and why names it. */
static size_t process_bounds(size_t limit, int ranks_here, char *why, size_t why_len)
{
    char text[8192] = "", which[4400] = "";
    FILE *f = fopen("/proc/self/cgroup", "r");
    size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[got] = 0;
    if (f)
        fclose(f);
    double cg = zt_cgroup_memory_room("/sys/fs/cgroup", text, which, sizeof which), as = zt_address_space_room();
    char h[32];
    if (cg >= 0 && (limit == 0 || cg / ranks_here < (double)limit)) {
        limit = (size_t)(cg / ranks_here);
        snprintf(why, why_len, "the cgroup's memory limit %s leaves %s, shared by %d rank%s on this machine; "
                 "--max_memory overrides", which, human(h, sizeof h, cg), ranks_here, ranks_here == 1 ? "" : "s");
    }
    if (as >= 0 && (limit == 0 || as < (double)limit)) {
        limit = (size_t)as;
        snprintf(why, why_len, "ulimit -v (RLIMIT_AS) leaves this process %s of address space; --max_memory "
                 "overrides", human(h, sizeof h, as));
    }
    return limit;
}

size_t zt_memory_limit(size_t max_memory, int ranks_here, char *why, size_t why_len)
{
    if (max_memory > 0) {
        snprintf(why, why_len, "--max_memory");
        return max_memory;
    }
    if (ranks_here < 1)
        ranks_here = 1;
    size_t avail = meminfo_share(ranks_here, why, why_len);
    return process_bounds(avail, ranks_here, why, why_len);
}

/* MemAvailable / ranks_here, 0 when unknown. */
static size_t meminfo_share(int ranks_here, char *why, size_t why_len)
{
    unsigned long long kb = zt_proc_kb("/proc/meminfo", "MemAvailable: %llu kB");
    if (kb == 0) {
        snprintf(why, why_len, "no limit known");
        return 0;
    }
    double total = (double)kb * 1024.0;
    char h[32];
    snprintf(why, why_len, "MemAvailable %s shared by %d rank%s on this machine; --max_memory overrides",
             human(h, sizeof h, total), ranks_here, ranks_here == 1 ? "" : "s");
    return (size_t)(total / ranks_here);
}

size_t zt_memory_limit_on(const char *device, size_t max_memory, int ranks_here, int local_rank, char *why,
                          size_t why_len)
{
    if (max_memory > 0 || !device || strcmp(device, "cuda") != 0)
        return zt_memory_limit(max_memory, ranks_here, why, why_len);
    int count = 0;
    zt_cuda_device info;
    zt_err err = {0};
    if (zt_cuda_device_count(&count, &err) || count < 1 ||
        zt_cuda_device_info(local_rank % count, &info, &err)) {
        snprintf(why, why_len, "no limit known");
        return 0;
    }
    /* the local ranks whose device is this one: r = dev, dev + count, ... */
    int dev = local_rank % count, sharing = 0;
    for (int r = dev; r < (ranks_here > 1 ? ranks_here : 1); r += count)
        sharing++;
    sharing = sharing ? sharing : 1;
    char h[32];
    snprintf(why, why_len, "cuda:%d (%s) has %s free, shared by %d rank%s; --max_memory overrides", dev, info.name,
             human(h, sizeof h, (double)info.free_bytes), sharing, sharing == 1 ? "" : "s");
    return info.free_bytes / (size_t)sharing;
}

/* Parameters of cfg, in doubles (no overflow whatever the config says). */
static double param_count(const zt_llama_config *c)
{
    double C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, L = c->num_hidden_layers;
    double q = (double)c->num_attention_heads * c->head_dim, kv = (double)c->num_key_value_heads * c->head_dim;
    double layer = C * q + 2.0 * C * kv + q * C + 3.0 * C * F + 2.0 * C;
    return L * layer + V * C * (c->tie_word_embeddings ? 1.0 : 2.0) + C;
}

/* Offload could move state off this plan's device: it has none yet, runs on a
 * device (not the CPU, where nothing would move) and shards (stage 1-3). */
static int offload_would_apply(const zt_plan *p)
{
    return !p->overlap.offload_optimizer && strcmp(p->device, "cpu") != 0 && p->stage >= 1;
}

static int refuse(zt_err *err, double need, const char *what, double limit, const char *why)
{
    char n[32], l[32];
    return zt_fail(err, ZT_EINPUT, "the run needs %s %s per rank (%s), more than the %s limit (%s); "
                   "refused before allocating (ztrain estimate-memory shows the breakdown; shard over more "
                   "ranks, use a smaller batch or model, or set --max_memory)",
                   what, human(n, sizeof n, need), !strcmp(what, "at least") ? "lower bound" : "estimate",
                   human(l, sizeof l, limit), why);
}

size_t zt_plan_activation_bytes(const zt_llama_config *cfg, const zt_plan *p, int B, int T, int checkpointing,
                                int train)
{
    /* fast mode's training pass holds no (N, V) logits; evaluation's forward does */
    zt_kernel_mode mode = train && p->kernels == ZT_PLAN_KERNELS_FAST ? ZT_KERNELS_FAST : ZT_KERNELS_EXACT;
    return zt_model_activation_bytes_in(cfg, B, T, checkpointing, p->prec.compute, mode,
                                        train && p->activations == ZT_PLAN_ACT_BF16);
}

int zt_memory_gate(const zt_llama_config *cfg, const zt_plan *p, int B, int T, int checkpointing, int train,
                   const zt_lora *lora, size_t limit, const char *why, zt_err *err)
{
    if (limit == 0)
        return ZT_OK;
    double G = train ? p->group_size : 1;
    double ms = zt_dtype_size(train ? p->prec.master : p->prec.compute);
    double L = cfg->num_hidden_layers;
    /* the layout's own tables: one zt_param per tensor, a unit and its state per layer */
    double tables = (L * ZT_P_NKINDS + ZT_P_NKINDS) * (sizeof(zt_param) + sizeof(int)) +
                    (L + 1.0) * (sizeof(zt_unit) + zt_engine_unit_table_bytes() + sizeof(int));
    /* a lower bound in doubles: one copy of this rank's share of the weights, the
     * fp32 logits of B x T tokens (none in fast mode's training), the tables */
    double logits = train && p->kernels == ZT_PLAN_KERNELS_FAST ? 0.0 : (double)B * T * cfg->vocab_size * 4.0;
    double lower = param_count(cfg) * ms / G + logits + tables;
    if (lower > (double)limit)
        return refuse(err, lower, "at least", (double)limit, why);
    zt_layout lay;
    int rc = zt_layout_build(&lay, cfg, p->wrap, (size_t)p->min_num_params, train ? p->group_size : 1, err);
    if (rc || (train && lora && (rc = zt_lora_layout(&lay, lora, err))))
        return rc;
    double need = tables + (double)zt_plan_activation_bytes(cfg, p, B, T, checkpointing, train);
    if (train && lora)
        need += (double)zt_model_lora_activation_bytes(cfg, B, T, lora, p->prec.compute,
                                                       p->activations == ZT_PLAN_ACT_BF16);
    double with_offload = 0; /* what the device would hold with offload, when the plan has none */
    if (train) {
        zt_engine_bytes b = zt_engine_estimate(&lay, p->prec, p->stage, p->group_size, &p->overlap);
        /* the device's share: offloaded state is the host gate's (zt_memory_gate_host) */
        with_offload = need;
        need += (double)(b.master + b.grads + b.optim + b.gathered + b.comm - b.host);
        if (offload_would_apply(p)) {
            zt_overlap ov = p->overlap;
            ov.offload_optimizer = 1;
            ov.offload_params = p->stage == 3;
            zt_engine_bytes o = zt_engine_estimate(&lay, p->prec, p->stage, p->group_size, &ov);
            with_offload += (double)(o.master + o.grads + o.optim + o.gathered + o.comm - o.host);
        } else {
            with_offload = 0;
        }
    } else { /* evaluation holds the weights once, in the compute dtype */
        need += (double)lay.numel * zt_dtype_size(p->prec.compute);
    }
    zt_layout_free(&lay);
    if (need > (double)limit && with_offload > 0 && with_offload <= (double)limit) {
        char n[32], l[32], o[32];
        return zt_fail(err, ZT_EINPUT, "the run needs an estimated %s of device memory per rank, more than the %s "
                       "limit (%s); it fits only with offload: %s would leave %s on the device (set "
                       "offload_optimizer_device: cpu, or fsdp_offload_params: true; docs/zero.md, Offload)",
                       human(n, sizeof n, need), human(l, sizeof l, (double)limit), why,
                       p->stage == 3 ? "the optimizer state and parameter shard in host memory"
                                     : "the optimizer state in host memory",
                       human(o, sizeof o, with_offload));
    }
    if (need > (double)limit)
        return refuse(err, need, "an estimated", (double)limit, why);
    return ZT_OK;
}

int zt_memory_gate_init(const zt_llama_config *cfg, int dtype_bytes, size_t limit, const char *why, zt_err *err)
{
    double need = param_count(cfg) * (4.0 + (dtype_bytes != 4 ? dtype_bytes : 0));
    return limit && need > (double)limit ? refuse(err, need, "an estimated", (double)limit, why) : ZT_OK;
}

size_t zt_host_memory_limit(size_t max_host_memory, int ranks_here, char *why, size_t why_len)
{
    size_t limit = zt_memory_limit(max_host_memory, ranks_here, why, why_len);
    if (max_host_memory > 0)
        snprintf(why, why_len, "--max_host_memory");
    else if (limit > 0) /* the same MemAvailable share, overridden by the host's own flag */
        snprintf(why + strcspn(why, ";"), why_len - strcspn(why, ";"), "; --max_host_memory overrides");
    return limit;
}

int zt_memory_gate_host(const zt_llama_config *cfg, const zt_plan *p, size_t limit, const char *why, zt_err *err)
{
    if (limit == 0 || !p->overlap.offload_optimizer)
        return ZT_OK;
    zt_layout lay;
    int rc = zt_layout_build(&lay, cfg, p->wrap, (size_t)p->min_num_params, p->group_size, err);
    if (rc)
        return rc;
    zt_engine_bytes b = zt_engine_estimate(&lay, p->prec, p->stage, p->group_size, &p->overlap);
    zt_layout_free(&lay);
    if ((double)b.host <= (double)limit)
        return ZT_OK;
    char n[32], l[32];
    return zt_fail(err, ZT_EINPUT, "the offloaded state needs an estimated %s of host memory per rank, more than "
                   "the host limit %s (%s); refused before allocating (shard over more ranks, or set "
                   "--max_host_memory)", human(n, sizeof n, (double)b.host), human(l, sizeof l, (double)limit), why);
}
