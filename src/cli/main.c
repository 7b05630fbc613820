/* main.c — ztrain's command line: parses flags, calls the library, and is the
 * only place that turns a status into an exit code (0 ok, 2 bad input, 1 other). */
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../config/settings.h"
#include "../core/fs.h"
#include "../core/prof.h"
#include "../plan/plan.h"
#include "../io/hf_carry.h"
#include "../io/hf_model.h"
#include "../kernels/matmul.h"
#include "../text/tokenizer.h"
#include "../train/preempt.h"
#include "../train/run_args.h"
#include "../train/trainer.h"
#include "commands.h"
#include "memory_gate.h"
#include "flags.h"
#include "lora_cli.h"
#include "run_settings.h"
#include "train_eval.h"
#include "train_select.h"
#include "train_vocab.h"

#define ZTRAIN_VERSION "0.1.0"

const char *zt_version(void) { return ZTRAIN_VERSION; }

static int default_threads(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
    return 1;
}

int zt_cli_set_threads(int threads)
{
    omp_set_num_threads(threads > 0 ? threads : default_threads());
    return omp_get_max_threads();
}

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- train ---------------------------------------------------------------- */

static int resolve_dtype_flag(const char *flag, const char *value, zt_dtype *out, zt_err *err)
{
    if (zt_dtype_parse(value, out) != 0)
        return zt_fail(err, ZT_EINPUT, "--%s: expected one of fp32, bf16, fp16 (or float32, bfloat16, float16), got '%s'",
                       flag, value);
    return ZT_OK;
}

/* HF's size strings: "5GB" = 5*10^9 bytes, "200MB", "64KB", "1GiB" = 2^30, or bytes. */
int zt_cli_parse_size(const char *flag, const char *s, size_t *out, zt_err *err)
{
    static const struct { const char *suffix; double mult; } units[] = {
        {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0},
        {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1.0}, {"", 1.0},
    };
    char *end = NULL;
    double v = strtod(s, &end);
    if (end != s && v > 0)
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (!strcmp(end, units[i].suffix) && v * units[i].mult < 1e18) {
                *out = (size_t)(v * units[i].mult);
                return ZT_OK;
            }
    return zt_fail(err, ZT_EINPUT, "--%s: expected a size such as 5GB, 200MB or 64KB, got '%s'", flag, s);
}

static int g_rank = 0, g_world = 1; /* for error messages */

/* The YAML describes a world; mpirun started one.  `ztrain launch` starts the
 * YAML's, but under a plain mpirun they can differ, and a silent difference
 * changes the global batch and the sharding. */
static int check_world(const zt_settings *st, int world, int ignore_num_processes, zt_err *err)
{
    const zt_accel_config *ac = &st->accel;
    if (!st->config_file)
        return ZT_OK;
    if (!strcmp(ac->distributed_type, "NO") && world > 1)
        return zt_fail(err, ZT_EINPUT, "%s: distributed_type NO is one process, but MPI started %d ranks; use "
                       "MULTI_CPU, FSDP or DEEPSPEED for several", st->config_file, world);
    if (ac->num_processes > 0 && ac->num_processes != world && !ignore_num_processes)
        return zt_fail(err, ZT_EINPUT, "%s: num_processes is %d, but MPI started %d ranks; start %d (ztrain launch "
                       "does), or pass --ignore_num_processes to run on %d", st->config_file, ac->num_processes,
                       world, ac->num_processes, world);
    return ZT_OK;
}

/* Every data file holds token ids already (.npy, .bin): no tokenizer applies. */
static int ids_only(const char *const *files, int n)
{
    for (int i = 0; i < n; i++) {
        size_t l = strlen(files[i]);
        if (!(l > 4 && (!strcmp(files[i] + l - 4, ".npy") || !strcmp(files[i] + l - 4, ".bin"))))
            return 0;
    }
    return 1;
}

enum { TRAIN_MAX_DATA = 64 };

/* train's flags as parsed, and the strings the run keeps pointers into until it ends */
typedef struct train_cli {
    const char *model, *data, *output_dir, *log_jsonl, *max_shard;
    const char *resume, *tokenizer, *profile, *profile_steps, *packing_strategy;
    zt_text_opts topts;
    int completion_only, assistant_only, padding_free, packing;
    long save_total_limit;
    int override_ckpt, allow_precision;
    int threads, progress;
    double peak, coll_timeout;
    long skip_nonfinite, max_skipped;
    const char *max_memory, *max_host_memory;
    int ignore_np;
    zt_settings st;
    zt_cli_eval ev;
    zt_cli_vocab voc;
    zt_select_args sel;
    zt_cli_lora lora;
    long prof_a, prof_b;
    const char *data_files[TRAIN_MAX_DATA];
    int n_data;
    char command_line[1024];
    char gguf_tok[4096];
    char shown[1024]; /* messages name the files given, not the token cache they became */
    char tok_data[4096], mask_data[4096];
} train_cli;

