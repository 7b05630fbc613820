/* flags.c — table-driven flag parsing (see flags.h). */
#include "flags.h"

#include "../core/text.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_value(zt_flag *f, const char *v, zt_err *err)
{
    char *end = NULL;
    errno = 0;
    switch (f->kind) {
    case ZT_FLAG_STR:
        *(const char **)f->dest = v;
        return ZT_OK;
    case ZT_FLAG_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) {
            *(int *)f->dest = 1;
            return ZT_OK;
        }
        if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) {
            *(int *)f->dest = 0;
            return ZT_OK;
        }
        return zt_fail(err, ZT_EINPUT, "--%s: expected true or false, got '%s'", f->name, v);
    case ZT_FLAG_INT:
    case ZT_FLAG_LONG: {
        long x = strtol(v, &end, 10);
        if (!*v || *end || errno)
            return zt_fail(err, ZT_EINPUT, "--%s: expected an integer, got '%s'", f->name, v);
        if (f->min <= f->max && ((double)x < f->min || (double)x > f->max))
            return zt_fail(err, ZT_EINPUT, "--%s: %ld is out of range [%.0f, %.0f]", f->name, x,
                           f->min, f->max);
        if (f->kind == ZT_FLAG_INT)
            *(int *)f->dest = (int)x;
        else
            *(long *)f->dest = x;
        return ZT_OK;
    }
    case ZT_FLAG_DOUBLE: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return zt_fail(err, ZT_EINPUT, "--%s: expected a number, got '%s'", f->name, v);
        if (f->min <= f->max && (x < f->min || x > f->max))
            return zt_fail(err, ZT_EINPUT, "--%s: %g is out of range [%g, %g]", f->name, x, f->min,
                           f->max);
        *(double *)f->dest = x;
        return ZT_OK;
    }
    }
    return ZT_EFAIL;
}

/* Trainer's (TrainingArguments') spellings of ztrain's flags.  An alias works
 * where its target is a flag of the command; one with a value stands for the
 * target given that value when it is given bare or true (false: as not given,
 * Trainer's default), one without takes its own value for the target's. */
static const struct flag_alias {
    const char *name, *target, *value;
} aliases[] = {
    {"bf16", "mixed_precision", "bf16"},
    {"fp16", "mixed_precision", "fp16"},
    {"deepspeed", "deepspeed_config_file", NULL},
    /* TRL's SFTConfig: max_length (max_seq_length before TRL 0.20) and dataset_text_field */
    {"max_length", "block_size", NULL},
    {"max_seq_length", "block_size", NULL},
    {"dataset_text_field", "text_field", NULL},
};
#define NALIASES ((int)(sizeof aliases / sizeof aliases[0]))

/* Names a Trainer user types that are too far from ztrain's for the edit
 * distance: older TrainingArguments names and common shorthands. */
static const struct {
    const char *name, *meant;
} trainer_names[] = {
    {"evaluation_strategy", "eval_strategy"},
    {"per_gpu_train_batch_size", "per_device_train_batch_size"},
    {"per_gpu_eval_batch_size", "per_device_eval_batch_size"},
    {"batch_size", "per_device_train_batch_size"},
    {"train_batch_size", "per_device_train_batch_size"},
    {"eval_batch_size", "per_device_eval_batch_size"},
    {"lr", "learning_rate"},
    {"epochs", "num_train_epochs"},
    {"num_epochs", "num_train_epochs"},
    {"gradient_clipping", "max_grad_norm"},
    {"scheduler", "lr_scheduler_type"},
    {"save_limit", "save_total_limit"},
};

static zt_flag *find_flag(zt_flag *flags, int nflags, const char *name)
{
    for (int k = 0; k < nflags; k++)
        if (!strcmp(flags[k].name, name))
            return &flags[k];
    return NULL;
}

static const struct flag_alias *find_alias(zt_flag *flags, int nflags, const char *name)
{
    for (int k = 0; k < NALIASES; k++)
        if (!strcmp(aliases[k].name, name) && find_flag(flags, nflags, aliases[k].target))
            return &aliases[k];
    return NULL;
}

/* The flag an unknown name most likely meant: Trainer's name for it, else the
 * closest by edit distance (at most 3 edits), else the one flag it is the start
 * of (--gradient_accumulation: --gradient_accumulation_steps); NULL if none. */
static const char *suggest(const zt_flag *flags, int nflags, const char *name)
{
    for (size_t i = 0; i < sizeof trainer_names / sizeof trainer_names[0]; i++)
        if (!strcmp(trainer_names[i].name, name))
            for (int k = 0; k < nflags; k++)
                if (!strcmp(flags[k].name, trainer_names[i].meant))
                    return flags[k].name;
    int best = -1, bestd = 99;
    for (int k = 0; k < nflags; k++) {
        int d = zt_edit_distance(name, flags[k].name);
        if (d < bestd) {
            bestd = d;
            best = k;
        }
    }
    if (best >= 0 && bestd <= 3)
        return flags[best].name;
    const char *prefix_of = NULL;
    size_t len = strlen(name);
    for (int k = 0; k < nflags && len >= 4; k++)
        if (!strncmp(flags[k].name, name, len)) {
            if (prefix_of) /* the start of several: no single guess */
                return NULL;
            prefix_of = flags[k].name;
        }
    return prefix_of;
}

