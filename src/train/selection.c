/* selection.c — best model, early stopping and log_history (see selection.h). */
#include "selection.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int zt_selection_init(zt_selection *s, const zt_select_args *a, int have_eval, const char *output_dir,
                      long eval_every, long save_every, zt_err *err)
{
    memset(s, 0, sizeof *s);
    s->history = cJSON_CreateArray();
    if (!s->history)
        return zt_fail(err, ZT_EFAIL, "out of memory for the log history");
    /* Trainer reads metric_for_best_model with "eval_" put in front when it lacks it;
     * ztrain's evaluation reports one metric, the loss */
    const char *m = a->metric;
    if (m && strcmp(m, "loss") && strcmp(m, "eval_loss"))
        return zt_fail(err, ZT_EINPUT, "--metric_for_best_model %s: the evaluation reports loss (eval_loss); "
                       "expected loss or eval_loss", m);
    s->on = m || a->load_best_model_at_end || a->patience > 0;
    s->greater = a->greater_is_better > 0; /* a loss: lower is better, Trainer's default for a *loss name */
    s->patience = a->patience;
    s->threshold = a->threshold;
    const char *why = a->patience > 0 ? "--early_stopping_patience" : "--load_best_model_at_end";
    if ((a->patience > 0 || a->load_best_model_at_end) && !have_eval)
        return zt_fail(err, ZT_EINPUT, "%s needs evaluations: give --eval_data FILE (and --eval_steps N)", why);
    if (a->load_best_model_at_end && !output_dir)
        return zt_fail(err, ZT_EINPUT, "--load_best_model_at_end needs --output_dir (the best model is a checkpoint "
                       "there)");
    /* Trainer: the best model must be among the checkpoints, so saves fall on evaluations */
    if (a->load_best_model_at_end && eval_every > 0 && (save_every <= 0 || save_every % eval_every))
        return zt_fail(err, ZT_EINPUT, "--load_best_model_at_end: --save_steps %ld must be a multiple of --eval_steps "
                       "%ld, so that each best evaluation has its checkpoint", save_every, eval_every);
    return ZT_OK;
}

void zt_selection_free(zt_selection *s)
{
    cJSON_Delete(s->history);
    s->history = NULL;
}

static cJSON *record(zt_selection *s, long step, double epoch)
{
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddItemToArray(s->history, o)) {
        cJSON_Delete(o);
        return NULL;
    }
    if (o) {
        cJSON_AddNumberToObject(o, "epoch", epoch);
        cJSON_AddNumberToObject(o, "step", (double)step);
    }
    return o;
}

void zt_selection_log_train(zt_selection *s, long step, double epoch, double loss, double grad_norm, double lr)
{
    cJSON *o = record(s, step, epoch);
    if (!o)
        return;
    cJSON_AddNumberToObject(o, "grad_norm", grad_norm);
    cJSON_AddNumberToObject(o, "learning_rate", lr);
    cJSON_AddNumberToObject(o, "loss", loss);
}

int zt_selection_on_eval(zt_selection *s, long step, double epoch, double eval_loss)
{
    /* Trainer's record without its timings (eval_runtime, eval_samples_per_second):
     * they would make two identical runs' checkpoints differ */
    cJSON *o = record(s, step, epoch);
    if (o)
        cJSON_AddNumberToObject(o, "eval_loss", eval_loss);
    if (!s->on)
        return 0;
    int better = s->have_best && (s->greater ? eval_loss > s->best_metric : eval_loss < s->best_metric);
    /* EarlyStoppingCallback first, against the best before this evaluation */
    if (!s->have_best || (better && fabs(eval_loss - s->best_metric) > s->threshold))
        s->counter = 0;
    else
        s->counter++;
    if (!s->have_best || better) {
        s->have_best = 1;
        s->best_metric = eval_loss;
        s->best_step = step;
    }
    return s->patience > 0 && s->counter >= s->patience;
}

/* Trainer looks for checkpoint-best on disk; here the run knows which steps it saved
 * (a best step's checkpoint is named when it is written, and kept by the rotation), so
 * every rank decides alike without a shared file system. */