static void train_cli_defaults(train_cli *o)
{
    *o = (train_cli){.max_shard = "5GB", .topts = ZT_TEXT_OPTS_DEFAULTS, .completion_only = 1, .progress = -1,
                     .coll_timeout = 600.0, .max_skipped = 20, .ev = ZT_CLI_EVAL_DEFAULTS,
                     .voc = ZT_CLI_VOCAB_DEFAULTS, .sel = ZT_CLI_SELECT_DEFAULTS, .prof_a = 1, .prof_b = 0,
                     .lora = ZT_CLI_LORA_DEFAULTS};
    zt_settings_defaults(&o->st);
}

/* The command line (recorded in each checkpoint's trainer_state.json, --data
 * included), --data's list taken out of argv, then the flags and what they need
 * of each other. */
static int train_parse(train_cli *o, zt_flag *flags, int nflags, int argc, char **argv, zt_err *err)
{
    snprintf(o->command_line, sizeof o->command_line, "ztrain train");
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(o->command_line);
        snprintf(o->command_line + len, sizeof o->command_line - len, " %s", argv[i]);
    }
    /* --data A B ...: its values leave argv here (the table lists it for --help) */
    const char **taken = NULL;
    int n_data = zt_cli_take_list("--data", &argc, argv, &taken);
    if (n_data < 0)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    for (int i = 0; i < n_data && i < TRAIN_MAX_DATA; i++)
        o->data_files[i] = taken[i];
    free(taken);
    if (n_data > TRAIN_MAX_DATA)
        return zt_fail(err, ZT_EINPUT, "--data: %d files, more than %d; join them first (ztrain tokenize)", n_data,
                       TRAIN_MAX_DATA);
    o->n_data = n_data;
    o->data = n_data > 0 ? o->data_files[0] : NULL;
    int rc;
    if ((rc = zt_cli_lora_take(&o->lora, &argc, argv, err)) ||
        (rc = zt_flags_parse(flags, nflags, argc, argv, "ztrain train", err)) ||
        (rc = zt_cli_lora_check(&o->lora, &(flag_table){flags, nflags}, o->st.config_file, err)))
        return rc;
    if (!o->model || !o->data)
        return zt_fail(err, ZT_EINPUT, "ztrain train: --model and --data are required");
    /* checkpoints go into --output_dir, as Trainer's do: without one they would be
     * a silent no-op */
    if (o->st.save_steps > 0 && !o->output_dir)
        return zt_fail(err, ZT_EINPUT, "--save_steps %ld needs --output_dir DIR (checkpoint-N directories are "
                       "written there)", o->st.save_steps);
    if (o->profile_steps && !o->profile)
        return zt_fail(err, ZT_EINPUT, "--profile_steps: needs --profile FILE.json (where the trace goes)");
    if (o->profile_steps && (rc = zt_prof_parse_steps(o->profile_steps, &o->prof_a, &o->prof_b, err)))
        return rc;
    return ZT_OK;
}

/* This rank's memory limits (device and host), and the run's estimate refused
 * above either before anything is allocated. */
static int train_memory_gates(const train_cli *o, const zt_llama_config *cfg, const zt_train_args *a,
                              const zt_topology *topo, zt_err *err)
{
    int rc;
    size_t max_mem = 0;
    if (o->max_memory && (rc = zt_cli_parse_size("max_memory", o->max_memory, &max_mem, err)))
        return rc;
    char why[320];
    size_t limit = zt_memory_limit_on(a->plan.device, max_mem, topo->machine_size, topo->machine_rank, why, sizeof why);
    size_t max_host = 0;
    if (o->max_host_memory && (rc = zt_cli_parse_size("max_host_memory", o->max_host_memory, &max_host, err)))
        return rc;
    char host_why[320];
    size_t host_limit = zt_host_memory_limit(max_host, topo->machine_size, host_why, sizeof host_why);
    if ((rc = zt_memory_gate(cfg, &a->plan, a->batch_size, a->block_size, a->checkpointing, 1, a->lora, limit, why,
                             err)) ||
        (rc = zt_memory_gate_host(cfg, &a->plan, host_limit, host_why, err))) {
        if (g_rank != 0) /* every rank refuses alike; rank 0 says it */
            err->msg[0] = 0;
        return rc;
    }
    return ZT_OK;
}

/* MPI and the profiler started, then the run resolved into its plan and arguments
 * and checked against the world MPI started and the memory there is. */
