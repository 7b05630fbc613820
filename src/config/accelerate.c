/* accelerate.c — Accelerate config YAML into zt_accel_config (see accelerate.h).
 *
 * Two steps.  libyaml's event parser builds the one document as a schema tree
 * (core/schema.h; refusing aliases, tags, extra documents and absurd nesting, and
 * reporting syntax errors at libyaml's line), typing each plain scalar by the YAML
 * 1.2 core schema; then the schema engine walks it against its key tables (the
 * top level, fsdp_config, deepspeed_config, mpirun_config, peft_config), which say for each key its type,
 * range or allowed values and where it lands in the struct.  This file adds the
 * YAML's own kinds (integers without octal ambiguity, reals, sharding strategies)
 * and the checks that involve two keys (the backend's section, FSDP1 vs FSDP2
 * keys, ZeRO-3-only flags, a DeepSpeed JSON beside YAML settings), which run
 * last, once every key is known. */
#include "accelerate.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "../core/input.h"
#include "../core/mem.h"
#include "../core/text.h"
#include "../model/layout.h" /* the wrap policy names */
#include "../plan/plan.h"

#define MAX_FILE_BYTES (1u << 20) /* an Accelerate config is a few hundred bytes */
#define MAX_DEPTH 32

/* ---- the document as a tree ------------------------------------------------ */

typedef struct loader {
    yaml_parser_t parser;
    const char *path;
    zt_doc *doc;
    zt_err *err;
} loader;

static int syntax_error(loader *ld)
{
    const yaml_parser_t *p = &ld->parser;
    if (p->error == YAML_MEMORY_ERROR)
        return zt_fail(ld->err, ZT_EFAIL, "%s: out of memory while reading YAML", ld->path);
    if (p->error == YAML_READER_ERROR)
        return zt_fail(ld->err, ZT_EINPUT, "%s: invalid YAML: %s at byte %zu", ld->path,
                       p->problem ? p->problem : "unreadable input", p->problem_offset);
    const char *problem = p->problem ? p->problem : "syntax error";
    if (p->context) /* "while scanning a simple key" and the line where that began */
        return zt_fail(ld->err, ZT_EINPUT, "%s:%zu:%zu: invalid YAML: %s (%s that starts at line %zu)",
                       ld->path, p->problem_mark.line + 1, p->problem_mark.column + 1, problem,
                       p->context, p->context_mark.line + 1);
    return zt_fail(ld->err, ZT_EINPUT, "%s:%zu:%zu: invalid YAML: %s", ld->path,
                   p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

static int next_event(loader *ld, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&ld->parser, ev))
        return syntax_error(ld);
    return ZT_OK;
}

/* ---- scalar types (YAML 1.2 core schema) ----------------------------------- */

static int all_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static int is_one_of(const char *s, const char *const *set)
{
    for (; *set; set++)
        if (!strcmp(s, *set))
            return 1;
    return 0;
}

static int looks_float(const char *s)
{
    static const char *const special[] = {".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN", NULL};
    if (*s == '+' || *s == '-')
        s++;
    if (is_one_of(s, special))
        return 1;
    int digits = 0;
    while (*s >= '0' && *s <= '9')
        s++, digits++;
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++)
            digits++;
    if (!digits)
        return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!all_digits(s))
            return 0;
        return 1;
    }
    return *s == '\0';
}

/* The type of a plain (unquoted) scalar; a quoted or block one is a string. */
static zt_node_type resolve(const char *s)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const bools[] = {"true", "True", "TRUE", "false", "False", "FALSE", NULL};
    if (is_one_of(s, nulls))
        return ZT_NODE_NULL;
    if (is_one_of(s, bools))
        return ZT_NODE_BOOL;
    if (all_digits(s + (*s == '+' || *s == '-')))
        return ZT_NODE_INT;
    if (looks_float(s))
        return ZT_NODE_FLOAT;
    return ZT_NODE_STR;
}

static int new_node(loader *ld, zt_node_type type, int line, const char *text, size_t len, zt_node **out)
{
    if (!(*out = zt_doc_node(ld->doc, type, line, text, len)))
        return zt_fail(ld->err, ZT_EFAIL, "%s: out of memory while reading YAML", ld->path);
    return ZT_OK;
}

/* A scalar event's node, typed by the YAML 1.2 core schema. */
static int scalar_node(loader *ld, const yaml_event_t *ev, int line, zt_node **out)
{
    const char *text = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (memchr(text, '\0', len))
        return zt_fail(ld->err, ZT_EINPUT, "%s:%d: a value contains a NUL character", ld->path, line);
    int quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    zt_node_type type = quoted ? ZT_NODE_STR : resolve(text);
    int rc = new_node(ld, type, line, text, len, out);
    if (rc == ZT_OK && type == ZT_NODE_BOOL)
        (*out)->boolean = text[0] == 't' || text[0] == 'T';
    return rc;
}

/* Build the node that starts with *ev (whose ownership passes here: it is
 * deleted on every path) and the nodes below it.  A mapping's children are its
 * values, each pointing to its key. */