void zt_selection_on_save(zt_selection *s, const char *output_dir, long step)
{
    if (s->on && s->best_step > 0 && s->best_step == step)
        snprintf(s->best_checkpoint, sizeof s->best_checkpoint, "%s/checkpoint-%ld", output_dir, step);
}

void zt_selection_to_json(const zt_selection *s, cJSON *obj)
{
    if (s->have_best) {
        cJSON_AddNumberToObject(obj, "best_global_step", (double)s->best_step);
        cJSON_AddNumberToObject(obj, "best_metric", s->best_metric);
    } else {
        cJSON_AddNullToObject(obj, "best_global_step");
        cJSON_AddNullToObject(obj, "best_metric");
    }
    if (s->best_checkpoint[0])
        cJSON_AddStringToObject(obj, "best_model_checkpoint", s->best_checkpoint);
    else
        cJSON_AddNullToObject(obj, "best_model_checkpoint");
    cJSON *h = s->history ? cJSON_Duplicate(s->history, 1) : cJSON_CreateArray();
    if (h)
        cJSON_AddItemToObject(obj, "log_history", h);
    if (s->patience > 0) { /* EarlyStoppingCallback's state, as Trainer keeps it */
        cJSON *cb = cJSON_GetObjectItemCaseSensitive(obj, "stateful_callbacks");
        cJSON *es = cb ? cJSON_AddObjectToObject(cb, "EarlyStoppingCallback") : NULL;
        cJSON *args = es ? cJSON_AddObjectToObject(es, "args") : NULL, *attr = es ? cJSON_AddObjectToObject(es, "attributes") : NULL;
        if (args && attr) {
            cJSON_AddNumberToObject(args, "early_stopping_patience", (double)s->patience);
            cJSON_AddNumberToObject(args, "early_stopping_threshold", s->threshold);
            cJSON_AddNumberToObject(attr, "early_stopping_patience_counter", (double)s->counter);
        }
    }
}

int zt_selection_from_json(zt_selection *s, const cJSON *obj, const char *name, zt_err *err)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(obj, "log_history");
    const cJSON *bm = cJSON_GetObjectItemCaseSensitive(obj, "best_metric");
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(obj, "best_global_step");
    const cJSON *bc = cJSON_GetObjectItemCaseSensitive(obj, "best_model_checkpoint");
    if (h && !cJSON_IsArray(h))
        return zt_fail(err, ZT_EINPUT, "%s: log_history must be a list of records", name);
    if ((bm && !cJSON_IsNull(bm) && !cJSON_IsNumber(bm)) || (bs && !cJSON_IsNull(bs) && !cJSON_IsNumber(bs)) ||
        (bc && !cJSON_IsNull(bc) && !cJSON_IsString(bc)))
        return zt_fail(err, ZT_EINPUT, "%s: best_metric and best_global_step must be numbers or null, "
                       "best_model_checkpoint a string or null", name);
    if (h) {
        cJSON *copy = cJSON_Duplicate(h, 1);
        if (!copy)
            return zt_fail(err, ZT_EFAIL, "out of memory for the log history");
        cJSON_Delete(s->history);
        s->history = copy;
    }
    if (cJSON_IsNumber(bm) && cJSON_IsNumber(bs)) {
        s->have_best = 1;
        s->best_metric = bm->valuedouble;
        s->best_step = (long)bs->valuedouble;
    }
    if (cJSON_IsString(bc))
        snprintf(s->best_checkpoint, sizeof s->best_checkpoint, "%s", bc->valuestring);
    const cJSON *cb = cJSON_GetObjectItemCaseSensitive(obj, "stateful_callbacks");
    const cJSON *es = cJSON_GetObjectItemCaseSensitive(cb, "EarlyStoppingCallback");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(es, "attributes"),
                                                      "early_stopping_patience_counter");
    if (cJSON_IsNumber(n) && n->valuedouble >= 0)
        s->counter = (long)n->valuedouble;
    return ZT_OK;
}
