/* checkpoint.c — sharded run state (see checkpoint.h). */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../core/mem.h"
#include "../io/hf_model.h"
#include "../io/safetensors.h"

enum { ROLE_MASTER, ROLE_M, ROLE_V, ROLE_COMP, NROLES };
static const char *role_names[NROLES] = {"master", "m", "v", "comp"};

static void *role_buffer(const zt_unit_state *us, int role)
{
    return role == ROLE_MASTER ? us->master : role == ROLE_M ? us->m : role == ROLE_V ? us->v : us->comp;
}

static void shard_path(char *buf, size_t cap, const char *dir, int rank, int world)
{
    snprintf(buf, cap, "%s/zero/rank-%d-of-%d.safetensors", dir, rank, world);
}

int zt_ckpt_save(const char *dir, zt_engine *eng, const zt_plan *plan, const zt_ckpt_state *st,
                 zt_err *err)
{
    const zt_comm *c = eng->comm;
    const zt_layout *lay = eng->lay;
    char path[4200], zdir[4200];
    snprintf(zdir, sizeof zdir, "%s/zero", dir);
    int rc = zt_mkdirs(zdir, err);
    int n = 0, cap = lay->nunits * NROLES;
    zt_st_out *outs = zt_alloc(ZT_MEM_OTHER, (size_t)cap * sizeof *outs);
    char (*names)[48] = zt_alloc(ZT_MEM_OTHER, (size_t)cap * sizeof *names);
    if (rc == ZT_OK && (!outs || !names))
        rc = zt_fail(err, ZT_EFAIL, "out of memory saving %s", dir);
    for (int u = 0; rc == ZT_OK && u < lay->nunits; u++)
        for (int role = 0; role < NROLES; role++) {
            const zt_unit_state *us = &eng->units[u];
            if (!role_buffer(us, role))
                continue;
            snprintf(names[n], sizeof names[n], "unit.%d.%s", u, role_names[role]);
            outs[n] = (zt_st_out){.name = names[n], .dtype = eng->prec.master, .ndim = 1,
                                  .data = role_buffer(us, role)};
            outs[n].shape[0] = (int64_t)us->shard_numel;
            n++;
        }
    if (rc == ZT_OK) {
        shard_path(path, sizeof path, dir, c->rank, c->world);
        rc = zt_st_write(path, outs, n, NULL, err);
    }
    zt_free(ZT_MEM_OTHER, outs, (size_t)cap * sizeof *outs);
    zt_free(ZT_MEM_OTHER, names, (size_t)cap * sizeof *names);
    /* trainer_state.json marks the checkpoint complete: only after every shard */
    int worst = zt_comm_max_int(eng->comm, rc);
    if (worst != ZT_OK)
        return rc ? rc : zt_fail(err, worst, "%s", "");
    if (c->rank != 0)
        return ZT_OK;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step", (double)st->step);
    cJSON_AddNumberToObject(j, "optimizer_steps", (double)st->optimizer_steps);
    cJSON_AddNumberToObject(j, "world", c->world);
    cJSON_AddNumberToObject(j, "stage", plan->stage);
    cJSON_AddNumberToObject(j, "group_size", plan->group_size);
    cJSON_AddStringToObject(j, "wrap", zt_wrap_policy_name(plan->wrap));
    cJSON_AddStringToObject(j, "master_dtype", zt_dtype_name(plan->prec.master));
    cJSON_AddNumberToObject(j, "compensated", plan->prec.compensated);
    cJSON_AddNumberToObject(j, "padded_numel", (double)lay->padded_numel);
    cJSON *ls = cJSON_AddObjectToObject(j, "loss_scaler");
    cJSON_AddNumberToObject(ls, "scale", st->scaler.scale);
    cJSON_AddNumberToObject(ls, "cur_hysteresis", st->scaler.cur_hysteresis);
    cJSON_AddNumberToObject(ls, "iter", (double)st->scaler.iter);
    cJSON_AddNumberToObject(ls, "last_overflow_iter", (double)st->scaler.last_overflow_iter);
    cJSON_AddNumberToObject(ls, "skipped", (double)st->scaler.skipped);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text)
        return zt_fail(err, ZT_EFAIL, "out of memory writing %s/trainer_state.json", dir);
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    zt_wpart part = {text, strlen(text)};
    rc = zt_write_atomic(path, &part, 1, err);
    free(text);
    return rc;
}

static int get_num(const cJSON *j, const char *key, double *out, const char *path, zt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v))
        return zt_fail(err, ZT_EINPUT, "%s: \"%s\" is missing or not a number", path, key);
    *out = v->valuedouble;
    return ZT_OK;
}