static int load_node(loader *ld, yaml_event_t *ev, int depth, zt_node **out)
{
    int line = (int)ev->start_mark.line + 1, rc = ZT_OK;
    const yaml_char_t *tag = NULL;
    *out = NULL;
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        rc = zt_fail(ld->err, ZT_EINPUT,
                     "%s:%d: YAML aliases (*%s) are not supported in an Accelerate config; "
                     "write the value out", ld->path, line, (const char *)ev->data.alias.anchor);
        break;
    case YAML_SCALAR_EVENT:
        tag = ev->data.scalar.tag;
        if (!tag)
            rc = scalar_node(ld, ev, line, out);
        break;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        int is_map = ev->type == YAML_MAPPING_START_EVENT;
        yaml_event_type_t end = is_map ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;
        tag = is_map ? ev->data.mapping_start.tag : ev->data.sequence_start.tag;
        if (tag)
            break;
        if (depth >= MAX_DEPTH) {
            rc = zt_fail(ld->err, ZT_EINPUT, "%s:%d: nesting deeper than %d levels", ld->path, line,
                         MAX_DEPTH);
            break;
        }
        rc = new_node(ld, is_map ? ZT_NODE_MAP : ZT_NODE_LIST, line, NULL, 0, out);
        zt_node **tail = rc == ZT_OK ? &(*out)->child : NULL, *key = NULL;
        while (rc == ZT_OK) {
            yaml_event_t cev;
            if ((rc = next_event(ld, &cev)) != ZT_OK)
                break;
            if (cev.type == end) {
                yaml_event_delete(&cev);
                break;
            }
            zt_node *n = NULL;
            rc = load_node(ld, &cev, depth + 1, &n);
            if (rc != ZT_OK)
                break;
            if (is_map && !key) { /* a key; its value comes next */
                key = n;
                continue;
            }
            n->key = key;
            key = NULL;
            *tail = n;
            tail = &n->next;
        }
        if (rc != ZT_OK)
            *out = NULL; /* the nodes belong to the document, freed with it */
        break;
    }
    default: /* the parser only starts nodes with the events above */
        rc = zt_fail(ld->err, ZT_EINPUT, "%s:%d: unexpected YAML structure", ld->path, line);
        break;
    }
    if (tag)
        rc = zt_fail(ld->err, ZT_EINPUT,
                     "%s:%d: YAML tags (%s) are not supported in an Accelerate config; "
                     "write the plain value", ld->path, line, (const char *)tag);
    yaml_event_delete(ev);
    return rc;
}

/* The file's one document as a tree, or an error. */
static int load_document(loader *ld, zt_node **root)
{
    yaml_event_t ev;
    int rc;
    *root = NULL;
    if ((rc = next_event(ld, &ev)) != ZT_OK) /* STREAM-START */
        return rc;
    yaml_event_delete(&ev);
    if ((rc = next_event(ld, &ev)) != ZT_OK)
        return rc;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        return zt_fail(ld->err, ZT_EINPUT,
                       "%s: empty file; expected an Accelerate config (a mapping such as "
                       "'distributed_type: FSDP')", ld->path);
    }
    yaml_event_delete(&ev); /* DOCUMENT-START */
    if ((rc = next_event(ld, &ev)) != ZT_OK || (rc = load_node(ld, &ev, 0, root)) != ZT_OK)
        return rc;
    if ((rc = next_event(ld, &ev)) == ZT_OK) { /* DOCUMENT-END */
        yaml_event_delete(&ev);
        rc = next_event(ld, &ev);
    }
    if (rc == ZT_OK) {
        if (ev.type != YAML_STREAM_END_EVENT)
            rc = zt_fail(ld->err, ZT_EINPUT,
                         "%s:%zu: a second YAML document; an Accelerate config is one mapping",
                         ld->path, ev.start_mark.line + 1);
        yaml_event_delete(&ev);
    }
    if (rc != ZT_OK)
        *root = NULL;
    return rc;
}

/* ---- key tables -------------------------------------------------------------- */

/* The YAML's own kinds; booleans, enumerations, strings, sections, lists and
 * scalars are the schema engine's (core/schema.h). */
enum {
    K_INT = ZT_K_CUSTOM, /* integer in [min, max] into an int field */
    K_LONG,     /* integer in [min, max] into a long field */
    K_REAL,     /* finite number >= min into a double field */
    K_STRATEGY, /* FSDP sharding strategy: a name or 1..5 */
    K_RESHARD,  /* fsdp_reshard_after_forward: true/false (FSDP2) or a strategy name (FSDP1) */
    K_INT_DIGITS, /* K_INT, or a quoted digit string such as '12' (Accelerate's prompts
                   * store what was typed as a string) */
    K_EMPTY_MAP,  /* only {} (what `accelerate config` writes for a backend not chosen) */
    K_TARGETS,    /* lora_target_modules: one string, or a list of strings (joined by commas) */
};
#define K_BOOL ZT_K_BOOL
#define K_ENUM ZT_K_ENUM
#define K_STR ZT_K_STR
#define K_SECTION ZT_K_SECTION
#define K_ANY_MAP ZT_K_ANY_MAP
#define K_STR_LIST ZT_K_STR_LIST
#define K_SCALAR ZT_K_SCALAR

typedef zt_schema_key key;
typedef zt_schema_section section;

#define FIELD(m) offsetof(zt_accel_config, m), sizeof(((zt_accel_config *)0)->m)
#define IGNORED ZT_NO_FIELD, 0

/* MULTI_GPU is Accelerate's DDP on GPUs: ztrain's plain data parallel (stage 0) on
 * --device cuda, which only a CUDA build (make cuda) has; a CPU build refuses it
 * with that reason rather than run it somewhere else than it says. */
#ifdef ZT_CUDA
static const char *const distributed_types[] = {"NO", "MULTI_CPU", "MULTI_GPU", "FSDP", "DEEPSPEED", NULL};
static const char *const gpu_types[] = {NULL};
#else
static const char *const distributed_types[] = {"NO", "MULTI_CPU", "FSDP", "DEEPSPEED", NULL};
static const char *const gpu_types[] = {"MULTI_GPU", NULL};
#endif
static const char *const compute_environments[] = {"LOCAL_MACHINE", NULL};
static const char *const precisions[] = {"no", "bf16", "fp16", NULL};
static const char *const fp8[] = {"fp8", NULL};
static const char *const kernel_modes[] = {"exact", "fast", NULL};
static const char *const graph_modes[] = {"auto", "on", "off", NULL};
static const char *const strategies[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                         "HYBRID_SHARD_ZERO2", NULL};
static const char *const layer_classes[] = {"LlamaDecoderLayer", "MistralDecoderLayer", NULL};
static const char *const prefetches[] = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH", NULL};
static const char *const state_dict_types[] = {"FULL_STATE_DICT", "SHARDED_STATE_DICT",
                                               "LOCAL_STATE_DICT", NULL};
