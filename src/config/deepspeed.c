/* deepspeed.c — DeepSpeed JSON config into zt_ds_config, and "auto" resolved (see deepspeed.h).
 *
 * Reading: zt_json_parse checks that the text is strict JSON (valid UTF-8, RFC 8259
 * tokens) and builds a cJSON tree, which becomes a schema tree (core/schema.h); the
 * schema engine walks it against key tables, one per JSON object DeepSpeed defines (the
 * top level, fp16, bf16, zero_optimization and its two offload blocks, and the params of
 * each optimizer and scheduler type), which give each key its type, range and place in
 * zt_ds_config; numbers, betas and "typed" blocks are this file's own kinds.  The optimizer and scheduler blocks are
 * "typed": their params table is chosen by their "type".  Checks that involve two keys
 * (precision, ZeRO-3-only settings, offload, the scheduler's lr) run last.
 *
 * Resolving is separate and pure: config + run -> numbers, in the order Accelerate fills
 * "auto" and DeepSpeed then completes the batch settings (runtime/config.py,
 * _set_batch_related_parameters and _batch_assertion). */
#include "deepspeed.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../core/json.h"
#include "../core/json_doc.h"
#include "../core/schema.h"
#include "../core/text.h"

#define MAX_FILE_BYTES (1u << 20) /* a DeepSpeed config is a few kilobytes */
#define NOMAX 1e300               /* no upper bound */
#define MAX_COUNT 1e15            /* sizes and step counts: exact in a double, fit a long */

/* DeepSpeed's defaults for what resolve fills in when the file is silent. */
#define DS_REDUCE_BUCKET 500000000L
#define DS_ALLGATHER_BUCKET 500000000L
#define DS_PREFETCH_BUCKET 50000000L
#define DS_PERSISTENCE 100000L
#define DS_MAX_LIVE 1000000000L
#define DS_ADAM_LR 1e-3
#define DS_ADAM_BETA1 0.9
#define DS_ADAM_BETA2 0.999
#define DS_ADAM_EPS 1e-8
#define DS_ADAM_WEIGHT_DECAY 0.0
#define DS_WARMUP_STEPS 1000L
#define DS_WARMUP_MAX_LR 1e-3

/* ---- key tables ------------------------------------------------------------------ */

/* The DeepSpeed JSON's own kinds; booleans, enumerations, strings and sections
 * are the schema engine's (core/schema.h). */
enum {
    K_VALUE = ZT_K_CUSTOM, /* a number in [min, max] (or "auto" when .autook) into a zt_ds_value */
    K_NUM,       /* a number in [min, max] into a double field (or checked and ignored) */
    K_INT,       /* a whole number in [min, max] into an int field */
    K_BETAS,     /* [beta1, beta2] or "auto", into beta1 and beta2 */
    K_TYPED,     /* {"type": T, "params": {...}}: T into a char field, params by T's table */
};
#define K_BOOL ZT_K_BOOL
#define K_ENUM ZT_K_ENUM
#define K_STR ZT_K_STR
#define K_SECTION ZT_K_SECTION

typedef zt_schema_key key;
typedef zt_schema_section section;

/* An optimizer or scheduler block: its params table is chosen by its type. */
typedef struct typed {
    const char *const *names;    /* the types, canonical spelling */
    const section *const *params; /* the params table of each type */
    int icase;
    const char *const *refused;
    const char *refusal;
} typed;

enum {
    SEC_TOP, SEC_FP16, SEC_BF16, SEC_BFLOAT16, SEC_ZERO, SEC_OFFLOAD_OPT, SEC_OFFLOAD_PARAM,
    SEC_ADAM, SEC_ADAMW, SEC_WARMUP_LR, SEC_WARMUP_DECAY, SEC_WARMUP_COSINE, SEC_ACTIVATION, NSEC
};
_Static_assert(NSEC <= ZT_SCHEMA_MAX_SECTIONS, "the reader has room for every section");

#define FIELD(m) offsetof(zt_ds_config, m), sizeof(((zt_ds_config *)0)->m)
#define IGNORED ZT_NO_FIELD, 0
#define NKEYS(t) ZT_SCHEMA_NKEYS(t)

#define BATCH(m) .kind = K_VALUE, FIELD(m), .min = 1, .max = INT_MAX, .integer = 1, .autook = 1
#define SIZE(m, a) .kind = K_VALUE, FIELD(m), .min = 0, .max = MAX_COUNT, .integer = 1, .autook = a
#define COUNT(lo) .kind = K_NUM, IGNORED, .min = lo, .max = MAX_COUNT, .integer = 1

static const char *const comm_types[] = {"fp32", "bf16", "fp16", NULL};
static const char *const offload_devices[] = {"none", "cpu", NULL};
static const char *const nvme[] = {"nvme", NULL};
static const char *const linear_only[] = {"linear", NULL};
static const char *const log_rate[] = {"log", NULL};

static const key fp16_keys[] = {
    {.name = "enabled", .kind = K_BOOL, FIELD(fp16_enabled), .autook = 1},
    {.name = "loss_scale", .kind = K_NUM, FIELD(fp16_loss_scale), .min = 0, .max = NOMAX},
    {.name = "initial_scale_power", .kind = K_NUM, FIELD(fp16_initial_scale_power), .min = 0,
     .max = 63, .integer = 1},
    {.name = "loss_scale_window", .kind = K_NUM, FIELD(fp16_loss_scale_window), .min = 1,
     .max = MAX_COUNT, .integer = 1},
    {.name = "hysteresis", .kind = K_NUM, FIELD(fp16_hysteresis), .min = 1, .max = INT_MAX,
     .integer = 1},
    {.name = "min_loss_scale", .kind = K_NUM, FIELD(fp16_min_loss_scale), .min = 0, .max = NOMAX},
    {.name = "consecutive_hysteresis", .kind = K_BOOL, IGNORED, .fixed = 1, .want = 0,
     .why = "ztrain's loss scaler restores hysteresis only when the scale grows, DeepSpeed's "
            "default"},
    {.name = "auto_cast", .kind = K_BOOL, IGNORED}, /* casts float inputs; ztrain's are token ids */
    {.name = "fp16_master_weights_and_grads", .kind = K_BOOL, IGNORED, .fixed = 1, .want = 0,
     .why = "ztrain keeps fp32 master weights and gradients with fp16 compute (contract §3)"},
};

