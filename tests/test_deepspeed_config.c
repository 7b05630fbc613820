/* test_deepspeed_config.c — DeepSpeed JSON configs as the Hugging Face docs and Accelerate
 * users write them read to the settings they state, "auto" resolves from the run as
 * Accelerate resolves it (bucket sizes from hidden_size, batch numbers from the run and
 * the world), the batch numbers are derived and checked as DeepSpeed does, and every
 * unknown, mistyped, out-of-range or contradictory key is ZT_EINPUT naming the file and
 * the key.  Malformed JSON never crashes and nothing leaks. */
#include <string.h>
#include <unistd.h>

#include "../src/config/deepspeed.h"
#include "../src/core/mem.h"
#include "test.h"
#include "tmpdir.h"

static char tmpdir[64];

static const char *P(const char *name) { return tmpdir_path(tmpdir, name); }

/* Parse text from memory (no file), named TMPDIR/ds_config.json in messages. */
static int read_text(const char *text, zt_ds_config *c, zt_err *err)
{
    zt_ds_config_init(c);
    return zt_ds_config_parse(P("ds_config.json"), text, strlen(text), c, err);
}

/* The ZeRO-2 example of the Hugging Face DeepSpeed integration docs, verbatim. */
static const char *hf_zero2 =
    "{\n"
    "    \"fp16\": {\n"
    "        \"enabled\": \"auto\",\n"
    "        \"loss_scale\": 0,\n"
    "        \"loss_scale_window\": 1000,\n"
    "        \"initial_scale_power\": 16,\n"
    "        \"hysteresis\": 2,\n"
    "        \"min_loss_scale\": 1\n"
    "    },\n"
    "\n"
    "    \"optimizer\": {\n"
    "        \"type\": \"AdamW\",\n"
    "        \"params\": {\n"
    "            \"lr\": \"auto\",\n"
    "            \"betas\": \"auto\",\n"
    "            \"eps\": \"auto\",\n"
    "            \"weight_decay\": \"auto\"\n"
    "        }\n"
    "    },\n"
    "\n"
    "    \"scheduler\": {\n"
    "        \"type\": \"WarmupLR\",\n"
    "        \"params\": {\n"
    "            \"warmup_min_lr\": \"auto\",\n"
    "            \"warmup_max_lr\": \"auto\",\n"
    "            \"warmup_num_steps\": \"auto\"\n"
    "        }\n"
    "    },\n"
    "\n"
    "    \"zero_optimization\": {\n"
    "        \"stage\": 2,\n"
    "        \"offload_optimizer\": {\n"
    "            \"device\": \"cpu\",\n"
    "            \"pin_memory\": true\n"
    "        },\n"
    "        \"allgather_partitions\": true,\n"
    "        \"allgather_bucket_size\": 2e8,\n"
    "        \"overlap_comm\": true,\n"
    "        \"reduce_scatter\": true,\n"
    "        \"reduce_bucket_size\": 2e8,\n"
    "        \"contiguous_gradients\": true\n"
    "    },\n"
    "\n"
    "    \"gradient_accumulation_steps\": \"auto\",\n"
    "    \"gradient_clipping\": \"auto\",\n"
    "    \"steps_per_print\": 2000,\n"
    "    \"train_batch_size\": \"auto\",\n"
    "    \"train_micro_batch_size_per_gpu\": \"auto\",\n"
    "    \"wall_clock_breakdown\": false\n"
    "}\n";

/* The ZeRO-3 example of the same docs, verbatim. */
static const char *hf_zero3 =
    "{\n"
    "    \"fp16\": {\n"
    "        \"enabled\": \"auto\",\n"
    "        \"loss_scale\": 0,\n"
    "        \"loss_scale_window\": 1000,\n"
    "        \"initial_scale_power\": 16,\n"
    "        \"hysteresis\": 2,\n"
    "        \"min_loss_scale\": 1\n"
    "    },\n"
    "\n"
    "    \"optimizer\": {\n"
    "        \"type\": \"AdamW\",\n"
    "        \"params\": {\n"
    "            \"lr\": \"auto\",\n"
    "            \"betas\": \"auto\",\n"
    "            \"eps\": \"auto\",\n"
    "            \"weight_decay\": \"auto\"\n"
    "        }\n"
    "    },\n"
    "\n"
    "    \"scheduler\": {\n"
    "        \"type\": \"WarmupLR\",\n"
    "        \"params\": {\n"
    "            \"warmup_min_lr\": \"auto\",\n"
    "            \"warmup_max_lr\": \"auto\",\n"
    "            \"warmup_num_steps\": \"auto\"\n"
    "        }\n"
    "    },\n"
    "\n"
    "    \"zero_optimization\": {\n"
    "        \"stage\": 3,\n"
    "        \"offload_optimizer\": {\n"
    "            \"device\": \"cpu\",\n"
    "            \"pin_memory\": true\n"
    "        },\n"
    "        \"offload_param\": {\n"
    "            \"device\": \"cpu\",\n"
    "            \"pin_memory\": true\n"
    "        },\n"
    "        \"overlap_comm\": true,\n"
    "        \"contiguous_gradients\": true,\n"
    "        \"sub_group_size\": 1e9,\n"
    "        \"reduce_bucket_size\": \"auto\",\n"
    "        \"stage3_prefetch_bucket_size\": \"auto\",\n"
    "        \"stage3_param_persistence_threshold\": \"auto\",\n"
    "        \"stage3_max_live_parameters\": 1e9,\n"
    "        \"stage3_max_reuse_distance\": 1e9,\n"
    "        \"stage3_gather_16bit_weights_on_model_save\": true\n"
    "    },\n"
    "\n"
    "    \"gradient_accumulation_steps\": \"auto\",\n"
    "    \"gradient_clipping\": \"auto\",\n"
    "    \"steps_per_print\": 2000,\n"
    "    \"train_batch_size\": \"auto\",\n"
    "    \"train_micro_batch_size_per_gpu\": \"auto\",\n"
    "    \"wall_clock_breakdown\": false\n"
    "}\n";