static const char *const offload_devices[] = {"none", "cpu", NULL};
static const char *const nvme[] = {"nvme", NULL};

enum { SEC_TOP, SEC_FSDP, SEC_DS, SEC_MPI, SEC_PEFT, NSEC };

static const key fsdp_keys[] = {
    {.name = "fsdp_sharding_strategy", .kind = K_STRATEGY, FIELD(fsdp_sharding_strategy)},
    {.name = "fsdp_reshard_after_forward", .kind = K_RESHARD, FIELD(fsdp_reshard_after_forward)},
    {.name = "fsdp_version", .kind = K_INT, FIELD(fsdp_version), .min = 1, .max = 2},
    {.name = "fsdp_auto_wrap_policy", .kind = K_ENUM, FIELD(fsdp_auto_wrap_policy),
     .allowed = zt_wrap_policy_names, .icase = 1},
    {.name = "fsdp_transformer_layer_cls_to_wrap", .kind = K_ENUM,
     FIELD(fsdp_transformer_layer_cls_to_wrap), .allowed = layer_classes},
    {.name = "fsdp_min_num_params", .kind = K_LONG, FIELD(fsdp_min_num_params), .min = 0,
     .max = LONG_MAX},
    {.name = "fsdp_backward_prefetch", .kind = K_ENUM, FIELD(fsdp_backward_prefetch),
     .allowed = prefetches, .icase = 1},
    {.name = "fsdp_forward_prefetch", .kind = K_BOOL, FIELD(fsdp_forward_prefetch)},
    {.name = "fsdp_offload_params", .kind = K_BOOL, FIELD(fsdp_offload_params)},
    {.name = "fsdp_cpu_ram_efficient_loading", .kind = K_BOOL, FIELD(fsdp_cpu_ram_efficient_loading)},
    {.name = "fsdp_sync_module_states", .kind = K_BOOL, FIELD(fsdp_sync_module_states)},
    {.name = "fsdp_use_orig_params", .kind = K_BOOL, FIELD(fsdp_use_orig_params)},
    {.name = "fsdp_activation_checkpointing", .kind = K_BOOL, FIELD(fsdp_activation_checkpointing)},
    {.name = "fsdp_state_dict_type", .kind = K_ENUM, FIELD(fsdp_state_dict_type),
     .allowed = state_dict_types, .icase = 1},
};

static const key deepspeed_keys[] = {
    {.name = "zero_stage", .kind = K_INT, FIELD(zero_stage), .min = 0, .max = 3},
    {.name = "offload_optimizer_device", .kind = K_ENUM, FIELD(offload_optimizer_device),
     .allowed = offload_devices, .refused = nvme, .refusal = "NVMe offload (ZeRO-Infinity) is not supported: offload to cpu instead"},
    {.name = "offload_param_device", .kind = K_ENUM, FIELD(offload_param_device),
     .allowed = offload_devices, .refused = nvme, .refusal = "NVMe offload (ZeRO-Infinity) is not supported: offload to cpu instead"},
    {.name = "zero3_init_flag", .kind = K_BOOL, FIELD(zero3_init_flag)},
    {.name = "zero3_save_16bit_model", .kind = K_BOOL, FIELD(zero3_save_16bit_model)},
    {.name = "gradient_accumulation_steps", .kind = K_INT, FIELD(gradient_accumulation_steps),
     .min = 1, .max = INT_MAX},
    {.name = "gradient_clipping", .kind = K_REAL, FIELD(gradient_clipping), .min = 0},
    {.name = "deepspeed_config_file", .kind = K_STR, FIELD(deepspeed_config_file)},
    /* how DeepSpeed's own launcher reaches other machines: ztrain launches through MPI */
    {.name = "deepspeed_multinode_launcher", .kind = K_STR, IGNORED},
    {.name = "deepspeed_hostfile", .kind = K_STR, IGNORED},
};

static const key mpirun_keys[] = {
    {.name = "mpirun_hostfile", .kind = K_STR, FIELD(mpirun_hostfile)},
    {.name = "mpirun_ccl", .kind = K_INT_DIGITS, FIELD(mpirun_ccl), .min = 0, .max = INT_MAX},
};

/* LoRA: LoraConfig's names under peft_config:, TRL's at the top level (top_keys); the
 * ranges are the flags' (cli/lora_cli.h), the meaning is checked with the flags' */
static const char *const lora_biases[] = {"none", "all", "lora_only", NULL};
static const char *const causal_lm[] = {"CAUSAL_LM", NULL};
#define PEFT_KEYS(R, TARGETS, BIAS)                                                                   \
    {.name = R, .kind = K_INT, FIELD(peft.r), .min = 1, .max = 1 << 20},                              \
    {.name = "lora_alpha", .kind = K_REAL, FIELD(peft.alpha), .min = 0},                              \
    {.name = "lora_dropout", .kind = K_REAL, FIELD(peft.dropout), .min = 0},                          \
    {.name = TARGETS, .kind = K_TARGETS, FIELD(peft.targets)},                                        \
    {.name = "use_rslora", .kind = K_BOOL, FIELD(peft.use_rslora)},                                   \
    {.name = BIAS, .kind = K_ENUM, FIELD(peft.bias), .allowed = lora_biases}
static const key peft_keys[] = {
    PEFT_KEYS("r", "target_modules", "bias"),
    {.name = "task_type", .kind = K_ENUM, IGNORED, .allowed = causal_lm}, /* what train trains */
};

