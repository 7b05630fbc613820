/* ckpt_state.c — trainer_state.json and zero/index.json (see ckpt_state.h). */
#include "ckpt_state.h"
#include "selection.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../core/mem.h"

/* Largest count any field may hold: 2^50 (doubles are exact well past it, and
 * products of two such fields with small factors stay inside size_t). */
#define MAX_COUNT 1125899906842624.0
#define MAX_UNITS 1000000
#define MAX_PARAMS 1000000

/* ---- reading numbers that are checked before use -------------------------- */

typedef struct reader {
    const char *name;  /* file, for messages */
    zt_err *err;
    int rc;
} reader;

static const cJSON *item(reader *r, const cJSON *obj, const char *prefix, const char *key)
{
    if (r->rc)
        return NULL;
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!v)
        r->rc = zt_fail(r->err, ZT_EINPUT, "%s: %s%s is missing", r->name, prefix, key);
    return v;
}

/* A finite number in [lo, hi]; whole: also an integer.  The only way a double
 * from the file reaches an int, long or size_t. */
static double num(reader *r, const cJSON *obj, const char *prefix, const char *key, double lo, double hi,
                  int whole)
{
    const cJSON *v = item(r, obj, prefix, key);
    if (!v)
        return lo;
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(x) || x < lo || x > hi || (whole && x != floor(x))) {
        r->rc = zt_fail(r->err, ZT_EINPUT, "%s: %s%s must be a finite %s in [%.17g, %.17g]", r->name, prefix, key,
                        whole ? "whole number" : "number", lo, hi);
        return lo;
    }
    return x;
}

static const char *str(reader *r, const cJSON *obj, const char *prefix, const char *key)
{
    const cJSON *v = item(r, obj, prefix, key);
    if (v && !cJSON_IsString(v)) {
        r->rc = zt_fail(r->err, ZT_EINPUT, "%s: %s%s must be a string", r->name, prefix, key);
        return "";
    }
    return v ? v->valuestring : "";
}

static zt_dtype dtype(reader *r, const cJSON *obj, const char *prefix, const char *key)
{
    const char *s = str(r, obj, prefix, key);
    zt_dtype d = ZT_F32;
    if (!r->rc && zt_dtype_parse(s, &d) != 0)
        r->rc = zt_fail(r->err, ZT_EINPUT, "%s: %s%s must be fp32, bf16 or fp16, got \"%.40s\"", r->name, prefix,
                        key, s);
    return d;
}

/* 64-bit values do not fit a JSON double: they are 16 hex digits. */
static uint64_t hex64(reader *r, const cJSON *obj, const char *prefix, const char *key)
{
    const char *s = str(r, obj, prefix, key);
    uint64_t v = 0;
    int ok = !r->rc && strlen(s) == 16;
    for (int i = 0; ok && i < 16; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        ok = d >= 0;
        v = v << 4 | (uint64_t)(d < 0 ? 0 : d);
    }
    if (!r->rc && !ok)
        r->rc = zt_fail(r->err, ZT_EINPUT, "%s: %s%s must be 16 lowercase hex digits", r->name, prefix, key);
    return v;
}

static const cJSON *object(reader *r, const cJSON *obj, const char *prefix, const char *key)
{
    const cJSON *v = item(r, obj, prefix, key);
    if (v && !cJSON_IsObject(v)) {
        r->rc = zt_fail(r->err, ZT_EINPUT, "%s: %s%s must be an object", r->name, prefix, key);
        return NULL;
    }
    return v;
}

/* Every key of obj is in known (NULL-terminated) and given once: cJSON keeps a
 * repeated key as a second member, and a lookup would silently take the first. */
static void check_keys(reader *r, const cJSON *obj, const char *prefix, const char *const *known)
{
    for (const cJSON *c = cJSON_IsObject(obj) ? obj->child : NULL; c && !r->rc; c = c->next) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(known[i], c->string);
        if (!ok) {
            char list[512] = "";
            for (int i = 0; known[i]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", known[i]);
            r->rc = zt_fail(r->err, ZT_EINPUT, "%s: unknown key %s%.60s (expected %s)", r->name, prefix, c->string,
                            list);
            return;
        }
        for (const cJSON *d = obj->child; d != c; d = d->next)
            if (!strcmp(d->string, c->string)) {
                r->rc = zt_fail(r->err, ZT_EINPUT, "%s: duplicate key %s%s", r->name, prefix, c->string);
                return;
            }
    }
}