static int train_plan(train_cli *o, zt_llama_config *cfg, zt_train_args *a, zt_err *err)
{
    int rc;
    if (zt_comm_init_mpi(NULL, NULL, &g_rank, &g_world) != ZT_OK)
        return zt_fail(err, ZT_EFAIL, "MPI_Init failed");
    if (o->profile && (rc = zt_prof_open(o->profile, o->prof_a, o->prof_b, g_rank, err)))
        return rc;
    zt_plan plan;
    zt_topology topo; /* ranks per machine: HYBRID_SHARD's default shard group */
    zt_comm_set_timeout(o->coll_timeout);
    if ((rc = zt_comm_topology(&topo, err)))
        return rc;
    /* --model FILE.gguf: its own tokenizer, for text data and to save with the model,
     * unless --tokenizer names one */
    if ((rc = zt_cli_gguf_tokenizer_dir(o->tokenizer ? NULL : o->model, o->gguf_tok, sizeof o->gguf_tok, err)))
        return rc;
    if (o->gguf_tok[0] && !ids_only(o->data_files, o->n_data))
        o->tokenizer = o->gguf_tok;
    if ((rc = zt_resolve_run(&o->st, o->model, NULL, g_world, &topo, cfg, &plan, err)) ||
        (rc = zt_train_args_from_settings(&o->st, &plan, a, err)))
        return rc;
    if (o->lora.use_peft && (rc = zt_cli_lora_plan(&o->lora, cfg, g_rank == 0, err)))
        return rc;
    a->lora = o->lora.use_peft ? &o->lora.lora : NULL;
    a->lora_adapter = o->lora.use_peft ? o->lora.adapter : NULL;
    if ((rc = zt_cli_parse_size("max_shard_size", o->max_shard, &a->max_shard_bytes, err)))
        return rc;
    if (g_rank == 0)
        zt_print_config_notes(&o->st, stderr);
    if ((rc = check_world(&o->st, g_world, o->ignore_np, err))) {
        if (g_rank != 0)
            err->msg[0] = 0;
        return rc;
    }
    return train_memory_gates(o, cfg, a, &topo, err);
}

/* What is not a setting: where things are, and how the run reports. */
static int train_run_args(train_cli *o, const flag_table *table, zt_train_args *a, zt_err *err)
{
    a->model_dir = o->model;
    a->data_path = o->data;
    for (int i = 0; i < o->n_data; i++)
        snprintf(o->shown + strlen(o->shown), sizeof o->shown - strlen(o->shown), "%s%s", i ? " + " : "",
                 o->data_files[i]);
    a->data_shown = o->shown;
    a->output_dir = o->output_dir;
    a->log_jsonl = o->log_jsonl;
    a->resume_dir = o->resume;
    a->save_total_limit = o->save_total_limit;
    a->override_checkpoint_args = o->override_ckpt;
    a->allow_precision_change = o->allow_precision;
    a->command_line = o->command_line;
    a->tokenizer_dir = o->tokenizer ? o->tokenizer : o->gguf_tok[0] ? o->gguf_tok : NULL;
    a->peak_gflops = o->peak;
    a->skip_nonfinite_steps = o->skip_nonfinite;
    a->select = o->sel;
    a->max_consecutive_skipped_steps = o->max_skipped;
    a->progress = o->progress != 0 && isatty(STDERR_FILENO); /* a log file gets lines, not carriage returns */
    int rc;
    if ((rc = zt_cli_eval_apply(&o->ev, a, err)) || (rc = zt_cli_vocab_apply(&o->voc, table, a, err)))
        return rc;
    return ZT_OK;
}

/* The data as token files (text tokenized once, cached), the evaluation set's too,
 * the packing of documents, and which tokens the loss is on. */
static int train_data(train_cli *o, const zt_llama_config *cfg, zt_comm *comm, int nthreads, zt_train_args *a,
                      zt_err *err)
{
    int rc;
    zt_cli_set_assistant_only(o->assistant_only);
    if ((rc = zt_cli_data_files(o->data_files, o->n_data, &o->topts, o->tokenizer, cfg->vocab_size, comm, g_rank,
                                nthreads, &a->data_path, o->tok_data, sizeof o->tok_data, &a->loss_mask_path,
                                o->mask_data, err)) ||
        (rc = zt_cli_eval_tokenize(&o->ev, a, o->tokenizer, &o->topts, cfg->vocab_size, comm, g_rank, nthreads,
                                   err)))
        return rc;
    a->padding_free = o->padding_free;
    if ((rc = zt_cli_packing_mode(o->packing, o->packing_strategy, g_rank == 0, &a->packing, err)) ||
        ((o->padding_free || a->packing) &&
         (rc = zt_cli_padding_free_eos(o->tokenizer, &o->topts, g_rank == 0, a->packing, &a->doc_eos, err))))
        return rc;
    if (a->loss_mask_path && g_rank == 0)
        printf("loss: %s\n", o->assistant_only    ? "on the assistant's tokens only (TRL's assistant_only_loss)"
                              : o->completion_only ? "on the completions only (TRL's completion_only_loss)"
                                                   : "on every token (--completion_only_loss false)");
    if (!o->completion_only && !o->assistant_only) /* TRL's completion_only_loss=False: prompt tokens are targets too, in evaluation too */
        a->loss_mask_path = NULL, a->eval_mask_path = NULL;
    return ZT_OK;
}