static const section peft_section = {SEC_PEFT, "peft_config", peft_keys, ZT_SCHEMA_NKEYS(peft_keys)};
static const section mpirun_section = {SEC_MPI, "mpirun_config", mpirun_keys,
                                       ZT_SCHEMA_NKEYS(mpirun_keys)};
static const section fsdp_section = {SEC_FSDP, "fsdp_config", fsdp_keys, ZT_SCHEMA_NKEYS(fsdp_keys)};
static const section deepspeed_section = {SEC_DS, "deepspeed_config", deepspeed_keys,
                                          ZT_SCHEMA_NKEYS(deepspeed_keys)};

/* IGNORED keys only concern GPUs, TPUs, graph compilers or torchrun's
 * rendezvous; their types are still checked so a typo'd value is caught. */
static const key top_keys[] = {
    {.name = "compute_environment", .kind = K_ENUM, IGNORED, .allowed = compute_environments},
    {.name = "distributed_type", .kind = K_ENUM, FIELD(distributed_type),
     .allowed = distributed_types, .refused = gpu_types,
     .refusal = "MULTI_GPU runs on --device cuda, and this ztrain was built without CUDA (make cuda builds it); "
                "MULTI_CPU is its equivalent on CPUs"},
    {.name = "mixed_precision", .kind = K_ENUM, FIELD(mixed_precision), .allowed = precisions,
     .refused = fp8, .refusal = "fp8 training is not supported"},
    {.name = "num_processes", .kind = K_INT, FIELD(num_processes), .min = 1, .max = INT_MAX},
    {.name = "num_machines", .kind = K_INT, FIELD(num_machines), .min = 1, .max = INT_MAX},
    {.name = "machine_rank", .kind = K_INT, FIELD(machine_rank), .min = 0, .max = INT_MAX},
    {.name = "fsdp_config", .kind = K_SECTION, IGNORED, .section = &fsdp_section},
    {.name = "deepspeed_config", .kind = K_SECTION, IGNORED, .section = &deepspeed_section},
    {.name = "debug", .kind = K_BOOL, IGNORED},
    {.name = "downcast_bf16", .kind = K_SCALAR, IGNORED},       /* TPU only */
    {.name = "enable_cpu_affinity", .kind = K_BOOL, IGNORED},   /* NVIDIA only */
    {.name = "gpu_ids", .kind = K_SCALAR, IGNORED},             /* "all", "0,1" or 0 */
    {.name = "main_process_ip", .kind = K_STR, FIELD(main_process_ip)},
    {.name = "main_process_port", .kind = K_INT, FIELD(main_process_port), .min = 1, .max = 65535},
    {.name = "main_training_function", .kind = K_STR, IGNORED},
    {.name = "rdzv_backend", .kind = K_STR, IGNORED},
    {.name = "same_network", .kind = K_BOOL, IGNORED},
    {.name = "tpu_env", .kind = K_STR_LIST, IGNORED},
    {.name = "tpu_use_cluster", .kind = K_BOOL, IGNORED},
    {.name = "tpu_use_sudo", .kind = K_BOOL, IGNORED},
    {.name = "use_cpu", .kind = K_BOOL, FIELD(use_cpu)},        /* true: --device cpu */
    /* ztrain's own: the device's kernel mode (--kernels; docs/gpu.md, "Kernel modes") */
    {.name = "ztrain_kernels", .kind = K_ENUM, FIELD(ztrain_kernels), .allowed = kernel_modes},
    /* ztrain's own: DeepSpeed's delayed parameter update with offload (docs/zero.md, Offload) */
    {.name = "ztrain_offload_delayed_update", .kind = K_BOOL, FIELD(ztrain_offload_delayed_update)},
    /* ztrain's own: the captured step (--cuda_graphs; docs/gpu.md, "The captured step") */
    {.name = "ztrain_cuda_graphs", .kind = K_ENUM, FIELD(ztrain_cuda_graphs), .allowed = graph_modes},
    {.name = "dynamo_config", .kind = K_ANY_MAP, IGNORED},
    /* older Accelerate versions' spellings (its process_config converts them):
     * fp16: true is mixed_precision: fp16; dynamo_backend is dynamo_config's */
    {.name = "fp16", .kind = K_BOOL, FIELD(legacy_fp16)},
    {.name = "dynamo_backend", .kind = K_STR, IGNORED},
    {.name = "megatron_lm_config", .kind = K_EMPTY_MAP, IGNORED, .why = "Megatron-LM is not supported"},
    {.name = "ipex_config", .kind = K_ANY_MAP, IGNORED},
    {.name = "mpirun_config", .kind = K_SECTION, IGNORED, .section = &mpirun_section},
    {.name = "use_peft", .kind = K_BOOL, FIELD(peft.use_peft)},
    PEFT_KEYS("lora_r", "lora_target_modules", "lora_bias"),
    {.name = "peft_config", .kind = K_SECTION, IGNORED, .section = &peft_section},
};

static const section top_section = {SEC_TOP, "", top_keys, ZT_SCHEMA_NKEYS(top_keys)};
static const section *const all_sections[] = {&top_section, &fsdp_section, &deepspeed_section,
                                              &mpirun_section, &peft_section};
_Static_assert(ZT_SCHEMA_NKEYS(top_keys) <= ZT_SCHEMA_MAX_KEYS &&
               ZT_SCHEMA_NKEYS(fsdp_keys) <= ZT_SCHEMA_MAX_KEYS &&
               ZT_SCHEMA_NKEYS(deepspeed_keys) <= ZT_SCHEMA_MAX_KEYS &&
               ZT_SCHEMA_NKEYS(mpirun_keys) <= ZT_SCHEMA_MAX_KEYS &&
               ZT_SCHEMA_NKEYS(peft_keys) <= ZT_SCHEMA_MAX_KEYS,
               "the reader has room for every key");