static const key bf16_keys[] = {
    {.name = "enabled", .kind = K_BOOL, FIELD(bf16_enabled), .autook = 1},
};

static const key offload_optimizer_keys[] = {
    {.name = "device", .kind = K_ENUM, FIELD(offload_optimizer_device), .allowed = offload_devices,
     .refused = nvme, .refusal = "NVMe offload (ZeRO-Infinity) is not supported: offload to cpu instead"},
    {.name = "pin_memory", .kind = K_BOOL, IGNORED},
    {.name = "buffer_count", COUNT(0)},
    {.name = "fast_init", .kind = K_BOOL, IGNORED},
    {.name = "nvme_path", .kind = K_STR, IGNORED},
    {.name = "pipeline_read", .kind = K_BOOL, IGNORED},
    {.name = "pipeline_write", .kind = K_BOOL, IGNORED},
    {.name = "ratio", .kind = K_NUM, IGNORED, .min = 1, .max = 1,
     .why = "partial optimizer offload is not supported"},
};

static const key offload_param_keys[] = {
    {.name = "device", .kind = K_ENUM, FIELD(offload_param_device), .allowed = offload_devices,
     .refused = nvme, .refusal = "NVMe offload (ZeRO-Infinity) is not supported: offload to cpu instead"},
    {.name = "pin_memory", .kind = K_BOOL, IGNORED},
    {.name = "buffer_count", COUNT(0)},
    {.name = "buffer_size", COUNT(0)},
    {.name = "max_in_cpu", COUNT(0)},
    {.name = "nvme_path", .kind = K_STR, IGNORED},
};

static const section offload_optimizer_section = {
    SEC_OFFLOAD_OPT, "zero_optimization.offload_optimizer", offload_optimizer_keys,
    NKEYS(offload_optimizer_keys)};
static const section offload_param_section = {
    SEC_OFFLOAD_PARAM, "zero_optimization.offload_param", offload_param_keys,
    NKEYS(offload_param_keys)};

/* Keys named stage3_* only apply at stage 3 (checked in check_combinations). */
static const key zero_keys[] = {
    {.name = "stage", .kind = K_INT, FIELD(stage), .min = 0, .max = 3},
    {.name = "overlap_comm", .kind = K_BOOL, FIELD(overlap_comm)},
    {.name = "contiguous_gradients", .kind = K_BOOL, FIELD(contiguous_gradients)},
    {.name = "reduce_bucket_size", SIZE(reduce_bucket_size, 1)},
    {.name = "allgather_bucket_size", SIZE(allgather_bucket_size, 0)},
    {.name = "stage3_prefetch_bucket_size", SIZE(stage3_prefetch_bucket_size, 1)},
    {.name = "stage3_param_persistence_threshold", SIZE(stage3_param_persistence_threshold, 1)},
    {.name = "stage3_max_live_parameters", SIZE(stage3_max_live_parameters, 0)},
    {.name = "stage3_gather_16bit_weights_on_model_save", .kind = K_BOOL,
     FIELD(stage3_gather_16bit_weights_on_model_save), .autook = 1},
    /* DeepSpeed's older name for the same setting */
    {.name = "stage3_gather_fp16_weights_on_model_save", .kind = K_BOOL,
     FIELD(stage3_gather_16bit_weights_on_model_save), .autook = 1},
    {.name = "offload_optimizer", .kind = K_SECTION, IGNORED, .section = &offload_optimizer_section},
    {.name = "offload_param", .kind = K_SECTION, IGNORED, .section = &offload_param_section},
    /* how DeepSpeed schedules and buckets its communication: not the arithmetic */
    {.name = "round_robin_gradients", .kind = K_BOOL, IGNORED},
    {.name = "sub_group_size", COUNT(0)},
    {.name = "reduce_scatter", .kind = K_BOOL, IGNORED},
    {.name = "allgather_partitions", .kind = K_BOOL, IGNORED},
    {.name = "elastic_checkpoint", .kind = K_BOOL, IGNORED},
    {.name = "stage3_max_reuse_distance", COUNT(0)},
    {.name = "load_from_fp32_weights", .kind = K_BOOL, IGNORED},
    {.name = "ignore_unused_parameters", .kind = K_BOOL, IGNORED},
};

/* Adam and AdamW take the same params.  DeepSpeed's Adam is AdamW unless adam_w_mode
 * is false (L2 regularisation, which ztrain does not implement); AdamW ignores it. */
#define ADAM_PARAMS                                                                           \
    {.name = "lr", .kind = K_VALUE, FIELD(lr), .min = 0, .max = NOMAX, .autook = 1},          \
    {.name = "betas", .kind = K_BETAS, IGNORED},                                              \
    {.name = "eps", .kind = K_VALUE, FIELD(eps), .min = 0, .max = NOMAX, .autook = 1},        \
    {.name = "weight_decay", .kind = K_VALUE, FIELD(weight_decay), .min = 0, .max = NOMAX,    \
     .autook = 1},                                                                            \
    {.name = "bias_correction", .kind = K_BOOL, IGNORED, .fixed = 1, .want = 1,               \
     .why = "ztrain's AdamW always corrects the moments' bias"},                              \
    {.name = "amsgrad", .kind = K_BOOL, IGNORED, .fixed = 1, .want = 0,                       \
     .why = "AMSGrad is not supported"}

static const key adam_keys[] = {
    ADAM_PARAMS,
    {.name = "adam_w_mode", .kind = K_BOOL, IGNORED, .fixed = 1, .want = 1,
     .why = "ztrain's optimizer is AdamW (decoupled weight decay); Adam with L2 "
            "regularisation is not supported"},
};
static const key adamw_keys[] = {
    ADAM_PARAMS,
    {.name = "adam_w_mode", .kind = K_BOOL, IGNORED},
};

#define WARMUP_TYPE                                                                           \
    {.name = "warmup_type", .kind = K_ENUM, IGNORED, .allowed = linear_only, .refused = log_rate, \
     .refusal = "ztrain warms up linearly, as Hugging Face's schedules do"},                  \
    {.name = "last_batch_iteration", .kind = K_NUM, IGNORED, .min = -1, .max = -1,            \
     .integer = 1, .why = "a schedule resumes from a checkpoint, not from the config"}
