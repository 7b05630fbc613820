/* train_vocab.c — `train`'s TrainingArguments flags (see train_vocab.h). */
#include "train_vocab.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

static int parse_strategy(const char *flag, const char *s, int *out, zt_err *err)
{
    static const char *names[] = {"no", "steps", "epoch"};
    static const int values[] = {ZT_STRATEGY_NO, ZT_STRATEGY_STEPS, ZT_STRATEGY_EPOCH};
    *out = ZT_STRATEGY_UNSET;
    if (!s)
        return ZT_OK;
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = values[i];
            return ZT_OK;
        }
    return zt_fail(err, ZT_EINPUT, "--%s: expected no, steps or epoch, got '%s'", flag, s);
}

/* Trainer's logging_dir: OUTPUT_DIR/runs/<%b%d_%H-%M-%S>_<hostname>. */
static int tensorboard_dir(zt_cli_vocab *v, const char *output_dir, zt_err *err)
{
    if (v->logging_dir) {
        snprintf(v->tb_dir, sizeof v->tb_dir, "%s", v->logging_dir);
        return ZT_OK;
    }
    if (!output_dir)
        return zt_fail(err, ZT_EINPUT, "--report_to tensorboard: give --output_dir (events go to OUTPUT_DIR/runs/, "
                       "as Trainer's) or --logging_dir DIR");
    char host[256] = "localhost", stamp[64];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%b%d_%H-%M-%S", &tm);
    int n = snprintf(v->tb_dir, sizeof v->tb_dir, "%s/runs/%s_%s", output_dir, stamp, host);
    if (n < 0 || (size_t)n >= sizeof v->tb_dir)
        return zt_fail(err, ZT_EINPUT, "--output_dir %s: the path is too long", output_dir);
    return ZT_OK;
}

int zt_cli_vocab_apply(zt_cli_vocab *v, const flag_table *given, zt_train_args *a, zt_err *err)
{
    int rc;
    if ((rc = parse_strategy("eval_strategy", v->eval_strategy, &a->eval_strategy, err)) ||
        (rc = parse_strategy("save_strategy", v->save_strategy, &a->save_strategy, err)))
        return rc;
    /* max_steps wins over num_train_epochs, as in Trainer; 0 tells the trainer
     * to count the steps from the data */
    if (zt_flag_given((void *)given, "num_train_epochs") && !zt_flag_given((void *)given, "max_steps")) {
        a->max_steps = 0;
        a->num_train_epochs = v->num_train_epochs;
    }
    a->warmup_ratio = v->warmup_ratio;
    a->logging_steps = v->logging_steps;
    /* evaluation: Trainer refuses a strategy with nothing to evaluate; ztrain
     * also refuses what would be ignored */
    const char *es = v->eval_strategy;
    if (es && a->eval_strategy != ZT_STRATEGY_NO && !a->eval_data_path)
        return zt_fail(err, ZT_EINPUT, "--eval_strategy %s needs --eval_data FILE (the held-out tokens to evaluate)",
                       es);
    if (a->eval_strategy == ZT_STRATEGY_NO && a->eval_data_path)
        return zt_fail(err, ZT_EINPUT, "--eval_strategy no contradicts --eval_data %s: drop one of them",
                       a->eval_data_path);
    if ((a->eval_strategy == ZT_STRATEGY_NO || a->eval_strategy == ZT_STRATEGY_EPOCH) && a->eval_steps > 0)
        return zt_fail(err, ZT_EINPUT, "--eval_steps %ld applies to --eval_strategy steps, not %s", a->eval_steps,
                       es);
    /* saving */
    const char *ss = v->save_strategy;
    int save_steps_given = zt_flag_given((void *)given, "save_steps");
    if ((a->save_strategy == ZT_STRATEGY_NO || a->save_strategy == ZT_STRATEGY_EPOCH) && save_steps_given &&
        a->save_steps > 0)
        return zt_fail(err, ZT_EINPUT, "--save_steps %ld applies to --save_strategy steps, not %s", a->save_steps, ss);
    if (a->save_strategy == ZT_STRATEGY_STEPS && !save_steps_given)
        a->save_steps = 500; /* Trainer's default save_steps */
    if (a->save_strategy == ZT_STRATEGY_STEPS && a->save_steps <= 0)
        return zt_fail(err, ZT_EINPUT, "--save_strategy steps needs --save_steps N above 0");
    if ((a->save_strategy == ZT_STRATEGY_STEPS || a->save_strategy == ZT_STRATEGY_EPOCH) && !a->output_dir)
        return zt_fail(err, ZT_EINPUT, "--save_strategy %s writes OUTPUT_DIR/checkpoint-N: give --output_dir", ss);
    /* reporting */
    if (!strcmp(v->report_to, "none"))
        return ZT_OK;
    if (strcmp(v->report_to, "tensorboard") != 0)
        return zt_fail(err, ZT_EINPUT, "--report_to: expected none or tensorboard (ztrain writes TensorBoard's event "
                       "files itself; it has no other integration), got '%s'", v->report_to);
    if ((rc = tensorboard_dir(v, a->output_dir, err)))
        return rc;
    a->tensorboard_dir = v->tb_dir;
    return ZT_OK;
}