/* ---- reading values ------------------------------------------------------------ */

/* The YAML's reading state beside the schema reader's. */
typedef struct yaml_state {
    int reshard_strategy;     /* fsdp_reshard_after_forward in its FSDP1 form (a name), -1 */
} yaml_state;

typedef zt_schema_reader reader;
#define bad zt_schema_bad /* "FILE:LINE: KEY: ..." */
#define CONFIG(r) ((zt_accel_config *)(r)->target)
#define STATE(r) ((yaml_state *)(r)->ctx)

static const char *describe(const reader *r, const zt_node *v, char *buf, size_t cap)
{
    return zt_schema_describe(r, v, buf, cap);
}

/* A YAML integer into *v; leading zeros are refused because YAML 1.1 readers
 * (PyYAML, hence Accelerate) read 010 as octal 8. */
static int get_integer(reader *r, const zt_node *n, const char *kp, long long *v)
{
    char got[96];
    if (n->type != ZT_NODE_INT)
        return bad(r, n->line, kp, "expected an integer, got %s", describe(r, n, got, sizeof got));
    const char *digits = n->text + (n->text[0] == '+' || n->text[0] == '-');
    if (digits[0] == '0' && digits[1])
        return bad(r, n->line, kp, "'%s' has a leading zero, which YAML 1.1 reads as octal; "
                   "write the decimal number", n->text);
    errno = 0;
    *v = strtoll(n->text, NULL, 10);
    if (errno == ERANGE)
        return bad(r, n->line, kp, "%s is out of range", n->text);
    return ZT_OK;
}

static int get_range(reader *r, const key *k, const zt_node *n, const char *kp, long long *v)
{
    int rc;
    if (k->kind == K_INT_DIGITS && n->type == ZT_NODE_STR && n->text[0] && strlen(n->text) < 10 &&
        strspn(n->text, "0123456789") == strlen(n->text))
        *v = strtoll(n->text, NULL, 10), rc = ZT_OK;
    else
        rc = get_integer(r, n, kp, v);
    if (rc != ZT_OK)
        return rc;
    long long lo = (long long)k->min, hi = k->max >= (double)LLONG_MAX ? LLONG_MAX : (long long)k->max;
    if (*v < lo || *v > hi) {
        if (k->max == INT_MAX || k->max == LONG_MAX)
            return bad(r, n->line, kp, "must be at least %lld, got %lld", lo, *v);
        return bad(r, n->line, kp, "must be between %lld and %lld, got %lld", lo, hi, *v);
    }
    return ZT_OK;
}

/* A sharding strategy as Accelerate accepts it: a name (any case) or 1..5 as
 * an integer or a digit string.  Returns 1..5, or 0 if s is neither. */
static int strategy_of(const zt_node *n)
{
    zt_sharding s;
    if ((n->type == ZT_NODE_INT || n->type == ZT_NODE_STR) && zt_sharding_parse(n->text, &s) == 0)
        return (int)s;
    return 0;
}

/* lora_target_modules: PEFT's string (all-linear, or one name) or list of names, into
 * one comma-joined string (the names are checked with the flag's, cli/lora_cli.c). */
static int read_targets(reader *r, const key *k, const zt_node *v, const char *kp)
{
    char got[96], *out = zt_schema_field(r, k);
    size_t used = 0;
    if (v->type == ZT_NODE_STR && v->text[0])
        return snprintf(out, k->cap, "%s", v->text) < (int)k->cap ? ZT_OK : bad(r, v->line, kp, "too long");
    if (v->type != ZT_NODE_LIST || !v->child)
        return bad(r, v->line, kp, "expected all-linear or a list of projection names, got %s",
                   describe(r, v, got, sizeof got));
    for (const zt_node *item = v->child; item; item = item->next) {
        if (item->type != ZT_NODE_STR || !item->text[0] || strchr(item->text, ','))
            return bad(r, item->line, kp, "expected a list of projection names, but an item is %s",
                       describe(r, item, got, sizeof got));
        int n = snprintf(out + used, k->cap - used, "%s%s", used ? "," : "", item->text);
        if (n < 0 || (size_t)n >= k->cap - used)
            return bad(r, item->line, kp, "too many names");
        used += (size_t)n;
    }
    return ZT_OK;
}

/* The YAML's own kinds (nulls never reach here: they are absent). */
static int read_custom(reader *r, const key *k, const zt_node *v, const char *kp)
{
    char got[96], allowed[256];
    zt_node_type t = v->type;
    long long x = 0;
    int rc;
    switch (k->kind) {
    case K_INT:
    case K_INT_DIGITS:
    case K_LONG:
        if ((rc = get_range(r, k, v, kp, &x)) != ZT_OK)
            return rc;
        if (k->off == ZT_NO_FIELD)
            return ZT_OK;
        if (k->kind != K_LONG)
            *(int *)zt_schema_field(r, k) = (int)x;
        else
            *(long *)zt_schema_field(r, k) = (long)x;
        return ZT_OK;
    case K_REAL: {
        if (t != ZT_NODE_INT && t != ZT_NODE_FLOAT)
            return bad(r, v->line, kp, "expected a number, got %s", describe(r, v, got, sizeof got));
        /* .inf and .nan are YAML floats that strtod does not read */
        double d = strchr(v->text, '.') && strpbrk(v->text, "iInN") ? NAN : strtod(v->text, NULL);
        if (!isfinite(d) || d < k->min)
            return bad(r, v->line, kp, "must be a finite number of at least %lld, got %s",
                       (long long)k->min, v->text);
        *(double *)zt_schema_field(r, k) = d;
        return ZT_OK;
    }
    case K_STRATEGY: {
        int s = strategy_of(v);
        if (!s) {
            zt_join_names(allowed, sizeof allowed, strategies);
            return bad(r, v->line, kp, "expected one of %s or their numbers 1-5, got %s", allowed,
                       describe(r, v, got, sizeof got));
        }
        *(int *)zt_schema_field(r, k) = s;
        return ZT_OK;
    }
    case K_EMPTY_MAP:
        if (t != ZT_NODE_MAP || v->child)
            return bad(r, v->line, kp, "only {} is accepted (%s), got %s", k->why, describe(r, v, got, sizeof got));
        return ZT_OK;
    case K_TARGETS:
        return read_targets(r, k, v, kp);
    case K_RESHARD: {
        int s = t == ZT_NODE_STR ? strategy_of(v) : 0;
        if (t == ZT_NODE_BOOL) {
            *(zt_setting *)zt_schema_field(r, k) = v->boolean ? ZT_YES : ZT_NO;
            return ZT_OK;
        }
        if (!s) {
            zt_join_names(allowed, sizeof allowed, strategies);
            return bad(r, v->line, kp, "expected true or false (FSDP2), or one of %s (FSDP1), got %s",
                       allowed, describe(r, v, got, sizeof got));
        }
        STATE(r)->reshard_strategy = s;
        return ZT_OK;
    }
    }
    return ZT_EFAIL;
}

