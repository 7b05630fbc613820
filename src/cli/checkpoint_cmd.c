/* checkpoint_cmd.c — `ztrain checkpoint show DIR`: verify a checkpoint against
 * its manifest, print its trainer state and the plan it was saved under, and
 * say what resuming it under a plan (this command's plan flags, on
 * --num_processes ranks) would do: bit-exact, resharded, or refused and why. */
#include <stdio.h>
#include <string.h>

#include "../train/checkpoint.h"
#include "commands.h"
#include "run_settings.h"

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void print_state(const char *dir, const zt_ckpt_state *st)
{
    const zt_ckpt_hparams *h = &st->hp;
    const zt_ckpt_plan *p = &st->plan;
    printf("checkpoint %s: complete (every file matches manifest.json)\n", dir);
    printf("  step %ld, optimizer steps %ld (scheduler position), %ld samples seen (epoch %ld)\n", st->step,
           st->optimizer_steps, st->samples_seen, st->epoch);
    printf("  loss scaler: scale %.9g, hysteresis %d, iteration %ld, last overflow %ld, skipped %ld\n",
           st->scaler.scale, st->scaler.cur_hysteresis, st->scaler.iter, st->scaler.last_overflow_iter,
           st->scaler.skipped);
    printf("  hyper-parameters: learning_rate %.9g, weight_decay %.9g, betas (%.9g, %.9g), eps %.9g, "
           "max_grad_norm %.9g, %s schedule, warmup %ld of %ld steps\n",
           h->lr, h->weight_decay, h->beta1, h->beta2, h->eps, h->max_grad_norm, zt_lr_schedule_name(h->schedule),
           h->warmup_steps, h->max_steps);
    printf("  batch: %ld sequences of %d tokens per step (%d per device x %d accumulation); data %llu tokens "
           "(digest %016llx), shuffle %s, seed %llu; compute %s\n",
           h->global_batch, h->block_size, h->per_device_batch, h->grad_accum, (unsigned long long)h->data_tokens,
           (unsigned long long)h->data_digest, h->shuffle ? "on" : "off", (unsigned long long)h->seed,
           zt_dtype_name(h->compute));
    printf("  saved under: %d rank%s, %s %s (ZeRO-%d, shard group %d, %s), master %s, compute %s, reduce %s%s%s\n",
           p->world, p->world == 1 ? "" : "s", p->face, p->strategy, p->stage, p->group_size,
           zt_wrap_policy_name(p->wrap), zt_dtype_name(p->master), zt_dtype_name(p->compute),
           zt_dtype_name(p->reduce), p->compensated ? ", Kahan-compensated" : "",
           p->loss_scaling ? ", dynamic loss scaling" : "");
    printf("  command line: %s\n", st->command_line[0] ? st->command_line : "(not recorded)");
    if (st->lora.on) /* what a resume checks: docs/lora.md */
        printf("  LoRA adapters only: r %d, alpha %.9g, rsLoRA %s, target bits 0x%x; base digest %016llx\n",
               st->lora.r, st->lora.alpha, st->lora.rslora ? "on" : "off", st->lora.targets,
               (unsigned long long)st->lora.base_digest);
}

static int cmd_show(int argc, char **argv, zt_err *err)
{
    static const char usage[] = "usage: ztrain checkpoint show CHECKPOINT_DIR [--num_processes W] [plan flags]";
    int world = 1, allow_precision = 0;
    zt_settings st;
    zt_settings_defaults(&st);
    zt_flag flags[] = {
        {"num_processes", ZT_FLAG_INT, &world, "ranks of the resuming run (default 1)", 1, 1 << 20, 0},
        {"allow_precision_change", ZT_FLAG_BOOL, &allow_precision, "resume under another master dtype, converting the saved state, as train's flag", 1, 0, 0},
        PLAN_FLAGS(st),
    };
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, NFLAGS(flags), usage);
        return ZT_OK;
    }
    if (argc < 1 || !strncmp(argv[0], "--", 2))
        return zt_fail(err, ZT_EINPUT, "%s", usage);
    const char *dir = argv[0];
    flag_table table = {flags, NFLAGS(flags)};
    st.given = zt_flag_given;
    st.given_ctx = &table;
    int rc = zt_flags_parse(flags, NFLAGS(flags), argc - 1, argv + 1, "ztrain checkpoint show", err);
    if (rc)
        return rc;
    if ((rc = zt_ckpt_verify(dir, err)))
        return rc;
    zt_ckpt_state s;
    if ((rc = zt_ckpt_read_state(dir, &s, err)))
        return rc;
    print_state(dir, &s);
    /* the plan these flags resolve to, with the checkpoint's own config.json */
    zt_llama_config cfg;
    zt_plan plan;
    if ((rc = zt_resolve_run(&st, dir, NULL, world, NULL, &cfg, &plan, err)))
        return rc;
    char why[1024];
    zt_ckpt_compare_plans(&s.plan, &plan, allow_precision, why, sizeof why);
    printf("  resuming under this plan: %s\n", why);
    return ZT_OK;
}

int zt_cmd_checkpoint(int argc, char **argv, zt_err *err)
{
    if (argc >= 1 && !strcmp(argv[0], "show"))
        return cmd_show(argc - 1, argv + 1, err);
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        printf("usage: ztrain checkpoint show CHECKPOINT_DIR [--num_processes W] [plan flags]\n"
               "  verifies every file against manifest.json, prints the trainer state and the plan it was\n"
               "  saved under, and what resuming under the given plan would do (bit-exact, resharded, refused)\n");
        return argc < 1 ? ZT_EINPUT : ZT_OK;
    }
    return zt_fail(err, ZT_EINPUT, "ztrain checkpoint: unknown subcommand '%s' (expected: show)", argv[0]);
}
