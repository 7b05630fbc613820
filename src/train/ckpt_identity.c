/* ckpt_identity.c — the identity each checkpoint file carries (see ckpt_identity.h). */
#include "ckpt_identity.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "../core/mem.h"
#include "checkpoint.h"

int zt_ckpt_new_run_id(zt_comm *comm, char id[17], zt_err *err)
{
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return zt_fail(err, ZT_EFAIL, "cannot draw a run id: %s", strerror(errno));
    for (int i = 0; i < 8; i++)
        snprintf(id + 2 * i, 3, "%02x", rnd[i]);
    if (comm->world == 1)
        return ZT_OK;
    /* rank 0's id on every rank */
    char *all = zt_alloc(ZT_MEM_OTHER, 17 * (size_t)comm->world);
    if (!all)
        return zt_fail(err, ZT_EFAIL, "out of memory sharing the run id");
    zt_comm_allgather_bytes(comm, all, id, 17);
    memcpy(id, all, 17);
    zt_free(ZT_MEM_OTHER, all, 17 * (size_t)comm->world);
    return ZT_OK;
}

void zt_ckpt_plan_id(const zt_ckpt_plan *p, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s %s stage %d, world %d, group %d, %s, %s master%s", p->face, p->strategy, p->stage,
             p->world, p->group_size, zt_wrap_policy_name(p->wrap), zt_dtype_name(p->master),
             p->compensated ? " + Kahan" : "");
}

void zt_ckpt_shard_meta_fill(zt_ckpt_shard_meta *m, const zt_ckpt_state *st, int rank, int group_size)
{
    snprintf(m->step, sizeof m->step, "%ld", st->step);
    snprintf(m->rank, sizeof m->rank, "%d", rank);
    snprintf(m->group, sizeof m->group, "%d", group_size);
    snprintf(m->world, sizeof m->world, "%d", st->plan.world);
    zt_ckpt_plan_id(&st->plan, m->plan, sizeof m->plan);
    const char *kv[] = {"format", "ztrain-zero", "run_id", st->run_id, "step", m->step, "rank", m->rank,
                        "group_size", m->group, "world_size", m->world, "plan", m->plan, NULL};
    memcpy(m->kv, kv, sizeof kv);
}

int zt_ckpt_check_shard(const zt_st_file *f, int rank, int group_size, const zt_ckpt_state *st, zt_err *err)
{
    const char *path = zt_st_path(f), *fmt = zt_st_metadata(f, "format");
    if (!fmt || strcmp(fmt, "ztrain-zero"))
        return zt_fail(err, ZT_EINPUT, "%s: __metadata__.format is %s%s%s, expected \"ztrain-zero\" (not a ztrain "
                       "checkpoint shard)", path, fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "");
    const char *run = zt_st_metadata(f, "run_id");
    if (!st->run_id[0] && !run)
        return ZT_OK; /* written before identities: the manifest alone guards it (the loader warns) */
    if (!st->run_id[0] || !run)
        return zt_fail(err, ZT_EINPUT, "%s: %s has a run_id and %s has none: files of different checkpoints mixed",
                       path, run ? "this shard" : "trainer_state.json", run ? "trainer_state.json" : "this shard");
    zt_ckpt_shard_meta want;
    zt_ckpt_shard_meta_fill(&want, st, rank, group_size);
    /* the fields in the order that best says what went wrong */
    static const char *const keys[] = {"run_id", "rank", "group_size", "world_size", "step", "plan"};
    static const char *const why[] = {"a file of another run or another save", "another rank's file",
                                      "a file of another cut", "a file saved under another world size",
                                      "a file of another step", "a file saved under another plan"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *have = zt_st_metadata(f, keys[k]), *expect = NULL;
        for (int i = 0; want.kv[i]; i += 2)
            if (!strcmp(want.kv[i], keys[k]))
                expect = want.kv[i + 1];
        if (!have || strcmp(have, expect))
            return zt_fail(err, ZT_EINPUT, "%s: __metadata__.%s is %s%s%s, but this checkpoint expects \"%s\" (from "
                           "trainer_state.json and the file name): %s", path, keys[k], have ? "\"" : "",
                           have ? have : "missing", have ? "\"" : "", expect, why[k]);
    }
    return ZT_OK;
}

void zt_ckpt_model_meta_fill(zt_ckpt_model_meta *m, const zt_ckpt_state *st)
{
    snprintf(m->step, sizeof m->step, "%ld", st->step);
    const char *kv[] = {"format", "pt", "run_id", st->run_id, "step", m->step, NULL};
    memcpy(m->kv, kv, sizeof kv);
}

int zt_ckpt_check_model(const char *dir, const zt_ckpt_state *st, zt_err *err)
{
    char single[4400], index[4400];
    struct stat sb;
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    if (!st->run_id[0] || (stat(single, &sb) != 0 && stat(index, &sb) != 0))
        return ZT_OK; /* a checkpoint from before identities, or one without a model */
    zt_weights *w = NULL;
    int rc = zt_weights_open(dir, &w, err);
    zt_ckpt_model_meta want;
    zt_ckpt_model_meta_fill(&want, st);
    for (int i = 0; rc == ZT_OK && i < zt_weights_nfiles(w); i++) {
        const zt_st_file *f = zt_weights_file(w, i);
        const char *run = zt_st_metadata(f, "run_id"), *step = zt_st_metadata(f, "step");
        if (!run && !step) {
            fprintf(stderr, "ztrain: warning: %s carries no run_id and step (written before a checkpoint's model "
                            "recorded them): only the manifest guards it\n", zt_st_path(f));
            continue;
        }
        if (!run || strcmp(run, st->run_id))
            rc = zt_fail(err, ZT_EINPUT, "%s: __metadata__.run_id is %s%s%s, but trainer_state.json says \"%s\": "
                         "the model of another run", zt_st_path(f), run ? "\"" : "", run ? run : "missing",
                         run ? "\"" : "", st->run_id);
        else if (!step || strcmp(step, want.step))
            rc = zt_fail(err, ZT_EINPUT, "%s: __metadata__.step is %s%s%s, but trainer_state.json says %ld: the "
                         "model of another step", zt_st_path(f), step ? "\"" : "", step ? step : "missing",
                         step ? "\"" : "", st->step);
    }
    if (w)
        zt_weights_close(w);
    return rc;
}

int zt_ckpt_check_model_dir(const char *dir, zt_err *err)
{
    char path[4400];
    struct stat sb;
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    if (stat(path, &sb) != 0)
        return ZT_OK;
    zt_ckpt_state st;
    int rc = zt_ckpt_read_state(dir, &st, err);
    return rc ? rc : zt_ckpt_check_model(dir, &st, err);
}
