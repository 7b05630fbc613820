/* optim.c — learning-rate schedules (see optim.h; the AdamW step is kernels/adamw.c). */
#include "optim.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/json.h"

/* WSD's shapes: the warmup rises from 0 to 1 over x in [0, 1), the decay falls from 1 */
static double wsd_shape(zt_lr_shape t, double x, int rising, double cycles)
{
    switch (t) {
    case ZT_SHAPE_COSINE:
        return rising ? 0.5 * (1.0 - cos(M_PI * x)) : 0.5 * (1.0 + cos(M_PI * cycles * 2.0 * x));
    case ZT_SHAPE_1_SQRT:
        return rising ? 1.0 - sqrt(1.0 - x) : 1.0 - sqrt(x);
    default:
        return rising ? x : 1.0 - x;
    }
}

/* warmup_stable_decay: its warmup starts at min_lr_ratio r rather than 0, so it
 * is not the shared u/w ramp */
static double wsd_factor(const zt_lr_kwargs *kw, long u, long S, long w)
{
    double r = kw->min_lr_rate, f;
    long stable = kw->num_stable_steps >= 0 ? kw->num_stable_steps : S - w - kw->num_decay_steps;
    long decay = kw->num_decay_steps;
    if (u < w)
        f = wsd_shape(kw->warmup_type, (double)u / (double)(w > 1 ? w : 1), 1, kw->num_cycles);
    else if (u < w + stable)
        return 1.0;
    else if (u < w + stable + decay)
        f = wsd_shape(kw->decay_type, (double)(u - w - stable) / (double)(decay > 1 ? decay : 1), 0,
                      kw->num_cycles);
    else
        return r;
    f = f * (1.0 - r) + r;
    return f > 0.0 ? f : 0.0;
}

double zt_lr_value(zt_lr_schedule s, const zt_lr_kwargs *given, double lr, long u, long S, long w)
{
    zt_lr_kwargs defaults;
    const zt_lr_kwargs *kw = given;
    if (!kw) {
        zt_lr_kwargs_defaults(s, &defaults);
        kw = &defaults;
    }
    if (s == ZT_LR_CONSTANT)
        return lr;
    if (s == ZT_LR_WSD)
        return lr * wsd_factor(kw, u, S, w);
    if (u < w)
        return lr * (double)u / (double)(w > 0 ? w : 1);
    double span = (double)(S - w > 1 ? S - w : 1), progress = (double)(u - w) / span;
    switch (s) {
    case ZT_LR_CONSTANT_WARMUP:
        return lr;
    case ZT_LR_LINEAR: {
        double f = (double)(S - u) / span;
        return lr * (f > 0.0 ? f : 0.0);
    }
    case ZT_LR_COSINE:
    case ZT_LR_COSINE_MIN_LR: {
        /* 2*pi*c*p: with c = 0.5 exactly pi*p (scalings by powers of two are exact) */
        double f = 0.5 * (1.0 + cos(M_PI * kw->num_cycles * 2.0 * progress));
        if (s == ZT_LR_COSINE_MIN_LR)
            f = f * (1.0 - kw->min_lr_rate) + kw->min_lr_rate;
        return lr * (f > 0.0 ? f : 0.0);
    }
    case ZT_LR_COSINE_RESTARTS: {
        /* each of the c cycles decays from lr to 0 and restarts at lr ("hard"
         * restarts); after the last one the lr stays 0 */
        if (progress >= 1.0)
            return 0.0;
        double f = 0.5 * (1.0 + cos(M_PI * fmod(kw->num_cycles * progress, 1.0)));
        return lr * (f > 0.0 ? f : 0.0);
    }
    case ZT_LR_POLYNOMIAL: {
        /* from lr down to lr_end over S-w updates, then lr_end; lr_end is an
         * absolute lr, so this schedule depends on the base lr */
        if (u > S)
            return kw->lr_end;
        double remaining = 1.0 - (double)(u - w) / (double)(S - w > 0 ? S - w : 1);
        return (lr - kw->lr_end) * pow(remaining, kw->power) + kw->lr_end;
    }
    case ZT_LR_INVERSE_SQRT: {
        /* get_inverse_sqrt_schedule's timescale defaults to the warmup, or 10000 without one */
        double T = (double)(kw->timescale > 0 ? kw->timescale : w > 0 ? w : 10000);
        return lr * (1.0 / sqrt(((double)u + (T - (double)w)) / T));
    }
    default:
        return lr;
    }
}

double zt_lr_factor(zt_lr_schedule s, long u, long S, long w) { return zt_lr_value(s, NULL, 1.0, u, S, w); }