int zt_flags_parse(zt_flag *flags, int nflags, int argc, char **argv, const char *command,
                   zt_err *err)
{
    const struct flag_alias *valued = NULL; /* the last --bf16-like alias given true */
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || !arg[2])
            return zt_fail(err, ZT_EINPUT, "%s: unexpected argument '%s' (flags look like --name value)",
                           command, arg);
        char name[128];
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (len >= sizeof name)
            return zt_fail(err, ZT_EINPUT, "%s: flag '%s' is too long", command, arg);
        memcpy(name, arg + 2, len);
        name[len] = '\0';
        zt_flag *f = find_flag(flags, nflags, name);
        const struct flag_alias *al = f ? NULL : find_alias(flags, nflags, name);
        if (al && al->value) { /* --bf16 [true|false] */
            int on = 1;
            zt_flag as_bool = {.name = al->name, .kind = ZT_FLAG_BOOL, .dest = &on, .min = 1, .max = 0};
            int rc = ZT_OK;
            if (eq)
                rc = parse_value(&as_bool, eq + 1, err);
            else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                rc = parse_value(&as_bool, argv[++i], err);
            if (rc)
                return rc;
            zt_flag *target = find_flag(flags, nflags, al->target);
            /* TrainingArguments raises on bf16 and fp16 both true; the last one winning would hide it */
            if (on && valued && valued != al && !strcmp(valued->target, al->target))
                return zt_fail(err, ZT_EINPUT, "%s: --%s and --%s exclude each other (both set --%s); give one",
                               command, valued->name, al->name, al->target);
            if (on)
                valued = al;
            if (on && (rc = parse_value(target, al->value, err)))
                return rc;
            target->seen |= on;
            continue;
        }
        if (al) /* --deepspeed FILE */
            f = find_flag(flags, nflags, al->target);
        if (!f) {
            const char *meant = suggest(flags, nflags, name);
            if (meant)
                return zt_fail(err, ZT_EINPUT, "%s: unknown flag --%s (did you mean --%s?)", command,
                               name, meant);
            return zt_fail(err, ZT_EINPUT, "%s: unknown flag --%s (see %s --help)", command, name,
                           command);
        }
        const char *value;
        if (eq) {
            value = eq + 1;
        } else if (f->kind == ZT_FLAG_BOOL &&
                   (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) {
            value = "true";
        } else {
            if (i + 1 >= argc)
                return zt_fail(err, ZT_EINPUT, "%s: flag --%s needs a value", command, name);
            value = argv[++i];
        }
        /* a later occurrence overrides an earlier one, as argparse does */
        int rc = parse_value(f, value, err);
        if (rc)
            return rc;
        f->seen = 1;
    }
    return ZT_OK;
}

/* Is --name shown as required in the usage line (outside its [optional] parts)? */
static int required_in(const char *usage_line, const char *name)
{
    size_t n = strlen(name);
    int depth = 0;
    for (const char *p = usage_line; *p; p++) {
        depth += *p == '[' ? 1 : *p == ']' ? -1 : 0;
        if (!depth && p[0] == '-' && p[1] == '-' && !strncmp(p + 2, name, n) &&
            !(isalnum((unsigned char)p[2 + n]) || p[2 + n] == '_'))
            return 1;
    }
    return 0;
}

/* " (default X)" from the value the flag holds before parsing, unless the help
 * already says what the default is (or the flag is required). */
static void print_default(const zt_flag *f, const char *usage_line)
{
    if (strstr(f->help, "default") || required_in(usage_line, f->name))
        return;
    switch (f->kind) {
    case ZT_FLAG_STR: {
        const char *v = *(const char *const *)f->dest;
        printf(" (default %s)", v ? v : "none");
        return;
    }
    case ZT_FLAG_INT:
        printf(" (default %d)", *(const int *)f->dest);
        return;
    case ZT_FLAG_LONG:
        printf(" (default %ld)", *(const long *)f->dest);
        return;
    case ZT_FLAG_DOUBLE:
        printf(" (default %g)", *(const double *)f->dest);
        return;
    case ZT_FLAG_BOOL:
        printf(" (default %s)", *(const int *)f->dest > 0 ? "true" : "false");
        return;
    }
}

void zt_flags_usage(const zt_flag *flags, int nflags, const char *usage_line)
{
    printf("%s\n\n", usage_line);
    for (int k = 0; k < nflags; k++) {
        printf("  --%-30s %s", flags[k].name, flags[k].help);
        print_default(&flags[k], usage_line);
        printf("\n");
    }
    for (int k = 0; k < NALIASES; k++) /* Trainer's spellings, where the command has the target */
        for (int j = 0; j < nflags; j++)
            if (!strcmp(flags[j].name, aliases[k].target))
                printf("  --%-30s Trainer's name: --%s %s\n", aliases[k].name, aliases[k].target,
                       aliases[k].value ? aliases[k].value : "FILE");
}

int zt_flags_wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return 1;
    return 0;
}