#define WARMUP_STEPS                                                                          \
    {.name = "warmup_num_steps", .kind = K_VALUE, FIELD(warmup_num_steps), .min = 0,          \
     .max = MAX_COUNT, .integer = 1, .autook = 1}
#define TOTAL_STEPS                                                                           \
    {.name = "total_num_steps", .kind = K_VALUE, FIELD(total_num_steps), .min = 1,            \
     .max = MAX_COUNT, .integer = 1, .autook = 1}
#define WARMUP_LRS                                                                            \
    {.name = "warmup_min_lr", .kind = K_VALUE, FIELD(warmup_min_lr), .min = 0, .max = 0,      \
     .autook = 1,                                                                             \
     .why = "ztrain's schedules warm up from 0; DeepSpeed's would start at warmup_min_lr"},   \
    {.name = "warmup_max_lr", .kind = K_VALUE, FIELD(warmup_max_lr), .min = 0, .max = NOMAX,  \
     .autook = 1}

static const key warmup_lr_keys[] = {WARMUP_LRS, WARMUP_STEPS, WARMUP_TYPE};
static const key warmup_decay_keys[] = {WARMUP_LRS, WARMUP_STEPS, TOTAL_STEPS, WARMUP_TYPE};
static const key warmup_cosine_keys[] = {
    TOTAL_STEPS,
    WARMUP_STEPS,
    {.name = "warmup_min_ratio", .kind = K_NUM, IGNORED, .min = 0, .max = 0,
     .why = "ztrain's cosine schedule warms up from 0"},
    {.name = "cos_min_ratio", .kind = K_NUM, IGNORED, .min = 0, .max = 0,
     .why = "ztrain's cosine schedule decays to 0"},
    WARMUP_TYPE,
};

static const section adam_section = {SEC_ADAM, "optimizer.params", adam_keys, NKEYS(adam_keys)};
static const section adamw_section = {SEC_ADAMW, "optimizer.params", adamw_keys, NKEYS(adamw_keys)};
static const section warmup_lr_section = {SEC_WARMUP_LR, "scheduler.params", warmup_lr_keys,
                                          NKEYS(warmup_lr_keys)};
static const section warmup_decay_section = {SEC_WARMUP_DECAY, "scheduler.params",
                                             warmup_decay_keys, NKEYS(warmup_decay_keys)};
static const section warmup_cosine_section = {SEC_WARMUP_COSINE, "scheduler.params",
                                              warmup_cosine_keys, NKEYS(warmup_cosine_keys)};

static const char *const optimizer_names[] = {"Adam", "AdamW", NULL};
static const section *const optimizer_params[] = {&adam_section, &adamw_section};
static const char *const other_optimizers[] = {"Lamb", "OneBitAdam", "OneBitLamb", "ZeroOneAdam",
                                               "Adagrad", "Lion", "MuAdam", "MuAdamW", "MuSGD",
                                               "SGD", NULL};
static const typed optimizers = {optimizer_names, optimizer_params, 1, other_optimizers,
                                 "ztrain's optimizer is AdamW"};