/* The optional run id: 16 lowercase hex digits, or "" when absent. */
static void run_id(reader *r, const cJSON *obj, char out[17])
{
    out[0] = 0;
    if (r->rc || !cJSON_GetObjectItemCaseSensitive(obj, "run_id"))
        return;
    const char *s = str(r, obj, "", "run_id");
    int ok = !r->rc && strlen(s) == 16 && strspn(s, "0123456789abcdef") == 16;
    if (!r->rc && !ok)
        r->rc = zt_fail(r->err, ZT_EINPUT, "%s: run_id must be 16 lowercase hex digits", r->name);
    if (ok)
        memcpy(out, s, 17);
}

static void add_hex64(cJSON *o, const char *key, uint64_t v)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, v);
    cJSON_AddStringToObject(o, key, hex);
}

/* ---- trainer_state.json ---------------------------------------------------- */

/* Trainer's TrainerState around ztrain's state j (taken over) */
static cJSON *trainer_state(const zt_ckpt_state *st, cJSON *j)
{
    cJSON *t = cJSON_CreateObject();
    if (!t) {
        cJSON_Delete(j);
        return NULL;
    }
    cJSON_AddNumberToObject(t, "epoch", st->epoch_fraction);
    cJSON_AddNumberToObject(t, "global_step", (double)st->step);
    cJSON_AddNumberToObject(t, "max_steps", (double)st->hp.max_steps);
    cJSON_AddNumberToObject(t, "logging_steps", (double)st->logging_steps);
    cJSON_AddNumberToObject(t, "eval_steps", (double)st->eval_steps);
    cJSON_AddNumberToObject(t, "save_steps", (double)st->save_steps);
    cJSON_AddNumberToObject(t, "train_batch_size", (double)st->train_batch_size);
    cJSON_AddNumberToObject(t, "num_train_epochs", st->num_train_epochs);
    cJSON_AddNumberToObject(t, "num_input_tokens_seen", 0);
    cJSON_AddNumberToObject(t, "total_flos", 0);
    cJSON_AddBoolToObject(t, "is_local_process_zero", 1);
    cJSON_AddBoolToObject(t, "is_world_process_zero", 1);
    cJSON_AddBoolToObject(t, "is_hyper_param_search", 0);
    cJSON_AddNullToObject(t, "trial_name");
    cJSON_AddNullToObject(t, "trial_params");
    cJSON *cb = cJSON_AddObjectToObject(t, "stateful_callbacks");
    if (cb)
        cJSON_AddItemToObject(cb, "ztrain", j);
    else
        cJSON_Delete(j);
    zt_selection empty = {0};
    zt_selection_to_json(st->sel ? st->sel : &empty, t);
    return t;
}