void zt_lr_kwargs_defaults(zt_lr_schedule s, zt_lr_kwargs *kw)
{
    *kw = (zt_lr_kwargs){.num_cycles = s == ZT_LR_COSINE_RESTARTS ? ZT_LR_RESTART_CYCLES : 0.5,
                         .lr_end = ZT_LR_POLY_END, .power = ZT_LR_POLY_POWER, .num_decay_steps = -1,
                         .num_stable_steps = -1, .warmup_type = ZT_SHAPE_LINEAR, .decay_type = ZT_SHAPE_COSINE};
}

static const char *schedule_names[ZT_LR_NSCHEDULES] = {"constant", "constant_with_warmup", "linear", "cosine",
                                                       "cosine_with_restarts", "polynomial", "cosine_with_min_lr",
                                                       "warmup_stable_decay", "inverse_sqrt"};

int zt_lr_schedule_parse(const char *s, zt_lr_schedule *out)
{
    for (int i = 0; i < ZT_LR_NSCHEDULES; i++)
        if (!strcmp(s, schedule_names[i])) {
            *out = (zt_lr_schedule)i;
            return 0;
        }
    return -1;
}

const char *zt_lr_schedule_name(zt_lr_schedule s) { return schedule_names[s]; }

const char *zt_lr_schedule_list(void)
{
    return "linear | cosine | cosine_with_restarts | polynomial | constant | constant_with_warmup | "
           "cosine_with_min_lr | warmup_stable_decay | inverse_sqrt";
}

/* The keyword arguments each schedule's transformers function takes beyond
 * (optimizer, num_warmup_steps, num_training_steps); get_scheduler raises a
 * TypeError on any other.  constant and constant_with_warmup take none (get_scheduler
 * drops theirs unread; ztrain says so rather than ignore them). */
static const char *const kwarg_names[ZT_LR_NSCHEDULES][7] = {
    [ZT_LR_COSINE] = {"num_cycles"},
    [ZT_LR_COSINE_RESTARTS] = {"num_cycles"},
    [ZT_LR_POLYNOMIAL] = {"lr_end", "power"},
    [ZT_LR_COSINE_MIN_LR] = {"num_cycles", "min_lr", "min_lr_rate"},
    [ZT_LR_WSD] = {"num_decay_steps", "num_stable_steps", "warmup_type", "decay_type", "min_lr_ratio",
                   "num_cycles"},
    [ZT_LR_INVERSE_SQRT] = {"timescale"},
};

static int takes(zt_lr_schedule s, const char *key)
{
    for (int i = 0; i < 7 && kwarg_names[s][i]; i++)
        if (!strcmp(kwarg_names[s][i], key))
            return 1;
    return 0;
}

/* one member: a number (an integer for the step counts) or a WSD shape name */
static int kwarg_value(const cJSON *it, zt_lr_kwargs *kw, double *min_lr, double *min_rate, zt_err *err)
{
    const char *k = it->string;
    if (!strcmp(k, "warmup_type") || !strcmp(k, "decay_type")) {
        static const char *const shapes[] = {"linear", "cosine", "1-sqrt"};
        for (int i = 0; cJSON_IsString(it) && i < 3; i++)
            if (!strcmp(it->valuestring, shapes[i])) {
                *(k[0] == 'w' ? &kw->warmup_type : &kw->decay_type) = (zt_lr_shape)i;
                return ZT_OK;
            }
        return zt_fail(err, ZT_EINPUT, "--lr_scheduler_kwargs: %s: expected \"linear\", \"cosine\" or \"1-sqrt\"", k);
    }
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    int steps = !strcmp(k, "num_decay_steps") || !strcmp(k, "num_stable_steps") || !strcmp(k, "timescale");
    if (!isfinite(v) || (steps && (v != floor(v) || v < (k[0] == 't' ? 1 : 0) || v > 1e15)))
        return zt_fail(err, ZT_EINPUT, "--lr_scheduler_kwargs: %s: expected %s", k,
                       steps ? (k[0] == 't' ? "a positive integer" : "an integer of at least 0") : "a number");
    if (!strcmp(k, "num_cycles"))
        kw->num_cycles = v;
    else if (!strcmp(k, "lr_end"))
        kw->lr_end = v;
    else if (!strcmp(k, "power"))
        kw->power = v;
    else if (!strcmp(k, "min_lr"))
        *min_lr = v;
    else if (!strcmp(k, "min_lr_rate") || !strcmp(k, "min_lr_ratio"))
        *min_rate = v;
    else if (!strcmp(k, "num_decay_steps"))
        kw->num_decay_steps = (long)v;
    else if (!strcmp(k, "num_stable_steps"))
        kw->num_stable_steps = (long)v;
    else
        kw->timescale = (long)v;
    return ZT_OK;
}