/* The communicators and threads, the data, then the run and its profile. */
static int train_run(train_cli *o, const zt_llama_config *cfg, zt_train_args *a, zt_err *err)
{
    zt_comm comm;
    int rc;
    if ((rc = zt_comm_create(&comm, a->plan.group_size, err)))
        return rc;
    a->comm = &comm;
    a->quiet = g_rank != 0;
    int nthreads = zt_cli_set_threads(o->threads);
    if (g_rank == 0)
        printf("ztrain %s: %d rank%s x %d thread%s\n", ZTRAIN_VERSION, g_world, g_world == 1 ? "" : "s",
               nthreads, nthreads == 1 ? "" : "s");
    if (!o->output_dir && g_rank == 0)
        fprintf(stderr, "ztrain: warning: no --output_dir: the trained model is discarded at the end of the run\n");
    if ((rc = train_data(o, cfg, &comm, nthreads, a, err))) {
        zt_comm_free(&comm);
        return rc;
    }
    zt_train_result res;
    rc = zt_train(a, &res, err);
    if (rc == ZT_OK) /* the trace, and rank 0's table by kernel class */
        rc = zt_prof_finish(g_rank == 0 ? stdout : NULL, err);
    zt_prof_close();
    zt_comm_free(&comm);
    return rc;
}