/* Old names Accelerate still reads.  In fsdp_config, `accelerate launch` turns a key x
 * without the fsdp_ prefix into fsdp_x (commands/launch.py), and versions before 0.28
 * wrote fsdp_backward_prefetch_policy for what is now fsdp_backward_prefetch (current
 * Accelerate passes the old name on to nothing, so its value is silently lost there;
 * ztrain reads it, with a note, since prefetching never changes the numbers). */
static const char *renamed(const section *s, const char *name, char *buf, size_t cap)
{
    if (s->id != SEC_FSDP)
        return NULL;
    if (!strncmp(name, "fsdp_", 5))
        name += 5;
    if (!strcmp(name, "backward_prefetch_policy"))
        name = "backward_prefetch";
    snprintf(buf, cap, "fsdp_%s", name);
    for (int j = 0; j < s->nkeys; j++)
        if (!strcmp(s->keys[j].name, buf))
            return buf;
    return NULL;
}

static const zt_schema_format accelerate_yaml = {
    .sections = all_sections, .nsections = NSEC, .has_lines = 1, .null_is_absent = 1,
    .list_word = "a list", .map_word = "a mapping", .numbers_as_written = 1,
    .section_want = "a mapping of %s keys", .read_custom = read_custom, .renamed = renamed,
};

/* ---- checks across keys ------------------------------------------------------------ */

/* Line where section s's key `name` was given, 0 if absent. */
static int given(const reader *r, const section *s, const char *name)
{
    return zt_schema_given(r, s, name);
}

/* The top level: distributed_type against the sections given, the deprecated
 * spellings, machine_rank. */
static int check_top(reader *r)
{
    zt_accel_config *c = CONFIG(r);
    const char *dt = c->distributed_type;
    int dt_line = given(r, &top_section, "distributed_type");
    if (!dt_line)
        return zt_fail(r->err, ZT_EINPUT,
                       "%s: distributed_type: missing (allowed: NO | MULTI_CPU | FSDP | DEEPSPEED)",
                       r->path);
    if (r->nonempty[SEC_FSDP] && strcmp(dt, "FSDP"))
        return bad(r, given(r, &top_section, "fsdp_config"), "fsdp_config",
                   "given, but distributed_type is %s (line %d); FSDP settings need "
                   "distributed_type: FSDP", dt, dt_line);
    if (r->nonempty[SEC_DS] && strcmp(dt, "DEEPSPEED"))
        return bad(r, given(r, &top_section, "deepspeed_config"), "deepspeed_config",
                   "given, but distributed_type is %s (line %d); DeepSpeed settings need "
                   "distributed_type: DEEPSPEED", dt, dt_line);
    if (!strcmp(dt, "NO") && c->num_processes > 1)
        return bad(r, given(r, &top_section, "num_processes"), "num_processes",
                   "is %d, but distributed_type NO runs one process (use MULTI_CPU, FSDP or "
                   "DEEPSPEED for more)", c->num_processes);
    /* the old top-level spellings, converted as Accelerate's process_config does */
    int fp16_line = given(r, &top_section, "fp16");
    if (fp16_line) {
        int mp_line = given(r, &top_section, "mixed_precision");
        if (mp_line)
            zt_schema_note(r, "%s:%d: fp16 is deprecated and ignored beside mixed_precision (line %d), as "
                           "Accelerate ignores it; remove it", r->path, fp16_line, mp_line);
        else
            zt_schema_note(r, "%s:%d: fp16 is deprecated; read as mixed_precision: %s (remove it and set "
                           "mixed_precision)", r->path, fp16_line, c->legacy_fp16 == ZT_YES ? "fp16" : "no");
        if (!mp_line && c->legacy_fp16 == ZT_YES)
            snprintf(c->mixed_precision, sizeof c->mixed_precision, "fp16");
    }
    int dynamo_line = given(r, &top_section, "dynamo_backend");
    if (dynamo_line)
        zt_schema_note(r, "%s:%d: dynamo_backend is deprecated; Accelerate reads it as "
                       "dynamo_config.dynamo_backend (ignored by ztrain, which compiles no graphs)",
                       r->path, dynamo_line);
    int machines = c->num_machines > 0 ? c->num_machines : 1;
    if (c->machine_rank >= machines)
        return bad(r, given(r, &top_section, "machine_rank"), "machine_rank",
                   "is %d, but num_machines is %d (allowed: 0 to %d)", c->machine_rank, machines,
                   machines - 1);
    return ZT_OK;
}

