/* lora_cli.c — `train`'s LoRA flags (lora_cli.h). */
#include "lora_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/peft_adapter.h"
#include "commands.h"

int zt_cli_lora_take(zt_cli_lora *l, int *argc, char **argv, zt_err *err)
{
    static const char flag[] = "--lora_target_modules";
    for (int i = 0; i < *argc; i++) {
        char after = argv[i][strncmp(argv[i], flag, sizeof flag - 1) ? 0 : sizeof flag - 1];
        if (!strncmp(argv[i], flag, sizeof flag - 1) && (after == 0 || after == '='))
            l->targets_given = 1;
    }
    const char **taken = NULL;
    int n = zt_cli_take_list(flag, argc, argv, &taken);
    if (n < 0)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    for (int i = 0; i < n && i < ZT_CLI_LORA_MAX_TARGETS; i++)
        l->targets[i] = taken[i];
    free(taken);
    if (n > ZT_CLI_LORA_MAX_TARGETS)
        return zt_fail(err, ZT_EINPUT, "%s: %d values, more than %d", flag, n, ZT_CLI_LORA_MAX_TARGETS);
    if (l->targets_given && n == 0)
        return zt_fail(err, ZT_EINPUT, "%s: expected all-linear or projection names, got none", flag);
    l->ntargets = n;
    return ZT_OK;
}

/* Where each LoRA setting came from, for messages: "--lora_r" or "FILE:LINE: lora_r". */
typedef char lora_names[ZT_PEFT_NKEYS][600];