static int train_command(int argc, char **argv, zt_err *err)
{
    train_cli o;
    train_cli_defaults(&o);
    zt_flag flags[] = {
        {"model", ZT_FLAG_STR, &o.model, "Hugging Face model directory (config.json + safetensors), or a GGUF file", 1, 0, 0},
        {"data", ZT_FLAG_STR, &o.data, "FILE...: token data (.npy, .bin uint16, .txt bytes) or text with --tokenizer (.txt; JSON Lines .jsonl/.json; Parquet .parquet, Arrow .arrow or a save_to_disk directory: a document a record); several files are one stream, in order", 1, 0, 0},
        {"tokenizer", ZT_FLAG_STR, &o.tokenizer, "tokenize text data with DIR/tokenizer.json (once: cached by content hash)", 1, 0, 0},
        TEXT_OPTS_FLAGS(o.topts),
        {"padding_free", ZT_FLAG_BOOL, &o.padding_free, "TRL's padding_free: positions restart at each document (after each eos) inside a window and attention stays inside it (CPU, exact kernels; default false)", 1, 0, 0},
        {"packing", ZT_FLAG_BOOL, &o.packing, "TRL's packing=True: documents (ended by eos) packed best-fit decreasing into the windows (--packing_strategy), positions restart at each, attention stays inside it, padding out of the loss (CPU, exact kernels). Default false: ztrain's windows cut across documents, which is TRL's packing=True with strategy wrapped (TRL's own default, packing=False, a padded row per example, is not offered)", 1, 0, 0},
        {"packing_strategy", ZT_FLAG_STR, &o.packing_strategy, "with --packing, TRL's packing_strategy: bfd (default: a document longer than --block_size truncated), bfd_split (cut into pieces) or wrapped (ztrain's default windows)", 1, 0, 0},
        {"completion_only_loss", ZT_FLAG_BOOL, &o.completion_only, "prompt/completion records: the loss on the completion only (default true, as TRL); false: on every token", 1, 0, 0},
        {"assistant_only_loss", ZT_FLAG_BOOL, &o.assistant_only, "conversational records (messages, or prompt/completion lists): the loss on the assistant's tokens only, the {% generation %} blocks of the chat template (TRL's; default false)", 1, 0, 0},
        TRAIN_EVAL_FLAGS(o.ev),
        {"output_dir", ZT_FLAG_STR, &o.output_dir, "where the trained model (and its checkpoint-N) are written (default none: the model is discarded, with a warning)", 1, 0, 0},
        {"log_jsonl", ZT_FLAG_STR, &o.log_jsonl, "write one JSON object per optimizer step here", 1, 0, 0},
        {"profile", ZT_FLAG_STR, &o.profile, "write a Chrome trace (Perfetto) of every kernel, collective and phase here, and print the time by kernel class at the end", 1, 0, 0},
        {"profile_steps", ZT_FLAG_STR, &o.profile_steps, "the steps --profile records: A-B, A or A- (default: every step)", 1, 0, 0},
        PLAN_FLAGS(o.st),
        TRAIN_VOCAB_FLAGS(o.voc),
        {"seed", ZT_FLAG_LONG, &o.st.seed, "seed for --shuffle (default 42)", 0, 9.2e18, 0},
        {"shuffle", ZT_FLAG_BOOL, &o.st.shuffle, "read the windows in a permutation seeded by --seed, a new one each epoch, as Trainer does (default true; false: in order)", 1, 0, 0},
        {"max_shard_size", ZT_FLAG_STR, &o.max_shard, "split saved weights into shards above this size, e.g. 5GB, 200MB (default 5GB, as HF)", 1, 0, 0},
        {"save_steps", ZT_FLAG_LONG, &o.st.save_steps, "also save OUTPUT_DIR/checkpoint-N (model + sharded run state) every N steps", 0, 1e12, 0},
        {"resume_from_checkpoint", ZT_FLAG_STR, &o.resume, "continue from a checkpoint-N directory, or 'latest' (the newest complete one in --output_dir); bit for bit under the same plan, resharded under another", 1, 0, 0},
        {"save_total_limit", ZT_FLAG_LONG, &o.save_total_limit, "keep only the newest N checkpoint-N directories (default: all)", 0, 1e12, 0},
        {"override_checkpoint_args", ZT_FLAG_BOOL, &o.override_ckpt, "resume even where hyper-parameters differ from the checkpoint's, printing each change", 1, 0, 0},
        {"allow_precision_change", ZT_FLAG_BOOL, &o.allow_precision, "resume under another master dtype, converting the saved state", 1, 0, 0},
        {"threads", ZT_FLAG_INT, &o.threads, "threads per process (default: the cores this process may use)", 0, 4096, 0},
        {"progress", ZT_FLAG_BOOL, &o.progress, "progress bar, drawn only on a terminal (default: when stderr is one); elsewhere the plain lines of --logging_steps", 1, 0, 0},
        {"peak_gflops", ZT_FLAG_DOUBLE, &o.peak, "matrix-product peak for MFU (default: measured)", 0, 1e9, 0},
        {"skip_nonfinite_steps", ZT_FLAG_LONG, &o.skip_nonfinite, "outside fp16 loss scaling, skip up to N steps in a row whose loss or gradient holds an inf or NaN (default 0: stop at the first)", 0, 1e12, 0},
        {"max_consecutive_skipped_steps", ZT_FLAG_LONG, &o.max_skipped, "fp16: stop with an error (exit 1) when a step overflows with the loss scale at its floor (min_loss_scale) after more than N skipped steps in a row (default 20; 0: at the first such overflow, as DeepSpeed)", 0, 1e12, 0},
        {"max_memory", ZT_FLAG_STR, &o.max_memory, "bytes each rank may use, e.g. 8GB (default: the machine's available memory shared by its ranks); a run estimated above it is refused before allocating", 1, 0, 0},
        {"max_host_memory", ZT_FLAG_STR, &o.max_host_memory, "host bytes each rank may hold in offloaded state, e.g. 64GB (default: the machine's available memory shared by its ranks)", 1, 0, 0},
        {"ignore_num_processes", ZT_FLAG_BOOL, &o.ignore_np, "run on the ranks MPI started even when the Accelerate YAML's num_processes differs", 1, 0, 0},
        {"collective_timeout", ZT_FLAG_DOUBLE, &o.coll_timeout, "seconds one collective may block before the job is aborted with what each rank waits for (default 600, as NCCL's)", 0.1, 1e9, 0},
        TRAIN_SELECT_FLAGS(o.sel),
        TRAIN_LORA_FLAGS(o.lora),
    };
    flag_table table = {flags, NFLAGS(flags)};
    o.st.given = zt_flag_given;
    o.st.given_ctx = &table;
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, NFLAGS(flags),
                       "usage: ztrain train --model DIR --data FILE... [flags]\n"
                       "       mpirun -np N ztrain train ...   or   ztrain launch --num_processes N train ...\n"
                       "Precedence: flags > DeepSpeed JSON > Accelerate YAML > defaults (docs/zero.md).");
        return ZT_OK;
    }
    zt_train_args a;
    zt_llama_config cfg;
    int rc;
    if ((rc = train_parse(&o, flags, NFLAGS(flags), argc, argv, err)) || (rc = train_plan(&o, &cfg, &a, err)) ||
        (rc = train_run_args(&o, &table, &a, err)))
        return rc;
    return train_run(&o, &cfg, &a, err);
}

/* A stop signal (SIGTERM, SIGINT, SIGUSR2) that comes while MPI and the data
 * start up is kept for the trainer, which answers it after the first step,
 * instead of killing the rank (SIGUSR2's default) or being lost.  The handlers
 * stay until the process ends: a first signal after the final save (during the
 * closing lines or MPI's shutdown) is then only recorded, and the run still
 * exits 0 with its closing lines, where the default action killed it (143). */
