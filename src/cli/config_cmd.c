/* config_cmd.c — `ztrain config show|validate|convert` and `ztrain estimate-memory`:
 * what a run would do, without running it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../config/convert.h"
#include "../engine/engine.h"
#include "../core/fs.h"
#include "../model/layout.h"
#include "../model/llama.h"
#include "commands.h"
#include "lora_cli.h"
#include "memory_gate.h"
#include "run_settings.h"

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
static const double MiB = 1048576.0;

typedef struct report_args {
    const char *model, *model_config;
    int world;
} report_args;

/* Memory per rank for plan p: model state by role and activations for B x T; with lora
 * (NULL: none), as LoRA allocates them (its adapter units, the base frozen). */
static int print_memory(FILE *f, const zt_llama_config *cfg, const zt_plan *p, int B, int T, int ckpt,
                        const zt_lora *lora, zt_err *err)
{
    zt_layout lay;
    int rc = zt_layout_build(&lay, cfg, p->wrap, (size_t)p->min_num_params, p->group_size, err);
    if (rc || (lora && (rc = zt_lora_layout(&lay, lora, err))))
        return rc;
    zt_engine_bytes b = zt_engine_estimate(&lay, p->prec, p->stage, p->group_size, &p->overlap);
    size_t act = zt_plan_activation_bytes(cfg, p, B, T, ckpt, 1);
    act += lora ? zt_model_lora_activation_bytes(cfg, B, T, lora, p->prec.compute, p->activations == ZT_PLAN_ACT_BF16)
                : 0;
    size_t maxu = 0;
    for (int u = 0; u < lay.nunits; u++)
        maxu = lay.units[u].padded_numel > maxu ? lay.units[u].padded_numel : maxu;
    fprintf(f, "units:            %d (%s), largest %zu parameters; model %zu parameters\n", lay.nunits,
            zt_wrap_policy_name(p->wrap), maxu, lay.numel);
    fprintf(f, "memory per rank (estimated; B=%d, T=%d%s):\n", B, T, ckpt ? ", gradient checkpointing" : "");
    fprintf(f, "  master params    %10.2f MiB\n  gradients        %10.2f MiB\n  optimizer state  %10.2f MiB\n",
            (double)b.master / MiB, (double)b.grads / MiB, (double)b.optim / MiB);
    fprintf(f, "  gathered params  %10.2f MiB\n  comm buffers     %10.2f MiB\n  activations      %10.2f MiB\n",
            (double)b.gathered / MiB, (double)b.comm / MiB, (double)act / MiB);
    /* bytes per parameter before sharding: the same plan on one rank */
    zt_engine_bytes one = zt_engine_estimate(&lay, p->prec, 0, 1, NULL);
    fprintf(f, "  total            %10.2f MiB (model state %.2f MiB per rank; %.2f bytes/parameter unsharded)\n",
            (double)(b.master + b.grads + b.optim + b.gathered + b.comm + act) / MiB,
            (double)(b.master + b.grads + b.optim) / MiB,
            (double)(one.master + one.grads + one.optim) / (double)lay.numel);
    /* where those bytes live: the device's memory and, with offload, the host's
     * (master, m and v whole; of the gradients and comm buffers, the host's shards) */
    char where[192] = "";
    if (b.host)
        snprintf(where, sizeof where, ": master %.2f, m and v %.2f, gradient and compute-dtype shards %.2f MiB, "
                 "in pinned host memory", (double)b.master / MiB, (double)b.optim / MiB,
                 (double)(b.host - b.master - b.optim) / MiB);
    else if (p->offload_requested)
        snprintf(where, sizeof where, ": offload asked, but on the CPU nothing moves");
    fprintf(f, "  device           %10.2f MiB (memory_bytes)\n  host (offload)   %10.2f MiB (host_memory_bytes)%s\n",
            (double)(b.master + b.grads + b.optim + b.gathered + b.comm - b.host + act) / MiB, (double)b.host / MiB,
            where);
    zt_layout_free(&lay);
    return ZT_OK;
}

