/* emu_train.h — the training run that the fast step's tests share (test_async_step.c,
 * test_step_graph.c): the gqa_tied fixture on the emulated device, block 16, batch 2,
 * lr 1e-3, weight decay 0.1, seed 0, quiet, a peak of 1 GFLOP/s.  What varies between
 * their runs is an emu_run; emu_train_args resolves its plan and fills the trainer's
 * arguments, to which the test adds its callbacks before calling zt_train. */
#ifndef ZT_TEST_EMU_TRAIN_H
#define ZT_TEST_EMU_TRAIN_H

#include "../src/plan/plan.h"
#include "../src/train/run_args.h"
#include "../src/train/trainer.h"
#include "test.h"

typedef struct emu_run {
    const char *kernels;  /* exact | fast */
    const char *graphs;   /* --cuda_graphs; NULL: auto */
    const char *mixed;    /* --mixed_precision */
    int fsdp;             /* FSDP's face (FULL_SHARD) instead of plain data parallel */
    int accum;            /* micro-batches a step */
    long steps;
    long warmup;          /* > 0: a linear schedule with this warm-up (a new lr every step) */
    int checkpointing;    /* gradient checkpointing */
    long save_steps;
    int stage;            /* > 0: on `world` ranks with the emulated NCCL: 1 DeepSpeed ZeRO-1, 3 FSDP FULL_SHARD */
    int world;            /* the ranks the plan is resolved for (0: one) */
    int ls_power, ls_window, ls_hysteresis; /* fp16's loss scaler (0: the defaults) */
    const char *loss_mask; /* a loss mask's .npy (NULL: none) */
} emu_run;

/* The plan and the trainer's arguments of run r; a failure is a failed check. */
static void emu_train_args(const emu_run *r, zt_plan *plan, zt_train_args *a)
{
    zt_err err = {0};
    zt_plan_request req;
    zt_plan_request_init(&req);
    req.device = "emu";
    req.kernels = r->kernels;
    req.cuda_graphs = r->graphs;
    req.mixed_precision = r->mixed;
    if (r->fsdp || r->stage == 3)
        req.face = ZT_FACE_FSDP;
    if (r->stage == 1) {
        req.face = ZT_FACE_DEEPSPEED;
        req.zero_stage = 1;
    }
    if (r->stage > 0)
        req.comm_backend = "nccl";
    if (r->ls_power)
        req.ls_initial_scale_power = r->ls_power;
    if (r->ls_window)
        req.ls_window = r->ls_window;
    if (r->ls_hysteresis)
        req.ls_hysteresis = r->ls_hysteresis;
    ZT_CHECK_MSG(zt_plan_resolve(&req, r->stage > 0 && r->world > 0 ? r->world : 1, plan, &err) == ZT_OK, "%s",
                 err.msg);
    zt_settings st;
    zt_settings_defaults(&st);
    st.shuffle = 0; /* the reference reads the windows in order (the default shuffles) */
    st.block_size = 16;
    st.batch = 2;
    st.accum = r->accum;
    st.max_steps = r->steps;
    st.lr = 1e-3;
    st.weight_decay = 0.1;
    st.seed = 0;
    st.checkpointing = r->checkpointing;
    if (r->warmup) {
        st.schedule = "linear";
        st.warmup_steps = r->warmup;
    }
    st.save_steps = r->save_steps;
    ZT_CHECK_MSG(zt_train_args_from_settings(&st, plan, a, &err) == ZT_OK, "%s", err.msg);
    a->model_dir = "tests/fixtures/gqa_tied";
    a->data_path = "tests/fixtures/gqa_tied/tokens.npy";
    a->loss_mask_path = r->loss_mask;
    a->quiet = 1;
    a->peak_gflops = 1.0;
}

#endif