static int cmd_train(int argc, char **argv, zt_err *err)
{
    zt_preempt_install();
    return train_command(argc, argv, err);
}

/* ---- eval ----------------------------------------------------------------- */

static int cmd_eval(int argc, char **argv, zt_err *err)
{
    const char *model = NULL, *data = NULL, *mixed_precision = "no", *tokenizer = NULL, *output_json = NULL;
    const char *device = NULL;
    zt_text_opts topts = ZT_TEXT_OPTS_DEFAULTS;
    int block_size = 128, batch = 8, threads = 0;
    long max_batches = 0;
    zt_flag flags[] = {
        {"model", ZT_FLAG_STR, &model, "Hugging Face model directory, or a GGUF file", 1, 0, 0},
        {"data", ZT_FLAG_STR, &data, "token data: .npy, .bin or .txt (bytes), or text with --tokenizer (.txt; JSON Lines .jsonl/.json; .parquet, .arrow or a save_to_disk directory)", 1, 0, 0},
        {"tokenizer", ZT_FLAG_STR, &tokenizer, "tokenize text data with DIR/tokenizer.json (once: cached by content hash)", 1, 0, 0},
        TEXT_OPTS_FLAGS(topts),
        {"block_size", ZT_FLAG_INT, &block_size, "tokens per sequence (default 128)", 1, 1 << 20, 0},
        {"per_device_eval_batch_size", ZT_FLAG_INT, &batch, "sequences per batch (default 8)", 1, 1 << 20, 0},
        {"max_batches", ZT_FLAG_LONG, &max_batches, "stop after K batches (default: all)", 0, 1e12, 0},
        {"mixed_precision", ZT_FLAG_STR, &mixed_precision, "no | bf16 (or bfloat16)", 1, 0, 0},
        {"device", ZT_FLAG_STR, &device, "cpu (default) | cuda (make cuda)", 1, 0, 0},
        {"threads", ZT_FLAG_INT, &threads, "threads (default: the cores this process may use)", 0, 4096, 0},
        {"output_json", ZT_FLAG_STR, &output_json, "also write {\"eval_loss\", \"perplexity\", \"eval_tokens\"} here (atomically; full precision)", 1, 0, 0},
    };
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, NFLAGS(flags), "usage: ztrain eval --model DIR --data FILE [--block_size T] [flags]");
        return ZT_OK;
    }
    int rc = zt_flags_parse(flags, NFLAGS(flags), argc, argv, "ztrain eval", err);
    if (rc)
        return rc;
    if (!model || !data)
        return zt_fail(err, ZT_EINPUT, "ztrain eval: --model and --data are required");
    char gguf_tok[4096]; /* --model FILE.gguf: its own tokenizer for text data, unless --tokenizer names one */
    if ((rc = zt_cli_gguf_tokenizer_dir(tokenizer || ids_only(&data, 1) ? NULL : model, gguf_tok, sizeof gguf_tok,
                                        err)))
        return rc;
    if (gguf_tok[0])
        tokenizer = gguf_tok;
    zt_eval_args a = {model, data, block_size, batch, max_batches, ZT_F32, device, NULL};
    if (strcmp(mixed_precision, "no") != 0 &&
        (zt_dtype_parse(mixed_precision, &a.compute) != 0 || a.compute != ZT_BF16))
        return zt_fail(err, ZT_EINPUT, "--mixed_precision: expected no or bf16, got '%s'", mixed_precision);
    int nthreads = zt_cli_set_threads(threads);
    char tok_data[4096], mask_data[4096];
    zt_llama_config cfg;
    if ((rc = zt_hf_read_config_dir(model, &cfg, err)) ||
        (tokenizer && (rc = zt_cli_data_files(&data, 1, &topts, tokenizer, cfg.vocab_size, NULL, 0, nthreads,
                                              &a.data_path, tok_data, sizeof tok_data, &a.mask_path, mask_data, err))))
        return rc;
    if (a.mask_path) /* as training counts them */
        printf("eval: prompt/completion records: the loss over the completion tokens only\n");
    /* sizes before allocation, as for train: the weights once in the compute
     * dtype and the activations of one batch */
    zt_precision prec = {.load = ZT_F32, .master = ZT_F32, .compute = a.compute, .reduce = a.compute,
                         .save = ZT_F32};
    zt_plan eplan = zt_plan_single(prec, ZT_WRAP_TRANSFORMER);
    char why[160];
    size_t limit = zt_memory_limit(0, 1, why, sizeof why);
    if ((rc = zt_memory_gate(&cfg, &eplan, batch, block_size, 0, 0, NULL, limit, why, err)))
        return rc;
    double loss = 0.0;
    long tokens = 0;
    if ((rc = zt_eval(&a, &loss, &tokens, err)))
        return rc;
    /* the weights were checked finite at load: a non-finite loss means the
     * forward overflowed, which is no result to print */
    if (!isfinite(loss))
        return zt_fail(err, ZT_EFAIL, "%s: the mean loss over %ld tokens of %s is %s: the forward overflowed "
                       "(weights or activations too large for %s); no loss or perplexity to report", model,
                       tokens, data, isnan(loss) ? "nan" : "inf", a.compute == ZT_BF16 ? "bf16" : "fp32");
    /* %.17g: the double back bit for bit, so a script can compare it with a JSONL
     * eval_loss (also %.17g) or another run exactly */
    printf("eval loss %.17g over %ld tokens (perplexity %.17g)\n", loss, tokens, exp(loss));
    if (output_json) {
        char text[256];
        int n = snprintf(text, sizeof text, "{\"eval_loss\": %.17g, \"perplexity\": %.17g, \"eval_tokens\": %ld}\n",
                         loss, exp(loss), tokens);
        zt_wpart part = {text, (size_t)n};
        if ((rc = zt_write_atomic(output_json, &part, 1, err)))
            zt_wrap(err, "--output_json: ");
    }
    return rc;
}