char *zt_ckpt_state_to_json(const zt_ckpt_state *st)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "ztrain-trainer-state");
    cJSON_AddNumberToObject(j, "version", 1);
    if (st->run_id[0])
        cJSON_AddStringToObject(j, "run_id", st->run_id);
    cJSON_AddNumberToObject(j, "step", (double)st->step);
    cJSON_AddNumberToObject(j, "optimizer_steps", (double)st->optimizer_steps);
    cJSON *d = cJSON_AddObjectToObject(j, "data_position");
    cJSON_AddNumberToObject(d, "samples_seen", (double)st->samples_seen);
    cJSON_AddNumberToObject(d, "epoch", (double)st->epoch);
    cJSON *rng = cJSON_AddObjectToObject(j, "rng");
    add_hex64(rng, "shuffle_seed", st->hp.seed);
    cJSON *ls = cJSON_AddObjectToObject(j, "loss_scaler");
    cJSON_AddNumberToObject(ls, "scale", st->scaler.scale);
    cJSON_AddNumberToObject(ls, "cur_hysteresis", st->scaler.cur_hysteresis);
    cJSON_AddNumberToObject(ls, "iter", (double)st->scaler.iter);
    cJSON_AddNumberToObject(ls, "last_overflow_iter", (double)st->scaler.last_overflow_iter);
    cJSON_AddNumberToObject(ls, "skipped", (double)st->scaler.skipped);
    const zt_ckpt_hparams *h = &st->hp;
    cJSON *hp = cJSON_AddObjectToObject(j, "hyper_parameters");
    cJSON_AddNumberToObject(hp, "learning_rate", h->lr);
    cJSON_AddNumberToObject(hp, "weight_decay", h->weight_decay);
    cJSON_AddNumberToObject(hp, "adam_beta1", h->beta1);
    cJSON_AddNumberToObject(hp, "adam_beta2", h->beta2);
    cJSON_AddNumberToObject(hp, "adam_epsilon", h->eps);
    cJSON_AddNumberToObject(hp, "max_grad_norm", h->max_grad_norm);
    cJSON_AddStringToObject(hp, "lr_scheduler_type", zt_lr_schedule_name(h->schedule));
    cJSON_AddStringToObject(hp, "lr_scheduler_kwargs", h->schedule_kwargs);
    cJSON_AddNumberToObject(hp, "warmup_steps", (double)h->warmup_steps);
    cJSON_AddNumberToObject(hp, "max_steps", (double)h->max_steps);
    cJSON_AddNumberToObject(hp, "global_batch_size", (double)h->global_batch);
    cJSON_AddNumberToObject(hp, "per_device_train_batch_size", h->per_device_batch);
    cJSON_AddNumberToObject(hp, "gradient_accumulation_steps", h->grad_accum);
    cJSON_AddNumberToObject(hp, "block_size", h->block_size);
    cJSON_AddBoolToObject(hp, "shuffle", h->shuffle);
    add_hex64(hp, "seed", h->seed);
    cJSON_AddNumberToObject(hp, "data_tokens", (double)h->data_tokens);
    add_hex64(hp, "data_digest", h->data_digest);
    cJSON_AddStringToObject(hp, "compute_dtype", zt_dtype_name(h->compute));
    const zt_ckpt_plan *p = &st->plan;
    cJSON *pl = cJSON_AddObjectToObject(j, "plan");
    cJSON_AddStringToObject(pl, "face", p->face);
    cJSON_AddStringToObject(pl, "strategy", p->strategy);
    cJSON_AddNumberToObject(pl, "stage", p->stage);
    cJSON_AddNumberToObject(pl, "world", p->world);
    cJSON_AddNumberToObject(pl, "group_size", p->group_size);
    cJSON_AddStringToObject(pl, "wrap", zt_wrap_policy_name(p->wrap));
    cJSON_AddNumberToObject(pl, "min_num_params", (double)p->min_num_params);
    cJSON_AddStringToObject(pl, "master_dtype", zt_dtype_name(p->master));
    cJSON_AddStringToObject(pl, "compute_dtype", zt_dtype_name(p->compute));
    cJSON_AddStringToObject(pl, "reduce_dtype", zt_dtype_name(p->reduce));
    cJSON_AddBoolToObject(pl, "compensated", p->compensated);
    cJSON_AddBoolToObject(pl, "loss_scaling", p->loss_scaling);
    cJSON_AddStringToObject(j, "command_line", st->command_line);
    if (st->lora.on) {
        cJSON *lo = cJSON_AddObjectToObject(j, "lora");
        cJSON_AddNumberToObject(lo, "r", st->lora.r);
        cJSON_AddNumberToObject(lo, "lora_alpha", st->lora.alpha);
        cJSON_AddBoolToObject(lo, "use_rslora", st->lora.rslora);
        cJSON_AddNumberToObject(lo, "target_bits", st->lora.targets);
        add_hex64(lo, "base_digest", st->lora.base_digest);
    }
    cJSON *t = trainer_state(st, j);
    char *text = t ? cJSON_Print(t) : NULL;
    cJSON_Delete(t);
    return text;
}

static int boolean(reader *r, const cJSON *obj, const char *prefix, const char *key)
{
    const cJSON *v = item(r, obj, prefix, key);
    if (v && !cJSON_IsBool(v)) {
        r->rc = zt_fail(r->err, ZT_EINPUT, "%s: %s%s must be true or false", r->name, prefix, key);
        return 0;
    }
    return v ? cJSON_IsTrue(v) : 0;
}

/* hyper_parameters.lr_scheduler_kwargs: the resolved kwargs as text (absent in
 * checkpoints written before --lr_scheduler_kwargs: the schedule's defaults then) */