int zt_ckpt_load(const char *dir, zt_engine *eng, const zt_plan *plan, zt_ckpt_state *st, zt_err *err)
{
    const zt_comm *c = eng->comm;
    const zt_layout *lay = eng->lay;
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    zt_json js;
    int rc = zt_json_parse_file(path, 1 << 20, &js, err);
    if (rc) {
        zt_wrap(err, "--resume_from_checkpoint: ");
        return rc;
    }
    const cJSON *j = js.root, *ls = cJSON_GetObjectItemCaseSensitive(j, "loss_scaler");
    double step = 0, t = 0, world = 0, stage = 0, group = 0, comp = 0, padded = 0;
    double scale = 0, hyst = 0, iter = 0, last = 0, skipped = 0;
    if (!cJSON_IsObject(j) || !cJSON_IsObject(ls))
        rc = zt_fail(err, ZT_EINPUT, "%s: expected an object with a \"loss_scaler\" object", path);
    if (!rc) rc = get_num(j, "step", &step, path, err);
    if (!rc) rc = get_num(j, "optimizer_steps", &t, path, err);
    if (!rc) rc = get_num(j, "world", &world, path, err);
    if (!rc) rc = get_num(j, "stage", &stage, path, err);
    if (!rc) rc = get_num(j, "group_size", &group, path, err);
    if (!rc) rc = get_num(j, "compensated", &comp, path, err);
    if (!rc) rc = get_num(j, "padded_numel", &padded, path, err);
    if (!rc) rc = get_num(ls, "scale", &scale, path, err);
    if (!rc) rc = get_num(ls, "cur_hysteresis", &hyst, path, err);
    if (!rc) rc = get_num(ls, "iter", &iter, path, err);
    if (!rc) rc = get_num(ls, "last_overflow_iter", &last, path, err);
    if (!rc) rc = get_num(ls, "skipped", &skipped, path, err);
    const cJSON *wrap = cJSON_GetObjectItemCaseSensitive(j, "wrap");
    const cJSON *mdt = cJSON_GetObjectItemCaseSensitive(j, "master_dtype");
    if (!rc && (!cJSON_IsString(wrap) || !cJSON_IsString(mdt)))
        rc = zt_fail(err, ZT_EINPUT, "%s: \"wrap\" and \"master_dtype\" must be strings", path);
    /* the shards are restored as they were cut: the cut must be the same */
    if (!rc && ((int)world != c->world || (int)stage != plan->stage || (int)group != plan->group_size ||
                strcmp(wrap->valuestring, zt_wrap_policy_name(plan->wrap)) ||
                strcmp(mdt->valuestring, zt_dtype_name(plan->prec.master)) ||
                (int)comp != plan->prec.compensated || (size_t)padded != lay->padded_numel))
        rc = zt_fail(err, ZT_EINPUT,
                     "%s: saved with %d ranks, ZeRO-%d, shard group %d, %s, %s master%s (%.0f padded "
                     "parameters); this run has %d ranks, ZeRO-%d, shard group %d, %s, %s master%s (%zu): "
                     "resume with the plan the checkpoint was saved under",
                     path, (int)world, (int)stage, (int)group, wrap->valuestring, mdt->valuestring,
                     comp ? " + Kahan" : "", padded, c->world, plan->stage, plan->group_size,
                     zt_wrap_policy_name(plan->wrap), zt_dtype_name(plan->prec.master),
                     plan->prec.compensated ? " + Kahan" : "", lay->padded_numel);
    zt_json_free(&js);
    if (rc)
        return rc;
    st->step = (long)step;
    st->optimizer_steps = (long)t;
    st->scaler.scale = scale;
    st->scaler.cur_hysteresis = (int)hyst;
    st->scaler.iter = (long)iter;
    st->scaler.last_overflow_iter = (long)last;
    st->scaler.skipped = (long)skipped;

    shard_path(path, sizeof path, dir, c->rank, c->world);
    zt_st_file *f = NULL;
    if ((rc = zt_st_open(path, &f, err)))
        return rc;
    for (int u = 0; rc == ZT_OK && u < lay->nunits; u++)
        for (int role = 0; rc == ZT_OK && role < NROLES; role++) {
            zt_unit_state *us = &eng->units[u];
            void *buf = role_buffer(us, role);
            if (!buf)
                continue;
            char name[48];
            snprintf(name, sizeof name, "unit.%d.%s", u, role_names[role]);
            const zt_st_tensor *tn = zt_st_find(f, name);
            if (!tn || !tn->has_zt_dtype || tn->dtype != eng->prec.master || tn->ndim != 1 ||
                (size_t)tn->numel != us->shard_numel)
                rc = zt_fail(err, ZT_EINPUT, "%s: tensor %s is missing or is not %zu %s elements", path, name,
                             us->shard_numel, zt_dtype_name(eng->prec.master));
            else
                memcpy(buf, tn->data, tn->nbytes);
        }
    zt_st_close(f);
    if (rc == ZT_OK)
        eng->optimizer_steps = st->optimizer_steps;
    return rc;
}