/* ---- init-model ----------------------------------------------------------- */

/* init-model --tokenizer DIR: the vocabulary is the tokenizer's, and its special
 * tokens are the config's bos/eos/pad ids (as a model made for a tokenizer has). */
static int tokenizer_sizes(const char *tok_dir, zt_llama_config *cfg, zt_hf_token_ids *ids, zt_err *err)
{
    zt_tokenizer *tok = NULL;
    int rc = zt_tok_load(tok_dir, &tok, err);
    if (rc)
        return zt_wrap(err, "--tokenizer: ");
    if (cfg->vocab_size != zt_tok_vocab_size(tok))
        printf("vocab_size %d (the tokenizer's) instead of the config's %d\n", zt_tok_vocab_size(tok),
               cfg->vocab_size);
    cfg->vocab_size = zt_tok_vocab_size(tok);
    zt_hf_token_ids special = {zt_tok_bos_id(tok), zt_tok_eos_id(tok), zt_tok_pad_id(tok)};
    *ids = special;
    zt_tok_free(tok);
    return ZT_OK;
}

static int cmd_init_model(int argc, char **argv, zt_err *err)
{
    const char *cfg_path = NULL, *out = NULL, *torch_dtype = "float32", *tok_dir = NULL;
    long seed = 0;
    const char *max_shard = "5GB";
    zt_flag flags[] = {
        {"model_config", ZT_FLAG_STR, &cfg_path, "config.json describing the architecture", 1, 0, 0},
        {"output_dir", ZT_FLAG_STR, &out, "directory to write config.json + model.safetensors", 1, 0, 0},
        {"tokenizer", ZT_FLAG_STR, &tok_dir, "size the vocabulary from DIR/tokenizer.json, set bos/eos/pad_token_id from its special tokens, and save its files with the model", 1, 0, 0},
        {"seed", ZT_FLAG_LONG, &seed, "random seed (default 0)", 0, 9.2e18, 0},
        {"torch_dtype", ZT_FLAG_STR, &torch_dtype, "dtype of the saved weights: fp32 | bf16 | fp16 (or float32, bfloat16, float16; default float32)", 1, 0, 0},
        {"max_shard_size", ZT_FLAG_STR, &max_shard, "split weights into shards above this size, e.g. 5GB, 200MB, 64KB (default 5GB, as HF)", 1, 0, 0},
    };
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, NFLAGS(flags), "usage: ztrain init-model --model_config CFG.json --output_dir DIR [flags]");
        return ZT_OK;
    }
    int rc = zt_flags_parse(flags, NFLAGS(flags), argc, argv, "ztrain init-model", err);
    if (rc)
        return rc;
    if (!cfg_path || !out)
        return zt_fail(err, ZT_EINPUT, "ztrain init-model: --model_config and --output_dir are required");
    zt_dtype dt;
    size_t max_shard_bytes = 0;
    if ((rc = resolve_dtype_flag("torch_dtype", torch_dtype, &dt, err)) ||
        (rc = zt_cli_parse_size("max_shard_size", max_shard, &max_shard_bytes, err)))
        return rc;
    zt_llama_config cfg;
    zt_hf_token_ids ids = ZT_HF_TOKEN_IDS_NONE;
    if ((rc = zt_hf_config_read(cfg_path, &cfg, err)) || (tok_dir && (rc = tokenizer_sizes(tok_dir, &cfg, &ids, err))))
        return rc;
    char why[320]; /* the gate every command that allocates a model passes */
    if ((rc = zt_memory_gate_init(&cfg, (int)zt_dtype_size(dt), zt_memory_limit(0, 1, why, sizeof why), why, err)))
        return rc;
    size_t numel = 0;
    if ((rc = zt_hf_init_random(out, &cfg, (uint64_t)seed, dt, max_shard_bytes, &numel, err)))
        return rc;
    /* the config's other keys, and the tokenizer's files beside the weights */
    if ((rc = zt_hf_carry(out, cfg_path, NULL, tok_dir, tok_dir ? &ids : NULL, err)))
        return rc;
    printf("wrote a %zu-parameter model to %s\n", numel, out);
    return ZT_OK;
}

