/* train_log.c — what a finished step leaves: its JSONL record, the progress line,
 * Trainer's log and TensorBoard scalars; and the held-out evaluation (trainer_impl.h). */
#include "trainer_impl.h"

static void draw_progress(long step, long total, double loss, double eval_loss, double tps, double elapsed)
{
    const int width = 30;
    int filled = (int)((double)width * (double)step / (double)total);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    double eta = step ? elapsed / (double)step * (double)(total - step) : 0.0;
    char ev[32] = "";
    if (!isnan(eval_loss)) /* the latest evaluation, once there is one */
        snprintf(ev, sizeof ev, " eval %.4f", eval_loss);
    fprintf(stderr, "\r[%s] %ld/%ld loss %.4f%s  %.0f tok/s  %.0fs left ", bar, step, total, loss, ev,
            tps, eta);
    if (step == total)
        fputc('\n', stderr);
    fflush(stderr);
}

/* Warn once when most updates vanish in rounding for several steps in a row. */
static void audit_lost_updates(trainer *t, const zt_step_metrics *m)
{
    t->lost_streak = m->lost_update_fraction > 0.5 ? t->lost_streak + 1 : 0;
    if (t->lost_streak < 3 || t->warned || !t->rank0)
        return;
    fprintf(stderr, "%swarning: %.0f%% of parameter updates were rounded away in the last %d "
            "steps (mean |update| = %.2f half-ulps of the %s master weights); the model is barely "
            "training. Keep an fp32 master with --mixed_precision bf16 (Accelerate's upcast), or "
            "compensate the bf16 master with --master_compensation kahan.\n",
            t->a->progress ? "\n" : "", 100.0 * m->lost_update_fraction, t->lost_streak,
            m->update_to_half_ulp, zt_dtype_name(t->a->plan.prec.master));
    t->warned = 1;
}

/* A number, or null for an inf or NaN (which JSON cannot hold; jq and Python's
 * json refuse the bare words), recording which in *flags. */