static void read_schedule_kwargs(reader *r, const cJSON *hp, zt_ckpt_hparams *h)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(hp, "lr_scheduler_kwargs");
    if (r->rc)
        return;
    if (v && (!cJSON_IsString(v) || strlen(v->valuestring) >= sizeof h->schedule_kwargs)) {
        r->rc = zt_fail(r->err, ZT_EINPUT, "%s: hyper_parameters.lr_scheduler_kwargs must be a string of at most %zu "
                        "bytes", r->name, sizeof h->schedule_kwargs - 1);
        return;
    }
    if (v) {
        snprintf(h->schedule_kwargs, sizeof h->schedule_kwargs, "%s", v->valuestring);
        return;
    }
    zt_lr_kwargs kw;
    zt_lr_kwargs_defaults(h->schedule, &kw);
    zt_lr_kwargs_format(h->schedule, &kw, h->schedule_kwargs, sizeof h->schedule_kwargs);
}

/* ztrain's state inside Trainer's TrainerState (stateful_callbacks.ztrain), whose
 * own keys are checked by name; an older checkpoint's document is ztrain's state. */
static const cJSON *ztrain_part(reader *r, const cJSON *j)
{
    const cJSON *cbs = cJSON_GetObjectItemCaseSensitive(j, "stateful_callbacks");
    if (!cbs)
        return j;
    static const char *const trainer_keys[] = {
        "epoch", "global_step", "max_steps", "logging_steps", "eval_steps", "save_steps", "train_batch_size",
        "num_train_epochs", "num_input_tokens_seen", "total_flos", "log_history", "best_metric",
        "best_global_step", "best_model_checkpoint", "is_local_process_zero", "is_world_process_zero",
        "is_hyper_param_search", "trial_name", "trial_params", "stateful_callbacks", NULL};
    check_keys(r, j, "", trainer_keys);
    const cJSON *z = r->rc ? NULL : object(r, cbs, "stateful_callbacks.", "ztrain");
    return r->rc ? NULL : z;
}

/* lora: a LoRA checkpoint's settings and base digest (absent: full fine-tuning) */
static void read_lora(reader *rd, const cJSON *j, zt_ckpt_lora *l)
{
    memset(l, 0, sizeof *l);
    if (rd->rc || !cJSON_GetObjectItemCaseSensitive(j, "lora"))
        return;
    const cJSON *lo = object(rd, j, "", "lora");
    static const char *const lora_keys[] = {"r", "lora_alpha", "use_rslora", "target_bits", "base_digest", NULL};
    check_keys(rd, lo, "lora.", lora_keys);
    l->on = 1;
    l->r = (int)num(rd, lo, "lora.", "r", 1, 1 << 20, 1);
    l->alpha = num(rd, lo, "lora.", "lora_alpha", 1e-30, 1e30, 0);
    l->rslora = boolean(rd, lo, "lora.", "use_rslora");
    l->targets = (unsigned)num(rd, lo, "lora.", "target_bits", 1, (1 << ZT_P_NKINDS) - 1, 1);
    l->base_digest = hex64(rd, lo, "lora.", "base_digest");
}

/* plan: the plan the checkpoint was written under */
static void read_plan(reader *rd, const cJSON *j, zt_ckpt_plan *p)
{
    const cJSON *pl = object(rd, j, "", "plan");
    const char *pp = "plan.";
    static const char *const plan_keys[] = {"face", "strategy", "stage", "world", "group_size", "wrap",
                                            "min_num_params", "master_dtype", "compute_dtype", "reduce_dtype",
                                            "compensated", "loss_scaling", NULL};
    check_keys(rd, pl, pp, plan_keys);
    snprintf(p->face, sizeof p->face, "%s", str(rd, pl, pp, "face"));
    snprintf(p->strategy, sizeof p->strategy, "%s", str(rd, pl, pp, "strategy"));
    p->stage = (int)num(rd, pl, pp, "stage", 0, 3, 1);
    p->world = (int)num(rd, pl, pp, "world", 1, 1 << 20, 1);
    p->group_size = (int)num(rd, pl, pp, "group_size", 1, 1 << 20, 1);
    if (!rd->rc && p->world % p->group_size)
        rd->rc = zt_fail(rd->err, ZT_EINPUT, "%s: plan.group_size %d does not divide plan.world %d", rd->name,
                         p->group_size, p->world);
    const char *wrap = str(rd, pl, pp, "wrap");
    if (!rd->rc && zt_wrap_policy_parse(wrap, &p->wrap) != 0)
        rd->rc = zt_fail(rd->err, ZT_EINPUT, "%s: plan.wrap \"%.40s\" is not a wrap policy", rd->name, wrap);
    p->min_num_params = (long)num(rd, pl, pp, "min_num_params", 0, MAX_COUNT, 1);
    p->master = dtype(rd, pl, pp, "master_dtype");
    p->compute = dtype(rd, pl, pp, "compute_dtype");
    p->reduce = dtype(rd, pl, pp, "reduce_dtype");
    p->compensated = boolean(rd, pl, pp, "compensated");
    p->loss_scaling = boolean(rd, pl, pp, "loss_scaling");
}