/* A TinyLlama-sized run: H = 768, per-device batch 4, accumulation 2, two ranks. */
static zt_ds_run run768(void)
{
    zt_ds_run run;
    zt_ds_run_init(&run);
    run.micro_batch = 4;
    run.grad_accum = 2;
    run.world = 2;
    run.hidden_size = 768;
    run.lr = 3e-4;
    run.weight_decay = 0.1;
    run.beta1 = 0.9;
    run.beta2 = 0.95;
    run.eps = 1e-6;
    run.max_grad_norm = 0.5;
    run.warmup_steps = 10;
    run.total_steps = 100;
    return run;
}

static int is_auto(zt_ds_value v) { return v.set && v.is_auto; }
static int is_num(zt_ds_value v, double x) { return v.set && !v.is_auto && v.num == x; }

static void test_hf_zero2(void)
{
    zt_ds_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_text(hf_zero2, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.path, P("ds_config.json")));
    ZT_CHECK(is_auto(c.train_batch_size) && is_auto(c.train_micro_batch_size_per_gpu));
    ZT_CHECK(is_auto(c.gradient_accumulation_steps) && is_auto(c.gradient_clipping));
    ZT_CHECK(c.fp16_enabled == ZT_AUTO && c.bf16_enabled == ZT_UNSET);
    ZT_CHECK(c.fp16_loss_scale == 0 && c.fp16_loss_scale_window == 1000);
    ZT_CHECK(c.fp16_initial_scale_power == 16 && c.fp16_hysteresis == 2);
    ZT_CHECK(c.fp16_min_loss_scale == 1);
    ZT_CHECK(c.communication_data_type[0] == '\0');
    ZT_CHECK(c.stage == 2 && c.overlap_comm == ZT_YES && c.contiguous_gradients == ZT_YES);
    ZT_CHECK(is_num(c.allgather_bucket_size, 2e8) && is_num(c.reduce_bucket_size, 2e8));
    ZT_CHECK(!c.stage3_prefetch_bucket_size.set && !c.stage3_param_persistence_threshold.set);
    ZT_CHECK(!c.stage3_max_live_parameters.set);
    ZT_CHECK(c.stage3_gather_16bit_weights_on_model_save == ZT_UNSET);
    ZT_CHECK(!strcmp(c.offload_optimizer_device, "cpu") && c.offload_param_device[0] == '\0');
    ZT_CHECK(!strcmp(c.optimizer_type, "AdamW"));
    ZT_CHECK(is_auto(c.lr) && is_auto(c.weight_decay) && is_auto(c.eps));
    ZT_CHECK(is_auto(c.beta1) && is_auto(c.beta2));
    ZT_CHECK(!strcmp(c.scheduler_type, "WarmupLR"));
    ZT_CHECK(is_auto(c.warmup_min_lr) && is_auto(c.warmup_max_lr));
    ZT_CHECK(is_auto(c.warmup_num_steps) && !c.total_num_steps.set);

    zt_ds_run run = run768();
    zt_ds_resolved r;
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.micro_batch == 4 && r.grad_accum == 2 && r.train_batch_size == 16);
    ZT_CHECK(r.gradient_clipping == 0.5);                 /* the run's max_grad_norm */
    ZT_CHECK(r.reduce_bucket_size == 200000000L);         /* as written, not H*H */
    ZT_CHECK(r.allgather_bucket_size == 200000000L);
    ZT_CHECK(r.stage3_prefetch_bucket_size == 50000000L); /* DeepSpeed's defaults */
    ZT_CHECK(r.stage3_param_persistence_threshold == 100000L);
    ZT_CHECK(r.stage3_max_live_parameters == 1000000000L);
    ZT_CHECK(r.lr == 3e-4 && r.weight_decay == 0.1 && r.eps == 1e-6);
    ZT_CHECK(r.beta1 == 0.9 && r.beta2 == 0.95);
    ZT_CHECK(!strcmp(r.schedule, "constant_with_warmup"));
    ZT_CHECK(r.warmup_steps == 10 && r.total_steps == 100);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_hf_zero3(void)
{
    zt_ds_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_text(hf_zero3, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.stage == 3);
    ZT_CHECK(!strcmp(c.offload_optimizer_device, "cpu") && !strcmp(c.offload_param_device, "cpu"));
    ZT_CHECK(is_auto(c.reduce_bucket_size) && is_auto(c.stage3_prefetch_bucket_size));
    ZT_CHECK(is_auto(c.stage3_param_persistence_threshold));
    ZT_CHECK(is_num(c.stage3_max_live_parameters, 1e9) && !c.allgather_bucket_size.set);
    ZT_CHECK(c.stage3_gather_16bit_weights_on_model_save == ZT_YES);

    zt_ds_run run = run768();
    zt_ds_resolved r;
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    /* Accelerate's hidden-size rules for H = 768 */
    ZT_CHECK(r.reduce_bucket_size == 589824L);                /* H*H */
    ZT_CHECK(r.stage3_prefetch_bucket_size == 530841L);       /* int(0.9*H*H) = int(530841.6) */
    ZT_CHECK(r.stage3_param_persistence_threshold == 7680L);  /* 10*H */
    ZT_CHECK(r.stage3_max_live_parameters == 1000000000L);
    ZT_CHECK(r.allgather_bucket_size == 500000000L);
    ZT_CHECK(r.train_batch_size == 16 && r.gradient_clipping == 0.5);
    /* max_grad_norm unknown to the run: Accelerate's 1.0 */
    run.max_grad_norm = -1;
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.gradient_clipping == 1.0);
    /* other hidden sizes: int() truncates */
    static const struct { int h; long reduce, prefetch, persist; } hs[] = {
        {64, 4096, 3686, 640}, {2048, 4194304, 3774873, 20480}, {4096, 16777216, 15099494, 40960},
    };
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
        run.hidden_size = hs[i].h;
        ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK_MSG(r.reduce_bucket_size == hs[i].reduce && r.stage3_prefetch_bucket_size == hs[i].prefetch &&
                     r.stage3_param_persistence_threshold == hs[i].persist,
                     "H=%d: %ld %ld %ld", hs[i].h, r.reduce_bucket_size,
                     r.stage3_prefetch_bucket_size, r.stage3_param_persistence_threshold);
    }
    /* "auto" bucket sizes need the model's hidden size */
    run.hidden_size = 0;
    ZT_CHECK(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "zero_optimization.reduce_bucket_size") &&
                 strstr(err.msg, "hidden_size"), "%s", err.msg);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_train_batch_size_mismatch(void)
{
    zt_ds_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_text("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4,"
                           " \"gradient_accumulation_steps\": 2}", &c, &err) == ZT_OK,
                 "%s", err.msg);
    zt_ds_run run = run768();
    zt_ds_resolved r;
    ZT_CHECK(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, P("ds_config.json")) && strstr(err.msg, "train_batch_size 32") &&
                 strstr(err.msg, "train_micro_batch_size_per_gpu 4") &&
                 strstr(err.msg, "gradient_accumulation_steps 2") &&
                 strstr(err.msg, "world size 2") && strstr(err.msg, "(= 16)"),
                 "%s", err.msg);
    /* the same numbers agree on four ranks */
    run.world = 4;
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.train_batch_size == 32 && r.micro_batch == 4 && r.grad_accum == 2);
    /* explicit numbers win over the run's: the run's micro batch only fills "auto" */
    run.micro_batch = 16;
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.micro_batch == 4);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* DeepSpeed's _set_batch_related_parameters: whatever is missing follows from the rest. */
static void test_batch_derivation(void)
{
    /* 0 absent, -1 "auto"; want 0 0 0: an error mentioning `hint` */
    static const struct {
        int tbs, micro, accum, world;
        int want_tbs, want_micro, want_accum;
        const char *hint;
    } cases[] = {
        {32, 4, 0, 2, 32, 4, 4, NULL},   /* accumulation = tbs / (micro * world) */
        {32, 0, 2, 2, 32, 8, 2, NULL},   /* micro = tbs / (world * accumulation) */
        {0, 4, 2, 2, 16, 4, 2, NULL},    /* tbs = the product */
        {32, 0, 0, 4, 32, 8, 1, NULL},   /* tbs alone: accumulation 1 */
        {0, 4, 0, 3, 12, 4, 1, NULL},    /* micro alone: accumulation 1 */
        {16, 4, 2, 2, 16, 4, 2, NULL},   /* all three, consistent */
        {-1, -1, -1, 2, 16, 4, 2, NULL}, /* all auto: the run's 4 and 2 */
        {-1, 8, 0, 2, 32, 8, 2, NULL},   /* auto tbs: micro * the run's accumulation * world */
        {-1, -1, 3, 2, 24, 4, 3, NULL},  /* auto tbs with the file's accumulation */
        {48, -1, 0, 2, 48, 4, 6, NULL},  /* auto micro from the run, accumulation derived */
        {30, 4, 0, 2, 0, 0, 0, "train_batch_size 30 is not a multiple of train_micro_batch_size_per_gpu 4 * world size 2 (= 8)"},
        {4, 4, 0, 2, 0, 0, 0, "not a multiple"},
        {30, 0, 4, 2, 0, 0, 0, "gradient_accumulation_steps 4 * world size 2 (= 8)"},
        {9, 0, 0, 2, 0, 0, 0, "not a multiple of the world size 2"},
        {0, 0, 2, 2, 0, 0, 0, "both absent"},
        {0, 0, 0, 1, 0, 0, 0, "both absent"},
        {-1, 0, 2, 2, 0, 0, 0, "train_micro_batch_size_per_gpu is absent"},
        {17, 4, 2, 2, 0, 0, 0, "train_batch_size 17 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 2 * world size 2 (= 16)"},
    };
    zt_ds_run run = run768();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512], part[3][96];
        const int v[3] = {cases[i].tbs, cases[i].micro, cases[i].accum};
        static const char *const names[3] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                             "gradient_accumulation_steps"};
        for (int k = 0; k < 3; k++) {
            if (v[k] == 0)
                snprintf(part[k], sizeof part[k], "\"%s\": null", names[k]);
            else if (v[k] < 0)
                snprintf(part[k], sizeof part[k], "\"%s\": \"auto\"", names[k]);
            else
                snprintf(part[k], sizeof part[k], "\"%s\": %d", names[k], v[k]);
        }
        snprintf(text, sizeof text, "{%s, %s, %s}", part[0], part[1], part[2]);
        zt_ds_config c;
        zt_err err = {0};
        ZT_CHECK_MSG(read_text(text, &c, &err) == ZT_OK, "%s: %s", text, err.msg);
        run.world = cases[i].world;
        zt_ds_resolved r;
        int rc = zt_ds_config_resolve(&c, &run, &r, &err);
        if (!cases[i].hint) {
            ZT_CHECK_MSG(rc == ZT_OK, "case %zu %s: %s", i, text, err.msg);
            ZT_CHECK_MSG(rc != ZT_OK || (r.train_batch_size == cases[i].want_tbs &&
                                         r.micro_batch == cases[i].want_micro &&
                                         r.grad_accum == cases[i].want_accum),
                         "case %zu %s world %d: got %d %d %d", i, text, cases[i].world,
                         r.train_batch_size, r.micro_batch, r.grad_accum);
        } else {
            ZT_CHECK_MSG(rc == ZT_EINPUT && strstr(err.msg, cases[i].hint) &&
                         strstr(err.msg, P("ds_config.json")),
                         "case %zu %s: rc %d, no '%s' in '%s'", i, text, rc, cases[i].hint, err.msg);
        }
    }
    /* "auto" micro batch needs the run's */
    zt_ds_config c;
    zt_err err = {0};
    zt_ds_resolved r;
    ZT_CHECK(read_text("{\"train_micro_batch_size_per_gpu\": \"auto\"}", &c, &err) == ZT_OK);
    run.micro_batch = 0;
    ZT_CHECK(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_EINPUT &&
             strstr(err.msg, "per-device batch size"));
    /* the run's accumulation unknown: Accelerate's 1 */
    run.micro_batch = 2;
    run.grad_accum = 0;
    ZT_CHECK(read_text("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": "
                       "\"auto\", \"gradient_accumulation_steps\": \"auto\"}", &c, &err) == ZT_OK);
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.train_batch_size == 2 * run.world && r.grad_accum == 1 && r.micro_batch == 2);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* Absent settings get DeepSpeed's defaults; no optimizer or scheduler block: the run's. */
static void test_defaults_and_run_values(void)
{
    zt_ds_config c;
    zt_err err = {0};
    zt_ds_resolved r;
    zt_ds_run run = run768();
    ZT_CHECK_MSG(read_text("{\"train_micro_batch_size_per_gpu\": 4, "
                           "\"zero_optimization\": {\"stage\": 1}}", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.train_batch_size == 8 && r.grad_accum == 1);
    ZT_CHECK(r.gradient_clipping == 0.0); /* absent: DeepSpeed does not clip */
    ZT_CHECK(r.reduce_bucket_size == 500000000L && r.allgather_bucket_size == 500000000L);
    ZT_CHECK(r.lr == 3e-4 && r.weight_decay == 0.1 && r.beta2 == 0.95 && r.eps == 1e-6);
    ZT_CHECK(r.schedule[0] == '\0' && r.warmup_steps == 10 && r.total_steps == 100);
    ZT_CHECK(c.fp16_enabled == ZT_UNSET && c.fp16_loss_scale < 0 && c.fp16_initial_scale_power < 0);

    /* An optimizer block with absent params: DeepSpeed's Adam defaults, not the run's */
    ZT_CHECK_MSG(read_text("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"adam\"}, "
                           "\"bf16\": {\"enabled\": true}, \"communication_data_type\": \"FP32\"}",
                           &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.optimizer_type, "Adam") && c.bf16_enabled == ZT_YES && c.stage == -1);
    ZT_CHECK(!strcmp(c.communication_data_type, "fp32"));
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.micro_batch == 4 && r.grad_accum == 1);
    ZT_CHECK(r.lr == 1e-3 && r.weight_decay == 0.0 && r.beta1 == 0.9 && r.beta2 == 0.999);
    ZT_CHECK(r.eps == 1e-8);

    /* explicit params, Adam in DeepSpeed's default adam_w_mode */
    ZT_CHECK_MSG(read_text("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", "
                           "\"params\": {\"lr\": 2e-5, \"betas\": [0.8, 0.99], \"eps\": 1e-7, "
                           "\"weight_decay\": 0.01, \"adam_w_mode\": true}}, "
                           "\"gradient_clipping\": 2}", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(is_num(c.beta1, 0.8) && is_num(c.beta2, 0.99));
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.lr == 2e-5 && r.beta1 == 0.8 && r.beta2 == 0.99 && r.eps == 1e-7);
    ZT_CHECK(r.weight_decay == 0.01 && r.gradient_clipping == 2.0);

    /* JSON null is absent; Accelerate's own generated config (nvme_path null, gather false at
     * stage 2) and the harmless keys read */
    ZT_CHECK_MSG(read_text("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": "
                           "\"auto\", \"gradient_accumulation_steps\": 1, \"zero_optimization\": "
                           "{\"stage\": 2, \"offload_optimizer\": {\"device\": \"none\", "
                           "\"nvme_path\": null}, \"offload_param\": {\"device\": \"none\", "
                           "\"nvme_path\": null}, \"stage3_gather_16bit_weights_on_model_save\": "
                           "false, \"round_robin_gradients\": true, \"elastic_checkpoint\": false}, "
                           "\"steps_per_print\": 10, \"zero_allow_untested_optimizer\": true, "
                           "\"prescale_gradients\": false, \"gradient_predivide_factor\": 1.0, "
                           "\"gradient_clipping\": null, \"fp16\": {\"enabled\": false}}",
                           &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.stage3_gather_16bit_weights_on_model_save == ZT_NO && c.fp16_enabled == ZT_NO);
    ZT_CHECK(!strcmp(c.offload_optimizer_device, "none") && !c.gradient_clipping.set);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_scheduler_mapping(void)
{
    static const struct { const char *json, *schedule; long warmup, total; double lr; } cases[] = {
        {"{\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 5, \"warmup_max_lr\": 3e-4}}",
         "constant_with_warmup", 5, 100, 3e-4},
        {"{\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, \"warmup_max_lr\": \"auto\"}}",
         "constant_with_warmup", 1000, 100, 3e-4}, /* DeepSpeed's warmup default */
        {"{\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_num_steps\": \"auto\", "
         "\"total_num_steps\": 50, \"warmup_max_lr\": \"auto\", \"warmup_type\": \"linear\"}}",
         "linear", 10, 50, 3e-4},
        {"{\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_num_steps\": 0, "
         "\"total_num_steps\": \"auto\", \"warmup_max_lr\": 3e-4}}", "linear", 0, 100, 3e-4},
        {"{\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": \"auto\", "
         "\"total_num_steps\": \"auto\", \"warmup_min_ratio\": 0, \"cos_min_ratio\": 0}}",
         "cosine", 10, 100, 3e-4},
        {"{\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 20}}", "cosine", 1000,
         20, 3e-4},
    };
    zt_ds_run run = run768();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "{\"train_batch_size\": 16, \"optimizer\": {\"type\": "
                 "\"AdamW\", \"params\": {\"lr\": \"auto\"}}, \"scheduler\": %s}", cases[i].json);
        zt_ds_config c;
        zt_err err = {0};
        zt_ds_resolved r;
        ZT_CHECK_MSG(read_text(text, &c, &err) == ZT_OK, "%s: %s", cases[i].json, err.msg);
        ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s: %s", cases[i].json,
                     err.msg);
        ZT_CHECK_MSG(!strcmp(r.schedule, cases[i].schedule) && r.warmup_steps == cases[i].warmup &&
                     r.total_steps == cases[i].total && r.lr == cases[i].lr,
                     "%s: %s %ld %ld %g", cases[i].json, r.schedule, r.warmup_steps, r.total_steps,
                     r.lr);
    }
    /* DeepSpeed trains at warmup_max_lr; one that is not the optimizer's lr is refused */
    static const struct { const char *json; const char *hint; } lr_cases[] = {
        {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4}}, \"scheduler\": "
         "{\"type\": \"WarmupLR\", \"params\": {\"warmup_max_lr\": 1e-3}}}",
         "scheduler.params.warmup_max_lr: 0.001 differs from optimizer.params.lr 0.0003"},
        {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4}}, \"scheduler\": "
         "{\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 9}}}",
         "default 0.001, not optimizer.params.lr 0.0003"},
    };
    for (size_t i = 0; i < sizeof lr_cases / sizeof lr_cases[0]; i++) {
        zt_ds_config c;
        zt_err err = {0};
        ZT_CHECK(read_text(lr_cases[i].json, &c, &err) == ZT_EINPUT);
        ZT_CHECK_MSG(strstr(err.msg, lr_cases[i].hint), "no '%s' in '%s'", lr_cases[i].hint, err.msg);
    }
    /* ... also when the lr in effect is the run's: caught at resolve */
    zt_ds_config c;
    zt_err err = {0};
    zt_ds_resolved r;
    ZT_CHECK(read_text("{\"train_batch_size\": 16, \"scheduler\": {\"type\": \"WarmupLR\"}}", &c,
                       &err) == ZT_OK);
    ZT_CHECK(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "default 0.001, not the run's learning rate 0.0003"), "%s", err.msg);
    run.lr = 1e-3;
    ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.lr == 1e-3 && !strcmp(r.schedule, "constant_with_warmup") && r.warmup_steps == 1000);
    /* total_num_steps "auto" needs the run's */
    ZT_CHECK(read_text("{\"train_batch_size\": 16, \"scheduler\": {\"type\": \"WarmupCosineLR\", "
                       "\"params\": {\"total_num_steps\": \"auto\"}}}", &c, &err) == ZT_OK);
    run.total_steps = 0;
    ZT_CHECK(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_EINPUT &&
             strstr(err.msg, "scheduler.params.total_num_steps") && strstr(err.msg, "max_steps"));
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_bad_configs(void)
{
    static const struct { const char *json, *key, *hint; } cases[] = {
        /* unknown keys, with the closest known one */
        {"{\"train_batch_sise\": 8}", "train_batch_sise", "did you mean train_batch_size?"},
        {"{\"zero_optimization\": {\"stage3_prefetch_bucket\": 1}}",
         "zero_optimization.stage3_prefetch_bucket", "did you mean stage3_prefetch_bucket_size?"},
        {"{\"zero_optimisation\": {\"stage\": 2}}", "zero_optimisation", "did you mean zero_optimization?"},
        {"{\"stage\": 2}", "stage", "belongs under zero_optimization"},
        {"{\"enabled\": true}", "enabled", "belongs under one of fp16 | bf16 | bfloat16"},
        {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"learning_rate\": 1}}}",
         "optimizer.params.learning_rate", "unknown key"},
        {"{\"optimizer\": {\"type\": \"AdamW\", \"parameters\": {}}}", "optimizer.parameters",
         "the closest known key is params"},
        {"{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 9, "
         "\"warmup_max_lr\": 1}}}", "scheduler.params.warmup_max_lr",
         "not a parameter of WarmupCosineLR (allowed: total_num_steps | warmup_num_steps"},
        {"{\"flops_profiler\": {}}", "flops_profiler", "unknown key"},
        /* wrong types */
        {"{\"train_batch_size\": \"8\"}", "train_batch_size",
         "expected a whole number of at least 1 or \"auto\", got the string '8'"},
        {"{\"zero_optimization\": {\"stage\": \"3\"}}", "zero_optimization.stage",
         "expected a whole number between 0 and 3, got the string '3'"},
        {"{\"zero_optimization\": {\"overlap_comm\": 1}}", "zero_optimization.overlap_comm",
         "expected true or false, got the number 1"},
        {"{\"bf16\": {\"enabled\": \"yes\"}}", "bf16.enabled", "true, false or \"auto\""},
        {"{\"bf16\": true}", "bf16", "expected an object of bf16 settings, got the boolean true"},
        {"{\"zero_optimization\": [2]}", "zero_optimization", "got an array"},
        {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9]}}}",
         "optimizer.params.betas", "[beta1, beta2]"},
        {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9, 1.0]}}}",
         "optimizer.params.betas", "in [0, 1), got [0.9, 1]"},
        {"{\"zero_optimization\": {\"allgather_bucket_size\": \"auto\"}}",
         "zero_optimization.allgather_bucket_size", "\"auto\" is not allowed here"},
        {"{\"optimizer\": {\"type\": 1}}", "optimizer.type", "Adam | AdamW"},
        /* out of range */
        {"{\"zero_optimization\": {\"stage\": 4}}", "zero_optimization.stage",
         "must be a whole number between 0 and 3, got 4"},
        {"{\"zero_optimization\": {\"stage\": 2.5}}", "zero_optimization.stage", "whole number"},
        {"{\"train_micro_batch_size_per_gpu\": 0}", "train_micro_batch_size_per_gpu",
         "must be at least 1, got 0"},
        {"{\"gradient_accumulation_steps\": 1e10}", "gradient_accumulation_steps", "at most 2147483647"},
        {"{\"zero_optimization\": {\"reduce_bucket_size\": -1}}",
         "zero_optimization.reduce_bucket_size", "at least 0"},
        {"{\"zero_optimization\": {\"reduce_bucket_size\": 1000.5}}",
         "zero_optimization.reduce_bucket_size", "expected a whole number, got 1000.5"},
        {"{\"gradient_clipping\": -1}", "gradient_clipping", "at least 0"},
        {"{\"train_batch_size\": 1e999}", "train_batch_size", "out of range"},
        {"{\"fp16\": {\"initial_scale_power\": 64}}", "fp16.initial_scale_power", "between 0 and 63"},
        /* contradictions */
        {"{\"bf16\": {\"enabled\": true}, \"fp16\": {\"enabled\": true}}", "fp16.enabled",
         "contradicts bf16.enabled"},
        {"{\"bf16\": {\"enabled\": false}, \"bfloat16\": {\"enabled\": true}}", "bfloat16",
         "old name of bf16"},
        {"{\"zero_optimization\": {\"stage\": 2, \"stage3_gather_16bit_weights_on_model_save\": "
         "true}}", "zero_optimization.stage3_gather_16bit_weights_on_model_save",
         "true needs ZeRO stage 3, but zero_optimization.stage is 2"},
        {"{\"zero_optimization\": {\"stage\": 2, \"stage3_prefetch_bucket_size\": \"auto\"}}",
         "zero_optimization.stage3_prefetch_bucket_size", "only applies to ZeRO stage 3"},
        {"{\"zero_optimization\": {\"stage3_max_live_parameters\": 1e9}}",
         "zero_optimization.stage3_max_live_parameters", "stage is 0 (DeepSpeed's default"},
        {"{\"zero_optimization\": {\"stage\": 2, \"offload_param\": {\"device\": \"cpu\"}}}",
         "zero_optimization.offload_param.device", "cpu needs ZeRO stage 3"},
        {"{\"zero_optimization\": {\"stage\": 0, \"offload_optimizer\": {\"device\": \"cpu\"}}}",
         "zero_optimization.offload_optimizer.device", "stage 1, 2 or 3"},
        {"{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_max_lr\": \"auto\"}}}",
         "scheduler.params.total_num_steps", "missing; WarmupDecayLR needs it"},
        {"{\"optimizer\": {\"params\": {\"lr\": 1e-4}}}", "optimizer.type", "missing"},
        {"{\"zero_optimization\": {\"stage\": 1, \"stage\": 2}}", "zero_optimization.stage",
         "duplicate key"},
        /* what ztrain does not do */
        {"{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", "
         "\"nvme_path\": \"/local_nvme\"}}}", "zero_optimization.offload_optimizer.device",
         "NVMe offload (ZeRO-Infinity) is not supported: offload to cpu instead"},
        {"{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\"}}}",
         "zero_optimization.offload_param.device", "is not supported: offload to cpu instead (allowed: none | cpu)"},
        {"{\"optimizer\": {\"type\": \"Lamb\", \"params\": {\"lr\": 1e-3}}}", "optimizer.type",
         "'Lamb' is refused: ztrain's optimizer is AdamW (allowed: Adam | AdamW)"},
        {"{\"optimizer\": {\"type\": \"RMSprop\"}}", "optimizer.type", "'RMSprop' is not allowed"},
        {"{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false}}}",
         "optimizer.params.adam_w_mode", "must be true (ztrain's optimizer is AdamW"},
        {"{\"scheduler\": {\"type\": \"OneCycle\", \"params\": {}}}", "scheduler.type",
         "'OneCycle' is refused"},
        {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 1e-5}}}",
         "scheduler.params.warmup_min_lr", "must be 0, got 1e-05 (ztrain's schedules warm up from 0"},
        {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"log\"}}}",
         "scheduler.params.warmup_type", "ztrain warms up linearly"},
        {"{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 9, "
         "\"cos_min_ratio\": 0.1}}}", "scheduler.params.cos_min_ratio", "decays to 0"},
        {"{\"prescale_gradients\": true}", "prescale_gradients", "must be false"},
        {"{\"gradient_predivide_factor\": 2}", "gradient_predivide_factor", "must be 1, got 2"},
        {"{\"communication_data_type\": \"fp8\"}", "communication_data_type",
         "allowed: fp32 | bf16 | fp16"},
        {"{\"fp16\": {\"fp16_master_weights_and_grads\": true}}",
         "fp16.fp16_master_weights_and_grads", "fp32 master weights"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zt_ds_config c;
        zt_err err = {0};
        zt_ds_config_init(&c);
        c.stage = 7; /* a failed read leaves *c as it was */
        const char *path = "bad.json";
        int rc = zt_ds_config_parse(path, cases[i].json, strlen(cases[i].json), &c, &err);
        char want[256];
        snprintf(want, sizeof want, "%s: %s: ", path, cases[i].key);
        ZT_CHECK_MSG(rc == ZT_EINPUT, "case %zu %s: rc %d", i, cases[i].json, rc);
        ZT_CHECK_MSG(strstr(err.msg, want) && strstr(err.msg, cases[i].hint),
                     "case %zu: want '%s' and '%s' in '%s'", i, want, cases[i].hint, err.msg);
        ZT_CHECK(c.stage == 7);
    }
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_malformed_json(void)
{
    static const struct { const char *json; size_t len; const char *hint; } cases[] = {
#define T(s, hint) {s, sizeof s - 1, hint}
        T("", "not valid JSON"),
        T("{", "not valid JSON"),
        T("{\"train_batch_size\": 8,}", "not valid JSON"),
        T("{'train_batch_size': 8}", "not valid JSON"),
        T("{\"train_batch_size\": 08}", "malformed number"),
        T("{\"train_batch_size\": 8} {}", "not valid JSON"),
        T("{\"train_batch_size\": \"\xc3\x28\"}", "not valid UTF-8"),
        T("{\"a\x01\": 1}", "control byte"),
        T("{\"train_batch_size\": NaN}", "not valid JSON"),
        T("// comment\n{}", "not valid JSON"),
        T("[]", "the document is an array; expected a JSON object"),
        T("8", "the document is the number 8"),
        T("null", "the document is null"),
        T("{\"\\u0000\": 1}", "NUL"),
        T("\x00\x01\x02garbage", "not valid"),
#undef T
    };
    const char *path = "malformed.json";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zt_ds_config c;
        zt_err err = {0};
        int rc = zt_ds_config_parse(path, cases[i].json, cases[i].len, &c, &err);
        ZT_CHECK_MSG(rc == ZT_EINPUT, "case %zu: rc %d, %s", i, rc, err.msg);
        ZT_CHECK_MSG(strstr(err.msg, path) && strstr(err.msg, cases[i].hint),
                     "case %zu: no '%s' in '%s'", i, cases[i].hint, err.msg);
    }
    /* deep nesting is cJSON's to bound */
    char deep[8192];
    size_t k = (size_t)snprintf(deep, sizeof deep, "{\"zero_optimization\": ");
    while (k < sizeof deep - 1)
        deep[k++] = '[';
    zt_ds_config c;
    zt_err err = {0};
    ZT_CHECK(zt_ds_config_parse(path, deep, k, &c, &err) == ZT_EINPUT);
    /* not a file, no file */
    ZT_CHECK(zt_ds_config_read(tmpdir, &c, &err) == ZT_EINPUT && strstr(err.msg, "regular file"));
    ZT_CHECK(zt_ds_config_read(P("missing.json"), &c, &err) == ZT_EINPUT &&
             strstr(err.msg, "missing.json") && strstr(err.msg, "cannot open"));
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* Every prefix of a real config, and bytes replaced by JSON's special characters, read as
 * ZT_OK or ZT_EINPUT naming the file: never a crash, never a leak. */