static void print_plan_details(FILE *f, const zt_settings *st, const zt_plan *p)
{
    fprintf(f, "source:           %s%s%s\n", st->config_file ? st->config_file : "",
            st->config_file && st->have_ds ? " + " : "",
            st->have_ds ? st->ds_json_path : st->config_file ? "" : "flags only");
    zt_plan_print(f, p, NULL);
    fprintf(f, "ZeRO stage %d <-> FSDP %s\n", p->stage,
            p->stage == 0 ? "NO_SHARD" : p->stage == 1 ? "(none: FSDP cannot shard only the optimizer)"
            : p->stage == 2 ? (p->hybrid ? "HYBRID_SHARD_ZERO2" : "SHARD_GRAD_OP")
                            : (p->hybrid ? "HYBRID_SHARD" : "FULL_SHARD"));
    if (p->ls.on)
        fprintf(f, "loss scaling:     dynamic, initial 2^%g, window %ld, hysteresis %d, min %g\n",
                p->ls.initial_scale_power, p->ls.window, p->ls.hysteresis, p->ls.min_scale);
    if (st->have_ds) {
        const zt_ds_resolved *r = &st->ds_resolved;
        const struct { const char *name; long v; } sizes[] = {
            {"reduce_bucket_size", r->reduce_bucket_size},
            {"allgather_bucket_size", r->allgather_bucket_size},
            {"stage3_prefetch_bucket_size", r->stage3_prefetch_bucket_size},
            {"stage3_param_persistence_threshold", r->stage3_param_persistence_threshold},
            {"stage3_max_live_parameters", r->stage3_max_live_parameters},
        };
        fprintf(f, "buckets:          ");
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            fprintf(f, "%s%s ", i ? ", " : "", sizes[i].name);
            if (sizes[i].v < 0)
                fprintf(f, "auto (unresolved: needs the model's hidden_size)");
            else
                fprintf(f, "%ld", sizes[i].v);
        }
        fprintf(f, " (what they do: the limits line above, docs/zero.md)\n");
        fprintf(f, "batch:            micro %d x accumulation %d x world %d = train_batch_size %d\n",
                r->micro_batch, r->grad_accum, p->world, r->train_batch_size);
    }
}

/* The DeepSpeed "auto" values left unresolved without a model, one line (none: nothing). */
static void print_unresolved(FILE *f, const zt_settings *st)
{
    if (!st->have_ds)
        return;
    const zt_ds_resolved *r = &st->ds_resolved;
    /* the sizes Accelerate fills from the model (deepspeed.h) */
    const struct { const char *name; long v; const char *rule; } sizes[] = {
        {"reduce_bucket_size", r->reduce_bucket_size, "hidden_size^2"},
        {"stage3_prefetch_bucket_size", r->stage3_prefetch_bucket_size, "0.9 * hidden_size^2"},
        {"stage3_param_persistence_threshold", r->stage3_param_persistence_threshold, "10 * hidden_size"},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v < 0)
            fprintf(f, "%szero_optimization.%s (auto: %s)",
                    n++ ? ", " : "unresolved until a model is given (--model DIR or --model_config CFG.json): ",
                    sizes[i].name, sizes[i].rule);
    if (n)
        fprintf(f, "\n");
}