int zt_ckpt_state_from_json(const char *name, const zt_json *js, zt_ckpt_state *st, zt_err *err)
{
    memset(st, 0, sizeof *st);
    reader r = {name, err, ZT_OK};
    const cJSON *j = js->root;
    if (!cJSON_IsObject(j))
        return zt_fail(err, ZT_EINPUT, "%s: expected a JSON object", name);
    /* Trainer's TrainerState around ztrain's state (older checkpoints: ztrain's alone) */
    if (!(j = ztrain_part(&r, j)))
        return r.rc ? r.rc : zt_fail(err, ZT_EINPUT, "%s: stateful_callbacks.ztrain: missing", name);
    const char *fmt = str(&r, j, "", "format");
    if (!r.rc && strcmp(fmt, "ztrain-trainer-state"))
        r.rc = zt_fail(err, ZT_EINPUT, "%s: format must be \"ztrain-trainer-state\"", name);
    num(&r, j, "", "version", 1, 1, 1);
    static const char *const top_keys[] = {"format", "version", "run_id", "step", "optimizer_steps", "data_position",
                                           "rng", "loss_scaler", "hyper_parameters", "plan", "command_line", "lora",
                                           NULL};
    check_keys(&r, j, "", top_keys);
    run_id(&r, j, st->run_id);
    /* counts of steps and samples: whole, non-negative, at most 2^50 */
    const zt_ckpt_hparams *h = &st->hp;
    const cJSON *hp = object(&r, j, "", "hyper_parameters");
    const char *hpp = "hyper_parameters.";
    static const char *const hp_keys[] = {"learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
                                          "max_grad_norm", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "max_steps",
                                          "global_batch_size", "per_device_train_batch_size",
                                          "gradient_accumulation_steps", "block_size", "shuffle", "seed", "data_tokens",
                                          "data_digest", "compute_dtype", NULL};
    check_keys(&r, hp, hpp, hp_keys);
    st->hp.lr = num(&r, hp, hpp, "learning_rate", 0, 1e6, 0);
    st->hp.weight_decay = num(&r, hp, hpp, "weight_decay", 0, 1e6, 0);
    st->hp.beta1 = num(&r, hp, hpp, "adam_beta1", 0, 0.999999999, 0);
    st->hp.beta2 = num(&r, hp, hpp, "adam_beta2", 0, 0.999999999, 0);
    st->hp.eps = num(&r, hp, hpp, "adam_epsilon", 1e-30, 1, 0);
    st->hp.max_grad_norm = num(&r, hp, hpp, "max_grad_norm", 0, 1e30, 0);
    const char *sched = str(&r, hp, hpp, "lr_scheduler_type");
    if (!r.rc && zt_lr_schedule_parse(sched, &st->hp.schedule) != 0)
        r.rc = zt_fail(err, ZT_EINPUT, "%s: hyper_parameters.lr_scheduler_type \"%.40s\" is not a known schedule",
                       name, sched);
    read_schedule_kwargs(&r, hp, &st->hp);
    st->hp.max_steps = (long)num(&r, hp, hpp, "max_steps", 1, MAX_COUNT, 1);
    st->hp.warmup_steps = (long)num(&r, hp, hpp, "warmup_steps", 0, MAX_COUNT, 1);
    st->hp.global_batch = (long)num(&r, hp, hpp, "global_batch_size", 1, 1 << 30, 1);
    st->hp.per_device_batch = (int)num(&r, hp, hpp, "per_device_train_batch_size", 1, 1 << 20, 1);
    st->hp.grad_accum = (int)num(&r, hp, hpp, "gradient_accumulation_steps", 1, 1 << 20, 1);
    st->hp.block_size = (int)num(&r, hp, hpp, "block_size", 1, 1 << 20, 1);
    st->hp.shuffle = boolean(&r, hp, hpp, "shuffle");
    st->hp.seed = hex64(&r, hp, hpp, "seed");
    st->hp.data_tokens = (uint64_t)num(&r, hp, hpp, "data_tokens", 2, MAX_COUNT, 1);
    st->hp.data_digest = hex64(&r, hp, hpp, "data_digest");
    st->hp.compute = dtype(&r, hp, hpp, "compute_dtype");

    st->step = (long)num(&r, j, "", "step", 0, (double)h->max_steps, 1);
    st->optimizer_steps = (long)num(&r, j, "", "optimizer_steps", 0, (double)st->step, 1);
    const cJSON *dp = object(&r, j, "", "data_position");
    static const char *const dp_keys[] = {"samples_seen", "epoch", NULL};
    check_keys(&r, dp, "data_position.", dp_keys);
    /* the data position must be where step global batches end: anything else
     * would read other samples than the run it claims to continue */
    st->samples_seen = (long)num(&r, dp, "data_position.", "samples_seen", 0, MAX_COUNT, 1);
    if (!r.rc && (double)st->samples_seen != (double)st->step * (double)st->hp.global_batch)
        r.rc = zt_fail(err, ZT_EINPUT, "%s: data_position.samples_seen %ld is not step %ld x global_batch_size %ld",
                       name, st->samples_seen, st->step, st->hp.global_batch);
    st->epoch = (long)num(&r, dp, "data_position.", "epoch", 0, MAX_COUNT, 1);
    const cJSON *rng = object(&r, j, "", "rng");
    static const char *const rng_keys[] = {"shuffle_seed", NULL};
    check_keys(&r, rng, "rng.", rng_keys);
    uint64_t shuffle_seed = hex64(&r, rng, "rng.", "shuffle_seed");
    if (!r.rc && shuffle_seed != st->hp.seed)
        r.rc = zt_fail(err, ZT_EINPUT, "%s: rng.shuffle_seed differs from hyper_parameters.seed", name);
    const cJSON *ls = object(&r, j, "", "loss_scaler");
    static const char *const ls_keys[] = {"scale", "cur_hysteresis", "iter", "last_overflow_iter", "skipped", NULL};
    check_keys(&r, ls, "loss_scaler.", ls_keys);
    st->scaler.scale = num(&r, ls, "loss_scaler.", "scale", 1e-30, 1e30, 0);
    st->scaler.cur_hysteresis = (int)num(&r, ls, "loss_scaler.", "cur_hysteresis", 0, 1 << 20, 1);
    st->scaler.iter = (long)num(&r, ls, "loss_scaler.", "iter", 0, (double)st->step, 1);
    st->scaler.last_overflow_iter = (long)num(&r, ls, "loss_scaler.", "last_overflow_iter", -1, (double)st->scaler.iter, 1);
    st->scaler.skipped = (long)num(&r, ls, "loss_scaler.", "skipped", 0, (double)st->step, 1);

    read_plan(&r, j, &st->plan);
    read_lora(&r, j, &st->lora);
    snprintf(st->command_line, sizeof st->command_line, "%s", str(&r, j, "", "command_line"));
    return r.rc;
}