static const char *const scheduler_names[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", NULL};
static const section *const scheduler_params[] = {&warmup_lr_section, &warmup_decay_section,
                                                  &warmup_cosine_section};
static const char *const other_schedulers[] = {"LRRangeTest", "OneCycle", NULL};
static const typed schedulers = {scheduler_names, scheduler_params, 0, other_schedulers,
                                 "ztrain's schedules are constant_with_warmup (WarmupLR), linear "
                                 "(WarmupDecayLR) and cosine (WarmupCosineLR)"};

/* activation_checkpointing: given at all, it turns gradient checkpointing on (as
 * HF Trainer's --gradient_checkpointing with DeepSpeed); its keys tune DeepSpeed's
 * own checkpointing, and each is accepted where it changes nothing ztrain computes. */
static const key activation_keys[] = {
    /* splits each checkpoint over the model-parallel ranks: ztrain has no model
     * parallelism, so there is nothing to split */
    {.name = "partition_activations", .kind = K_BOOL, IGNORED},
    {.name = "cpu_checkpointing", .kind = K_BOOL, IGNORED, .fixed = 1, .want = 0,
     .why = "ztrain keeps the checkpointed layer inputs where the model computes; moving them to "
            "host memory is not implemented"},
    /* copies checkpoints into one buffer against fragmentation: ztrain allocates its
     * activation buffers once, at start, so there is none */
    {.name = "contiguous_memory_optimization", .kind = K_BOOL, IGNORED},
    /* the size of that buffer, in checkpoints */
    {.name = "number_checkpoints", .kind = K_NUM, IGNORED, .min = 1, .max = MAX_COUNT, .integer = 1},
    /* a device synchronisation at each checkpoint, for debugging: the same results */
    {.name = "synchronize_checkpoint_boundary", .kind = K_BOOL, IGNORED},
    {.name = "profile", .kind = K_BOOL, IGNORED, .fixed = 1, .want = 0,
     .why = "ztrain does not time checkpointed layers apart (each step's time is in the JSONL)"},
};

static const section fp16_section = {SEC_FP16, "fp16", fp16_keys, NKEYS(fp16_keys)};
static const section bf16_section = {SEC_BF16, "bf16", bf16_keys, NKEYS(bf16_keys)};
static const section bfloat16_section = {SEC_BFLOAT16, "bfloat16", bf16_keys, NKEYS(bf16_keys)};
static const section zero_section = {SEC_ZERO, "zero_optimization", zero_keys, NKEYS(zero_keys)};
static const section activation_section = {SEC_ACTIVATION, "activation_checkpointing", activation_keys,
                                           NKEYS(activation_keys)};

static const key top_keys[] = {
    {.name = "train_batch_size", BATCH(train_batch_size)},
    {.name = "train_micro_batch_size_per_gpu", BATCH(train_micro_batch_size_per_gpu)},
    {.name = "gradient_accumulation_steps", BATCH(gradient_accumulation_steps)},
    {.name = "gradient_clipping", .kind = K_VALUE, FIELD(gradient_clipping), .min = 0,
     .max = NOMAX, .autook = 1},
    {.name = "fp16", .kind = K_SECTION, IGNORED, .section = &fp16_section},
    {.name = "bf16", .kind = K_SECTION, IGNORED, .section = &bf16_section},
    {.name = "bfloat16", .kind = K_SECTION, IGNORED, .section = &bfloat16_section}, /* old name */
    {.name = "communication_data_type", .kind = K_ENUM, FIELD(communication_data_type),
     .allowed = comm_types, .icase = 1},
    {.name = "zero_optimization", .kind = K_SECTION, IGNORED, .section = &zero_section},
    {.name = "activation_checkpointing", .kind = K_SECTION, IGNORED, .section = &activation_section},
    {.name = "optimizer", .kind = K_TYPED, FIELD(optimizer_type), .custom = &optimizers},
    {.name = "scheduler", .kind = K_TYPED, FIELD(scheduler_type), .custom = &schedulers},
    /* logging and DeepSpeed's own safety switches: nothing ztrain computes */
    {.name = "steps_per_print", COUNT(1)},
    {.name = "wall_clock_breakdown", .kind = K_BOOL, IGNORED},
    {.name = "memory_breakdown", .kind = K_BOOL, IGNORED},
    {.name = "zero_allow_untested_optimizer", .kind = K_BOOL, IGNORED},
    {.name = "zero_force_ds_cpu_optimizer", .kind = K_BOOL, IGNORED},
    {.name = "prescale_gradients", .kind = K_BOOL, IGNORED, .fixed = 1, .want = 0,
     .why = "ztrain averages gradients in the reduction itself"},
    {.name = "gradient_predivide_factor", .kind = K_NUM, IGNORED, .min = 1, .max = 1,
     .why = "ztrain does not pre-divide gradients"},
};

static const section top_section = {SEC_TOP, "", top_keys, NKEYS(top_keys)};
static const section *const all_sections[] = {
    &top_section, &fp16_section, &bf16_section, &bfloat16_section, &zero_section,
    &offload_optimizer_section, &offload_param_section, &adam_section, &adamw_section,
    &warmup_lr_section, &warmup_decay_section, &warmup_cosine_section, &activation_section};
_Static_assert(sizeof all_sections / sizeof all_sections[0] == NSEC, "every section listed");
_Static_assert(NKEYS(top_keys) <= ZT_SCHEMA_MAX_KEYS && NKEYS(zero_keys) <= ZT_SCHEMA_MAX_KEYS &&
               NKEYS(fp16_keys) <= ZT_SCHEMA_MAX_KEYS && NKEYS(adam_keys) <= ZT_SCHEMA_MAX_KEYS &&
               NKEYS(warmup_decay_keys) <= ZT_SCHEMA_MAX_KEYS &&
               NKEYS(warmup_cosine_keys) <= ZT_SCHEMA_MAX_KEYS &&
               NKEYS(offload_optimizer_keys) <= ZT_SCHEMA_MAX_KEYS,
               "the reader has room for every key");

/* ---- reading values ------------------------------------------------------------ */

typedef zt_schema_reader reader;

/* "FILE: KEY: ..." */
#define bad(r, keypath, ...) zt_schema_bad((r), 0, (keypath), __VA_ARGS__)
#define CONFIG(r) ((zt_ds_config *)(r)->target)

/* A number as a user would write it: 200000000, 0.0003, 1e-08. */
static const char *num_text(double d, char *buf, size_t cap)
{
    snprintf(buf, cap, "%.15g", d);
    return buf;
}

static const char *describe(const reader *r, const zt_node *v, char *buf, size_t cap)
{
    return zt_schema_describe(r, v, buf, cap);
}

static int is_number(const zt_node *v) { return v->type == ZT_NODE_INT || v->type == ZT_NODE_FLOAT; }

/* "a whole number between 0 and 3", "a number of at least 0", "0", ... */
static const char *range_text(const key *k, char *buf, size_t cap)
{
    char lo[32], hi[32];
    const char *what = k->integer || k->kind == K_INT ? "a whole number" : "a number";
    num_text(k->min, lo, sizeof lo);
    num_text(k->max, hi, sizeof hi);
    if (k->min == k->max)
        snprintf(buf, cap, "%s", lo);
    else if (k->max >= INT_MAX)
        snprintf(buf, cap, "%s of at least %s", what, lo);
    else
        snprintf(buf, cap, "%s between %s and %s", what, lo, hi);
    return buf;
}

/* What key k accepts, for "expected X, got Y". */
static const char *expected(const key *k, char *buf, size_t cap)
{
    char range[96];
    switch (k->kind) {
    case K_VALUE:
    case K_NUM:
    case K_INT:
        snprintf(buf, cap, "%s%s", range_text(k, range, sizeof range),
                 k->kind == K_VALUE && k->autook ? " or \"auto\"" : "");
        return buf;
    case K_BETAS:
        return "[beta1, beta2] with each in [0, 1), or \"auto\"";
    case K_TYPED:
        return "an object {\"type\": ..., \"params\": {...}}";
    }
    return "?";
}

/* A JSON number for key k: finite, whole when it must be, inside [min, max]. */
static int get_number(reader *r, const key *k, const zt_node *v, const char *kp, double *out)
{
    char got[96], want[160], a[32], b[32];
    if (!is_number(v))
        return bad(r, kp, "expected %s, got %s", expected(k, want, sizeof want),
                   describe(r, v, got, sizeof got));
    double d = v->num;
    if (!isfinite(d))
        return bad(r, kp, "%s is out of range (expected %s)", describe(r, v, got, sizeof got),
                   expected(k, want, sizeof want));
    if ((k->integer || k->kind == K_INT) && d != floor(d))
        return bad(r, kp, "expected a whole number, got %s", num_text(d, a, sizeof a));
    if (d < k->min || d > k->max) {
        char why[300] = "";
        if (k->why)
            snprintf(why, sizeof why, " (%s)", k->why);
        num_text(d, a, sizeof a);
        if (k->min == k->max)
            return bad(r, kp, "must be %s, got %s%s", num_text(k->min, b, sizeof b), a, why);
        if (k->max >= INT_MAX && d >= k->min)
            return bad(r, kp, "must be at most %s, got %s%s", num_text(k->max, b, sizeof b), a, why);
        if (k->max >= INT_MAX)
            return bad(r, kp, "must be at least %s, got %s%s", num_text(k->min, b, sizeof b), a, why);
        return bad(r, kp, "must be %s, got %s%s", range_text(k, want, sizeof want), a, why);
    }
    *out = d;
    return ZT_OK;
}

/* Unknown key in section s: another optimizer's or scheduler's parameter is named
 * as such; otherwise the engine's answer (misplaced, or the closest known key). */
static int unknown_key(reader *r, const section *s, const zt_node *m, const char *kp)
{
    const char *name = m->key->text;
    for (int i = 0; i < NSEC; i++) {
        const section *o = all_sections[i];
        if (o == s || strcmp(o->name, s->name))
            continue;
        for (int j = 0; j < o->nkeys; j++) {
            if (strcmp(name, o->keys[j].name))
                continue;
            const char *type = !strcmp(s->name, "optimizer.params") ? CONFIG(r)->optimizer_type
                                                                    : CONFIG(r)->scheduler_type;
            char allowed[512];
            size_t used = 0;
            allowed[0] = '\0';
            for (int q = 0; q < s->nkeys && used < sizeof allowed; q++) {
                int w = snprintf(allowed + used, sizeof allowed - used, "%s%s", q ? " | " : "",
                                 s->keys[q].name);
                if (w < 0)
                    break;
                used += (size_t)w;
            }
            return bad(r, kp, "not a parameter of %s (allowed: %s)", type, allowed);
        }
    }
    return zt_schema_unknown_key(r, 0, kp, name, s->keys, s->nkeys, s);
}

/* {"type": T, "params": {...}}: T one of the typed's names, params read with T's table.
 * An empty block (or only nulls) is no block, as DeepSpeed reads it. */
static int read_typed(reader *r, const key *k, const zt_node *obj, const char *kp)
{
    static const key parts[] = {{.name = "type"}, {.name = "params"}};
    const typed *t = k->custom;
    char sub[320], got[96], allowed[256];
    const zt_node *type = NULL, *params = NULL;
    for (const zt_node *m = obj->child; m; m = m->next) {
        snprintf(sub, sizeof sub, "%.150s.%.100s", kp, m->key->text);
        for (const zt_node *p = obj->child; p != m; p = p->next)
            if (!strcmp(p->key->text, m->key->text))
                return bad(r, sub, "duplicate key");
        if (!strcmp(m->key->text, "type"))
            type = m->type == ZT_NODE_NULL ? NULL : m;
        else if (!strcmp(m->key->text, "params"))
            params = m->type == ZT_NODE_NULL ? NULL : m;
        else
            return zt_schema_unknown_key(r, 0, sub, m->key->text, parts, 2, NULL);
    }
    zt_join_names(allowed, sizeof allowed, t->names);
    snprintf(sub, sizeof sub, "%.150s.type", kp);
    if (!type) {
        if (params)
            return bad(r, sub, "missing; DeepSpeed ignores %s.params without a type (allowed: %s)",
                       kp, allowed);
        return ZT_OK;
    }
    if (type->type != ZT_NODE_STR)
        return bad(r, sub, "expected one of %s, got %s", allowed, describe(r, type, got, sizeof got));
    int i = zt_index_of(type->text, t->names, t->icase);
    if (i < 0) {
        if (zt_index_of(type->text, t->refused, t->icase) >= 0)
            return bad(r, sub, "'%s' is refused: %s (allowed: %s)", type->text, t->refusal,
                       allowed);
        return bad(r, sub, "'%.80s' is not allowed (allowed: %s)", type->text, allowed);
    }
    zt_schema_set_string(r, k, t->names[i]);
    if (!params)
        return ZT_OK;
    snprintf(sub, sizeof sub, "%.150s.params", kp);
    if (params->type != ZT_NODE_MAP)
        return bad(r, sub, "expected an object of %s parameters, got %s", t->names[i],
                   describe(r, params, got, sizeof got));
    return zt_schema_read_map(r, t->params[i], params);
}

/* The DeepSpeed JSON's own kinds (nulls never reach here: they are absent). */
static int read_custom(reader *r, const key *k, const zt_node *v, const char *kp)
{
    char got[96], want[256];
    double d = 0;
    int rc;
    switch (k->kind) {
    case K_VALUE: {
        zt_ds_value *out = zt_schema_field(r, k);
        if (k->autook && zt_schema_is_auto(v)) {
            *out = (zt_ds_value){.is_auto = 1, .set = 1};
            return ZT_OK;
        }
        if (zt_schema_is_auto(v))
            return bad(r, kp, "\"auto\" is not allowed here: Accelerate does not fill it "
                       "(expected %s)", expected(k, want, sizeof want));
        if ((rc = get_number(r, k, v, kp, &d)) != ZT_OK)
            return rc;
        *out = (zt_ds_value){.set = 1, .num = d};
        return ZT_OK;
    }
    case K_NUM:
    case K_INT:
        if ((rc = get_number(r, k, v, kp, &d)) != ZT_OK)
            return rc;
        if (k->off != ZT_NO_FIELD && k->kind == K_NUM)
            *(double *)zt_schema_field(r, k) = d;
        if (k->off != ZT_NO_FIELD && k->kind == K_INT)
            *(int *)zt_schema_field(r, k) = (int)d; /* [min, max] fits an int */
        return ZT_OK;
    case K_BETAS: {
        zt_ds_config *c = CONFIG(r);
        if (zt_schema_is_auto(v)) {
            c->beta1 = c->beta2 = (zt_ds_value){.is_auto = 1, .set = 1};
            return ZT_OK;
        }
        const zt_node *b1 = v->type == ZT_NODE_LIST ? v->child : NULL, *b2 = b1 ? b1->next : NULL;
        if (!b1 || !b2 || b2->next || !is_number(b1) || !is_number(b2))
            return bad(r, kp, "expected %s, got %s", expected(k, want, sizeof want),
                       v->type == ZT_NODE_LIST ? "an array of other than two numbers"
                                               : describe(r, v, got, sizeof got));
        double x1 = b1->num, x2 = b2->num;
        if (!(x1 >= 0 && x1 < 1) || !(x2 >= 0 && x2 < 1)) {
            char a[32], b[32];
            return bad(r, kp, "each beta must be in [0, 1), got [%s, %s]",
                       num_text(x1, a, sizeof a), num_text(x2, b, sizeof b));
        }
        c->beta1 = (zt_ds_value){.set = 1, .num = x1};
        c->beta2 = (zt_ds_value){.set = 1, .num = x2};
        return ZT_OK;
    }
    case K_TYPED:
        if (v->type != ZT_NODE_MAP)
            return bad(r, kp, "expected %s, got %s", expected(k, want, sizeof want),
                       describe(r, v, got, sizeof got));
        return read_typed(r, k, v, kp);
    }
    return ZT_EFAIL;
}

static const zt_schema_format deepspeed_json = {
    .sections = all_sections, .nsections = NSEC, .null_is_absent = 1,
    .list_word = "an array", .map_word = "an object", .section_want = "an object of %s settings",
    .read_custom = read_custom, .unknown_key = unknown_key,
};

/* ---- checks across keys ------------------------------------------------------------ */

static int given(const reader *r, const section *s, const char *name)
{
    return zt_schema_given(r, s, name);
}

static int warms_to_max_lr(const zt_ds_config *c)
{
    return !strcmp(c->scheduler_type, "WarmupLR") || !strcmp(c->scheduler_type, "WarmupDecayLR");
}

/* WarmupLR and WarmupDecayLR set the lr to warmup_max_lr (default 0.001) whatever the
 * optimizer says, so a different optimizer lr would silently not be the lr trained at.
 * opt_lr is the optimizer's lr in effect; src says where it came from. */
static int check_warmup_max_lr(const zt_ds_config *c, double opt_lr, const char *src, zt_err *err)
{
    char a[32], b[32];
    if (!warms_to_max_lr(c) || c->warmup_max_lr.is_auto)
        return ZT_OK;
    double max_lr = c->warmup_max_lr.set ? c->warmup_max_lr.num : DS_WARMUP_MAX_LR;
    if (fabs(max_lr - opt_lr) <= 1e-12 * fabs(opt_lr))
        return ZT_OK;
    num_text(max_lr, a, sizeof a);
    num_text(opt_lr, b, sizeof b);
    if (c->warmup_max_lr.set)
        return zt_fail(err, ZT_EINPUT,
                       "%s: scheduler.params.warmup_max_lr: %s differs from %s %s; DeepSpeed's %s "
                       "trains at warmup_max_lr, so give both the same value (or warmup_max_lr "
                       "\"auto\")", c->path, a, src, b, c->scheduler_type);
    return zt_fail(err, ZT_EINPUT,
                   "%s: scheduler.params.warmup_max_lr: absent, so DeepSpeed's %s would train at "
                   "its default 0.001, not %s %s; set warmup_max_lr to %s or \"auto\"", c->path,
                   c->scheduler_type, src, b, b);
}

static int check_combinations(reader *r)
{
    zt_ds_config *c = CONFIG(r);
    if (given(r, &top_section, "bf16") && given(r, &top_section, "bfloat16"))
        return bad(r, "bfloat16", "is the old name of bf16, which is also given; give one of them");
    if (c->bf16_enabled == ZT_YES && c->fp16_enabled == ZT_YES)
        return bad(r, "fp16.enabled", "true contradicts bf16.enabled: true; enable one of them "
                   "(or set both to \"auto\" and let mixed_precision choose)");
    static const char *const old_gather = "stage3_gather_fp16_weights_on_model_save";
    if (given(r, &zero_section, old_gather) &&
        given(r, &zero_section, "stage3_gather_16bit_weights_on_model_save"))
        return bad(r, "zero_optimization.stage3_gather_fp16_weights_on_model_save",
                   "is the old name of stage3_gather_16bit_weights_on_model_save, which is also "
                   "given; give one of them");
    if (c->stage3_gather_16bit_weights_on_model_save == ZT_AUTO) /* Accelerate fills "auto" with false */
        c->stage3_gather_16bit_weights_on_model_save = ZT_NO;

    /* ZeRO-3-only settings and offload against the stage. */
    int stage = c->stage >= 0 ? c->stage : 0;
    const char *src = c->stage >= 0 ? "" : " (DeepSpeed's default, as zero_optimization.stage is absent)";
    char kp[200];
    for (int j = 0; j < zero_section.nkeys && stage != 3; j++) {
        const char *name = zero_keys[j].name;
        if (strncmp(name, "stage3_", 7) || !r->line[SEC_ZERO][j])
            continue;
        snprintf(kp, sizeof kp, "zero_optimization.%s", name);
        if (strstr(name, "_on_model_save")) {
            if (c->stage3_gather_16bit_weights_on_model_save == ZT_YES)
                return bad(r, kp, "true needs ZeRO stage 3, but zero_optimization.stage is %d%s; "
                           "set it to false or the stage to 3", stage, src);
        } else {
            return bad(r, kp, "only applies to ZeRO stage 3, but zero_optimization.stage is %d%s; "
                       "remove it or set the stage to 3", stage, src);
        }
    }
    if (!strcmp(c->offload_param_device, "cpu") && stage != 3)
        return bad(r, "zero_optimization.offload_param.device",
                   "cpu needs ZeRO stage 3 (parameters are partitioned only at stage 3), but "
                   "zero_optimization.stage is %d%s; use none or stage 3", stage, src);
    if (!strcmp(c->offload_optimizer_device, "cpu") && stage == 0)
        return bad(r, "zero_optimization.offload_optimizer.device",
                   "cpu needs ZeRO stage 1, 2 or 3 (ZeRO-Offload moves the partitioned optimizer "
                   "state), but zero_optimization.stage is 0%s; use none or a stage of 1-3", src);

    /* The scheduler's own needs, and its lr against the optimizer's. */
    if (c->scheduler_type[0] && strcmp(c->scheduler_type, "WarmupLR") && !c->total_num_steps.set)
        return bad(r, "scheduler.params.total_num_steps",
                   "missing; %s needs it (a whole number of at least 1, or \"auto\")",
                   c->scheduler_type);
    if (c->optimizer_type[0] && !c->lr.is_auto)
        return check_warmup_max_lr(c, c->lr.set ? c->lr.num : DS_ADAM_LR,
                                   c->lr.set ? "optimizer.params.lr" : "the optimizer's default lr",
                                   r->err);
    return ZT_OK;
}

/* ---- public: reading ------------------------------------------------------------------ */

void zt_ds_config_init(zt_ds_config *c)
{
    memset(c, 0, sizeof *c); /* every zt_ds_value absent, every string "" */
    c->fp16_initial_scale_power = c->fp16_loss_scale_window = c->fp16_hysteresis = -1.0;
    c->fp16_min_loss_scale = c->fp16_loss_scale = -1.0;
    c->stage = -1;
}

/* The config in j (freed here) into *out. */
static int from_json(const char *path, zt_json *j, zt_ds_config *out, zt_err *err)
{
    zt_doc doc;
    int rc = zt_json_doc(j, path, &doc, err);
    zt_json_free(j);
    if (rc)
        return rc;
    zt_ds_config c;
    zt_ds_config_init(&c);
    snprintf(c.path, sizeof c.path, "%s", path);
    reader r;
    zt_schema_reader_init(&r, &deepspeed_json, path, &c, NULL, err);
    if (doc.root->type != ZT_NODE_MAP) {
        char got[96];
        rc = zt_fail(err, ZT_EINPUT, "%s: the document is %s; expected a JSON object of DeepSpeed "
                     "settings (such as {\"zero_optimization\": {\"stage\": 2}})", path,
                     describe(&r, doc.root, got, sizeof got));
    } else {
        rc = zt_schema_read_map(&r, &top_section, doc.root);
        if (rc == ZT_OK)
            rc = check_combinations(&r);
        c.activation_checkpointing = given(&r, &top_section, "activation_checkpointing");
    }
    zt_doc_free(&doc);
    if (rc == ZT_OK)
        *out = c;
    return rc;
}

int zt_ds_config_read(const char *path, zt_ds_config *out, zt_err *err)
{
    zt_json j;
    int rc = zt_json_parse_file(path, MAX_FILE_BYTES, &j, err);
    return rc ? rc : from_json(path, &j, out, err);
}

int zt_ds_config_parse(const char *name, const void *text, size_t len, zt_ds_config *out, zt_err *err)
{
    if (len > MAX_FILE_BYTES)
        return zt_fail(err, ZT_EINPUT, "%s: file is %zu bytes, more than the %u-byte limit", name, len,
                       MAX_FILE_BYTES);
    zt_json j;
    int rc = zt_json_parse(name, "file", text, len, 0, &j, err);
    return rc ? rc : from_json(name, &j, out, err);
}

/* ---- public: resolving ---------------------------------------------------------------- */

void zt_ds_run_init(zt_ds_run *run)
{
    *run = (zt_ds_run){.micro_batch = 8, .grad_accum = 1, .world = 1, .hidden_size = 0,
                       .lr = 5e-5, .weight_decay = 0.0, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                       .max_grad_norm = 1.0, .warmup_steps = 0, .total_steps = 0};
}

/* a * b * c, or -1 if it overflows (inputs >= 0). */
static long long mul3(long long a, long long b, long long c)
{
    long long ab, abc;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc))
        return -1;
    return abc;
}