/* FSDP: one way to say the strategy. */
static int check_fsdp(reader *r)
{
    zt_accel_config *c = CONFIG(r);
    int reshard_strategy = STATE(r)->reshard_strategy;
    int strategy_line = given(r, &fsdp_section, "fsdp_sharding_strategy");
    int reshard_line = given(r, &fsdp_section, "fsdp_reshard_after_forward");
    int version_line = given(r, &fsdp_section, "fsdp_version");
    if (strategy_line && reshard_line)
        return bad(r, reshard_line, "fsdp_config.fsdp_reshard_after_forward",
                   "contradicts fsdp_config.fsdp_sharding_strategy (line %d); give one of them",
                   strategy_line);
    if (c->fsdp_reshard_after_forward != ZT_UNSET && c->fsdp_version == 1)
        return bad(r, reshard_line, "fsdp_config.fsdp_reshard_after_forward",
                   "true/false is the FSDP2 form, but fsdp_version is 1 (line %d); give a "
                   "strategy name (FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | "
                   "HYBRID_SHARD_ZERO2) or set fsdp_version: 2", version_line);
    if (reshard_strategy > 0 && c->fsdp_version == 2)
        return bad(r, reshard_line, "fsdp_config.fsdp_reshard_after_forward",
                   "a strategy name is the FSDP1 form, but fsdp_version is 2 (line %d); "
                   "use true or false", version_line);
    if (c->fsdp_reshard_after_forward != ZT_UNSET)
        c->fsdp_sharding_strategy = c->fsdp_reshard_after_forward == ZT_YES ? 1 : 2;
    if (reshard_strategy > 0)
        c->fsdp_sharding_strategy = reshard_strategy;
    return ZT_OK;
}

/* DeepSpeed: ZeRO-3-only settings, and one source of truth beside a JSON. */
static int check_deepspeed(reader *r)
{
    zt_accel_config *c = CONFIG(r);
    int config_file_line = given(r, &deepspeed_section, "deepspeed_config_file");
    if (config_file_line) {
        static const char *const in_json[] = {"zero_stage", "gradient_accumulation_steps",
                                              "gradient_clipping", "offload_optimizer_device",
                                              "offload_param_device", "zero3_save_16bit_model",
                                              NULL};
        for (const char *const *name = in_json; *name; name++) {
            int line = given(r, &deepspeed_section, *name);
            if (line) {
                char kp[64];
                snprintf(kp, sizeof kp, "deepspeed_config.%s", *name);
                return bad(r, line, kp,
                           "cannot be given beside deepspeed_config_file (line %d); set it in "
                           "that JSON file instead", config_file_line);
            }
        }
        /* mixed_precision beside the JSON is Accelerate's own template
         * (examples/config_yaml_templates/deepspeed.yaml): it fills the JSON's
         * bf16/fp16 "auto"; an explicit JSON value that disagrees is refused when
         * both are read (config/settings.c) */
    }
    int stage = c->zero_stage >= 0 ? c->zero_stage : config_file_line ? -1 : 2;
    const char *stage_src = c->zero_stage >= 0 ? "" : " (Accelerate's default, as zero_stage is absent)";
    static const char *const zero3_only[] = {"zero3_save_16bit_model", "zero3_init_flag", NULL};
    for (const char *const *name = zero3_only; *name; name++) {
        zt_setting on = !strcmp(*name, "zero3_init_flag") ? c->zero3_init_flag : c->zero3_save_16bit_model;
        if (on == ZT_YES && stage >= 0 && stage != 3) {
            char kp[64];
            snprintf(kp, sizeof kp, "deepspeed_config.%s", *name);
            return bad(r, given(r, &deepspeed_section, *name), kp,
                       "true needs zero_stage 3, but the stage is %d%s; set it to false or "
                       "zero_stage: 3", stage, stage_src);
        }
    }
    if (!strcmp(c->offload_param_device, "cpu") && stage >= 0 && stage != 3)
        return bad(r, given(r, &deepspeed_section, "offload_param_device"),
                   "deepspeed_config.offload_param_device",
                   "cpu needs zero_stage 3 (parameters are partitioned only at stage 3), but the "
                   "stage is %d%s; use none or zero_stage: 3", stage, stage_src);
    return ZT_OK;
}

/* LoRA: each setting given once, by its TRL name or its LoraConfig name, and where;
 * peft_config: means use_peft: true. */
static int check_peft(reader *r)
{
    static const char *const names[ZT_PEFT_NKEYS][2] = {
        [ZT_PEFT_USE] = {"use_peft", NULL},         [ZT_PEFT_R] = {"lora_r", "r"},
        [ZT_PEFT_ALPHA] = {"lora_alpha", "lora_alpha"}, [ZT_PEFT_DROPOUT] = {"lora_dropout", "lora_dropout"},
        [ZT_PEFT_TARGETS] = {"lora_target_modules", "target_modules"},
        [ZT_PEFT_RSLORA] = {"use_rslora", "use_rslora"}, [ZT_PEFT_BIAS] = {"lora_bias", "bias"}};
    zt_accel_peft *p = &CONFIG(r)->peft;
    for (int i = 0; i < ZT_PEFT_NKEYS; i++) {
        int top = given(r, &top_section, names[i][0]);
        int sec = names[i][1] ? given(r, &peft_section, names[i][1]) : 0;
        snprintf(p->key[i], sizeof p->key[i], "%s%s", sec ? "peft_config." : "", names[i][sec ? 1 : 0]);
        if (top && sec)
            return bad(r, sec, p->key[i], "the same setting as %s (line %d); give one of them", names[i][0], top);
        p->line[i] = top ? top : sec;
    }
    p->section_line = r->nonempty[SEC_PEFT] ? given(r, &top_section, "peft_config") : 0;
    if (p->section_line && p->use_peft == ZT_NO)
        return bad(r, p->line[ZT_PEFT_USE], "use_peft",
                   "false, but peft_config (line %d) describes adapters; remove one of them", p->section_line);
    return ZT_OK;
}