/* ---- zero/index.json ------------------------------------------------------- */

int zt_ckpt_index_from_layout(const zt_layout *lay, int group_size, zt_dtype master, int compensated,
                              zt_ckpt_index *ix, zt_err *err)
{
    memset(ix, 0, sizeof *ix);
    ix->group_size = group_size;
    ix->master = master;
    ix->compensated = compensated;
    ix->units = zt_alloc(ZT_MEM_OTHER, (size_t)lay->nunits * sizeof *ix->units);
    ix->params = zt_alloc(ZT_MEM_OTHER, (size_t)lay->nparams * sizeof *ix->params);
    if (!ix->units || !ix->params) {
        zt_ckpt_index_free(ix);
        return zt_fail(err, ZT_EFAIL, "out of memory for the checkpoint index");
    }
    ix->nunits = lay->nunits;
    ix->nparams = lay->nparams;
    for (int u = 0; u < lay->nunits; u++)
        ix->units[u] = (zt_ckpt_iunit){lay->units[u].numel, lay->units[u].padded_numel};
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        zt_ckpt_iparam *q = &ix->params[i];
        snprintf(q->name, sizeof q->name, "%s", p->name);
        q->unit = p->unit;
        q->ndim = p->ndim;
        q->shape[0] = p->shape[0];
        q->shape[1] = p->ndim == 2 ? p->shape[1] : 1;
        q->offset = p->offset;
        q->numel = p->numel;
    }
    return ZT_OK;
}