/* ---- main ----------------------------------------------------------------- */

/* Every command, with the line `ztrain --help` shows for it: one table, so a new
 * command is listed (and tests/cli/help.sh runs its --help) by being added here. */
static const struct command {
    const char *name;
    int (*fn)(int, char **, zt_err *);
    const char *summary;
} commands[] = {
    {"train", cmd_train, "train a model (Hugging Face directory) on token data"},
    {"eval", cmd_eval, "mean loss of a model on token data"},
    {"init-model", cmd_init_model, "write a randomly initialised model from a config.json"},
    {"env", zt_cmd_env, "versions, CPU features and the calibrated matrix-product peaks"},
    {"launch", zt_cmd_launch, "start N ranks through mpirun: ztrain launch --num_processes N train ..."},
    {"config", zt_cmd_config, "show | validate | convert an Accelerate YAML / DeepSpeed JSON"},
    {"estimate-memory", zt_cmd_estimate_memory, "bytes per rank by stage and mode, before running"},
    {"tokenize", zt_cmd_tokenize, "text files to token ids with a Hugging Face tokenizer.json"},
    {"tokenizer", zt_cmd_tokenizer, "train: a byte-level BPE tokenizer from text (Hugging Face files)"},
    {"generate", zt_cmd_generate, "continue a prompt with a model (greedy or sampled, KV cache)"},
    {"chat", zt_cmd_chat, "talk with a model through its chat template, one line of stdin per turn"},
    {"checkpoint", zt_cmd_checkpoint, "show: verify a checkpoint, print its state and what resuming it would do"},
    {"merge-weights", zt_cmd_merge_weights, "a checkpoint's shards to a Hugging Face model directory"},
    {"plot", zt_cmd_plot, "a training log (JSONL) as an SVG chart"},
    {"convert", zt_cmd_convert, "a GGUF model (llama.cpp) to a Hugging Face directory: --from gguf FILE --output_dir DIR"},
    {"export", zt_cmd_export, "a model as one GGUF file for llama.cpp and Ollama: export --format gguf --outtype q8_0 MODEL OUT.gguf"},
    {"merge-adapter", zt_cmd_merge_adapter, "LoRA adapters merged into their base model: merge-adapter BASE ADAPTER OUT"},
};
#define NCOMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void usage(void)
{
    printf("ztrain %s — sharded data-parallel training of Llama models\n\n"
           "usage: ztrain <command> [flags]   (ztrain <command> --help for its flags)\n\n"
           "commands:\n",
           ZTRAIN_VERSION);
    for (int i = 0; i < NCOMMANDS; i++)
        printf("  %-16s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ztrain %s\n", ZTRAIN_VERSION);
        return 0;
    }
    /* A write past the file size limit (ulimit -f) raises SIGXFSZ, whose default
     * kills the process without a word; ignored, the write fails with EFBIG and
     * the error names the file like any other failed write. */
    signal(SIGXFSZ, SIG_IGN);
    zt_err err = {0};
    for (int i = 0; i < NCOMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        int rc = commands[i].fn(argc - 2, argv + 2, &err);
        zt_matmul_shutdown();
        if (rc != ZT_OK && err.msg[0]) {
            if (g_world > 1)
                fprintf(stderr, "ztrain: error: rank %d: %s\n", g_rank, err.msg);
            else
                fprintf(stderr, "ztrain: error: %s\n", err.msg);
        }
        zt_comm_finalize_mpi();
        if (zt_launch_exit_code() >= 0) /* launch ends as mpirun did, or 128 + a forwarded signal */
            return zt_launch_exit_code();
        return rc == ZT_OK ? 0 : rc == ZT_EINPUT ? 2 : rc == ZT_EINTERRUPT ? 130 : 1;
    }
    char names[512] = "";
    for (int i = 0; i < NCOMMANDS; i++) {
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", commands[i].name);
    }
    fprintf(stderr, "ztrain: error: unknown command '%s' (commands: %s)\n", argv[1], names);
    return 2;
}