static void json_num(FILE *f, const char *key, const char *fmt, double x, char *flags, size_t len)
{
    if (isfinite(x)) {
        fprintf(f, "\"%s\": ", key);
        fprintf(f, fmt, x);
        return;
    }
    fprintf(f, "\"%s\": null", key);
    size_t used = strlen(flags);
    snprintf(flags + used, len - used, "%s\"%s\": \"%s\"", used ? ", " : "", key,
             isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
}

/* One JSON object per step (docs/zero.md lists the fields).  A non-finite loss
 * or gradient norm is written as null, and "nonfinite" says which and what it
 * was, e.g. "nonfinite": {"loss": "nan", "grad_norm": "inf"}. */
static void write_jsonl(FILE *log, const zt_step_metrics *m)
{
    char flags[128] = "";
    fprintf(log, "{\"step\": %ld, ", m->step);
    json_num(log, "loss", "%.9g", m->loss, flags, sizeof flags);
    fprintf(log, ", ");
    json_num(log, "grad_norm", "%.9g", m->grad_norm, flags, sizeof flags);
    fprintf(log,
            ", \"lr\": %.9g, "
            "\"tokens_per_sec_per_device\": %.2f, \"step_time_s\": %.6f, \"mfu\": %.5f, \"peak_gflops\": %.6g, "
            "\"lost_update_fraction\": %.6f, \"update_to_half_ulp\": %.6g, \"loss_scale\": %.9g, "
            "\"skipped\": %d, ",
            m->lr, m->tokens_per_sec, m->step_time_s, m->mfu, m->peak_gflops, m->lost_update_fraction,
            m->update_to_half_ulp, m->loss_scale, m->skipped);
    if (flags[0])
        fprintf(log, "\"nonfinite\": {%s}, ", flags);
    fprintf(log, "\"memory_bytes\": {");
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        fprintf(log, "\"%s\": %zu%s", zt_mem_cat_name((zt_mem_cat)c), m->memory_bytes[c],
                c + 1 < ZT_MEM_NCAT ? ", " : "");
    fprintf(log, "}, \"host_memory_bytes\": {");
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        fprintf(log, "\"%s\": %zu%s", zt_mem_cat_name((zt_mem_cat)c), m->host_memory_bytes[c],
                c + 1 < ZT_MEM_NCAT ? ", " : "");
    fprintf(log, "}, \"comm_bytes\": {");
    for (int k = 0; k < ZT_COLL_NKINDS; k++)
        fprintf(log, "\"%s\": %llu%s", zt_coll_kind_name((zt_coll_kind)k),
                (unsigned long long)m->comm_bytes[k], k + 1 < ZT_COLL_NKINDS ? ", " : "");
    /* the same bytes by link: with ranks on this machine, with other machines */
    fprintf(log, "}, \"comm_link_bytes\": {\"intra_machine\": %llu, \"inter_machine\": %llu",
            (unsigned long long)m->link_bytes[ZT_LINK_INTRA], (unsigned long long)m->link_bytes[ZT_LINK_INTER]);
    fprintf(log, "}, \"comm_wait_s\": %.6f, \"comm_progress_s\": %.6f}\n", m->comm_wait_s, m->comm_progress_s);
    fflush(log);
}

/* A JSONL record is formatted into memory, then written whole (zt_write_record):
 * a full disk or a size limit never leaves half an object, and the failure is an
 * error naming the file.  fmt writes the record into the stream it is given. */
typedef void (*record_fn)(FILE *f, const void *what);
static int log_record(trainer *t, record_fn fmt, const void *what, zt_err *err)
{
    if (!t->have_log)
        return ZT_OK;
    char buf[16384];
    FILE *rec = fmemopen(buf, sizeof buf, "w");
    if (!rec)
        return zt_fail(err, ZT_EFAIL, "--log_jsonl %s: out of memory formatting a record", t->a->log_jsonl);
    fmt(rec, what);
    int bad = fflush(rec) != 0 || ferror(rec);
    long n = ftell(rec);
    fclose(rec);
    if (bad || n <= 0 || (size_t)n >= sizeof buf - 1)
        return zt_fail(err, ZT_EFAIL, "--log_jsonl %s: a record does not fit %zu bytes", t->a->log_jsonl, sizeof buf);
    int rc = zt_write_record(t->log_fd, t->a->log_jsonl, buf, (size_t)n, err);
    if (rc)
        zt_wrap(err, "--log_jsonl: ");
    return rc;
}

static void step_record(FILE *f, const void *m)
{
    write_jsonl(f, m);
}

/* Trainer's log, every logging_steps steps and after the last: the loss is the
 * mean of the steps' losses since the previous log, as Trainer reports it; the
 * learning rate and gradient norm are this step's.  On stdout as one plain line
 * (no progress bar is drawn then: a log file gets lines, not carriage returns)
 * and, with --report_to tensorboard, as scalars under Trainer's tags. */
/* One scalar into rank 0's event file (no file on the other ranks: ZT_OK).  A
 * failed write is an error, as the JSONL's is: the caller agrees on it with every
 * rank (tb_agree), so all of them stop instead of waiting for rank 0. */
static int tb_scalar(trainer *t, const char *tag, long step, double value, zt_err *err)
{
    if (!t->have_tb)
        return ZT_OK;
    int rc = zt_tfevents_scalar(&t->tb, tag, step, (float)value, err);
    if (rc)
        zt_wrap(err, "--report_to tensorboard: ");
    return rc;
}

/* Collective when events are written (--report_to tensorboard: the same on every
 * rank): every rank learns whether rank 0's writes succeeded. */
static int tb_agree(trainer *t, int rc, zt_err *err)
{
    return t->a->tensorboard_dir ? zt_comm_agree(t->comm, rc, err) : rc;
}

/* Collective on the steps that log (the same steps on every rank). */
static int log_trainer(trainer *t, const zt_step_metrics *m, zt_err *err)
{
    t->loss_since_log += m->loss;
    t->steps_since_log++;
    if (m->step % t->log_every != 0 && m->step != t->nsteps)
        return ZT_OK;
    double loss = t->loss_since_log / (double)t->steps_since_log, epoch = zt_train_epoch_at(t, m->step);
    t->loss_since_log = 0.0;
    t->steps_since_log = 0;
    if (t->talk && !t->a->progress) {
        printf("step %ld/%ld: loss %.4f, grad_norm %.4g, learning_rate %.6g, epoch %.2f\n", m->step, t->nsteps, loss,
               m->grad_norm, m->lr, epoch);
        fflush(stdout);
    }
    zt_selection_log_train(&t->sel, m->step, epoch, loss, m->grad_norm, m->lr);
    int rc = tb_scalar(t, "train/loss", m->step, loss, err);
    if (rc == ZT_OK)
        rc = tb_scalar(t, "train/grad_norm", m->step, m->grad_norm, err);
    if (rc == ZT_OK)
        rc = tb_scalar(t, "train/learning_rate", m->step, m->lr, err);
    if (rc == ZT_OK)
        rc = tb_scalar(t, "train/epoch", m->step, epoch, err);
    return tb_agree(t, rc, err);
}

/* Collective when there is a log: every rank learns whether rank 0 wrote it. */
int zt_train_log_step(trainer *t, const zt_step_metrics *m, zt_err *err)
{
    t->last = *m;
    audit_lost_updates(t, m);
    int rc = log_record(t, step_record, m, err);
    if (t->a->log_jsonl)
        rc = zt_comm_agree(t->comm, rc, err);
    if (rc)
        return rc;
    if (t->a->progress && t->rank0)
        draw_progress(m->step, t->nsteps, m->loss, t->last_eval, m->tokens_per_sec, zt_train_now() - t->t_start);
    if (t->a->on_step)
        t->a->on_step(t->a->on_step_ctx, m);
    return log_trainer(t, m, err);
}

/* HF's eval_strategy: "steps" after every eval_steps-th step (its default,
 * logging_steps, when eval_steps is not given), "epoch" after each step that ends
 * an epoch, "no" never; unset: every eval_steps, or once after the last step. */
int zt_train_eval_due(const trainer *t, long step)
{
    if (!t->have_ev)
        return 0;
    switch (t->a->eval_strategy) {
    case ZT_STRATEGY_NO:
        return 0;
    case ZT_STRATEGY_EPOCH:
        return zt_train_epoch_ends(t, step);
    case ZT_STRATEGY_STEPS:
        return step % (t->a->eval_steps > 0 ? t->a->eval_steps : t->log_every) == 0;
    default:
        return t->a->eval_steps > 0 ? step % t->a->eval_steps == 0 : step == t->nsteps;
    }
}

typedef struct eval_record_of {
    long step;
    const zt_eval_result *e;
} eval_record_of;

static void eval_record(FILE *f, const void *what)
{
    const eval_record_of *r = what;
    const zt_eval_result *e = r->e;
    char flags[128] = ""; /* non-finite values as null plus a flag, as in the step records */
    fprintf(f, "{\"step\": %ld, ", r->step);
    json_num(f, "eval_loss", "%.17g", e->loss, flags, sizeof flags);
    fprintf(f, ", ");
    json_num(f, "eval_perplexity", "%.17g", e->perplexity, flags, sizeof flags);
    fprintf(f, ", \"eval_tokens\": %ld, \"eval_runtime\": %.6f", e->tokens, e->seconds);
    if (flags[0])
        fprintf(f, ", \"nonfinite\": {%s}", flags);
    fprintf(f, "}\n");
}

/* Every rank alike (the eval loss is the same on each): the evaluation into the log
 * history and the selection; early stopping ends the run after this step (its
 * checkpoint, when one is due, is still written), as Trainer's should_training_stop. */
static int select_after_eval(trainer *t, long step, const zt_eval_result *e)
{
    if (!zt_selection_on_eval(&t->sel, step, zt_train_epoch_at(t, step), e->loss) || step >= t->nsteps)
        return ZT_OK;
    if (t->talk)
        printf("%searly stopping after step %ld: %s did not improve by more than %g in %ld evaluations "
               "(best %.4f at step %ld)\n", t->a->progress ? "\n" : "", step, "eval_loss", t->sel.threshold,
               t->sel.patience, t->sel.best_metric, t->sel.best_step);
    t->nsteps = step;
    return ZT_OK;
}

/* Collective: the held-out loss of the model as it stands after `step`, as its own
 * JSONL record (HF's eval_loss, with its perplexity, after the step's record) and on
 * stdout, or on the progress line that log_step draws next. */
int zt_train_evaluate(trainer *t, long step, zt_err *err)
{
    zt_eval_result e;
    int rc = zt_evaluator_run(&t->ev, t->comm, &e, err);
    if (rc)
        return rc;
    t->last_eval = e.loss;
    if ((rc = tb_agree(t, tb_scalar(t, "eval/loss", step, e.loss, err), err)))
        return rc;
    eval_record_of rec = {step, &e};
    rc = log_record(t, eval_record, &rec, err);
    if (t->a->log_jsonl && (rc = zt_comm_agree(t->comm, rc, err)))
        return rc;
    /* with a progress bar, its next line shows the eval; after the last step the bar
     * has ended its line, so the result gets one of its own */
    if (t->talk && (!t->a->progress || step == t->nsteps))
        printf("step %ld: eval loss %.4f, perplexity %.2f (%ld tokens, %.1f s)\n", step, e.loss, e.perplexity,
               e.tokens, e.seconds);
    return select_after_eval(t, step, &e);
}