/* Accelerate's "auto" for the three batch numbers, then DeepSpeed's derivation of the
 * missing ones and its check that train_batch_size = micro * accumulation * world. */
static int resolve_batch(const zt_ds_config *c, const zt_ds_run *run, zt_ds_resolved *o,
                         zt_err *err)
{
    const char *path = c->path;
    long long world = run->world, run_accum = run->grad_accum > 0 ? run->grad_accum : 1;
    long long micro = -1, accum = -1, tbs = -1;
    if (c->train_micro_batch_size_per_gpu.set) {
        if (!c->train_micro_batch_size_per_gpu.is_auto)
            micro = (long long)c->train_micro_batch_size_per_gpu.num;
        else if (run->micro_batch > 0)
            micro = run->micro_batch;
        else
            return zt_fail(err, ZT_EINPUT, "%s: train_micro_batch_size_per_gpu: \"auto\" is the "
                           "run's per-device batch size, which is not known; give a number",
                           path);
    }
    if (c->gradient_accumulation_steps.set)
        accum = c->gradient_accumulation_steps.is_auto
                    ? run_accum : (long long)c->gradient_accumulation_steps.num;
    if (c->train_batch_size.set) {
        if (!c->train_batch_size.is_auto)
            tbs = (long long)c->train_batch_size.num;
        else if (micro > 0)
            tbs = mul3(micro, accum > 0 ? accum : run_accum, world);
        else
            return zt_fail(err, ZT_EINPUT, "%s: train_batch_size: \"auto\" is "
                           "train_micro_batch_size_per_gpu * gradient_accumulation_steps * world "
                           "size, but train_micro_batch_size_per_gpu is absent; give it (a number "
                           "or \"auto\")", path);
    }

    long long per_step;
    if (tbs > 0 && micro > 0 && accum > 0) {
        /* all three given: only the check below */
    } else if (tbs > 0 && micro > 0) {
        per_step = mul3(micro, world, 1);
        if (per_step < 0 || tbs % per_step)
            return zt_fail(err, ZT_EINPUT, "%s: train_batch_size %lld is not a multiple of "
                           "train_micro_batch_size_per_gpu %lld * world size %lld (= %lld), so "
                           "gradient_accumulation_steps cannot be derived; give it", path, tbs,
                           micro, world, per_step);
        accum = tbs / per_step;
    } else if (tbs > 0 && accum > 0) {
        per_step = mul3(accum, world, 1);
        if (per_step < 0 || tbs % per_step)
            return zt_fail(err, ZT_EINPUT, "%s: train_batch_size %lld is not a multiple of "
                           "gradient_accumulation_steps %lld * world size %lld (= %lld), so "
                           "train_micro_batch_size_per_gpu cannot be derived; give it", path, tbs,
                           accum, world, per_step);
        micro = tbs / per_step;
    } else if (micro > 0 && accum > 0) {
        tbs = mul3(micro, accum, world);
    } else if (tbs > 0) {
        accum = 1;
        if (tbs % world)
            return zt_fail(err, ZT_EINPUT, "%s: train_batch_size %lld is not a multiple of the "
                           "world size %lld, so train_micro_batch_size_per_gpu cannot be "
                           "derived; give it", path, tbs, world);
        micro = tbs / world;
    } else if (micro > 0) {
        accum = 1;
        tbs = mul3(micro, 1, world);
    } else {
        return zt_fail(err, ZT_EINPUT, "%s: train_batch_size and train_micro_batch_size_per_gpu "
                       "are both absent; DeepSpeed needs at least one of them (a number or "
                       "\"auto\")", path);
    }
    long long product = mul3(micro, accum, world);
    if (product < 0 || tbs != product)
        return zt_fail(err, ZT_EINPUT, "%s: train_batch_size %lld != "
                       "train_micro_batch_size_per_gpu %lld * gradient_accumulation_steps %lld * "
                       "world size %lld (= %lld); DeepSpeed requires them equal: fix one, or set "
                       "train_batch_size to \"auto\"", path, tbs, micro, accum, world, product);
    if (tbs > INT_MAX)
        return zt_fail(err, ZT_EINPUT, "%s: train_batch_size %lld is too large (at most %d)", path,
                       tbs, INT_MAX);
    o->micro_batch = (int)micro;
    o->grad_accum = (int)accum;
    o->train_batch_size = (int)tbs;
    return ZT_OK;
}

