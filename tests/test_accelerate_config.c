/* test_accelerate_config.c — Accelerate config YAML as `accelerate config`
 * writes it reads to the settings it states, absent ones left absent; every
 * unknown, mistyped, out-of-range or contradictory key is ZT_EINPUT with a
 * message naming the file and the key; malformed YAML never crashes. */
#include <string.h>
#include <unistd.h>

#include "../src/config/accelerate.h"
#include "../src/core/mem.h"
#include "test.h"
#include "tmpdir.h"

static char tmpdir[64];

static const char *P(const char *name) { return tmpdir_path(tmpdir, name); }

/* Parse text from memory (no file), named TMPDIR/accelerate.yaml in messages. */
static int read_text(const char *text, zt_accel_config *c, zt_err *err)
{
    zt_accel_config_init(c);
    return zt_accel_config_parse(P("accelerate.yaml"), text, strlen(text), c, err);
}

/* As `accelerate config` (1.x) writes it for FSDP1, full shard, bf16. */
static const char *fsdp_v1 =
    "compute_environment: LOCAL_MACHINE\n"
    "debug: false\n"
    "distributed_type: FSDP\n"
    "downcast_bf16: 'no'\n"
    "enable_cpu_affinity: false\n"
    "fsdp_config:\n"
    "  fsdp_activation_checkpointing: false\n"
    "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
    "  fsdp_backward_prefetch: BACKWARD_PRE\n"
    "  fsdp_cpu_ram_efficient_loading: true\n"
    "  fsdp_forward_prefetch: false\n"
    "  fsdp_offload_params: false\n"
    "  fsdp_sharding_strategy: FULL_SHARD\n"
    "  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
    "  fsdp_sync_module_states: true\n"
    "  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n"
    "  fsdp_use_orig_params: true\n"
    "gpu_ids: all\n"
    "machine_rank: 0\n"
    "main_training_function: main\n"
    "mixed_precision: bf16\n"
    "num_machines: 1\n"
    "num_processes: 2\n"
    "rdzv_backend: static\n"
    "same_network: true\n"
    "tpu_env: []\n"
    "tpu_use_cluster: false\n"
    "tpu_use_sudo: false\n"
    "use_cpu: false\n";