int zt_cmd_config(int argc, char **argv, zt_err *err)
{
    if (argc < 1 || (strcmp(argv[0], "show") && strcmp(argv[0], "validate") && strcmp(argv[0], "convert"))) {
        if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
            printf("usage: ztrain config show|validate|convert --config_file F [--deepspeed_config_file J] "
                   "[--model DIR | --model_config CFG.json] [--num_processes N] [plan flags]\n"
                   "       ztrain config convert ... --to deepspeed|fsdp [--output FILE]\n");
            return ZT_OK;
        }
        return zt_fail(err, ZT_EINPUT, "ztrain config: expected show, validate or convert%s%s",
                       argc >= 1 ? ", got " : "", argc >= 1 ? argv[0] : "");
    }
    const char *verb = argv[0], *model = NULL, *model_config = NULL, *to = NULL, *output = NULL;
    int world = 0;
    zt_settings st;
    zt_settings_defaults(&st);
    zt_flag flags[] = {
        {"model", ZT_FLAG_STR, &model, "model directory (for units and memory)", 1, 0, 0},
        {"model_config", ZT_FLAG_STR, &model_config, "a config.json instead of a model directory", 1, 0, 0},
        {"num_processes", ZT_FLAG_INT, &world, "world size (default: the config's num_processes, else 1)", 1, 1 << 20, 0},
        {"to", ZT_FLAG_STR, &to, "convert: deepspeed | fsdp", 1, 0, 0},
        {"output", ZT_FLAG_STR, &output, "convert: write here instead of stdout", 1, 0, 0},
        PLAN_FLAGS(st),
    };
    flag_table table = {flags, NFLAGS(flags)};
    st.given = zt_flag_given;
    st.given_ctx = &table;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "ztrain config %s", verb);
    if (zt_flags_wants_help(argc - 1, argv + 1)) {
        zt_flags_usage(flags, NFLAGS(flags), "usage: ztrain config show|validate|convert [flags]");
        return ZT_OK;
    }
    int rc = zt_flags_parse(flags, NFLAGS(flags), argc - 1, argv + 1, cmd, err);
    if (rc)
        return rc;
    /* the world: the flag, else the YAML's num_processes (read twice: cheap) */
    if (!world && st.config_file) {
        zt_accel_config ac;
        zt_accel_config_init(&ac);
        if ((rc = zt_accel_config_read(st.config_file, &ac, err)))
            return rc;
        world = ac.num_processes > 0 ? ac.num_processes : 1;
    }
    if (!world)
        world = 1;
    /* without a model, a tiny stand-in resolves the plan; units and memory need the real one */
    zt_llama_config cfg;
    zt_plan plan;
    if (model || model_config) {
        rc = zt_resolve_run(&st, model, model_config, world, NULL, &cfg, &plan, err);
    } else {
        /* DeepSpeed's hidden-size "auto" values wait for a model; convert writes
         * a config, so it resolves everything or refuses */
        st.allow_unresolved_auto = strcmp(verb, "convert") != 0;
        rc = zt_settings_plan(&st, world, 0, ZT_F32, NULL, &plan, err);
    }
    if (rc)
        return rc;
    zt_print_config_notes(&st, stderr);
    if (!strcmp(verb, "validate")) {
        printf("valid: %s, %s, %d rank%s, %s\n", zt_face_name(plan.face), plan.strategy, world,
               world == 1 ? "" : "s", plan.mode);
        print_unresolved(stdout, &st);
        return ZT_OK;
    }
    if (!strcmp(verb, "show")) {
        print_plan_details(stdout, &st, &plan);
        print_unresolved(stdout, &st);
        if (model || model_config)
            return print_memory(stdout, &cfg, &plan, st.batch, st.block_size, st.checkpointing, NULL, err);
        printf("units, memory:    give --model DIR or --model_config CFG.json\n");
        return ZT_OK;
    }
    zt_face face;
    if (!to || (strcmp(to, "deepspeed") && strcmp(to, "fsdp")))
        return zt_fail(err, ZT_EINPUT, "%s: --to: expected deepspeed or fsdp%s%s", cmd, to ? ", got " : "",
                       to ? to : "");
    face = !strcmp(to, "deepspeed") ? ZT_FACE_DEEPSPEED : ZT_FACE_FSDP;
    /* write into memory first: a refused conversion must not leave a file behind */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    rc = zt_config_convert(mem, stderr, &st, &plan, face, err);
    fclose(mem);
    if (rc == ZT_OK && output) {
        zt_wpart part = {text, len}; /* an unpredictable temporary name, renamed into place */
        if ((rc = zt_write_atomic(output, &part, 1, err)))
            zt_wrap(err, "--output: ");
    } else if (rc == ZT_OK) {
        fwrite(text, 1, len, stdout);
    }
    free(text);
    return rc;
}

/* Keep, in order, the flags that change what estimate-memory reports (the plan's
 * dtypes, stage, units and overlap, and the batch's activations); the optimizer's
 * and the schedule's, which change no byte, are left out, so they are neither
 * listed nor accepted.  The new count. */
static int memory_flags_only(zt_flag *flags, int n)
{
    static const char *const memory[] = {
        "model", "model_config", "num_processes", "config_file", "deepspeed_config_file", "torch_dtype",
        "mixed_precision", "use_fsdp", "fsdp_sharding_strategy", "fsdp_auto_wrap_policy", "fsdp_backward_prefetch",
        "fsdp_forward_prefetch", "fsdp_limit_all_gathers", "fsdp_min_num_params", "use_deepspeed", "zero_stage",
        "ranks_per_node", "master_compensation", "reduce_dtype", "block_size", "per_device_train_batch_size",
        "gradient_checkpointing", "device", "kernels", "use_peft", "lora_r", "lora_target_modules", NULL,
        /* device: offload splits device from host bytes; kernels: fast mode's training holds no (N, V)
         * logits; LoRA: its adapters' state and activations, the base frozen */
    };
    int kept = 0;
    for (int i = 0; i < n; i++)
        for (int m = 0; memory[m]; m++)
            if (!strcmp(flags[i].name, memory[m])) {
                flags[kept++] = flags[i];
                break;
            }
    return kept;
}