/* A zero_optimization size: the file's number, "auto" from the hidden size H, or
 * DeepSpeed's default; without H, -1 (unresolved) when the run allows it. */
static int resolve_size(const zt_ds_config *c, const zt_ds_value *v, const char *name,
                        long deflt, long from_h, const zt_ds_run *run, long *out, zt_err *err)
{
    if (!v->set)
        *out = deflt;
    else if (!v->is_auto)
        *out = (long)v->num;
    else if (run->hidden_size > 0)
        *out = from_h;
    else if (run->allow_unresolved)
        *out = -1;
    else
        return zt_fail(err, ZT_EINPUT, "%s: zero_optimization.%s: \"auto\" is computed from the "
                       "model's hidden_size, which is not known; give a number", c->path, name);
    return ZT_OK;
}

/* An optimizer parameter: the file's number, "auto" from the run, or DeepSpeed's default. */
static double param(const zt_ds_value *v, double run, double deflt)
{
    return !v->set ? deflt : v->is_auto ? run : v->num;
}

int zt_ds_config_resolve(const zt_ds_config *c, const zt_ds_run *run, zt_ds_resolved *out,
                         zt_err *err)
{
    if (run->world < 1)
        return zt_fail(err, ZT_EFAIL, "%s: world size %d (must be at least 1)", c->path,
                       run->world);
    zt_ds_resolved o;
    memset(&o, 0, sizeof o);
    int rc = resolve_batch(c, run, &o, err);
    if (rc != ZT_OK)
        return rc;

    o.gradient_clipping = param(&c->gradient_clipping,
                                run->max_grad_norm >= 0 ? run->max_grad_norm : 1.0, 0.0);

    /* Accelerate's hidden-size rules, in Python's arithmetic: int(0.9 * H * H) truncates
     * the double (0.9 * H) * H. */
    long h = run->hidden_size;
    long hh = h > 0 ? h * h : 0;
    long prefetch = h > 0 ? (long)(0.9 * (double)h * (double)h) : 0;
    if ((rc = resolve_size(c, &c->reduce_bucket_size, "reduce_bucket_size", DS_REDUCE_BUCKET, hh,
                           run, &o.reduce_bucket_size, err)) ||
        (rc = resolve_size(c, &c->allgather_bucket_size, "allgather_bucket_size",
                           DS_ALLGATHER_BUCKET, 0, run, &o.allgather_bucket_size, err)) ||
        (rc = resolve_size(c, &c->stage3_prefetch_bucket_size, "stage3_prefetch_bucket_size",
                           DS_PREFETCH_BUCKET, prefetch, run, &o.stage3_prefetch_bucket_size,
                           err)) ||
        (rc = resolve_size(c, &c->stage3_param_persistence_threshold,
                           "stage3_param_persistence_threshold", DS_PERSISTENCE, 10 * h, run,
                           &o.stage3_param_persistence_threshold, err)) ||
        (rc = resolve_size(c, &c->stage3_max_live_parameters, "stage3_max_live_parameters",
                           DS_MAX_LIVE, 0, run, &o.stage3_max_live_parameters, err)))
        return rc;

    /* Optimizer: without a block the run's own AdamW; with one, the block's params. */
    if (c->optimizer_type[0]) {
        o.lr = param(&c->lr, run->lr, DS_ADAM_LR);
        o.weight_decay = param(&c->weight_decay, run->weight_decay, DS_ADAM_WEIGHT_DECAY);
        o.beta1 = param(&c->beta1, run->beta1, DS_ADAM_BETA1);
        o.beta2 = param(&c->beta2, run->beta2, DS_ADAM_BETA2);
        o.eps = param(&c->eps, run->eps, DS_ADAM_EPS);
    } else {
        o.lr = run->lr;
        o.weight_decay = run->weight_decay;
        o.beta1 = run->beta1;
        o.beta2 = run->beta2;
        o.eps = run->eps;
    }

    /* Scheduler: without a block the run's own schedule. */
    long run_warmup = run->warmup_steps > 0 ? run->warmup_steps : 0;
    o.warmup_steps = run_warmup;
    o.total_steps = run->total_steps;
    if (c->scheduler_type[0]) {
        const char *lr_src = !c->optimizer_type[0] ? "the run's learning rate"
                             : c->lr.is_auto        ? "the run's learning rate (optimizer.params.lr "
                                                      "is \"auto\")"
                             : c->lr.set            ? "optimizer.params.lr"
                                                    : "the optimizer's default lr";
        if ((rc = check_warmup_max_lr(c, o.lr, lr_src, err)) != ZT_OK)
            return rc;
        o.warmup_steps = !c->warmup_num_steps.set   ? DS_WARMUP_STEPS
                         : c->warmup_num_steps.is_auto ? run_warmup
                                                     : (long)c->warmup_num_steps.num;
        if (c->total_num_steps.set && !c->total_num_steps.is_auto) {
            o.total_steps = (long)c->total_num_steps.num;
        } else if (c->total_num_steps.set && run->total_steps <= 0) {
            return zt_fail(err, ZT_EINPUT, "%s: scheduler.params.total_num_steps: \"auto\" is the "
                           "run's total number of optimizer steps (max_steps), which is not "
                           "known; give a number", c->path);
        }
        const char *schedule = !strcmp(c->scheduler_type, "WarmupLR")      ? "constant_with_warmup"
                               : !strcmp(c->scheduler_type, "WarmupDecayLR") ? "linear"
                                                                             : "cosine";
        snprintf(o.schedule, sizeof o.schedule, "%s", schedule);
    }
    *out = o;
    return ZT_OK;
}
