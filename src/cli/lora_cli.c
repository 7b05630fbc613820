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

/* --adapter DIR: its config's r, alpha, rsLoRA and targets become the run's; a flag the
 * command line gave with another value is a contradiction, refused with both values. */
static int adapter_settings(zt_cli_lora *l, const flag_table *table, zt_err *err)
{
    zt_lora a;
    int rc = zt_peft_adapter_read_config(l->adapter, &a, err);
    if (rc)
        return rc;
    const char *cfg = "adapter_config.json";
    if (zt_flag_given((void *)table, "lora_r") && l->lora.r != a.r)
        return zt_fail(err, ZT_EINPUT, "--lora_r %d disagrees with --adapter %s: its %s has r %d", l->lora.r,
                       l->adapter, cfg, a.r);
    if (zt_flag_given((void *)table, "lora_alpha") && l->lora.alpha != a.alpha)
        return zt_fail(err, ZT_EINPUT, "--lora_alpha %g disagrees with --adapter %s: its %s has lora_alpha %g",
                       l->lora.alpha, l->adapter, cfg, a.alpha);
    if (zt_flag_given((void *)table, "use_rslora") && l->lora.rslora != a.rslora)
        return zt_fail(err, ZT_EINPUT, "--use_rslora %s disagrees with --adapter %s: its %s has use_rslora %s",
                       l->lora.rslora ? "true" : "false", l->adapter, cfg, a.rslora ? "true" : "false");
    if (l->targets_given && l->lora.targets != a.targets) {
        char given[160], have[160];
        zt_lora_targets_text(l->lora.targets, given, sizeof given);
        zt_lora_targets_text(a.targets, have, sizeof have);
        return zt_fail(err, ZT_EINPUT, "--lora_target_modules %s disagrees with --adapter %s: its %s has "
                       "target_modules %s", given, l->adapter, cfg, have);
    }
    l->lora = a;
    return ZT_OK;
}

int zt_cli_lora_check(zt_cli_lora *l, const flag_table *table, zt_err *err)
{
    static const char *const lora_flags[] = {"lora_r",    "lora_alpha", "lora_dropout", "use_rslora",
                                             "lora_bias", "adapter",    NULL};
    if (!l->use_peft) { /* TRL ignores them; a flag that changes nothing is a mistake worth naming */
        for (int i = 0; lora_flags[i]; i++)
            if (zt_flag_given((void *)table, lora_flags[i]))
                return zt_fail(err, ZT_EINPUT, "--%s: LoRA flags need --use_peft", lora_flags[i]);
        if (l->targets_given)
            return zt_fail(err, ZT_EINPUT, "--lora_target_modules: LoRA flags need --use_peft");
        return ZT_OK;
    }
    if (l->dropout != 0.0)
        return zt_fail(err, ZT_EINPUT,
                       "--lora_dropout %g: dropout on the adapters is not implemented yet; give "
                       "--lora_dropout 0 (ztrain's default; TRL's default is 0.05)",
                       l->dropout);
    if (strcmp(l->bias, "none"))
        return zt_fail(err, ZT_EINPUT,
                       "--lora_bias '%s': only none is implemented (PEFT's all and lora_only "
                       "train biases, which are not built yet)",
                       l->bias);
    l->lora = (zt_lora){.r = l->r, .alpha = l->alpha, .rslora = l->rslora};
    int rc = zt_lora_targets_parse("--lora_target_modules", l->targets, l->ntargets, &l->lora.targets, err);
    return rc || !l->adapter ? rc : adapter_settings(l, table, err);
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