int zt_cmd_estimate_memory(int argc, char **argv, zt_err *err)
{
    const char *model = NULL, *model_config = NULL;
    int world = 1;
    zt_settings st;
    zt_settings_defaults(&st);
    zt_cli_lora lora = ZT_CLI_LORA_DEFAULTS;
    zt_flag flags[] = {
        {"model", ZT_FLAG_STR, &model, "model directory", 1, 0, 0},
        {"model_config", ZT_FLAG_STR, &model_config, "or a config.json", 1, 0, 0},
        {"num_processes", ZT_FLAG_INT, &world, "world size (default 1)", 1, 1 << 20, 0},
        PLAN_FLAGS(st),
        TRAIN_LORA_FLAGS(lora),
    };
    int nflags = memory_flags_only(flags, NFLAGS(flags));
    flag_table table = {flags, nflags};
    st.given = zt_flag_given;
    st.given_ctx = &table;
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, nflags,
                       "usage: ztrain estimate-memory --model DIR|--model_config CFG.json [--num_processes N] [plan flags]");
        return ZT_OK;
    }
    int rc;
    if ((rc = zt_cli_lora_take(&lora, &argc, argv, err)) ||
        (rc = zt_flags_parse(flags, nflags, argc, argv, "ztrain estimate-memory", err)) ||
        (rc = zt_cli_lora_check(&lora, &table, st.config_file, err)))
        return rc;
    if (!model && !model_config)
        return zt_fail(err, ZT_EINPUT, "ztrain estimate-memory: give --model DIR or --model_config CFG.json");
    zt_llama_config cfg;
    zt_plan plan;
    if ((rc = zt_resolve_run(&st, model, model_config, world, NULL, &cfg, &plan, err)))
        return rc;
    zt_print_config_notes(&st, stderr);
    zt_plan_print(stdout, &plan, NULL);
    const zt_lora *l = lora.use_peft ? &lora.lora : NULL;
    if ((l && (rc = zt_cli_lora_plan(&lora, &cfg, 1, err))) ||
        (rc = print_memory(stdout, &cfg, &plan, st.batch, st.block_size, st.checkpointing, l, err)))
        return rc;
    /* the overview Accelerate's estimate-memory gives: every stage and mode at this world size */
    zt_layout lay;
    if ((rc = zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, world, err)) ||
        (l && (rc = zt_lora_layout(&lay, l, err))))
        return rc;
    static const struct { const char *name; zt_precision prec; } modes[] = {
        {"fp32", {ZT_F32, ZT_F32, ZT_F32, ZT_F32, ZT_F32, 0}},
        {"FSDP memory-constrained (bf16)", {ZT_BF16, ZT_BF16, ZT_BF16, ZT_BF16, ZT_BF16, 0}},
        {"bf16 + Kahan", {ZT_BF16, ZT_BF16, ZT_BF16, ZT_BF16, ZT_BF16, 1}},
        {"FSDP aligned / DeepSpeed bf16", {ZT_BF16, ZT_F32, ZT_BF16, ZT_BF16, ZT_BF16, 0}},
    };
    printf("\nmodel state per rank with %d rank%s (MiB; master + grads + optimizer + gathered):\n", world,
           world == 1 ? "" : "s");
    printf("| mode | stage 0 | stage 1 | stage 2 | stage 3 |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        printf("| %s |", modes[i].name);
        for (int stage = 0; stage <= 3; stage++) {
            /* FSDP's default overlap: stage 3 holds one prefetched unit more */
            zt_overlap ov = {.forward_prefetch = 0, .backward_prefetch = ZT_BACKWARD_PREFETCH_PRE,
                             .overlap_reduce = 1};
            zt_engine_bytes b = zt_engine_estimate(&lay, modes[i].prec, stage, world, &ov);
            printf(" %.1f |", (double)(b.master + b.grads + b.optim + b.gathered) / MiB);
        }
        printf("\n");
    }
    zt_layout_free(&lay);
    return ZT_OK;
}
