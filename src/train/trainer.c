/* trainer.c — the training loop, zt_train (see trainer.h; its files: trainer_impl.h). */
#include "trainer_impl.h"

/* A failing matrix product is not bad input: stop every rank.  The others are
 * inside (or about to enter) this step's collectives and would wait for this
 * rank forever, so on several ranks the job is aborted here, with its error. */
static int step_failed(const trainer *t, int rc, const zt_err *err)
{
    if (t->W > 1) {
        fprintf(stderr, "ztrain: error: rank %d: %s\n", t->comm->rank, err->msg);
        fflush(stderr);
        zt_comm_abort(1);
    }
    return rc;
}

/* "unit 2 (layers 1-1)" or "unit 0 (embeddings, final norm, lm_head)". */
static void describe_unit(char *buf, size_t len, const zt_layout *lay, int u)
{
    const zt_unit *un = &lay->units[u];
    int n = snprintf(buf, len, "unit %d (", u);
    if (n < 0 || (size_t)n >= len)
        return;
    if (un->num_layers > 0)
        n += snprintf(buf + n, len - (size_t)n, "layers %d-%d%s", un->first_layer,
                      un->first_layer + un->num_layers - 1, un->has_root ? ", " : "");
    if (un->has_root && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, "embeddings, final norm, lm_head");
    if ((size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ")");
}

/* What a run that stops on a failure leaves: "nothing saved from this run", or
 * the checkpoints it did save, the newest to resume from. */
static const char *saved_note(const trainer *t, char *buf, size_t cap)
{
    if (t->saved_n == 0)
        snprintf(buf, cap, "nothing saved from this run");
    else if (t->saved_n == 1)
        snprintf(buf, cap, "this run saved %s/checkpoint-%ld", t->a->output_dir, t->saved_last);
    else
        snprintf(buf, cap, "this run saved %ld checkpoints, checkpoint-%ld to checkpoint-%ld in %s (the newest: "
                 "%s/checkpoint-%ld)", t->saved_n, t->saved_first, t->saved_last, t->a->output_dir,
                 t->a->output_dir, t->saved_last);
    return buf;
}

/* Outside fp16's loss scaling, an inf or NaN in the loss or the gradient is not
 * an overflow to scale away: the run stops naming the step and the first unit,
 * unless --skip_nonfinite_steps N allows skipping it (the engine has already
 * left the parameters untouched), at most N steps in a row.  Every rank reaches
 * the same verdict (the loss and the engine's verdict are world-wide). */
static int check_finite(trainer *t, const zt_step_metrics *m, zt_err *err)
{
    const zt_train_args *a = t->a;
    if (a->plan.ls.on || (!m->skipped && isfinite(m->loss))) {
        t->nonfinite_streak = 0;
        return ZT_OK;
    }
    char what[160] = "the loss";
    if (m->skipped) {
        int u = zt_engine_nonfinite_unit(t->r.eng);
        char unit[96] = "";
        if (u >= 0)
            describe_unit(unit, sizeof unit, &t->r.lay, u);
        snprintf(what, sizeof what, "the gradient%s%s", u >= 0 ? ", first (in model order) in " : "", unit);
    }
    t->nonfinite_streak++;
    if (m->skipped && t->nonfinite_streak <= a->skip_nonfinite_steps) {
        if (t->rank0)
            fprintf(stderr, "%sztrain: warning: step %ld: an inf or NaN in %s (loss %g); step skipped (%ld in a "
                    "row, at most %ld by --skip_nonfinite_steps)\n", a->progress ? "\n" : "", m->step, what,
                    m->loss, t->nonfinite_streak, a->skip_nonfinite_steps);
        return ZT_OK;
    }
    if (!t->rank0) /* rank 0 says it; the others stop with it */
        return zt_fail(err, ZT_EFAIL, "%s", "");
    char saved[700];
    if (m->skipped && a->skip_nonfinite_steps > 0)
        return zt_fail(err, ZT_EFAIL, "step %ld: an inf or NaN in %s (loss %g), %ld steps in a row, more than "
                       "--skip_nonfinite_steps %ld allows; stopping (%s)", m->step, what, m->loss,
                       t->nonfinite_streak, a->skip_nonfinite_steps, saved_note(t, saved, sizeof saved));
    return zt_fail(err, ZT_EFAIL, "step %ld: an inf or NaN in %s (loss %g); stopping instead of training on it "
                   "(%s; lower the learning rate, check the data, or allow skipping with --skip_nonfinite_steps N)",
                   m->step, what, m->loss, saved_note(t, saved, sizeof saved));
}

/* fp16: an overflow skips the step and halves the scale, but at min_loss_scale
 * the scale cannot fall further, so a model that overflows fp16 even at the floor
 * would skip every step and "train" without changing.  DeepSpeed raises at its
 * minimum scale; here the run stops (exit 1: the run failed, the input was not
 * malformed) once a step overflows at the floor after more than
 * --max_consecutive_skipped_steps skips in a row.  From 2^16 the floor 1 is
 * reached after 17 skips in a row (one spent on hysteresis 2, then 16 halvings).
 * Every rank reaches the same verdict: the overflow is world-wide. */
static int check_overflow(trainer *t, const zt_step_metrics *m, zt_err *err)
{
    const zt_train_args *a = t->a;
    if (m->skipped)
        t->skipped++;
    else
        t->applied++;
    if (!a->plan.ls.on)
        return ZT_OK;
    t->overflow_streak = m->skipped ? t->overflow_streak + 1 : 0;
    /* m->loss_scale is the scale this step ran at, before the update halved it */
    int at_floor = m->loss_scale <= t->scaler.min_scale;
    if (!m->skipped || !at_floor || t->overflow_streak <= a->max_consecutive_skipped_steps)
        return ZT_OK;
    if (!t->rank0) /* rank 0 says it; the others stop with it */
        return zt_fail(err, ZT_EFAIL, "%s", "");
    char saved[700];
    return zt_fail(err, ZT_EFAIL, "%sstep %ld: fp16 overflow with the loss scale at its floor (min_loss_scale %g); "
                   "%ld steps skipped in a row, more than --max_consecutive_skipped_steps %ld allows; stopping "
                   "(%s; %ld of this run's %ld steps were applied): the model overflows "
                   "fp16 even unscaled; train in bf16 or fp32 (--mixed_precision bf16|no)",
                   a->progress ? "\n" : "", m->step, t->scaler.min_scale, t->overflow_streak,
                   a->max_consecutive_skipped_steps, saved_note(t, saved, sizeof saved), t->applied,
                   t->applied + t->skipped);
}

/* The numbers of a step that are complete once it is queued: its collectives and
 * memory (a next step queued before its finish must not count in them). */
static void measure_queued(trainer *t, step_run *run)
{
    const zt_comm *comm = t->comm;
    zt_step_metrics *m = &run->m;
    for (int k = 0; k < ZT_COLL_NKINDS; k++)
        m->comm_bytes[k] = comm->bytes[k] - run->before[k];
    for (int k = 0; k < ZT_COLL_NKINDS; k++)
        m->comm_calls[k] = comm->calls[k] - m->comm_calls[k];
    for (int k = 0; k < ZT_NLINKS; k++)
        m->link_bytes[k] = comm->link_bytes[k] - run->link_before[k];
    m->comm_wait_s = comm->wait_s - run->wait0;
    m->comm_progress_s = comm->progress_s - run->progress0;
    for (int c = 0; c < ZT_MEM_NCAT; c++) { /* the device's bytes and the offloaded host bytes apart */
        m->host_memory_bytes[c] = zt_mem_host_current((zt_mem_cat)c);
        m->memory_bytes[c] = zt_mem_current((zt_mem_cat)c) - m->host_memory_bytes[c];
    }
}

/* The numbers of a step known once its numbers are back.  Steps are read back in
 * batches (one at a time unless fast mode reads them at logged steps only: zt_train),
 * and each step of a batch gets the batch's mean time: the window from the first
 * step's start, or from the previous batch's read when the host queued it earlier
 * than that (running ahead), to this batch's read, over its steps.  In a run that
 * runs ahead, the device's time per step. */
static void measure_finished(trainer *t, step_run *run)
{
    zt_step_metrics *m = &run->m;
    if (t->batch_left <= 0) { /* the batch's first step: its read has just waited */
        double now = zt_train_now(), start = run->t0 > t->prev_finish ? run->t0 : t->prev_finish;
        int n = t->batch_n > 0 ? t->batch_n : 1;
        t->batch_time = (now - start) / n;
        t->batch_left = n;
        t->prev_finish = now;
    }
    t->batch_left--;
    m->step_time_s = t->batch_time;
    m->tokens_per_sec = t->tokens_per_step / m->step_time_s / t->W;
    /* achieved FLOP/s per device against the peak, which a faster step raises
     * (peak.h): MFU is at most 1 by construction */
    double achieved = t->flops_per_token * m->tokens_per_sec * 1e-9;
    m->peak_gflops = zt_peak_admit(&t->peak, achieved, t->rank0, t->talk ? stderr : NULL);
    m->mfu = m->peak_gflops > 0 ? achieved / m->peak_gflops : 0.0;
    const zt_adamw_audit au = zt_engine_last_audit(t->r.eng);
    m->lost_update_fraction = au.updated > 0 ? au.lost / au.updated : 0.0;
    m->update_to_half_ulp = au.updated > 0 ? au.ratio_sum / au.updated : 0.0;
}

/* The learning rate of the coming step.  The schedule counts applied updates (a
 * step skipped on fp16 overflow does not advance it, as DeepSpeed's engine does not
 * step its scheduler then), so every step queued before must have been finished;
 * with the schedule on the device (fast mode) the device counts, and this is only a
 * placeholder until the step's own comes back (step_finish). */
static double step_lr(const trainer *t)
{
    const zt_train_args *a = t->a;
    long u = zt_engine_optimizer_steps(t->r.eng);
    return zt_lr_value(a->schedule, &a->schedule_kwargs, a->adam.lr, u, a->max_steps, a->warmup_steps);
}

/* Optimizer step s (0-based), its first half: A micro-batches of forward and
 * backward.  step_queue then queues the gradient reduction and one AdamW update of
 * this rank's shard, and step_finish reads the step's numbers back. */
static int train_step(trainer *t, long s, step_run *run, zt_err *err)
{
    const zt_train_args *a = t->a;
    const zt_plan *pl = &a->plan;
    zt_comm *comm = t->comm;
    run_state *r = &t->r;
    const int B = a->batch_size, A = a->grad_accum;
    zt_step_metrics *m = &run->m;
    const int slot = run->slot;
    memset(run, 0, sizeof *run);
    run->slot = slot;
    m->step = s + 1;
    comm->step = s + 1; /* the flight recorder's context; the engine sets phase and unit */
    run->t0 = zt_train_now(), run->wait0 = comm->wait_s, run->progress0 = comm->progress_s;
    memcpy(run->before, comm->bytes, sizeof run->before);
    memcpy(run->link_before, comm->link_bytes, sizeof run->link_before);
    memcpy(m->comm_calls, comm->calls, sizeof m->comm_calls); /* the counts before; measure_queued subtracts */

    /* the captured step (step_graph.h): the passes are one graph per token set, which
     * a capture holds and a replay skips the host's side of; the update is another,
     * launched by step_queue (the step before may still be queued: running ahead) */
    zt_step_graph *sg = &t->sg;
    const int set = run->slot; /* the token set of its slot in the ring */
    const zt_graph_phase ph = zt_step_graph_passes_phase(sg, set);
    /* fp16: backward runs on loss * scale; the step divides it back out */
    double scale = pl->ls.on ? t->scaler.scale : 1.0;
    double loss_sum = 0.0;
    /* the global mean loss divides by the targets that count: all B*A*W*T, or
     * under a loss mask the completion tokens of the step's G samples, which every
     * rank counts alike from the shared sample order (no collective); a step of
     * prompts only has no loss and no gradient */
    double counted = t->tokens_per_step;
    if (r->tokens.loss_mask) {
        long G = (long)B * A * t->W, n = zt_batcher_count_targets(&r->batcher, s * G, G);
        counted = n > 0 ? (double)n : 1.0;
    }
    int rc = ph == ZT_GRAPH_CAPTURE ? zt_step_graph_begin(sg, err) : ZT_OK;
    if (rc)
        return step_failed(t, rc, err);
    /* fast mode: the count goes to the device, where the backward forms its gradient
     * scale with the loss scale the device holds when it runs (the host's scale may
     * be a step behind when it runs ahead); a captured step uploads it from the
     * token set's own memory, refilled here before each launch */
    double *count = ph != ZT_GRAPH_OFF ? sg->count + set : &run->counted;
    *count = counted;
    if (ph != ZT_GRAPH_REPLAY) {
        zt_engine_zero_grads(r->eng);
        zt_engine_step_count(r->eng, count);
    }
    for (int micro = 0; micro < A; micro++) {
        long k0 = zt_sample_index(s, micro, comm->rank, B, A, t->W);
        /* a captured step reads each micro-batch's ids from its own fixed buffers */
        const int graphed = ph != ZT_GRAPH_OFF;
        int *inputs = graphed ? sg->inputs[set * A + micro] : r->inputs;
        int *targets = graphed ? sg->targets[set * A + micro] : r->targets;
        int hd = zt_prof_begin("data", "phase", ZT_PROF_COMPUTE);
        zt_batcher_fill(&r->batcher, k0, B, inputs, targets);
        zt_prof_end(hd, 0.0, 0.0);
        if (ph == ZT_GRAPH_REPLAY) /* the launch below runs the micro-batch */
            continue;
        /* the last micro-batch's backward may start the step's reduction */
        zt_engine_sync_backward(r->eng, micro == A - 1);
        double ls = 0.0;
        rc = t->hooks->before_forward ? t->hooks->before_forward(t->hooks->ctx, s + 1, micro, comm->rank, err)
                                      : ZT_OK;
        if (t->a->lora) /* adapter dropout's mask: keyed on the step and the global sample */
            zt_model_set_lora_batch(&r->model, t->a->seed, s, k0);
        if (micro > 0) /* the weights are micro-batch 0's: so are its fp32 norm weights */
            zt_model_keep_norm_weights(&r->model);
        if (rc == ZT_OK)
            rc = zt_model_forward_backward(&r->model, inputs, targets, zt_grad_scale(counted, scale), &ls,
                                           err);
        if (rc)
            return step_failed(t, rc, err);
        loss_sum += ls;
    }
    zt_engine_sync_backward(r->eng, 0);
    if (ph == ZT_GRAPH_WARMUP || ph == ZT_GRAPH_CAPTURE) /* the last reduction ends in the passes' graph */
        zt_engine_drain(r->eng);
    if ((rc = zt_step_graph_run_passes(sg, set, ph, err)))
        return step_failed(t, rc, err);
    run->ph = zt_step_graph_phase(sg);
    run->loss_sum = loss_sum;
    run->counted = counted;
    m->loss_scale = pl->ls.on ? scale : 0.0;
    return ZT_OK;
}

/* Step s's second half: its update queued (a graphed step: its inputs uploaded, the
 * captured update launched), its numbers' download queued. */
static int step_queue(trainer *t, long s, step_run *run, zt_err *err)
{
    const zt_train_args *a = t->a;
    zt_comm *comm = t->comm;
    run_state *r = &t->r;
    zt_step_metrics *m = &run->m;
    m->lr = step_lr(t);
    if (t->hooks->before_update)
        t->hooks->before_update(t->hooks->ctx, s + 1, comm->rank, r->eng);
    comm->phase = "optimizer";
    comm->unit = -1;
    int ho = zt_prof_begin("optimizer", "phase", ZT_PROF_COMPUTE);
    double scale = a->plan.ls.on ? m->loss_scale : 1.0;
    int rc = ZT_OK;
    if (run->ph == ZT_GRAPH_OFF) {
        zt_engine_step_queue(r->eng, run->slot, &a->adam, m->lr, a->max_grad_norm, 1.0 / scale);
    } else {
        rc = zt_engine_step_inputs(r->eng, &a->adam, m->lr, err);
        if (rc == ZT_OK && run->ph == ZT_GRAPH_CAPTURE)
            rc = zt_step_graph_begin(&t->sg, err);
        if (rc == ZT_OK && run->ph != ZT_GRAPH_REPLAY) /* the warm-up runs them, the capture holds them */
            zt_engine_step_launch(r->eng, &a->adam, m->lr, a->max_grad_norm, 1.0 / scale);
        if (rc == ZT_OK && (rc = zt_step_graph_run(&t->sg, run->ph, err)) == ZT_OK)
            zt_engine_step_readback(r->eng, run->slot);
    }
    zt_prof_end(ho, 0.0, 0.0);
    if (rc)
        return step_failed(t, rc, err);
    measure_queued(t, run);
    return ZT_OK;
}

/* A queued step's numbers: the skip, the norm, the loss (fast mode: read back with
 * them), the loss scale's update. */
static void step_finish(trainer *t, step_run *run, int wait)
{
    const zt_plan *pl = &t->a->plan;
    zt_comm *comm = t->comm;
    run_state *r = &t->r;
    zt_step_metrics *m = &run->m;
    m->skipped = zt_engine_step_finish(r->eng, run->slot, wait, &m->grad_norm);
    if (r->model.loss_sink) /* read back by the step with its other numbers */
        run->loss_sum = zt_engine_step_loss_sum(r->eng);
    if (t->device_lr) /* the device's schedule chose it: the host's step_lr, counted there */
        zt_engine_step_lr(r->eng, &m->lr);
    double used;
    if (t->device_scaler && zt_engine_step_loss_scale(r->eng, &t->scaler, &used)) /* updated by the verdict */
        m->loss_scale = used;
    else if (pl->ls.on)
        zt_loss_scaler_update(&t->scaler, m->skipped);
    comm->phase = "loss";
    m->loss = zt_comm_sum_double(comm, run->loss_sum, ZT_SCOPE_WORLD) / run->counted;
    measure_finished(t, run);
}

/* OUTPUT_DIR/checkpoint-N every save_steps (save_strategy steps or unset), or
 * after each step that ends an epoch (save_strategy epoch), and after the last
 * step of the schedule whenever checkpoints are saved at all, as Hugging Face's
 * Trainer does (a run can then be continued or inspected from its end, not only
 * from the last multiple of save_steps).  The final save writes OUTPUT_DIR itself
 * as well. */
static int checkpoint_due(const trainer *t, long step)
{
    const zt_train_args *a = t->a;
    if (!a->output_dir || a->save_strategy == ZT_STRATEGY_NO)
        return 0;
    if (a->save_strategy == ZT_STRATEGY_EPOCH)
        return zt_train_epoch_ends(t, step) || step == a->max_steps;
    return a->save_steps > 0 && (step % a->save_steps == 0 || step == a->max_steps);
}

/* A /proc/self/status field in KiB (0 where there is none). */
static long proc_status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) {
            kib = atol(line + n);
            break;
        }
    if (f)
        fclose(f);
    return kib;
}

