/* ckpt_identity.c — the identity each checkpoint file carries (see ckpt_identity.h). */
#include "ckpt_identity.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "../core/mem.h"

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