char *zt_ckpt_index_to_json(const zt_ckpt_index *ix)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "ztrain-zero-index");
    cJSON_AddNumberToObject(j, "version", 1);
    if (ix->run_id[0])
        cJSON_AddStringToObject(j, "run_id", ix->run_id);
    cJSON_AddNumberToObject(j, "group_size", ix->group_size);
    cJSON_AddStringToObject(j, "master_dtype", zt_dtype_name(ix->master));
    cJSON_AddBoolToObject(j, "compensated", ix->compensated);
    cJSON *units = cJSON_AddArrayToObject(j, "units");
    for (int u = 0; units && u < ix->nunits; u++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "numel", (double)ix->units[u].numel);
        cJSON_AddNumberToObject(o, "padded_numel", (double)ix->units[u].padded_numel);
        cJSON_AddItemToArray(units, o);
    }
    cJSON *params = cJSON_AddArrayToObject(j, "params");
    for (int i = 0; params && i < ix->nparams; i++) {
        const zt_ckpt_iparam *p = &ix->params[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", p->name);
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < p->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->shape[d]));
        cJSON_AddNumberToObject(o, "unit", p->unit);
        cJSON_AddNumberToObject(o, "offset", (double)p->offset);
        cJSON_AddItemToArray(params, o);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const zt_ckpt_iparam *const *)a)->name, (*(const zt_ckpt_iparam *const *)b)->name);
}

/* Names must be unique (a reshard looks each up): sorted, so a hostile index
 * with a million parameters costs n log n, not n^2. */
static int check_unique_names(const char *name, const zt_ckpt_index *ix, zt_err *err)
{
    const zt_ckpt_iparam **sorted = zt_alloc(ZT_MEM_OTHER, (size_t)ix->nparams * sizeof *sorted);
    if (!sorted)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", name);
    for (int i = 0; i < ix->nparams; i++)
        sorted[i] = &ix->params[i];
    qsort(sorted, (size_t)ix->nparams, sizeof *sorted, cmp_name);
    int rc = ZT_OK;
    for (int i = 1; i < ix->nparams && rc == ZT_OK; i++)
        if (!strcmp(sorted[i - 1]->name, sorted[i]->name))
            rc = zt_fail(err, ZT_EINPUT, "%s: parameter \"%s\" appears twice in params", name, sorted[i]->name);
    zt_free(ZT_MEM_OTHER, sorted, (size_t)ix->nparams * sizeof *sorted);
    return rc;
}