/* Each setting's flag, in the YAML keys' order (config/accelerate.h's ZT_PEFT_*). */
static const char *const flags[ZT_PEFT_NKEYS] = {
    "use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "use_rslora", "lora_bias"};

/* The YAML's settings that no flag gave, into l (a flag wins, as everywhere). */
static void take_yaml(zt_cli_lora *l, const flag_table *table, const char *path, lora_names names)
{
    zt_accel_peft *y = &l->yaml;
    for (int i = 0; i < ZT_PEFT_NKEYS; i++) {
        int flag = i == ZT_PEFT_TARGETS ? l->targets_given : zt_flag_given((void *)table, flags[i]);
        int line = i == ZT_PEFT_USE && !y->line[i] ? y->section_line : y->line[i];
        if (flag || !line) {
            snprintf(names[i], sizeof names[i], "--%s", flags[i]);
            continue;
        }
        if (i == ZT_PEFT_USE && !y->line[i])
            snprintf(names[i], sizeof names[i], "%s:%d: peft_config", path, line);
        else
            snprintf(names[i], sizeof names[i], "%s:%d: %s", path, line, y->key[i]);
        switch (i) {
        case ZT_PEFT_USE: l->use_peft = y->use_peft != ZT_NO; break;
        case ZT_PEFT_R: l->r = y->r; break;
        case ZT_PEFT_ALPHA: l->alpha = y->alpha; break;
        case ZT_PEFT_DROPOUT: l->dropout = y->dropout; break;
        case ZT_PEFT_TARGETS: l->targets[0] = y->targets, l->ntargets = 1, l->targets_given = 1; break;
        case ZT_PEFT_RSLORA: l->rslora = y->use_rslora == ZT_YES; break;
        case ZT_PEFT_BIAS: l->bias = y->bias; break;
        }
    }
}

/* A setting the run was given: by its flag, or by a YAML key (names[i] then reads
 * "FILE:LINE: KEY"). */
static int given(const flag_table *table, lora_names names, int i)
{
    return names[i][0] != '-' || zt_flag_given((void *)table, flags[i]);
}

/* --adapter DIR: its config's r, alpha, rsLoRA and targets become the run's; a flag or a
 * YAML key that gave another value is a contradiction, refused with both values.  Its
 * lora_dropout is the run's unless --lora_dropout (or the YAML key) gives one. */
static int adapter_settings(zt_cli_lora *l, const flag_table *table, lora_names names, zt_err *err)
{
    zt_lora a;
    int rc = zt_peft_adapter_read_config(l->adapter, &a, err);
    if (rc)
        return rc;
    const char *cfg = "adapter_config.json";
    if (given(table, names, ZT_PEFT_R) && l->lora.r != a.r)
        return zt_fail(err, ZT_EINPUT, "%s %d disagrees with --adapter %s: its %s has r %d", names[ZT_PEFT_R],
                       l->lora.r, l->adapter, cfg, a.r);
    if (given(table, names, ZT_PEFT_ALPHA) && l->lora.alpha != a.alpha)
        return zt_fail(err, ZT_EINPUT, "%s %g disagrees with --adapter %s: its %s has lora_alpha %g",
                       names[ZT_PEFT_ALPHA], l->lora.alpha, l->adapter, cfg, a.alpha);
    if (given(table, names, ZT_PEFT_RSLORA) && l->lora.rslora != a.rslora)
        return zt_fail(err, ZT_EINPUT, "%s %s disagrees with --adapter %s: its %s has use_rslora %s",
                       names[ZT_PEFT_RSLORA], l->lora.rslora ? "true" : "false", l->adapter, cfg,
                       a.rslora ? "true" : "false");
    if (l->targets_given && l->lora.targets != a.targets) {
        char want[160], have[160];
        zt_lora_targets_text(l->lora.targets, want, sizeof want);
        zt_lora_targets_text(a.targets, have, sizeof have);
        return zt_fail(err, ZT_EINPUT,
                       "%s %s disagrees with --adapter %s: its %s has "
                       "target_modules %s",
                       names[ZT_PEFT_TARGETS], want, l->adapter, cfg, have);
    }
    if (given(table, names, ZT_PEFT_DROPOUT)) /* a training setting, not the adapter's math: the run's wins */
        a.dropout = l->lora.dropout;
    l->lora = a;
    return ZT_OK;
}

int zt_cli_lora_check(zt_cli_lora *l, const flag_table *table, const char *config_file, zt_err *err)
{
    lora_names names;
    int rc;
    memset(&l->yaml, 0, sizeof l->yaml);
    if (config_file) {
        zt_accel_config ac;
        if ((rc = zt_accel_config_read(config_file, &ac, err)))
            return rc;
        l->yaml = ac.peft;
    }
    take_yaml(l, table, config_file, names);
    if (!l->use_peft) { /* TRL ignores them; a setting that changes nothing is a mistake worth naming */
        for (int i = ZT_PEFT_R; i < ZT_PEFT_NKEYS; i++) {
            int flag = i == ZT_PEFT_TARGETS
                ? l->targets_given && names[i][0] == '-'
                : names[i][0] == '-' && zt_flag_given((void *)table, names[i] + 2);
            if (flag)
                return zt_fail(err, ZT_EINPUT, "%s: LoRA flags need --use_peft", names[i]);
            if (names[i][0] != '-')
                return zt_fail(err, ZT_EINPUT, "%s: LoRA keys need use_peft: true (or --use_peft)", names[i]);
        }
        if (zt_flag_given((void *)table, "adapter"))
            return zt_fail(err, ZT_EINPUT, "--adapter: LoRA flags need --use_peft");
        return ZT_OK;
    }
    if (!(l->alpha > 0.0))
        return zt_fail(err, ZT_EINPUT, "%s %g: must be greater than 0", names[ZT_PEFT_ALPHA], l->alpha);
    if (!(l->dropout >= 0.0 && l->dropout < 1.0))
        return zt_fail(err, ZT_EINPUT, "%s %g: expected a probability from 0 to below 1", names[ZT_PEFT_DROPOUT],
                       l->dropout);
    if (strcmp(l->bias, "none"))
        return zt_fail(err, ZT_EINPUT,
                       "%s '%s': only none is implemented (PEFT's all and lora_only "
                       "train biases, which are not built yet)",
                       names[ZT_PEFT_BIAS], l->bias);
    l->lora = (zt_lora){.r = l->r, .alpha = l->alpha, .rslora = l->rslora, .dropout = l->dropout};
    rc = zt_lora_targets_parse(names[ZT_PEFT_TARGETS], l->targets, l->ntargets, &l->lora.targets, err);
    return rc || !l->adapter ? rc : adapter_settings(l, table, names, err);
}

int zt_cli_lora_plan(const zt_cli_lora *l, const zt_llama_config *cfg, int print, zt_err *err)
{
    char line[320];
    int rc = zt_lora_describe(&l->lora, cfg, line, sizeof line, err);
    if (rc)
        return rc;
    if (print) {
        printf("%s\n", line);
        fflush(stdout);
    }
    return ZT_OK;
}