int zt_lr_kwargs_parse(const char *json, zt_lr_schedule s, double lr, zt_lr_kwargs *kw, zt_err *err)
{
    zt_lr_kwargs_defaults(s, kw);
    double min_lr = NAN, min_rate = NAN;
    int rc = ZT_OK;
    if (json && json[0]) {
        zt_json j;
        if ((rc = zt_json_parse("--lr_scheduler_kwargs", "JSON", json, strlen(json), 0, &j, err)))
            return rc;
        if (!cJSON_IsObject(j.root))
            rc = zt_fail(err, ZT_EINPUT, "--lr_scheduler_kwargs: expected a JSON object such as {\"min_lr\": 1e-6}");
        for (const cJSON *it = j.root->child; !rc && it; it = it->next)
            if (!takes(s, it->string))
                rc = zt_fail(err, ZT_EINPUT, "--lr_scheduler_kwargs: %s is not an argument of lr_scheduler_type %s "
                             "(it takes %s%s%s%s)", it->string, schedule_names[s],
                             kwarg_names[s][0] ? kwarg_names[s][0] : "none", kwarg_names[s][1] ? ", " : "",
                             kwarg_names[s][1] ? kwarg_names[s][1] : "", kwarg_names[s][2] ? ", ..." : "");
            else
                rc = kwarg_value(it, kw, &min_lr, &min_rate, err);
        zt_json_free(&j);
        if (rc)
            return rc;
    }
    if (s == ZT_LR_COSINE_MIN_LR) { /* as get_cosine_with_min_lr_schedule_with_warmup */
        if (!isnan(min_lr) && !isnan(min_rate))
            return zt_fail(err, ZT_EINPUT, "--lr_scheduler_kwargs: give one of min_lr and min_lr_rate, not both");
        if (isnan(min_lr) && isnan(min_rate))
            return zt_fail(err, ZT_EINPUT, "lr_scheduler_type cosine_with_min_lr needs --lr_scheduler_kwargs "
                           "'{\"min_lr\": LR}' or '{\"min_lr_rate\": R}' (the floor, absolute or a fraction of the lr)");
        kw->min_lr_rate = !isnan(min_lr) ? min_lr / lr : min_rate;
    } else if (!isnan(min_rate)) {
        kw->min_lr_rate = min_rate; /* WSD's min_lr_ratio */
    }
    if (s == ZT_LR_WSD && kw->num_decay_steps < 0)
        return zt_fail(err, ZT_EINPUT, "lr_scheduler_type warmup_stable_decay needs --lr_scheduler_kwargs "
                       "'{\"num_decay_steps\": N}' (the steps of the final decay)");
    return ZT_OK;
}

int zt_lr_kwargs_format(zt_lr_schedule s, const zt_lr_kwargs *kw, char *buf, size_t cap)
{
    static const char *const shapes[] = {"linear", "cosine", "1-sqrt"};
    size_t n = 0;
    int wrote = 0;
    buf[0] = 0;
#define PUT(...) (n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__))
    PUT("{");
    for (int i = 0; i < 7 && kwarg_names[s][i]; i++) {
        const char *k = kwarg_names[s][i];
        if (!strcmp(k, "min_lr")) /* recorded as the rate it resolved to */
            continue;
        PUT("%s\"%s\": ", wrote++ ? ", " : "", k);
        if (!strcmp(k, "num_cycles"))
            PUT("%.17g", kw->num_cycles);
        else if (!strcmp(k, "lr_end"))
            PUT("%.17g", kw->lr_end);
        else if (!strcmp(k, "power"))
            PUT("%.17g", kw->power);
        else if (!strcmp(k, "min_lr_rate") || !strcmp(k, "min_lr_ratio"))
            PUT("%.17g", kw->min_lr_rate);
        else if (!strcmp(k, "num_decay_steps"))
            PUT("%ld", kw->num_decay_steps);
        else if (!strcmp(k, "num_stable_steps"))
            PUT("%ld", kw->num_stable_steps);
        else if (!strcmp(k, "warmup_type") || !strcmp(k, "decay_type"))
            PUT("\"%s\"", shapes[k[0] == 'w' ? kw->warmup_type : kw->decay_type]);
        else
            PUT("%ld", kw->timescale);
    }
    PUT("}");
#undef PUT
    return n < cap ? 0 : -1;
}