static int check_combinations(reader *r)
{
    int rc;
    if ((rc = check_top(r)) || (rc = check_fsdp(r)) || (rc = check_deepspeed(r)) || (rc = check_peft(r)))
        return rc;
    return ZT_OK;
}

/* ---- public ------------------------------------------------------------------------ */

void zt_accel_config_init(zt_accel_config *c)
{
    memset(c, 0, sizeof *c); /* every string "" */
    c->num_processes = c->num_machines = c->machine_rank = -1;
    c->main_process_port = c->mpirun_ccl = -1;
    c->fsdp_sharding_strategy = c->fsdp_version = -1;
    c->fsdp_min_num_params = -1;
    c->zero_stage = -1;
    c->gradient_accumulation_steps = -1;
    c->gradient_clipping = -1.0;
    c->peft.r = -1;
    c->peft.alpha = c->peft.dropout = -1.0;
}

/* The config in text[0..len) into *out; path names it in messages. */
static int parse(const char *path, const char *text, size_t len, zt_accel_config *out, zt_err *err)
{
    if (len > MAX_FILE_BYTES)
        return zt_fail(err, ZT_EINPUT, "%s: %lld bytes is too large for an Accelerate config "
                       "(at most %u)", path, (long long)len, MAX_FILE_BYTES);
    zt_doc doc = {0};
    loader ld = {.path = path, .doc = &doc, .err = err};
    if (!yaml_parser_initialize(&ld.parser))
        return zt_fail(err, ZT_EFAIL, "%s: out of memory while reading YAML", path);
    yaml_parser_set_input_string(&ld.parser, (const unsigned char *)text, len);
    zt_node *root = NULL;
    int rc = load_document(&ld, &root);
    yaml_parser_delete(&ld.parser);
    if (rc != ZT_OK) {
        zt_doc_free(&doc);
        return rc;
    }

    zt_accel_config c;
    zt_accel_config_init(&c);
    snprintf(c.path, sizeof c.path, "%s", path);
    yaml_state st = {.reshard_strategy = -1};
    reader r;
    zt_schema_reader_init(&r, &accelerate_yaml, path, &c, &st, err);
    if (root->type != ZT_NODE_MAP) {
        char got[96];
        if (root->type == ZT_NODE_NULL)
            rc = zt_fail(err, ZT_EINPUT, "%s:%d: the document is empty; expected a mapping of "
                         "Accelerate settings", path, root->line);
        else
            rc = zt_fail(err, ZT_EINPUT, "%s:%d: the document is %s; expected a mapping of "
                         "Accelerate settings (such as 'distributed_type: FSDP')", path,
                         root->line, describe(&r, root, got, sizeof got));
    } else {
        rc = zt_schema_read_map(&r, &top_section, root);
        if (rc == ZT_OK)
            rc = check_combinations(&r);
    }
    zt_doc_free(&doc);
    for (int i = 0; i < r.nnotes && i < ZT_ACCEL_MAX_NOTES; i++)
        snprintf(c.notes[c.nnotes++], sizeof c.notes[0], "%s", r.notes[i]);
    if (rc == ZT_OK)
        *out = c;
    return rc;
}

int zt_accel_config_parse(const char *name, const char *text, size_t len, zt_accel_config *out,
                          zt_err *err)
{
    return parse(name, text, len, out, err);
}

/* A DeepSpeed JSON given where the Accelerate YAML goes: YAML would read it (JSON
 * is YAML) and refuse its keys one by one; name the mix-up instead.  A JSON
 * object holding one of DeepSpeed's own top-level keys is taken for one. */
static int deepspeed_json_given(const char *path, const char *text, zt_err *err)
{
    static const char *const ds_keys[] = {"\"zero_optimization\"", "\"train_micro_batch_size_per_gpu\"",
                                          "\"train_batch_size\"", "\"gradient_accumulation_steps\"", NULL};
    const char *p = text + strspn(text, " \t\r\n");
    if (*p != '{')
        return ZT_OK;
    for (int i = 0; ds_keys[i]; i++)
        if (strstr(p, ds_keys[i]))
            return zt_fail(err, ZT_EINPUT, "%s: this is a DeepSpeed JSON (it has %s), not an Accelerate config: "
                           "use --deepspeed_config_file %s", path, ds_keys[i], path);
    return ZT_OK;
}

int zt_accel_config_read(const char *path, zt_accel_config *out, zt_err *err)
{
    int fd;
    struct stat st;
    int orc = zt_open_input(path, "the Accelerate config", &fd, &st, err);
    if (orc)
        return orc;
    if (st.st_size > (off_t)MAX_FILE_BYTES) {
        close(fd);
        return zt_fail(err, ZT_EINPUT, "%s: %lld bytes is too large for an Accelerate config "
                       "(at most %u)", path, (long long)st.st_size, MAX_FILE_BYTES);
    }
    size_t len = (size_t)st.st_size, got = 0;
    char *text = zt_alloc(ZT_MEM_OTHER, len + 1);
    if (!text) {
        close(fd);
        return zt_fail(err, ZT_EFAIL, "%s: out of memory while reading YAML", path);
    }
    int rc = ZT_OK;
    while (got < len) {
        ssize_t n = read(fd, text + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = zt_fail(err, ZT_EFAIL, "%s: cannot read the Accelerate config: %s", path,
                         n < 0 ? strerror(errno) : "the file shrank while being read");
            break;
        }
        got += (size_t)n;
    }
    close(fd);
    if (rc == ZT_OK) {
        text[len] = '\0';
        rc = deepspeed_json_given(path, text, err);
    }
    if (rc == ZT_OK)
        rc = parse(path, text, len, out, err);
    zt_free(ZT_MEM_OTHER, text, len + 1);
    return rc;
}