/* Restart VmHWM from the current resident set (Linux: "5" to clear_refs), so
 * the peak of what follows can be read. */
static void reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* What trainer_state.json carries for Trainer's TrainerState beside ztrain's state:
 * the epoch, the intervals, and the selection, its best checkpoint first brought
 * up to this save (Trainer records the best step's checkpoint once it exists). */
static void trainer_state_fields(trainer *t, long step, zt_ckpt_state *cs)
{
    const zt_train_args *a = t->a;
    zt_selection_on_save(&t->sel, a->output_dir, step);
    cs->epoch_fraction = zt_train_epoch_at(t, step);
    cs->logging_steps = t->log_every;
    cs->eval_steps = a->eval_steps > 0 ? a->eval_steps : t->log_every;
    cs->save_steps = a->save_steps;
    cs->train_batch_size = a->batch_size;
    cs->num_train_epochs = a->num_train_epochs > 0 ? ceil(a->num_train_epochs) : ceil(zt_train_epoch_at(t, a->max_steps));
    cs->sel = &t->sel;
}

/* Collective: OUTPUT_DIR/checkpoint-STEP with everything a resume needs
 * (checkpoint.h): written aside, then renamed into place. */
static int save_checkpoint(trainer *t, long step, zt_err *err)
{
    const zt_train_args *a = t->a;
    run_state *r = &t->r;
    t->comm->phase = "checkpoint";
    zt_ckpt_state cs = {.step = step, .optimizer_steps = zt_engine_optimizer_steps(r->eng), .scaler = t->scaler,
                        .hp = t->hp, .plan = zt_ckpt_plan_of(&a->plan, t->W)};
    cs.samples_seen = step * t->hp.global_batch;
    cs.epoch = r->batcher.nwin ? cs.samples_seen / (long)r->batcher.nwin : 0;
    snprintf(cs.command_line, sizeof cs.command_line, "%s", a->command_line ? a->command_line : "");
    memcpy(cs.run_id, t->run_id, sizeof cs.run_id);
    trainer_state_fields(t, step, &cs);
    zt_ckpt_save_args sa = {a->output_dir, &r->cfg, &a->plan, !a->sharded_only, a->plan.prec.save,
                            a->max_shard_bytes, a->save_total_limit, a->model_dir, a->tokenizer_dir,
                            t->sel.best_checkpoint[0] ? t->sel.best_step : 0, a->lora};
    /* LoRA: the base's digest, read once at the first save (rank 0 writes it) */
    int rc = a->lora && !t->lora_id.on && t->rank0 ? zt_train_lora_identity(t, err) : ZT_OK;
    if ((rc = zt_comm_agree(t->comm, rc, err)))
        return rc;
    cs.lora = t->lora_id;
    char where[4096];
    zt_ckpt_save_report rep = {0};
    long rss0 = proc_status_kib("VmRSS:");
    reset_peak_rss();
    rc = zt_ckpt_save(&sa, r->eng, &cs, where, &rep, err);
    if (rc == ZT_OK) { /* what a stop message can then say was saved */
        t->saved_first = t->saved_n++ ? t->saved_first : step;
        t->saved_last = step;
    }
    long peak = proc_status_kib("VmHWM:");
    if (rc == ZT_OK && t->talk) {
        const double MB = 1e6;
        printf("%scheckpoint saved to %s (%.2f s; %.1f MB: rank 0 wrote %.1f MB", a->progress ? "\n" : "", where,
               rep.seconds, (double)rep.bytes_total / MB, (double)rep.bytes_rank0 / MB);
        if (t->W > 1)
            printf(", each other rank at most %.1f MB", (double)rep.bytes_other_max / MB);
        if (rss0 > 0 && peak > 0)
            printf("; rank 0's peak memory during the save: +%.1f MiB", (double)(peak - rss0) / 1024.0);
        printf(")\n");
        fflush(stdout);
    }
    return rc;
}

/* With PEFT, Trainer loads the best checkpoint's adapters and then saves them
 * unchanged.  That checkpoint's adapter files were written by zt_lora_save from
 * those very adapters, with the same settings and base, so copying the pair (one
 * file set: both change or neither) is that save bit for bit, without loading the
 * adapters back into the engine. */
static int copy_best_adapters(const char *ckpt, const char *out, zt_err *err)
{
    static const char *const names[] = {"adapter_model.safetensors", "adapter_config.json"};
    zt_fileset set;
    int rc = zt_mkdirs(out, err);
    if (rc)
        return rc;
    zt_fileset_begin(&set, out);
    for (int i = 0; i < 2 && rc == ZT_OK; i++) {
        char src[4400], stage[4400];
        snprintf(src, sizeof src, "%s/%s", ckpt, names[i]);
        if ((rc = zt_fileset_stage(&set, names[i], stage, sizeof stage, err)) == ZT_OK)
            rc = zt_copy_file(src, stage, ~0ull, "an adapter file", err);
    }
    if (rc == ZT_OK)
        return zt_fileset_commit(&set, err);
    zt_fileset_abort(&set, err);
    return rc;
}

/* Collective: the final model into OUTPUT_DIR: the weights as they stand (with
 * --use_peft the adapters alone, in PEFT's format), or with --load_best_model_at_end
 * the best checkpoint's (merged from its shards, as merge-weights writes them, or
 * its adapter files), as Trainer loads the best model before its save. */
static int save_final_model(trainer *t, zt_err *err)
{
    const zt_train_args *a = t->a;
    run_state *r = &t->r;
    const zt_selection *s = &t->sel;
    int best = a->select.load_best_model_at_end && s->best_checkpoint[0] && s->best_step != t->nsteps;
    if (!best && a->lora)
        return zt_comm_agree(t->comm, zt_lora_save(a->output_dir, &r->lay, a->lora, r->eng, a->model_dir, t->rank0,
                                                   err), err);
    if (!best)
        return zt_comm_agree(t->comm, zt_hf_save(a->output_dir, &r->cfg, &r->lay, r->eng, a->plan.prec.save,
                                                 a->max_shard_bytes, NULL, t->rank0, err), err);
    int rc = !t->rank0 ? ZT_OK
             : a->lora ? copy_best_adapters(s->best_checkpoint, a->output_dir, err)
                       : zt_ckpt_merge(s->best_checkpoint, a->output_dir, &a->plan.prec.save, a->max_shard_bytes, err);
    if ((rc = zt_comm_agree(t->comm, rc, err)))
        return rc;
    if (t->talk)
        printf("best %s (eval_loss %.4f at step %ld) loaded from %s\n", a->lora ? "adapters" : "model",
               s->best_metric, s->best_step, s->best_checkpoint);
    return ZT_OK;
}

/* The run's summary, the final save and the closing lines. */
static int train_finish(trainer *t, zt_train_result *res, zt_err *err)
{
    const zt_train_args *a = t->a;
    run_state *r = &t->r;
    long steps = t->nsteps - t->first_step;
    double elapsed = zt_train_now() - t->t_start;
    if (res) {
        res->final_loss = t->last.loss;
        res->steps = steps;
        res->tokens_per_sec = elapsed > 0 ? t->tokens_per_step * (double)steps / elapsed / t->W : 0.0;
        res->state = zt_engine_state_bytes(r->eng);
        res->activation_bytes = r->model.act_bytes;
        memcpy(res->step_bytes, t->last.comm_bytes, sizeof res->step_bytes);
        memcpy(res->step_calls, t->last.comm_calls, sizeof res->step_calls);
        res->skipped_steps = t->scaler.skipped;
        res->loss_scale = a->plan.ls.on ? t->scaler.scale : 0.0;
        zt_engine_stats es = zt_engine_get_stats(r->eng);
        res->prefetch_used = es.prefetch_used;
        res->prefetch_dropped = es.prefetch_dropped;
        res->reduce_overlapped = es.reduce_overlapped;
        res->pieces_overlapped = es.pieces_overlapped;
    }
    /* the final model: rank 0 writes, every rank learns whether it did */
    int rc;
    if (a->output_dir && (rc = save_final_model(t, err)))
        return rc;
    /* and what the source model carried: config keys, generation config, tokenizer (not
     * beside LoRA's adapters yet: its config.json would describe a model not there) */
    if (a->output_dir && !a->lora &&
        (rc = zt_comm_agree(t->comm, t->rank0 ? zt_hf_carry_model(a->output_dir, a->model_dir, a->tokenizer_dir, err)
                                              : ZT_OK, err)))
        return rc;
    if (t->talk) {
        /* "trained" only when a step changed the weights; skipped steps are counted */
        if (t->applied == 0 && t->skipped > 0)
            printf("ran %ld steps, none applied (%ld skipped on %s)", steps, t->skipped,
                   a->plan.ls.on ? "fp16 overflow" : "an inf or NaN");
        else if (t->skipped > 0)
            printf("trained %ld steps (%ld applied, %ld skipped on %s)", steps, t->applied, t->skipped,
                   a->plan.ls.on ? "fp16 overflow" : "an inf or NaN");
        else
            printf("trained %ld step%s", steps, steps == 1 ? "" : "s");
        printf(" in %.1f s (%.0f tokens/s per device); final loss %.4f\n", elapsed,
               t->tokens_per_step * (double)steps / elapsed / t->W, t->last.loss);
        if (a->output_dir)
            printf("model saved to %s\n", a->output_dir);
    }
    return ZT_OK;
}

static void train_close(trainer *t)
{
    if (t->have_log)
        close(t->log_fd);
    if (t->have_tb)
        zt_tfevents_close(&t->tb);
    if (t->have_ev)
        zt_evaluator_free(&t->ev);
    zt_step_graph_free(&t->sg);
    zt_selection_free(&t->sel);
    if (t->have_run)
        zt_train_run_free(&t->r);
    if (t->comm == &t->local) /* its staging buffers, if a device gave it some */
        zt_comm_free(&t->local);
}

/* After step `step`: has a SIGTERM or SIGINT reached any rank?  A max over the
 * ranks, so every rank stops after the same step even when the signal reached
 * only one (a launcher that signals the ranks one by one, a user's kill). */
static int stop_signal(const trainer *t)
{
    return zt_comm_max_int(t->comm, zt_preempt_requested());
}

/* The clean stop: a checkpoint of the step just finished (unless one was just
 * written), where it is, and the status main turns into exit 0 (SIGTERM, and
 * SIGUSR2, the stop request ztrain launch sends through mpirun) or 130 (SIGINT). */
static int stop_for_signal(trainer *t, long step, int sig, int saved, zt_err *err)
{
    const zt_train_args *a = t->a;
    char dir[4096] = "";
    int rc = ZT_OK;
    if (a->output_dir && !saved)
        rc = save_checkpoint(t, step, err);
    if (rc)
        return rc;
    if (a->output_dir)
        snprintf(dir, sizeof dir, "%s/checkpoint-%ld", a->output_dir, step);
    if (t->rank0) {
        printf("%sstopped by %s after step %ld of %ld: ", a->progress ? "\n" : "",
               sig == SIGINT ? "SIGINT" : sig == SIGUSR2 ? "SIGUSR2 (a stop request)" : "SIGTERM", step, a->max_steps);
        if (a->output_dir)
            printf("checkpoint saved to %s; continue with --resume_from_checkpoint latest\n", dir);
        else
            printf("nothing saved (no --output_dir)\n");
        fflush(stdout);
    }
    return sig == SIGINT ? ZT_EINTERRUPT : ZT_OK;
}

/* Running ahead (docs/gpu.md): may step n's (1-based) numbers be read after step
 * n+1's forward and backward are queued?  Only where the engine's step does not
 * wait by itself (fast mode), and only where nothing the host decides after step n
 * needs the state after step n, or changes what step n+1 computes:
 *   - an evaluation or a checkpoint after step n reads the state of step n;
 *   - the last step ends the run.
 * fp16's loss scale for step n+1's backward depends on step n's overflow, but the
 * device decides it (the verdict) and step n+1's backward reads it there
 * (zt_step_grad_scale), so fp16 runs ahead too; its floor stop, read from step n,
 * comes with step n+1's passes queued and its update not, and saves nothing, as
 * the synchronous run's does.
 * A graphed run (--cuda_graphs) runs ahead too: its passes and its update are
 * separate graphs, and a step's passes read another set of token buffers than any
 * step still in flight (step_graph.h).
 * What step n decides still comes out as the synchronous run's: its record and
 * progress line (written when it is read, in order), the non-finite stop and the
 * skip count (the schedule's step count, kept on the device: zt_engine_set_schedule),
 * and a stop request (answered before step n+1 begins: every step queued is read,
 * and the checkpoint holds the last). */
static int may_run_ahead(const trainer *t, long n)
{
    return zt_engine_runs_ahead(t->r.eng) && n < t->nsteps && !zt_train_eval_due(t, n) && !checkpoint_due(t, n);
}

/* After step n ran ahead with `queued` steps unread: are they read after the next
 * step's passes?  Lazy (fast mode): at the logged steps
 * (--logging_steps), and when `depth` steps are in flight, the most the engine's
 * readback slots and the captured step's token sets hold; otherwise at every step. */
static int read_due(const trainer *t, long n, int queued)
{
    return !t->lazy || n % t->log_every == 0 || queued >= t->depth;
}

/* A queued step's end: its numbers back (the first of a batch waits for them all),
 * its record and progress line, the checks that may stop the run.  current: the
 * loop's own step, whose profiled window closes here (a step that ran ahead closes
 * its window when queued). */
static int step_tail(trainer *t, step_run *run, int current, int wait, zt_err *err)
{
    long step_now = t->comm->step;
    t->comm->step = run->m.step; /* the flight recorder names the step these collectives finish */
    step_finish(t, run, wait);
    int hl = zt_prof_begin("log", "phase", ZT_PROF_COMPUTE);
    int rc = zt_train_log_step(t, &run->m, err);
    zt_prof_end(hl, 0.0, 0.0);
    t->comm->step = step_now;
    if (rc)
        return rc;
    if (current && (rc = zt_prof_step_end(err))) /* waits for the device once, in a profiled step */
        return rc;
    if ((rc = check_finite(t, &run->m, err)) || (rc = check_overflow(t, &run->m, err)))
        return rc;
    return ZT_OK;
}

/* The one ring of steps: step s (0-based) has slot (s - first) % size, and the
 * slot is everything of the step that must outlive its queue: its record (runs),
 * its token set in the captured passes and its readback slot in the engine (both
 * the slot's index), so the three cannot disagree.  Steps lo .. lo+n-1 are queued
 * and not read; size is one more than the steps that may be in flight (t->depth),
 * for the next step's passes, which fill their slot while those are unread. */
typedef struct step_ring {
    step_run runs[ZT_STEP_SLOTS];
    long first, lo;
    int n, size;
} step_ring;

static step_run *ring_take(step_ring *f, long s)
{
    step_run *run = &f->runs[(s - f->first) % f->size];
    run->slot = (int)((s - f->first) % f->size);
    return run;
}

/* Read every step in flight, oldest first: one wait for them all (the first
 * finish), then each one's record, progress line and checks in order, as the
 * synchronous run takes them.  A check that stops the run stops the reading there:
 * the later steps' records are never written, and nothing is saved (a stop on an inf
 * or NaN, or at fp16's floor, saves nothing), so what the device did after the
 * halting step is never seen.  current: the loop's own step (-1: none among them). */
static int read_in_flight(trainer *t, step_ring *f, long current, zt_err *err)
{
    int rc = ZT_OK, wait = 1;
    t->batch_n = f->n;
    t->batch_left = 0;
    while (rc == ZT_OK && f->n > 0) {
        long s = f->lo++;
        f->n--;
        rc = step_tail(t, &f->runs[(s - f->first) % f->size], s == current, wait, err);
        wait = 0;
    }
    return rc;
}

/* The step loop.  Each step s, in its slot of the ring:
 *   stop      a stop request seen after the steps in flight: read them, save, stop;
 *   passes    train_step: A micro-batches of forward and backward queued;
 *   read      the steps that ran ahead, now that this step's passes are queued;
 *   update    step_queue: the reduction, the verdict, AdamW, the readback queued;
 *   ahead     may_run_ahead: leave it unread and go on to the next step's passes;
 *   tail      else read it (and any before it), then evaluate, save, answer a stop. */
int zt_train(const zt_train_args *a, zt_train_result *res, zt_err *err)
{
    trainer t;
    zt_preempt_install(); /* a first SIGTERM/SIGINT is a request, answered at a step boundary */
    int rc = zt_train_setup(&t, a, err), stopped = 0, due = 0;
    step_ring *f = zt_alloc(ZT_MEM_OTHER, sizeof *f); /* nine step_runs: kept off the stack */
    if (f)
        f->first = f->lo = rc == ZT_OK ? t.first_step : 0, f->n = 0, f->size = t.ring_size;
    else if (rc == ZT_OK)
        rc = zt_fail(err, ZT_EFAIL, "out of memory for the steps in flight");
    for (long s = t.first_step; rc == ZT_OK && s < t.nsteps; s++) {
        step_run *run = ring_take(f, s);
        if (f->n) { /* stop: a request after the steps in flight, before this one begins */
            int sig = stop_signal(&t);
            if (sig) {
                long last = f->lo + f->n;
                if ((rc = read_in_flight(&t, f, -1, err)) == ZT_OK)
                    rc = stop_for_signal(&t, last, sig, 0, err);
                stopped = 1;
                break;
            }
        }
        zt_prof_step_begin(s + 1); /* --profile: a no-op outside --profile_steps */
        rc = train_step(&t, s, run, err); /* passes */
        if (due && f->n) { /* read: the steps before, now that this step's passes are queued */
            zt_err aerr = {0};
            int arc = read_in_flight(&t, f, -1, rc ? &aerr : err); /* a failed pass keeps its own error */
            rc = rc ? rc : arc;
        }
        due = 0;
        if (rc)
            break;
        if ((rc = step_queue(&t, s, run, err))) /* update */
            break;
        if (f->n++ == 0)
            f->lo = s;
        if (may_run_ahead(&t, s + 1)) { /* ahead */
            due = read_due(&t, s + 1, f->n);
            if ((rc = zt_prof_step_end(err)))
                break;
            continue;
        }
        if ((rc = read_in_flight(&t, f, s, err))) /* tail */
            break;
        if (zt_train_eval_due(&t, s + 1) && (rc = zt_train_evaluate(&t, s + 1, err)))
            break;
        int saved = checkpoint_due(&t, s + 1);
        if (saved)
            rc = save_checkpoint(&t, s + 1, err);
        int sig = rc == ZT_OK && s + 1 < t.nsteps ? stop_signal(&t) : 0;
        if (sig) {
            rc = stop_for_signal(&t, s + 1, sig, saved, err);
            stopped = 1;
            break;
        }
    }
    if (rc == ZT_OK && !stopped)
        rc = train_finish(&t, res, err);
    train_close(&t);
    zt_free(ZT_MEM_OTHER, f, sizeof *f);
    zt_preempt_restore();
    return rc;
}