static void test_mutations_never_crash(void)
{
    static const char special[] = {'{', '}', '[', ']', '"', ':', ',', '0', '-', 'e', '\\', '\0'};
    size_t len = strlen(hf_zero3);
    char *buf = malloc(len);
    ZT_CHECK(buf != NULL);
    if (!buf)
        return;
    const char *path = "mutated.json";
    int bad_rc = 0, ok = 0;
    zt_ds_run run = run768();
    for (size_t cut = 0; cut <= len; cut += 2) {
        zt_ds_config c;
        zt_err err = {0};
        int rc = zt_ds_config_parse(path, hf_zero3, cut, &c, &err);
        bad_rc += rc != ZT_OK && rc != ZT_EINPUT;
    }
    for (size_t at = 0; at < len; at += 3) {
        for (size_t s = 0; s < sizeof special; s++) {
            memcpy(buf, hf_zero3, len);
            buf[at] = special[s];
            zt_ds_config c;
            zt_err err = {0};
            int rc = zt_ds_config_parse(path, buf, len, &c, &err);
            bad_rc += rc != ZT_OK && rc != ZT_EINPUT;
            if (rc == ZT_EINPUT)
                bad_rc += strstr(err.msg, path) == NULL;
            if (rc == ZT_OK) {
                ok++;
                zt_ds_resolved r;
                rc = zt_ds_config_resolve(&c, &run, &r, &err);
                bad_rc += rc != ZT_OK && rc != ZT_EINPUT;
            }
        }
    }
    free(buf);
    ZT_CHECK_MSG(bad_rc == 0, "%d reads neither ok nor bad input naming the file", bad_rc);
    ZT_CHECK(ok > 0); /* some mutations (a digit for a digit) still read */
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* The shipped examples read and resolve for a two-rank run. */
static void test_example_configs(void)
{
    static const struct { const char *file; int stage; long prefetch; } ex[] = {
        {"examples/configs/ds_zero2.json", 2, 50000000L},
        {"examples/configs/ds_zero3.json", 3, 530841L},
    };
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        zt_ds_config c;
        zt_err err = {0};
        zt_ds_config_init(&c);
        ZT_CHECK_MSG(zt_ds_config_read(ex[i].file, &c, &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK_MSG(c.stage == ex[i].stage && c.bf16_enabled == ZT_YES && c.fp16_enabled == ZT_UNSET,
                     "%s", ex[i].file);
        zt_ds_run run = run768();
        zt_ds_resolved r;
        ZT_CHECK_MSG(zt_ds_config_resolve(&c, &run, &r, &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK_MSG(r.train_batch_size == 16 && r.reduce_bucket_size == 589824L &&
                     r.stage3_prefetch_bucket_size == ex[i].prefetch && r.lr == 3e-4 &&
                     !strcmp(r.schedule, "linear") && r.warmup_steps == 10 &&
                     r.total_steps == 100 && r.gradient_clipping == 0.5,
                     "%s: tbs %d reduce %ld prefetch %ld lr %g %s", ex[i].file, r.train_batch_size,
                     r.reduce_bucket_size, r.stage3_prefetch_bucket_size, r.lr, r.schedule);
    }
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

int main(void)
{
    if (!tmpdir_make(tmpdir, sizeof tmpdir, "zt_ds_")) {
        perror("mkdtemp");
        return 1;
    }
    ZT_RUN(test_hf_zero2);
    ZT_RUN(test_hf_zero3);
    ZT_RUN(test_train_batch_size_mismatch);
    ZT_RUN(test_batch_derivation);
    ZT_RUN(test_defaults_and_run_values);
    ZT_RUN(test_scheduler_mapping);
    ZT_RUN(test_bad_configs);
    ZT_RUN(test_malformed_json);
    ZT_RUN(test_mutations_never_crash);
    ZT_RUN(test_example_configs);
    tmpdir_remove(tmpdir);
    ZT_TEST_MAIN_END();
}