static void test_fsdp_v1_full_shard_bf16(void)
{
    zt_accel_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_text(fsdp_v1, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.distributed_type, "FSDP"));
    ZT_CHECK(!strcmp(c.mixed_precision, "bf16"));
    ZT_CHECK(c.num_processes == 2 && c.num_machines == 1 && c.machine_rank == 0);
    ZT_CHECK(c.fsdp_sharding_strategy == 1);
    ZT_CHECK(c.fsdp_reshard_after_forward == ZT_UNSET && c.fsdp_version == -1);
    ZT_CHECK(!strcmp(c.fsdp_auto_wrap_policy, "TRANSFORMER_BASED_WRAP"));
    ZT_CHECK(!strcmp(c.fsdp_transformer_layer_cls_to_wrap, "LlamaDecoderLayer"));
    ZT_CHECK(c.fsdp_min_num_params == -1);
    ZT_CHECK(!strcmp(c.fsdp_backward_prefetch, "BACKWARD_PRE"));
    ZT_CHECK(c.fsdp_forward_prefetch == ZT_NO && c.fsdp_offload_params == ZT_NO);
    ZT_CHECK(c.fsdp_cpu_ram_efficient_loading == ZT_YES && c.fsdp_sync_module_states == ZT_YES);
    ZT_CHECK(c.fsdp_use_orig_params == ZT_YES && c.fsdp_activation_checkpointing == ZT_NO);
    ZT_CHECK(!strcmp(c.fsdp_state_dict_type, "SHARDED_STATE_DICT"));
    /* nothing of DeepSpeed's */
    ZT_CHECK(c.zero_stage == -1 && c.zero3_init_flag == ZT_UNSET && c.zero3_save_16bit_model == ZT_UNSET);
    ZT_CHECK(c.offload_optimizer_device[0] == '\0' && c.offload_param_device[0] == '\0');
    ZT_CHECK(c.gradient_accumulation_steps == -1 && c.gradient_clipping < 0);
    ZT_CHECK(c.deepspeed_config_file[0] == '\0');
    ZT_CHECK(!strcmp(c.path, P("accelerate.yaml")));
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_fsdp_v2_reshard_after_forward(void)
{
    static const char *v2 =
        "compute_environment: LOCAL_MACHINE\n"
        "debug: false\n"
        "distributed_type: FSDP\n"
        "downcast_bf16: 'no'\n"
        "enable_cpu_affinity: false\n"
        "fsdp_config:\n"
        "  fsdp_activation_checkpointing: true\n"
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
        "  fsdp_cpu_ram_efficient_loading: true\n"
        "  fsdp_offload_params: true\n"
        "  fsdp_reshard_after_forward: %s\n"
        "  fsdp_state_dict_type: FULL_STATE_DICT\n"
        "  fsdp_transformer_layer_cls_to_wrap: MistralDecoderLayer\n"
        "  fsdp_version: 2\n"
        "machine_rank: 0\n"
        "main_training_function: main\n"
        "mixed_precision: 'no'\n"
        "num_machines: 1\n"
        "num_processes: 4\n"
        "rdzv_backend: static\n"
        "same_network: true\n"
        "tpu_env: []\n"
        "tpu_use_cluster: false\n"
        "tpu_use_sudo: false\n"
        "use_cpu: false\n";
    char text[2048];
    zt_accel_config c;
    zt_err err = {0};
    snprintf(text, sizeof text, v2, "true");
    ZT_CHECK_MSG(read_text(text, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.fsdp_version == 2 && c.fsdp_reshard_after_forward == ZT_YES);
    ZT_CHECK(c.fsdp_sharding_strategy == 1); /* true is FULL_SHARD */
    ZT_CHECK(c.fsdp_offload_params == ZT_YES);    /* accepted: parameters live in host memory */
    ZT_CHECK(c.fsdp_activation_checkpointing == ZT_YES);
    ZT_CHECK(!strcmp(c.mixed_precision, "no") && c.num_processes == 4);
    ZT_CHECK(!strcmp(c.fsdp_state_dict_type, "FULL_STATE_DICT"));
    ZT_CHECK(!strcmp(c.fsdp_transformer_layer_cls_to_wrap, "MistralDecoderLayer"));
    ZT_CHECK(c.fsdp_backward_prefetch[0] == '\0' && c.fsdp_use_orig_params == ZT_UNSET);
    snprintf(text, sizeof text, v2, "false");
    ZT_CHECK_MSG(read_text(text, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.fsdp_reshard_after_forward == ZT_NO && c.fsdp_sharding_strategy == 2);
    /* Accelerate's FSDP1 form of the same key: a strategy name. */
    ZT_CHECK_MSG(read_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n"
                           "  fsdp_reshard_after_forward: hybrid_shard\n", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK(c.fsdp_sharding_strategy == 4 && c.fsdp_reshard_after_forward == ZT_UNSET);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_sharding_strategy_forms(void)
{
    /* names in any case, integers 1-5 and digit strings, as Accelerate accepts */
    static const struct { const char *value; int want; } cases[] = {
        {"FULL_SHARD", 1}, {"shard_grad_op", 2}, {"No_Shard", 3}, {"HYBRID_SHARD", 4},
        {"HYBRID_SHARD_ZERO2", 5}, {"1", 1}, {"2", 2}, {"3", 3}, {"4", 4}, {"5", 5}, {"'3'", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: %s\n",
                 cases[i].value);
        zt_accel_config c;
        zt_err err = {0};
        ZT_CHECK_MSG(read_text(text, &c, &err) == ZT_OK, "%s: %s", cases[i].value, err.msg);
        ZT_CHECK_MSG(c.fsdp_sharding_strategy == cases[i].want, "%s -> %d", cases[i].value,
                     c.fsdp_sharding_strategy);
    }
    /* enum values are stored in their canonical spelling */
    zt_accel_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_text("distributed_type: FSDP\nfsdp_config:\n"
                           "  fsdp_auto_wrap_policy: size_based_wrap\n"
                           "  fsdp_min_num_params: 100000000\n"
                           "  fsdp_backward_prefetch: backward_post\n"
                           "  fsdp_state_dict_type: local_state_dict\n", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK(!strcmp(c.fsdp_auto_wrap_policy, "SIZE_BASED_WRAP"));
    ZT_CHECK(c.fsdp_min_num_params == 100000000L);
    ZT_CHECK(!strcmp(c.fsdp_backward_prefetch, "BACKWARD_POST"));
    ZT_CHECK(!strcmp(c.fsdp_state_dict_type, "LOCAL_STATE_DICT"));
    ZT_CHECK(c.fsdp_sharding_strategy == -1);
}

static void test_deepspeed_zero3(void)
{
    static const char *ds =
        "compute_environment: LOCAL_MACHINE\n"
        "debug: false\n"
        "deepspeed_config:\n"
        "  deepspeed_multinode_launcher: standard\n"
        "  gradient_accumulation_steps: 4\n"
        "  gradient_clipping: 1.0\n"
        "  offload_optimizer_device: cpu\n"
        "  offload_param_device: cpu\n"
        "  zero3_init_flag: true\n"
        "  zero3_save_16bit_model: true\n"
        "  zero_stage: 3\n"
        "distributed_type: DEEPSPEED\n"
        "downcast_bf16: 'no'\n"
        "enable_cpu_affinity: false\n"
        "fsdp_config: {}\n"          /* older Accelerate writes the other section empty */
        "machine_rank: 0\n"
        "main_training_function: main\n"
        "mixed_precision: fp16\n"
        "num_machines: 1\n"
        "num_processes: 8\n"
        "rdzv_backend: static\n"
        "same_network: true\n"
        "tpu_env: []\n"
        "tpu_use_cluster: false\n"
        "tpu_use_sudo: false\n"
        "use_cpu: false\n";
    zt_accel_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_text(ds, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.distributed_type, "DEEPSPEED") && !strcmp(c.mixed_precision, "fp16"));
    ZT_CHECK(c.num_processes == 8);
    ZT_CHECK(c.zero_stage == 3 && c.zero3_init_flag == ZT_YES && c.zero3_save_16bit_model == ZT_YES);
    ZT_CHECK(!strcmp(c.offload_optimizer_device, "cpu") && !strcmp(c.offload_param_device, "cpu"));
    ZT_CHECK(c.gradient_accumulation_steps == 4 && c.gradient_clipping == 1.0);
    ZT_CHECK(c.fsdp_sharding_strategy == -1 && c.fsdp_version == -1);

    /* with a DeepSpeed JSON, the YAML only points at it */
    ZT_CHECK_MSG(read_text("compute_environment: LOCAL_MACHINE\n"
                           "deepspeed_config:\n"
                           "  deepspeed_config_file: configs/ds_zero3.json\n"
                           "  zero3_init_flag: true\n"
                           "distributed_type: DEEPSPEED\n"
                           "mixed_precision: 'no'\n"
                           "num_processes: 2\n", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.deepspeed_config_file, "configs/ds_zero3.json"));
    ZT_CHECK(c.zero_stage == -1 && c.zero3_init_flag == ZT_YES);
    /* integer clipping reads as a number; 0 stays a real setting */
    ZT_CHECK_MSG(read_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 0\n"
                           "  gradient_clipping: 0\n", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.zero_stage == 0 && c.gradient_clipping == 0.0);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_multi_cpu(void)
{
    /* As `accelerate config` writes it for CPU-only, multi-process training. */
    static const char *cpu =
        "compute_environment: LOCAL_MACHINE\n"
        "debug: false\n"
        "distributed_type: MULTI_CPU\n"
        "downcast_bf16: 'no'\n"
        "ipex_config:\n"
        "  ipex: false\n"
        "machine_rank: 1\n"
        "main_process_ip: 192.168.1.10\n"
        "main_process_port: 29500\n"
        "main_training_function: main\n"
        "mixed_precision: 'no'\n"
        "mpirun_config:\n"
        "  mpirun_ccl: '1'\n"
        "  mpirun_hostfile: /home/user/hostfile\n"
        "num_machines: 2\n"
        "num_processes: 4\n"
        "rdzv_backend: static\n"
        "same_network: true\n"
        "tpu_env: []\n"
        "tpu_use_cluster: false\n"
        "tpu_use_sudo: false\n"
        "use_cpu: true\n";
    zt_accel_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_text(cpu, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.distributed_type, "MULTI_CPU") && !strcmp(c.mixed_precision, "no"));
    ZT_CHECK(c.num_processes == 4 && c.num_machines == 2 && c.machine_rank == 1);
    ZT_CHECK(c.fsdp_sharding_strategy == -1 && c.zero_stage == -1);
    /* the multi-machine keys launch uses: mpirun_ccl as the prompt stored it ('1') */
    ZT_CHECK(!strcmp(c.main_process_ip, "192.168.1.10") && c.main_process_port == 29500);
    ZT_CHECK(!strcmp(c.mpirun_hostfile, "/home/user/hostfile") && c.mpirun_ccl == 1);
    ZT_CHECK(read_text("distributed_type: MULTI_CPU\nmpirun_config:\n  mpirun_ccl: two\n", &c, &err) ==
                 ZT_EINPUT && strstr(err.msg, ":3: mpirun_config.mpirun_ccl: expected an integer"));
    ZT_CHECK(read_text("distributed_type: MULTI_CPU\nmpirun_config:\n  mpirun_hostfle: h\n", &c, &err) ==
                 ZT_EINPUT && strstr(err.msg, "did you mean mpirun_hostfile"));
    /* the smallest config: only the required key */
    ZT_CHECK_MSG(read_text("distributed_type: NO\n", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.distributed_type, "NO") && c.mixed_precision[0] == '\0');
    ZT_CHECK(c.num_processes == -1 && c.num_machines == -1 && c.machine_rank == -1);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_yaml_forms(void)
{
    zt_accel_config c;
    zt_err err = {0};
    /* flow style, an explicit document, comments, quoted keys and values */
    ZT_CHECK_MSG(read_text("# written by hand\n---\n"
                           "{distributed_type: \"FSDP\", 'num_processes': 2,  # two ranks\n"
                           " fsdp_config: {fsdp_sharding_strategy: 2, fsdp_version: 1}}\n...\n",
                           &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.distributed_type, "FSDP") && c.num_processes == 2);
    ZT_CHECK(c.fsdp_sharding_strategy == 2 && c.fsdp_version == 1);
    /* null and empty values mean absent; an empty section is no section */
    ZT_CHECK_MSG(read_text("distributed_type: MULTI_CPU\nmixed_precision:\nnum_processes: null\n"
                           "main_process_ip: ~\nfsdp_config:\ndeepspeed_config: {}\n"
                           "dynamo_config: {}\n", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.mixed_precision[0] == '\0' && c.num_processes == -1);
    /* an anchor alone is harmless; plain no is the string "no" (YAML 1.2) */
    ZT_CHECK_MSG(read_text("distributed_type: &dt FSDP\nmixed_precision: no\n"
                           "fsdp_config: &fc\n  fsdp_offload_params: True\n", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK(!strcmp(c.mixed_precision, "no") && c.fsdp_offload_params == ZT_YES);
    /* an older Accelerate FSDP config: integer strategy, the other section empty */
    ZT_CHECK_MSG(read_text("compute_environment: LOCAL_MACHINE\ndeepspeed_config: {}\n"
                           "distributed_type: FSDP\nfsdp_config:\n"
                           "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                           "  fsdp_min_num_params: 0\n  fsdp_sharding_strategy: 1\n"
                           "gpu_ids: 0\nmixed_precision: fp16\nnum_processes: 2\n", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK(c.fsdp_sharding_strategy == 1 && c.fsdp_min_num_params == 0);
    /* a byte-order mark and Windows line ends */
    ZT_CHECK_MSG(read_text("\xef\xbb\xbf" "distributed_type: FSDP\r\nnum_processes: 3\r\n", &c,
                           &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.distributed_type, "FSDP") && c.num_processes == 3);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

#ifdef ZT_CUDA
/* A CUDA build reads Accelerate's MULTI_GPU (settings.c runs it on --device cuda, stage 0) */
static void test_multi_gpu(void)
{
    zt_accel_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 2\n", &c,
                           &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(c.distributed_type, "MULTI_GPU") && c.num_processes == 2);
}
#endif

/* Each bad config is ZT_EINPUT with the file, the key path and a hint at what
 * was allowed; *c is left as it was. */
static void test_bad_configs(void)
{
    static const struct { const char *yaml, *key, *hint; } cases[] = {
        {"distributed_typ: FSDP\n", "distributed_typ", "did you mean distributed_type?"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_shardng_strategy: FULL_SHARD\n",
         "fsdp_config.fsdp_shardng_strategy", "unknown key (did you mean fsdp_sharding_strategy?)"},
        {"distributed_type: FSDP\nmegatron_lm_config: {megatron_lm_tp_degree: 2}\n", "megatron_lm_config",
         "only {} is accepted (Megatron-LM is not supported)"},
        {"distributed_type: FSDP\nzero_stage: 3\n", "zero_stage", "belongs under deepspeed_config"},
#ifndef ZT_CUDA /* a CUDA build runs it on --device cuda (test_multi_gpu) */
        {"distributed_type: MULTI_GPU\n", "distributed_type", "built without CUDA (make cuda builds it)"},
#endif
        {"distributed_type: fsdp\n", "distributed_type", "(allowed: NO | MULTI_CPU | "}, /* MULTI_GPU | with CUDA */
        {"distributed_type: fsdp\n", "distributed_type", "FSDP | DEEPSPEED)"},
        {"num_processes: 2\n", "distributed_type", "missing"},
        {"distributed_type: NO\ncompute_environment: AMAZON_SAGEMAKER\n", "compute_environment",
         "LOCAL_MACHINE"},
        {"distributed_type: FSDP\nmixed_precision: fp32\n", "mixed_precision", "no | bf16 | fp16"},
        {"distributed_type: FSDP\nmixed_precision: fp8\n", "mixed_precision", "fp8 training is not supported"},
        {"distributed_type: FSDP\nmixed_precision: false\n", "mixed_precision", "the boolean false"},
        {"distributed_type: FSDP\nnum_processes: 0\n", "num_processes", "at least 1"},
        {"distributed_type: FSDP\nnum_processes: two\n", "num_processes", "expected an integer"},
        {"distributed_type: FSDP\nnum_processes: 2.0\n", "num_processes", "expected an integer"},
        {"distributed_type: FSDP\nnum_processes: 010\n", "num_processes", "leading zero"},
        {"distributed_type: FSDP\nnum_processes: 99999999999999999999\n", "num_processes",
         "out of range"},
        {"distributed_type: FSDP\nnum_processes: [2]\n", "num_processes", "got a list"},
        {"distributed_type: NO\nnum_processes: 2\n", "num_processes", "MULTI_CPU"},
        {"distributed_type: MULTI_CPU\nnum_machines: 2\nmachine_rank: 2\n", "machine_rank",
         "0 to 1"},
        {"distributed_type: MULTI_CPU\nmain_process_port: 70000\n", "main_process_port",
         "between 1 and 65535"},
        {"distributed_type: MULTI_CPU\nuse_cpu: 'true'\n", "use_cpu", "true or false"},
        {"distributed_type: MULTI_CPU\ntpu_env: [1]\n", "tpu_env", "list of strings"},
        {"distributed_type: MULTI_CPU\nipex_config: true\n", "ipex_config", "expected a mapping"},
        {"distributed_type: FSDP\nfsdp_config: FULL_SHARD\n", "fsdp_config", "expected a mapping"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 6\n",
         "fsdp_config.fsdp_sharding_strategy", "1-5"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: [FULL_SHARD]\n",
         "fsdp_config.fsdp_sharding_strategy", "got a list"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: yes\n",
         "fsdp_config.fsdp_offload_params", "expected true or false, got the string 'yes'"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_backward_prefetch: 1\n",
         "fsdp_config.fsdp_backward_prefetch", "BACKWARD_PRE | BACKWARD_POST | NO_PREFETCH"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: ALWAYS_WRAP\n",
         "fsdp_config.fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP | SIZE_BASED_WRAP | NO_WRAP"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_transformer_layer_cls_to_wrap: GPT2Block\n",
         "fsdp_config.fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer | MistralDecoderLayer"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_state_dict_type: 2\n",
         "fsdp_config.fsdp_state_dict_type", "FULL_STATE_DICT"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_min_num_params: -5\n",
         "fsdp_config.fsdp_min_num_params", "at least 0"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 3\n", "fsdp_config.fsdp_version",
         "between 1 and 2"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
         "  fsdp_reshard_after_forward: true\n",
         "fsdp_config.fsdp_reshard_after_forward", "fsdp_config.fsdp_sharding_strategy"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n"
         "  fsdp_reshard_after_forward: false\n", "fsdp_config.fsdp_reshard_after_forward",
         "fsdp_version is 1"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
         "  fsdp_reshard_after_forward: FULL_SHARD\n", "fsdp_config.fsdp_reshard_after_forward",
         "use true or false"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_reshard_after_forward: 1\n",
         "fsdp_config.fsdp_reshard_after_forward", "true or false"},
        {"distributed_type: FSDP\nfsdp_config:\n  zero_stage: 2\n", "fsdp_config.zero_stage",
         "belongs under deepspeed_config"},
        {"distributed_type: DEEPSPEED\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n",
         "fsdp_config", "distributed_type is DEEPSPEED"},
        {"distributed_type: FSDP\ndeepspeed_config:\n  zero_stage: 3\n", "deepspeed_config",
         "distributed_type is FSDP"},
        {"distributed_type: MULTI_CPU\nfsdp_config:\n  fsdp_version: 2\n", "fsdp_config",
         "distributed_type: FSDP"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n",
         "deepspeed_config.zero_stage", "between 0 and 3"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: '3'\n",
         "deepspeed_config.zero_stage", "expected an integer, got the string '3'"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n"
         "  zero3_save_16bit_model: true\n", "deepspeed_config.zero3_save_16bit_model",
         "zero_stage 3"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero3_init_flag: true\n",
         "deepspeed_config.zero3_init_flag", "Accelerate's default"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
         "  offload_optimizer_device: nvme\n", "deepspeed_config.offload_optimizer_device",
         "NVMe offload (ZeRO-Infinity) is not supported: offload to cpu instead"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
         "  offload_param_device: nvme\n", "deepspeed_config.offload_param_device",
         "NVMe offload (ZeRO-Infinity) is not supported: offload to cpu instead"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n"
         "  offload_param_device: cpu\n", "deepspeed_config.offload_param_device",
         "zero_stage 3"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_accumulation_steps: 0\n",
         "deepspeed_config.gradient_accumulation_steps", "at least 1"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: -1.0\n",
         "deepspeed_config.gradient_clipping", "at least 0"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: .inf\n",
         "deepspeed_config.gradient_clipping", "finite"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: auto\n",
         "deepspeed_config.gradient_clipping", "expected a number"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
         "  zero_stage: 2\n", "deepspeed_config.zero_stage", "deepspeed_config_file"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: 12\n",
         "deepspeed_config.deepspeed_config_file", "expected a string"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_param_device: nvme_disk\n",
         "deepspeed_config.offload_param_device", "none | cpu"},
        {"distributed_type: FSDP\nnum_processes: 2\nnum_processes: 4\n", "num_processes",
         "duplicate key (first given at line 2)"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_version: 2\n",
         "fsdp_config.fsdp_version", "duplicate key"},
        {"distributed_type: FSDP\n1: x\n", "(top level)", "keys must be names"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    ZT_CHECK(n >= 15);
    const char *path = "accelerate.yaml";
    for (int i = 0; i < n; i++) {
        zt_accel_config c;
        zt_accel_config_init(&c);
        c.num_processes = 12345; /* a failed read must not touch *c */
        zt_err err = {0};
        int rc = zt_accel_config_parse(path, cases[i].yaml, strlen(cases[i].yaml), &c, &err);
        ZT_CHECK_MSG(rc == ZT_EINPUT, "case %d (%s): rc %d, %s", i, cases[i].key, rc, err.msg);
        ZT_CHECK_MSG(strstr(err.msg, path) != NULL, "case %d: no path in '%s'", i, err.msg);
        ZT_CHECK_MSG(strstr(err.msg, cases[i].key) != NULL, "case %d: no '%s' in '%s'", i,
                     cases[i].key, err.msg);
        ZT_CHECK_MSG(strstr(err.msg, cases[i].hint) != NULL, "case %d: no '%s' in '%s'", i,
                     cases[i].hint, err.msg);
        ZT_CHECK(c.num_processes == 12345);
    }
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* Malformed YAML: ZT_EINPUT naming the file (and the line where libyaml knows it). */
static void test_malformed_yaml(void)
{
    static const struct { const char *yaml; size_t len; const char *hint; } cases[] = {
#define T(s, hint) {s, sizeof s - 1, hint}
        T("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n bad: [\n", ":4:"),
        T("distributed_type: FSDP\nmixed_precision: 'bf16\n", "quoted scalar that starts at line 2"),
        T("distributed_type: FSDP\nfsdp_config:\n\tfsdp_version: 2\n", ":3:"),
        T("distributed_type: FSDP\n  num_processes: 2\n", ":2:"),
        T("distributed_type: [FSDP\n", "invalid YAML"),
        T("", "empty file"),
        T("# only a comment\n\n", "empty file"),
        T("---\n", "the document is empty"),
        T("- distributed_type: FSDP\n", "the document is a list"),
        T("FSDP\n", "the document is the string 'FSDP'"),
        T("base: &b 2\nnum_processes: *b\n", ":2: YAML aliases (*b)"),
        T("distributed_type: FSDP\n<<: *defaults\n", ":2: YAML aliases"), /* a merge key */
        T("num_processes: !!int 2\ndistributed_type: FSDP\n", ":1: YAML tags (tag:yaml.org,2002:int)"),
        T("distributed_type: !custom FSDP\n", "YAML tags"),
        T("distributed_type: NO\n---\ndistributed_type: FSDP\n", ":2: a second YAML document"),
        T("distributed_type: \xc3\x28\n", "invalid YAML"),
        T("distributed_type: F\x01SDP\n", "invalid YAML"),
        T("distributed_type: \"FS\\0DP\"\n", ":1: a value contains a NUL"),
        T("\x00\x01\x02\x03garbage", "invalid YAML"),
        T("? [a, b]\n: 1\n", "keys must be names"),
        T("{a: 1, a: 1}\n", "unknown key"),
#undef T
    };
    const char *path = "malformed.yaml";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zt_accel_config c;
        zt_err err = {0};
        int rc = zt_accel_config_parse(path, cases[i].yaml, cases[i].len, &c, &err);
        ZT_CHECK_MSG(rc == ZT_EINPUT, "case %zu: rc %d, %s", i, rc, err.msg);
        ZT_CHECK_MSG(strstr(err.msg, path) && strstr(err.msg, cases[i].hint),
                     "case %zu: no '%s' in '%s'", i, cases[i].hint, err.msg);
    }
    /* nesting is bounded, however deep the file goes */
    char deep[4096];
    size_t k = (size_t)snprintf(deep, sizeof deep, "distributed_type: ");
    while (k < sizeof deep - 1)
        deep[k++] = '[';
    zt_accel_config c;
    zt_err err = {0};
    ZT_CHECK(zt_accel_config_parse(path, deep, k, &c, &err) == ZT_EINPUT && strstr(err.msg, "nesting"));
    /* not a file, no file, too large a file (and too large a text) */
    ZT_CHECK(zt_accel_config_read(tmpdir, &c, &err) == ZT_EINPUT && strstr(err.msg, "regular file"));
    ZT_CHECK(zt_accel_config_read(P("missing.yaml"), &c, &err) == ZT_EINPUT &&
             strstr(err.msg, "missing.yaml") && strstr(err.msg, "cannot open"));
    size_t big = (1u << 20) + 1;
    char *huge = calloc(big, 1);
    ZT_CHECK(huge != NULL);
    if (huge) {
        memset(huge, '#', big);
        ZT_CHECK(zt_accel_config_parse(path, huge, big, &c, &err) == ZT_EINPUT && strstr(err.msg, "too large"));
        path = P("huge.yaml");
        write_bytes(path, huge, big);
        free(huge);
        ZT_CHECK(zt_accel_config_read(path, &c, &err) == ZT_EINPUT && strstr(err.msg, "too large") &&
                 strstr(err.msg, path));
    }
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* Every prefix of a real config, and every byte replaced by YAML's special
 * characters, reads as ZT_OK or ZT_EINPUT: never a crash, never a leak. */
static void test_mutations_never_crash(void)
{
    static const char special[] = {':', '[', '{', '"', '\'', '\t', '&', '*', '!', '-', '\n', '#',
                                   '|', '\0'};
    size_t len = strlen(fsdp_v1);
    char *buf = malloc(len);
    ZT_CHECK(buf != NULL);
    if (!buf)
        return;
    const char *path = "mutated.yaml";
    int bad_rc = 0;
    for (size_t cut = 0; cut <= len; cut++) {
        zt_accel_config c;
        zt_err err = {0};
        int rc = zt_accel_config_parse(path, fsdp_v1, cut, &c, &err);
        bad_rc += rc != ZT_OK && rc != ZT_EINPUT;
    }
    for (size_t at = 0; at < len; at += 3) {
        for (size_t s = 0; s < sizeof special; s++) {
            memcpy(buf, fsdp_v1, len);
            buf[at] = special[s];
            zt_accel_config c;
            zt_err err = {0};
            int rc = zt_accel_config_parse(path, buf, len, &c, &err);
            bad_rc += rc != ZT_OK && rc != ZT_EINPUT;
            if (rc == ZT_EINPUT)
                bad_rc += strstr(err.msg, path) == NULL;
        }
    }
    free(buf);
    ZT_CHECK_MSG(bad_rc == 0, "%d reads neither ok nor bad input naming the file", bad_rc);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* The shipped examples read, each to the mode its name promises. */
static void test_example_configs(void)
{
    static const struct {
        const char *file, *dt, *mp;
        int strategy, stage;
    } ex[] = {
        {"fsdp_full_shard_bf16.yaml", "FSDP", "bf16", 1, -1},
        {"fsdp_shard_grad_op.yaml", "FSDP", "bf16", 2, -1},
        {"fsdp_hybrid.yaml", "FSDP", "bf16", 4, -1},
        {"fsdp_memory_constrained.yaml", "FSDP", "no", 1, -1},
        {"deepspeed_zero1.yaml", "DEEPSPEED", "bf16", -1, 1},
        {"deepspeed_zero2.yaml", "DEEPSPEED", "bf16", -1, 2},
        {"deepspeed_zero3.yaml", "DEEPSPEED", "bf16", -1, 3},
    };
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "examples/configs/%s", ex[i].file);
        zt_accel_config c;
        zt_err err = {0};
        zt_accel_config_init(&c);
        ZT_CHECK_MSG(zt_accel_config_read(path, &c, &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK_MSG(!strcmp(c.distributed_type, ex[i].dt), "%s", path);
        ZT_CHECK_MSG(!strcmp(c.mixed_precision, ex[i].mp), "%s", path);
        ZT_CHECK_MSG(c.num_processes == 2, "%s", path);
        ZT_CHECK_MSG(c.fsdp_sharding_strategy == ex[i].strategy, "%s", path);
        ZT_CHECK_MSG(c.zero_stage == ex[i].stage, "%s", path);
    }
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

int main(void)
{
    if (!tmpdir_make(tmpdir, sizeof tmpdir, "zt_accel_")) {
        perror("mkdtemp");
        return 1;
    }
    ZT_RUN(test_fsdp_v1_full_shard_bf16);
    ZT_RUN(test_fsdp_v2_reshard_after_forward);
    ZT_RUN(test_sharding_strategy_forms);
    ZT_RUN(test_deepspeed_zero3);
    ZT_RUN(test_multi_cpu);
#ifdef ZT_CUDA
    ZT_RUN(test_multi_gpu);
#endif
    ZT_RUN(test_yaml_forms);
    ZT_RUN(test_bad_configs);
    ZT_RUN(test_malformed_yaml);
    ZT_RUN(test_mutations_never_crash);
    ZT_RUN(test_example_configs);
    tmpdir_remove(tmpdir);
    ZT_TEST_MAIN_END();
}