int zt_ckpt_index_from_json(const char *name, const zt_json *js, zt_ckpt_index *ix, zt_err *err)
{
    memset(ix, 0, sizeof *ix);
    reader r = {name, err, ZT_OK};
    const cJSON *j = js->root;
    if (!cJSON_IsObject(j))
        return zt_fail(err, ZT_EINPUT, "%s: expected a JSON object", name);
    const char *fmt = str(&r, j, "", "format");
    if (!r.rc && strcmp(fmt, "ztrain-zero-index"))
        r.rc = zt_fail(err, ZT_EINPUT, "%s: format must be \"ztrain-zero-index\"", name);
    num(&r, j, "", "version", 1, 1, 1);
    static const char *const ix_keys[] = {"format", "version", "run_id", "group_size", "master_dtype", "compensated",
                                          "units", "params", NULL};
    check_keys(&r, j, "", ix_keys);
    run_id(&r, j, ix->run_id);
    ix->group_size = (int)num(&r, j, "", "group_size", 1, 1 << 20, 1);
    ix->master = dtype(&r, j, "", "master_dtype");
    ix->compensated = boolean(&r, j, "", "compensated");
    const cJSON *units = item(&r, j, "", "units"), *params = item(&r, j, "", "params");
    if (!r.rc && (!cJSON_IsArray(units) || !cJSON_IsArray(params)))
        r.rc = zt_fail(err, ZT_EINPUT, "%s: units and params must be arrays", name);
    int nu = r.rc ? 0 : cJSON_GetArraySize(units), np = r.rc ? 0 : cJSON_GetArraySize(params);
    if (!r.rc && (nu < 1 || nu > MAX_UNITS || np < 1 || np > MAX_PARAMS))
        r.rc = zt_fail(err, ZT_EINPUT, "%s: %d units and %d params: expected 1..%d units and 1..%d params", name, nu,
                       np, MAX_UNITS, MAX_PARAMS);
    if (!r.rc) {
        ix->units = zt_alloc(ZT_MEM_OTHER, (size_t)nu * sizeof *ix->units);
        ix->params = zt_alloc(ZT_MEM_OTHER, (size_t)np * sizeof *ix->params);
        ix->nunits = nu; /* the sizes zt_ckpt_index_free gives back */
        ix->nparams = np;
        if (!ix->units || !ix->params)
            r.rc = zt_fail(err, ZT_EFAIL, "%s: out of memory", name);
    }
    char prefix[64];
    const cJSON *e = r.rc ? NULL : units->child;
    for (int u = 0; !r.rc && e; u++, e = e->next) {
        snprintf(prefix, sizeof prefix, "units[%d].", u);
        if (!cJSON_IsObject(e))
            r.rc = zt_fail(err, ZT_EINPUT, "%s: units[%d] must be an object", name, u);
        zt_ckpt_iunit *un = &ix->units[u];
        un->numel = (size_t)num(&r, e, prefix, "numel", 1, MAX_COUNT, 1);
        un->padded_numel = (size_t)num(&r, e, prefix, "padded_numel", (double)un->numel, MAX_COUNT, 1);
        if (!r.rc && un->padded_numel % (size_t)ix->group_size)
            r.rc = zt_fail(err, ZT_EINPUT, "%s: units[%d].padded_numel %zu is not a multiple of group_size %d", name,
                           u, un->padded_numel, ix->group_size);
    }
    e = r.rc ? NULL : params->child;
    for (int i = 0; !r.rc && e; i++, e = e->next) {
        snprintf(prefix, sizeof prefix, "params[%d].", i);
        zt_ckpt_iparam *p = &ix->params[i];
        const char *pname = str(&r, e, prefix, "name");
        if (!r.rc && (strlen(pname) == 0 || strlen(pname) >= sizeof p->name))
            r.rc = zt_fail(err, ZT_EINPUT, "%s: params[%d].name must have 1 to %zu characters", name, i,
                           sizeof p->name - 1);
        if (r.rc)
            break;
        snprintf(p->name, sizeof p->name, "%s", pname);
        const cJSON *shape = item(&r, e, prefix, "shape");
        int nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : 0;
        if (!r.rc && (nd < 1 || nd > 2))
            r.rc = zt_fail(err, ZT_EINPUT, "%s: params[%d].shape must be an array of 1 or 2 sizes", name, i);
        p->ndim = nd;
        p->shape[1] = 1;
        const cJSON *dim = r.rc ? NULL : shape->child;
        for (int d = 0; !r.rc && dim; d++, dim = dim->next) {
            double x = cJSON_IsNumber(dim) ? dim->valuedouble : NAN;
            if (!isfinite(x) || x < 1 || x > MAX_COUNT || x != floor(x))
                r.rc = zt_fail(err, ZT_EINPUT, "%s: params[%d].shape[%d] must be a whole number in [1, 2^50]", name,
                               i, d);
            else
                p->shape[d] = (long)x;
        }
        p->unit = (int)num(&r, e, prefix, "unit", 0, nu - 1, 1);
        p->offset = (size_t)num(&r, e, prefix, "offset", 0, MAX_COUNT, 1);
        if (r.rc)
            break;
        /* both shape factors are at most 2^50: check the product without overflow */
        double numel = (double)p->shape[0] * (double)p->shape[1];
        if (numel > (double)ix->units[p->unit].numel ||
            (double)p->offset + numel > (double)ix->units[p->unit].numel)
            r.rc = zt_fail(err, ZT_EINPUT, "%s: params[%d] (%s) does not fit inside units[%d] (%zu elements)", name, i,
                           p->name, p->unit, ix->units[p->unit].numel);
        p->numel = (size_t)p->shape[0] * (size_t)p->shape[1];
    }
    if (!r.rc)
        r.rc = check_unique_names(name, ix, err);
    if (r.rc)
        zt_ckpt_index_free(ix);
    return r.rc;
}

void zt_ckpt_index_free(zt_ckpt_index *ix)
{
    zt_free(ZT_MEM_OTHER, ix->units, ix->units ? (size_t)ix->nunits * sizeof *ix->units : 0);
    zt_free(ZT_MEM_OTHER, ix->params, ix->params ? (size_t)ix->nparams * sizeof *ix->params : 0);
    memset(ix, 0, sizeof *ix);
}

const zt_ckpt_iparam *zt_ckpt_index_find(const zt_ckpt_index *ix, const char *name)
{
    for (int i = 0; i < ix->nparams; i++)
        if (!strcmp(ix->params[i].name, name))
            return &ix->params[i];
    return NULL;
}
