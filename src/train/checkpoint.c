/* checkpoint.c — crash-consistent, reshardable run state (see checkpoint.h). */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../core/mem.h"
#include "../io/hf_carry.h"
#include "../io/hf_model.h"
#include "../io/safetensors.h"
#include "ckpt_dir.h"
#include "ckpt_identity.h"
#include "manifest.h"
#include "weights.h"

/* The host's view of this rank's state, through the engine's state view
 * (engine.h): each state tensor lent as host memory (the engine's buffer itself,
 * or a host copy of a device's), filled for a save, sent back after a load.  The
 * file format is the host's, so a checkpoint written on one device resumes on
 * another. */
typedef struct state_view {
    zt_engine *eng;
    int n;                /* the engine's state tensors */
    zt_state_tensor *t;   /* their names, dtypes and slices */
    void **host;          /* host[i]: tensor i's bytes on the host */
    int *slot;            /* slot[unit * ZT_STATE_NROLES + role]: its tensor, -1 none */
    int nslots;
} state_view;

static void view_close(state_view *v, int send)
{
    for (int i = 0; v->host && i < v->n; i++)
        zt_engine_state_unmap(v->eng, i, v->host[i], send);
    zt_free(ZT_MEM_OTHER, v->t, v->t ? (size_t)v->n * sizeof *v->t : 0);
    zt_free(ZT_MEM_OTHER, v->host, v->host ? (size_t)v->n * sizeof *v->host : 0);
    zt_free(ZT_MEM_OTHER, v->slot, v->slot ? (size_t)v->nslots * sizeof *v->slot : 0);
    memset(v, 0, sizeof *v);
}

static int view_open(zt_engine *eng, int fill, state_view *v, zt_err *err)
{
    memset(v, 0, sizeof *v);
    v->eng = eng;
    v->n = zt_engine_state_count(eng);
    v->nslots = zt_engine_layout(eng)->nunits * ZT_STATE_NROLES;
    v->t = zt_alloc(ZT_MEM_OTHER, (size_t)v->n * sizeof *v->t);
    v->host = zt_alloc(ZT_MEM_OTHER, (size_t)v->n * sizeof *v->host);
    v->slot = zt_alloc(ZT_MEM_OTHER, (size_t)v->nslots * sizeof *v->slot);
    if (!v->t || !v->host || !v->slot) {
        view_close(v, 0);
        return zt_fail(err, ZT_EFAIL, "out of memory for the checkpoint's view of the state");
    }
    for (int k = 0; k < v->nslots; k++)
        v->slot[k] = -1;
    for (int i = 0; i < v->n; i++) {
        v->t[i] = zt_engine_state_tensor(eng, i);
        v->slot[v->t[i].unit * ZT_STATE_NROLES + (int)v->t[i].role] = i;
        if (!(v->host[i] = zt_engine_state_map(eng, i, fill, err))) {
            view_close(v, 0);
            return ZT_EFAIL;
        }
    }
    return ZT_OK;
}

/* The tensor of unit's role, -1 when the engine keeps none (a compensation). */
static int view_find(const state_view *v, int unit, zt_state_role role)
{
    return v->slot[unit * ZT_STATE_NROLES + (int)role];
}

/* Rank 0's string (cap bytes) on every rank. */
static int share_string(zt_comm *comm, char *s, size_t cap, zt_err *err)
{
    if (comm->world == 1)
        return ZT_OK;
    char *all = zt_alloc(ZT_MEM_OTHER, cap * (size_t)comm->world);
    if (!all)
        return zt_fail(err, ZT_EFAIL, "out of memory sharing a path");
    zt_comm_allgather_bytes(comm, all, s, cap);
    memcpy(s, all, cap);
    s[cap - 1] = 0;
    zt_free(ZT_MEM_OTHER, all, cap * (size_t)comm->world);
    return ZT_OK;
}

int zt_ckpt_probe_output_dir(const char *dir, zt_err *err)
{
    int rc = zt_mkdirs(dir, err);
    if (rc) {
        zt_wrap(err, "--output_dir: ");
        return rc;
    }
    char probe[4200], tmp[4300];
    snprintf(probe, sizeof probe, "%s/.ztrain-write-probe", dir);
    int fd = zt_create_temp(probe, tmp, sizeof tmp);
    if (fd < 0)
        return zt_fail(err, ZT_EINPUT, "--output_dir %s: cannot write there: %s", dir, strerror(errno));
    close(fd);
    unlink(tmp);
    return zt_hf_check_outputs(dir, err);
}

/* ---- save ------------------------------------------------------------------- */

/* What a shard writer reports to rank 0 for the manifest. */
typedef struct shard_entry {
    int present;
    char path[64];
    uint64_t bytes, xxh3;
} shard_entry;

static int write_shard(const char *tmpdir, zt_engine *eng, const zt_ckpt_state *st, shard_entry *me, zt_err *err)
{
    state_view v;
    int rc = view_open(eng, 1, &v, err);
    if (rc)
        return rc;
    zt_st_out *outs = zt_alloc(ZT_MEM_OTHER, (size_t)v.n * sizeof *outs);
    if (!outs)
        rc = zt_fail(err, ZT_EFAIL, "out of memory saving %s", tmpdir);
    for (int i = 0; rc == ZT_OK && i < v.n; i++) {
        outs[i] = (zt_st_out){.name = v.t[i].name, .dtype = v.t[i].dtype, .ndim = 1, .data = v.host[i]};
        outs[i].shape[0] = (int64_t)v.t[i].numel;
    }
    snprintf(me->path, sizeof me->path, "zero/shard-%d-of-%d.safetensors", zt_engine_group_rank(eng),
             zt_engine_group_size(eng));
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", tmpdir, me->path);
    zt_ckpt_shard_meta meta; /* the shard's identity (ckpt_identity.h) */
    zt_ckpt_shard_meta_fill(&meta, st, zt_engine_group_rank(eng), zt_engine_group_size(eng));
    if (rc == ZT_OK)
        rc = zt_st_write_meta(path, outs, v.n, meta.kv, err);
    /* read back: the checksum is of what reached the file */
    if (rc == ZT_OK && (rc = zt_file_digest(path, &me->bytes, &me->xxh3, err)) == ZT_OK)
        me->present = 1;
    view_close(&v, 0);
    zt_free(ZT_MEM_OTHER, outs, outs ? (size_t)v.n * sizeof *outs : 0);
    return rc;
}

/* Whether the engine keeps a Kahan compensation (a state tensor of that role). */
static int compensated(const zt_engine *eng)
{
    for (int i = 0; i < zt_engine_state_count(eng); i++)
        if (zt_engine_state_tensor(eng, i).role == ZT_STATE_COMP)
            return 1;
    return 0;
}

/* Rank 0: the index, the trainer state and the manifest over every file. */
static int write_metadata(const char *tmpdir, zt_engine *eng, const zt_ckpt_state *st, const shard_entry *shards,
                          int nshards, uint64_t *total_bytes, zt_err *err)
{
    char path[4400];
    zt_ckpt_index ix;
    int rc = zt_ckpt_index_from_layout(zt_engine_layout(eng), zt_engine_group_size(eng),
                                       zt_engine_precision(eng).master, compensated(eng), &ix, err);
    if (rc)
        return rc;
    memcpy(ix.run_id, st->run_id, sizeof ix.run_id);
    snprintf(path, sizeof path, "%s/zero/index.json", tmpdir);
    rc = zt_json_write_text(path, zt_ckpt_index_to_json(&ix), 0, err);
    zt_ckpt_index_free(&ix);
    snprintf(path, sizeof path, "%s/trainer_state.json", tmpdir);
    if (rc == ZT_OK)
        rc = zt_json_write_text(path, zt_ckpt_state_to_json(st), 0, err);
    if (rc)
        return rc;
    /* the manifest: rank 0's top-level files and the index, read back here, and
     * the shards as their writers read them back */
    int top = 0, n = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        top++;
    if (d)
        closedir(d);
    int cap = top + 1 + nshards;
    zt_manifest_entry *files = zt_alloc(ZT_MEM_OTHER, (size_t)cap * sizeof *files);
    if (!files)
        return zt_fail(err, ZT_EFAIL, "out of memory writing %s/manifest.json", tmpdir);
    if (!(d = opendir(tmpdir)))
        rc = zt_fail(err, ZT_EFAIL, "%s: cannot list: %s", tmpdir, strerror(errno));
    while (rc == ZT_OK && d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "zero"))
            continue;
        if (n == top) {
            rc = zt_fail(err, ZT_EFAIL, "%s: files appeared while it was saved", tmpdir);
            break;
        }
        snprintf(files[n].path, sizeof files[n].path, "%s", e->d_name);
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        rc = zt_file_digest(path, &files[n].bytes, &files[n].xxh3, err);
        n++;
    }
    if (d)
        closedir(d);
    if (rc == ZT_OK) {
        snprintf(files[n].path, sizeof files[n].path, "zero/index.json");
        snprintf(path, sizeof path, "%s/zero/index.json", tmpdir);
        rc = zt_file_digest(path, &files[n].bytes, &files[n].xxh3, err);
        n++;
    }
    for (int i = 0; rc == ZT_OK && i < nshards; i++)
        if (shards[i].present) {
            snprintf(files[n].path, sizeof files[n].path, "%s", shards[i].path);
            files[n].bytes = shards[i].bytes;
            files[n].xxh3 = shards[i].xxh3;
            n++;
        }
    if (rc == ZT_OK)
        rc = zt_manifest_write(tmpdir, files, n, err);
    *total_bytes = 0;
    for (int i = 0; i < n; i++)
        *total_bytes += files[i].bytes;
    zt_free(ZT_MEM_OTHER, files, (size_t)cap * sizeof *files);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int zt_ckpt_save(const zt_ckpt_save_args *sa, zt_engine *eng, const zt_ckpt_state *st, char *where,
                 zt_ckpt_save_report *rep, zt_err *err)
{
    const double t0 = now_s();
    uint64_t total = 0;
    zt_comm *comm = zt_engine_comm(eng);
    const int rank0 = comm->rank == 0;
    char final[4096], tmpdir[4096] = "";
    if (snprintf(final, sizeof final, "%s/checkpoint-%ld", sa->output_dir, st->step) >= (int)sizeof final - 64)
        return zt_fail(err, ZT_EINPUT, "--output_dir %s: path too long", sa->output_dir);
    int rc = ZT_OK;
    if (rank0) {
        snprintf(tmpdir, sizeof tmpdir, "%s/.checkpoint-%ld.tmp-XXXXXX", sa->output_dir, st->step);
        char zdir[4200];
        /* mkdtemp: an unpredictable name, created 0700; opened up to 0755 as
         * a checkpoint-N directory normally is */
        int made = mkdtemp(tmpdir) != NULL && chmod(tmpdir, 0755) == 0;
        snprintf(zdir, sizeof zdir, "%s/zero", tmpdir);
        if (!made || mkdir(zdir, 0777) != 0) {
            rc = zt_fail(err, errno == ENOSPC || errno == EIO ? ZT_EFAIL : ZT_EINPUT,
                         "%s: cannot create a temporary checkpoint directory: %s", sa->output_dir, strerror(errno));
            if (made)
                zt_ckpt_remove_tree(tmpdir);
        }
    }
    if ((rc = zt_comm_agree(comm, rc, err)) || (rc = share_string(comm, tmpdir, sizeof tmpdir, err)))
        return rc;
    /* 1. the model: the full HF directory (a collective gather), or its config alone;
     * LoRA: the adapters in PEFT's format beside the config, never the base */
    if (sa->lora)
        rc = zt_lora_save(tmpdir, zt_engine_layout(eng), sa->lora, eng, sa->source_dir, rank0, err);
    if (rc == ZT_OK && sa->write_model && !sa->lora) {
        zt_ckpt_model_meta meta;
        zt_ckpt_model_meta_fill(&meta, st);
        rc = zt_hf_save(tmpdir, sa->cfg, zt_engine_layout(eng), eng, sa->model_dtype, sa->max_shard_bytes, meta.kv,
                        rank0, err);
    } else if (rc == ZT_OK && rank0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/config.json", tmpdir);
        zt_llama_config c = *sa->cfg;
        c.torch_dtype = sa->model_dtype;
        rc = zt_hf_config_write(path, &c, err);
    }
    if (rc == ZT_OK && rank0 && !sa->lora) /* before the manifest, which then lists them */
        rc = zt_hf_carry_model(tmpdir, sa->source_dir, sa->tokenizer_dir, err);
    rc = zt_comm_agree(comm, rc, err);
    /* 2. the shards: the first rank holding each slice writes it */
    shard_entry me = {0}, *all = NULL;
    if (rc == ZT_OK && comm->rank == zt_engine_group_rank(eng))
        rc = write_shard(tmpdir, eng, st, &me, err);
    rc = zt_comm_agree(comm, rc, err);
    if (rc == ZT_OK) {
        all = zt_alloc(ZT_MEM_OTHER, (size_t)comm->world * sizeof *all);
        rc = zt_comm_agree(comm, all ? ZT_OK : zt_fail(err, ZT_EFAIL, "out of memory saving %s", final), err);
    }
    if (rc == ZT_OK)
        zt_comm_allgather_bytes(comm, all, &me, sizeof me);
    /* 3. rank 0: index, trainer state, manifest; then the rename */
    if (rc == ZT_OK && rank0)
        rc = write_metadata(tmpdir, eng, st, all, comm->world, &total, err);
    if (rc == ZT_OK && rank0 && rep) { /* the shards' writers said what they wrote */
        memset(rep, 0, sizeof *rep);
        rep->bytes_total = total;
        rep->bytes_rank0 = total;
        for (int q = 1; q < comm->world; q++) {
            rep->bytes_rank0 -= all[q].bytes;
            rep->bytes_other_max = all[q].bytes > rep->bytes_other_max ? all[q].bytes : rep->bytes_other_max;
        }
    }
    rc = zt_comm_agree(comm, rc, err);
    if (rc == ZT_OK && rank0)
        rc = zt_ckpt_publish(tmpdir, final, sa->output_dir, st->step, err);
    if (rank0) {
        if (rc == ZT_OK) {
            if (sa->save_total_limit > 0)
                zt_ckpt_rotate(sa->output_dir, sa->save_total_limit, sa->keep_step);
            zt_ckpt_remove_litter(sa->output_dir);
        } else {
            zt_ckpt_remove_tree(tmpdir);
        }
    }
    zt_free(ZT_MEM_OTHER, all, all ? (size_t)comm->world * sizeof *all : 0);
    rc = zt_comm_agree(comm, rc, err);
    if (rc != ZT_OK && err->msg[0]) /* only the rank that failed has a message to say */
        zt_wrap(err, "saving %s: ", final);
    if (rc == ZT_OK && where)
        snprintf(where, 4096, "%s", final);
    if (rc == ZT_OK && rank0 && rep)
        rep->seconds = now_s() - t0;
    return rc;
}

/* ---- find and verify ----------------------------------------------------- */

int zt_ckpt_read_state(const char *dir, zt_ckpt_state *st, zt_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    zt_json js;
    int rc = zt_json_parse_file(path, 1 << 20, &js, err);
    if (rc == ZT_OK) {
        rc = zt_ckpt_state_from_json(path, &js, st, err);
        zt_json_free(&js);
    }
    return rc;
}

static int read_index(const char *dir, zt_ckpt_index *ix, zt_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/zero/index.json", dir);
    zt_json js;
    int rc = zt_json_parse_file(path, 256u << 20, &js, err);
    if (rc == ZT_OK) {
        rc = zt_ckpt_index_from_json(path, &js, ix, err);
        zt_json_free(&js);
    }
    return rc;
}

/* zero/index.json belongs to the checkpoint trainer_state.json describes. */
static int check_index_identity(const char *dir, const zt_ckpt_index *ix, const zt_ckpt_state *st, zt_err *err)
{
    if (strcmp(ix->run_id, st->run_id))
        return zt_fail(err, ZT_EINPUT, "%s/zero/index.json: run_id \"%s\" differs from trainer_state.json's \"%s\": "
                       "files of different checkpoints mixed", dir, ix->run_id, st->run_id);
    return ZT_OK;
}

/* Every shard the index implies carries this checkpoint's identity. */
static int check_shard_identities(const char *dir, const zt_ckpt_index *ix, const zt_ckpt_state *st, zt_err *err)
{
    int rc = check_index_identity(dir, ix, st, err);
    for (int q = 0; rc == ZT_OK && q < ix->group_size; q++) {
        char path[4400];
        zt_st_file *f = NULL;
        snprintf(path, sizeof path, "%s/zero/shard-%d-of-%d.safetensors", dir, q, ix->group_size);
        if ((rc = zt_st_open(path, &f, err)) == ZT_OK)
            rc = zt_ckpt_check_shard(f, q, ix->group_size, st, err);
        zt_st_close(f);
    }
    return rc;
}

/* Everything a resume reads is listed in the manifest and matches it, the two
 * JSON documents pass their checks, and every shard carries the checkpoint's
 * identity. */
int zt_ckpt_verify(const char *dir, zt_err *err)
{
    static const char *const required[] = {"trainer_state.json", "zero/index.json", "config.json", NULL};
    struct stat sb;
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_fail(err, ZT_EINPUT, "%s: not a checkpoint directory", dir);
    if (stat(path, &sb) != 0)
        return zt_fail(err, ZT_EINPUT, "%s: missing (an incomplete checkpoint, or one written before manifests)",
                       path);
    int rc = zt_manifest_verify(dir, required, err);
    zt_ckpt_state st;
    zt_ckpt_index ix;
    if (rc == ZT_OK)
        rc = zt_ckpt_read_state(dir, &st, err);
    if (rc == ZT_OK && (rc = read_index(dir, &ix, err)) == ZT_OK) {
        /* every shard the index implies is in the manifest (and so verified) */
        zt_manifest m;
        if ((rc = zt_manifest_read(dir, &m, err)) == ZT_OK) {
            for (int q = 0; rc == ZT_OK && q < ix.group_size; q++) {
                char want[64];
                snprintf(want, sizeof want, "zero/shard-%d-of-%d.safetensors", q, ix.group_size);
                int found = 0;
                for (int i = 0; i < m.n && !found; i++)
                    found = !strcmp(m.files[i].path, want);
                if (!found)
                    rc = zt_fail(err, ZT_EINPUT, "%s/manifest.json does not list %s", dir, want);
            }
            zt_manifest_free(&m);
        }
        if (rc == ZT_OK)
            rc = check_shard_identities(dir, &ix, &st, err);
        if (rc == ZT_OK)
            rc = zt_ckpt_check_model(dir, &st, err);
        zt_ckpt_index_free(&ix);
    }
    return rc;
}

int zt_ckpt_resolve(const char *spec, const char *output_dir, zt_comm *comm, char *dir, zt_err *err)
{
    int rc = ZT_OK;
    dir[0] = 0;
    if (comm->rank == 0) {
        if (strcmp(spec, "latest") != 0) {
            snprintf(dir, 4096, "%s", spec);
            if ((rc = zt_ckpt_verify(dir, err)))
                zt_wrap(err, "--resume_from_checkpoint: ");
        } else if (!output_dir) {
            rc = zt_fail(err, ZT_EINPUT, "--resume_from_checkpoint latest needs --output_dir (where to look)");
        } else {
            int n;
            zt_ckpt_numbered *v = zt_ckpt_list(output_dir, &n);
            rc = ZT_EINPUT;
            for (int i = 0; i < n && rc != ZT_OK; i++) {
                zt_err why = {0};
                snprintf(dir, 4096, "%s/%s", output_dir, v[i].name);
                if ((rc = zt_ckpt_verify(dir, &why)))
                    fprintf(stderr, "ztrain: warning: --resume_from_checkpoint latest: skipping %s: %s\n", dir,
                            why.msg);
            }
            free(v);
            if (rc)
                rc = zt_fail(err, ZT_EINPUT, "--resume_from_checkpoint latest: no complete checkpoint-N in %s",
                             output_dir);
        }
    }
    if ((rc = zt_comm_agree(comm, rc, err)))
        return rc;
    return share_string(comm, dir, 4096, err);
}

/* ---- load ------------------------------------------------------------------ */

zt_ckpt_plan zt_ckpt_plan_of(const zt_plan *plan, int world)
{
    zt_ckpt_plan p;
    memset(&p, 0, sizeof p);
    snprintf(p.face, sizeof p.face, "%s", zt_face_name(plan->face));
    snprintf(p.strategy, sizeof p.strategy, "%s", plan->strategy);
    p.stage = plan->stage;
    p.world = world;
    p.group_size = plan->group_size;
    p.wrap = plan->wrap;
    p.min_num_params = plan->min_num_params;
    p.master = plan->prec.master;
    p.compute = plan->prec.compute;
    p.reduce = plan->prec.reduce;
    p.compensated = plan->prec.master != ZT_F32 && plan->prec.compensated;
    p.loss_scaling = plan->ls.on;
    return p;
}

static void describe_plan(char *buf, size_t cap, const zt_ckpt_plan *p)
{
    snprintf(buf, cap, "%d rank%s, %s %s, shard group %d, %s, %s master%s, %s compute", p->world,
             p->world == 1 ? "" : "s", p->face, p->strategy, p->group_size, zt_wrap_policy_name(p->wrap),
             zt_dtype_name(p->master), p->compensated ? " + Kahan" : "", zt_dtype_name(p->compute));
}

int zt_ckpt_compare_plans(const zt_ckpt_plan *saved, const zt_plan *plan, int allow_precision_change,
                          char *why, size_t cap)
{
    zt_ckpt_plan now = zt_ckpt_plan_of(plan, plan->world);
    char a[256], b[256];
    describe_plan(a, sizeof a, saved);
    describe_plan(b, sizeof b, &now);
    int precision = saved->master != now.master || saved->compensated != now.compensated;
    if (precision && !allow_precision_change) {
        snprintf(why, cap, "refused: saved under %s; this run's plan is %s: a master-dtype change is refused "
                 "unless --allow_precision_change converts it", a, b);
        return 2;
    }
    int same_cut = saved->world == now.world && saved->stage == now.stage && saved->group_size == now.group_size &&
                   saved->wrap == now.wrap && (now.wrap != ZT_WRAP_SIZE || saved->min_num_params == now.min_num_params);
    int same_numbers = same_cut && !precision && saved->compute == now.compute && saved->reduce == now.reduce;
    if (same_numbers) {
        snprintf(why, cap, "bit-exact: the same plan (%s)", b);
        return 0;
    }
    if (same_cut && !precision)
        snprintf(why, cap, "restored as cut, but the arithmetic differs (compute %s -> %s, reduce %s -> %s): "
                 "the run continues from the same state, not bit for bit", zt_dtype_name(saved->compute),
                 zt_dtype_name(now.compute), zt_dtype_name(saved->reduce), zt_dtype_name(now.reduce));
    else
        snprintf(why, cap, "resharded%s: saved under %s; resumed under %s", precision ? " and converted" : "", a, b);
    return 1;
}

typedef struct field_change {
    const char *field;
    char was[320], now[320];
} field_change;

/* The hyper-parameters that differ between the checkpoint and this run. */
static int changed_fields(const zt_ckpt_hparams *s, const zt_ckpt_hparams *c, field_change *out)
{
    int n = 0;
#define DBL(name, x)                                                                  \
    if (s->x != c->x) {                                                               \
        out[n].field = name;                                                          \
        snprintf(out[n].was, sizeof out[n].was, "%.9g", s->x);                       \
        snprintf(out[n].now, sizeof out[n].now, "%.9g", c->x);                       \
        n++;                                                                          \
    }
#define LNG(name, x)                                                                  \
    if ((long)s->x != (long)c->x) {                                                   \
        out[n].field = name;                                                          \
        snprintf(out[n].was, sizeof out[n].was, "%ld", (long)s->x);                  \
        snprintf(out[n].now, sizeof out[n].now, "%ld", (long)c->x);                  \
        n++;                                                                          \
    }
    DBL("learning_rate", lr);
    DBL("weight_decay", weight_decay);
    DBL("adam_beta1", beta1);
    DBL("adam_beta2", beta2);
    DBL("adam_epsilon", eps);
    DBL("max_grad_norm", max_grad_norm);
    if (s->schedule != c->schedule) {
        out[n].field = "lr_scheduler_type";
        snprintf(out[n].was, sizeof out[n].was, "%s", zt_lr_schedule_name(s->schedule));
        snprintf(out[n].now, sizeof out[n].now, "%s", zt_lr_schedule_name(c->schedule));
        n++;
    }
    if (strcmp(s->schedule_kwargs, c->schedule_kwargs)) {
        out[n].field = "lr_scheduler_kwargs";
        snprintf(out[n].was, sizeof out[n].was, "%s", s->schedule_kwargs);
        snprintf(out[n].now, sizeof out[n].now, "%s", c->schedule_kwargs);
        n++;
    }
    LNG("warmup_steps", warmup_steps);
    LNG("max_steps", max_steps);
    LNG("global batch size (per-device batch x accumulation x ranks)", global_batch);
    LNG("block_size", block_size);
    LNG("shuffle", shuffle);
    if (s->seed != c->seed) {
        out[n].field = "seed";
        snprintf(out[n].was, sizeof out[n].was, "%" PRIu64, s->seed);
        snprintf(out[n].now, sizeof out[n].now, "%" PRIu64, c->seed);
        n++;
    }
    if (s->data_tokens != c->data_tokens || s->data_digest != c->data_digest) {
        out[n].field = "data (the token stream)";
        snprintf(out[n].was, sizeof out[n].was, "%" PRIu64 " tokens, digest %016" PRIx64, s->data_tokens,
                 s->data_digest);
        snprintf(out[n].now, sizeof out[n].now, "%" PRIu64 " tokens, digest %016" PRIx64, c->data_tokens,
                 c->data_digest);
        n++;
    }
    if (s->compute != c->compute) {
        out[n].field = "compute dtype";
        snprintf(out[n].was, sizeof out[n].was, "%s", zt_dtype_name(s->compute));
        snprintf(out[n].now, sizeof out[n].now, "%s", zt_dtype_name(c->compute));
        n++;
    }
#undef DBL
#undef LNG
    return n;
}

/* The old shard files, opened when first needed. */
typedef struct old_shards {
    const char *dir;
    const zt_ckpt_index *ix;
    zt_st_file **files;
    const zt_ckpt_state *st;  /* the identity each shard must carry (ckpt_identity.h) */
} old_shards;

static int old_tensor(old_shards *os, int q, int unit, zt_state_role role, const zt_st_tensor **out, zt_err *err)
{
    char path[4400], name[48];
    if (!os->files[q]) {
        snprintf(path, sizeof path, "%s/zero/shard-%d-of-%d.safetensors", os->dir, q, os->ix->group_size);
        int rc = zt_st_open(path, &os->files[q], err);
        if (rc == ZT_OK && (rc = zt_ckpt_check_shard(os->files[q], q, os->ix->group_size, os->st, err))) {
            zt_st_close(os->files[q]);
            os->files[q] = NULL;
        }
        if (rc)
            return rc;
    }
    snprintf(name, sizeof name, "unit.%d.%s", unit, zt_state_role_name(role));
    const zt_st_tensor *t = zt_st_find(os->files[q], name);
    size_t want = os->ix->units[unit].padded_numel / (size_t)os->ix->group_size;
    if (!t || !t->has_zt_dtype || t->dtype != os->ix->master || t->ndim != 1 || (size_t)t->numel != want)
        return zt_fail(err, ZT_EINPUT, "%s: tensor %s is missing or is not %zu %s elements",
                       zt_st_path(os->files[q]), name, want, zt_dtype_name(os->ix->master));
    *out = t;
    return ZT_OK;
}

/* Fill this rank's slice of every unit, role by role, from the old shards.
 * New unit u's slice is [a, a + S) of its flat buffer.  Each parameter p of u
 * overlapping it needs its elements [ps, pe) (relative to p); in the old cut
 * they sit at [o + ps, o + pe) of old unit u' (o: p's old offset), which old
 * group rank q holds in [q S', (q + 1) S').  Padding stays zero, as training
 * keeps it (a zero gradient leaves a zero weight, m and v). */
static int reshard(const char *dir, const zt_ckpt_index *ix, const zt_ckpt_state *st, zt_engine *eng, zt_err *err)
{
    const zt_layout *lay = zt_engine_layout(eng);
    if (ix->nparams != lay->nparams)
        return zt_fail(err, ZT_EINPUT, "%s/zero/index.json: %d parameters, this model has %d", dir, ix->nparams,
                       lay->nparams);
    old_shards os = {dir, ix, zt_alloc(ZT_MEM_OTHER, (size_t)ix->group_size * sizeof(zt_st_file *)), st};
    if (!os.files)
        return zt_fail(err, ZT_EFAIL, "out of memory loading %s", dir);
    memset(os.files, 0, (size_t)ix->group_size * sizeof(zt_st_file *));
    const zt_dtype from = ix->master;
    const size_t es_from = zt_dtype_size(from);
    state_view v;
    if (view_open(eng, 0, &v, err) != ZT_OK) {
        zt_free(ZT_MEM_OTHER, os.files, (size_t)ix->group_size * sizeof(zt_st_file *));
        return ZT_EFAIL;
    }
    int rc = ZT_OK;
    for (int i = 0; i < v.n; i++)
        memset(v.host[i], 0, v.t[i].bytes);
    for (int i = 0; rc == ZT_OK && i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        if (lay->units[p->unit].frozen)
            continue; /* LoRA's base: loaded from the model, not in the checkpoint */
        const zt_ckpt_iparam *op = zt_ckpt_index_find(ix, p->name);
        if (!op || op->numel != p->numel || op->shape[0] != p->shape[0]) {
            rc = zt_fail(err, ZT_EINPUT, "%s/zero/index.json: parameter %s is %s; this model's is [%ld%s%ld]", dir,
                         p->name, op ? "of another shape" : "missing", p->shape[0], p->ndim == 2 ? ", " : "",
                         p->ndim == 2 ? p->shape[1] : 0L);
            break;
        }
        /* every role of a unit is the same slice [a, a + S) of its flat buffer */
        const zt_state_tensor *mt = &v.t[view_find(&v, p->unit, ZT_STATE_MASTER)];
        const size_t S = mt->numel, a = mt->offset;
        const size_t lo = p->offset > a ? p->offset : a;
        const size_t hi = p->offset + p->numel < a + S ? p->offset + p->numel : a + S;
        if (lo >= hi)
            continue;
        const size_t So = ix->units[op->unit].padded_numel / (size_t)ix->group_size;
        for (int role = 0; rc == ZT_OK && role < ZT_STATE_NROLES; role++) {
            int k = view_find(&v, p->unit, (zt_state_role)role);
            if (k < 0 || (role == ZT_STATE_COMP && !ix->compensated))
                continue; /* a compensation the checkpoint lacks starts at zero */
            char *dst = v.host[k];
            const zt_dtype to = v.t[k].dtype;
            const size_t es_to = zt_dtype_size(to);
            for (size_t pos = lo; rc == ZT_OK && pos < hi;) {
                size_t old = op->offset + (pos - p->offset); /* in the old unit's flat buffer */
                int q = (int)(old / So);
                size_t within = old - (size_t)q * So, take = So - within < hi - pos ? So - within : hi - pos;
                const zt_st_tensor *t = NULL;
                if ((rc = old_tensor(&os, q, op->unit, (zt_state_role)role, &t, err)))
                    break;
                const char *src = (const char *)t->data + within * es_from;
                if (to == from)
                    memcpy(dst + (pos - a) * es_to, src, take * es_to);
                else
                    zt_convert(dst + (pos - a) * es_to, to, src, from, take);
                pos += take;
            }
        }
    }
    view_close(&v, rc == ZT_OK); /* a failed load sends nothing to a device */
    for (int q = 0; q < ix->group_size; q++)
        if (os.files[q])
            zt_st_close(os.files[q]);
    zt_free(ZT_MEM_OTHER, os.files, (size_t)ix->group_size * sizeof(zt_st_file *));
    return rc;
}

/* A LoRA checkpoint resumes a LoRA run of the same adapters on the same base, and
 * only that: a full fine-tuning's state has no adapters, and an adapter's has no base. */
static int check_lora(const char *dir, const zt_ckpt_lora *saved, const zt_ckpt_load_args *la, zt_err *err)
{
    const zt_ckpt_lora *now = la->lora;
    if (saved->on != (now != NULL))
        return zt_fail(err, ZT_EINPUT, "--resume_from_checkpoint %s: %s; %s", dir,
                       saved->on ? "a LoRA checkpoint (adapters only) cannot resume full fine-tuning"
                                 : "a full fine-tuning checkpoint cannot resume a LoRA run (--use_peft)",
                       saved->on ? "resume it with --use_peft and its LoRA settings"
                                 : "resume it without --use_peft");
    if (!now)
        return ZT_OK;
    const char *field = saved->r != now->r ? "--lora_r" : saved->alpha != now->alpha ? "--lora_alpha"
                      : saved->rslora != now->rslora ? "--use_rslora"
                      : saved->targets != now->targets ? "--lora_target_modules" : NULL;
    if (field)
        return zt_fail(err, ZT_EINPUT, "--resume_from_checkpoint %s: the checkpoint's adapters were trained with "
                       "r=%d, alpha=%g, rslora %s, target bits 0x%x; this run's %s differs (r=%d, alpha=%g, rslora %s, "
                       "target bits 0x%x)", dir, saved->r, saved->alpha, saved->rslora ? "on" : "off", saved->targets,
                       field, now->r, now->alpha, now->rslora ? "on" : "off", now->targets);
    if (saved->base_digest != now->base_digest)
        return zt_fail(err, ZT_EINPUT, "--resume_from_checkpoint %s: %s/trainer_state.json records base digest "
                       "%016" PRIx64 " for the model its adapters were trained on; this run's base %s has digest "
                       "%016" PRIx64 ": resume on the same base model", dir, dir, saved->base_digest,
                       la->model_dir ? la->model_dir : "(unnamed)", now->base_digest);
    return ZT_OK;
}

int zt_ckpt_load(const char *dir, const zt_ckpt_load_args *la, zt_engine *eng, zt_ckpt_state *st,
                 zt_err *err)
{
    int rc = zt_ckpt_read_state(dir, st, err);
    if (rc) {
        zt_wrap(err, "--resume_from_checkpoint: ");
        return rc;
    }
    if ((rc = check_lora(dir, &st->lora, la, err)))
        return rc;
    char why[1024];
    if (zt_ckpt_compare_plans(&st->plan, la->plan, la->allow_precision_change, why, sizeof why) == 2)
        return zt_fail(err, ZT_EINPUT, "--resume_from_checkpoint %s: %s", dir, why);
    field_change ch[16];
    int n = changed_fields(&st->hp, la->hp, ch);
    if (n && !la->override_args)
        return zt_fail(err, ZT_EINPUT, "--resume_from_checkpoint %s: %s was %s when saved, this run has %s%s; resume "
                       "with the saved value, or pass --override_checkpoint_args to continue with the new one",
                       dir, ch[0].field, ch[0].was, ch[0].now, n > 1 ? " (and more fields differ)" : "");
    for (int i = 0; i < n && la->talk; i++)
        printf("resume: overriding the checkpoint's %s: %s -> %s (--override_checkpoint_args)\n", ch[i].field,
               ch[i].was, ch[i].now);
    zt_ckpt_index ix;
    if ((rc = read_index(dir, &ix, err)))
        return rc;
    /* stage 0 replicates everything: one shard holds it all */
    if (ix.group_size != (st->plan.stage == 0 ? 1 : st->plan.group_size))
        rc = zt_fail(err, ZT_EINPUT, "%s/zero/index.json: group_size %d disagrees with trainer_state.json's plan", dir,
                     ix.group_size);
    if (rc == ZT_OK)
        rc = check_index_identity(dir, &ix, st, err);
    if (rc == ZT_OK && !st->run_id[0] && la->talk)
        fprintf(stderr, "ztrain: warning: %s was written before checkpoints carried their identity (run id, rank, "
                "step in every shard); only its manifest guards it against mixed files\n", dir);
    if (rc == ZT_OK)
        rc = reshard(dir, &ix, st, eng, err);
    zt_ckpt_index_free(&ix);
    if (rc == ZT_OK) {
        zt_engine_set_optimizer_steps(eng, st->optimizer_steps);
        if (la->talk)
            printf("resumed from %s at step %ld: %s\n", dir, st->step, why);
    }
    return rc;
}

/* ---- merge-weights ----------------------------------------------------------- */

typedef struct merge_ctx {
    old_shards os;
    const zt_layout *lay;
    zt_dtype dtype;
    float *f32;           /* the parameter being written, in fp32 (largest numel); NULL for fp32 output */
} merge_ctx;

/* Parameter i, whole: its elements from every old shard that holds some, as
 * fp32 (as zt_engine_full_params gives them to a FULL_STATE_DICT save), then in
 * the output dtype.  The shards' pages are dropped afterwards, so the process
 * holds one parameter, not the model. */
static int fill_param(void *ctx, int i, void *dst, zt_err *err)
{
    merge_ctx *m = ctx;
    const zt_param *p = &m->lay->params[i];
    const zt_ckpt_index *ix = m->os.ix;
    const zt_ckpt_iparam *op = zt_ckpt_index_find(ix, p->name);
    const size_t So = ix->units[op->unit].padded_numel / (size_t)ix->group_size, es = zt_dtype_size(ix->master);
    /* an fp32 output is assembled in place; another dtype goes through fp32 */
    float *f32 = m->dtype == ZT_F32 ? dst : m->f32;
    int rc = ZT_OK;
    for (size_t pos = 0; rc == ZT_OK && pos < p->numel;) {
        size_t old = op->offset + pos;
        int q = (int)(old / So);
        size_t within = old - (size_t)q * So, take = So - within < p->numel - pos ? So - within : p->numel - pos;
        const zt_st_tensor *t = NULL;
        if ((rc = old_tensor(&m->os, q, op->unit, ZT_STATE_MASTER, &t, err)))
            break;
        zt_convert(f32 + pos, ZT_F32, (const char *)t->data + within * es, ix->master, take);
        pos += take;
    }
    if (rc == ZT_OK && m->dtype != ZT_F32)
        zt_convert(dst, m->dtype, f32, ZT_F32, p->numel);
    for (int q = 0; q < ix->group_size; q++)
        zt_st_drop_pages(m->os.files[q]);
    return rc;
}

int zt_ckpt_merge(const char *dir, const char *out, const zt_dtype *dtype, size_t max_shard_bytes, zt_err *err)
{
    int rc = zt_ckpt_verify(dir, err);
    if (rc)
        return rc;
    zt_llama_config cfg;
    zt_ckpt_index ix;
    zt_layout lay;
    zt_ckpt_state st;
    if ((rc = zt_hf_read_config_dir(dir, &cfg, err)) || (rc = zt_ckpt_read_state(dir, &st, err)))
        return rc;
    if (st.lora.on)
        return zt_fail(err, ZT_EINPUT, "%s: a LoRA checkpoint holds the adapters only, no base weights to merge "
                       "(it is also a PEFT adapter directory)", dir);
    if ((rc = read_index(dir, &ix, err)))
        return rc;
    if ((rc = zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, err))) {
        zt_ckpt_index_free(&ix);
        return rc;
    }
    size_t largest = 0;
    for (int i = 0; rc == ZT_OK && i < lay.nparams; i++) {
        const zt_ckpt_iparam *op = zt_ckpt_index_find(&ix, lay.params[i].name);
        if (!op || op->numel != lay.params[i].numel)
            rc = zt_fail(err, ZT_EINPUT, "%s/zero/index.json: parameter %s is %s than config.json describes", dir,
                         lay.params[i].name, op ? "of another size" : "missing, or the index has more parameters");
        largest = lay.params[i].numel > largest ? lay.params[i].numel : largest;
    }
    if (rc == ZT_OK && ix.nparams != lay.nparams)
        rc = zt_fail(err, ZT_EINPUT, "%s/zero/index.json: %d parameters, config.json describes %d", dir, ix.nparams,
                     lay.nparams);
    merge_ctx m = {{dir, &ix, NULL, &st}, &lay, dtype ? *dtype : cfg.torch_dtype, NULL};
    if (rc == ZT_OK) {
        m.os.files = zt_alloc(ZT_MEM_OTHER, (size_t)ix.group_size * sizeof(zt_st_file *));
        if (m.dtype != ZT_F32)
            m.f32 = zt_alloc(ZT_MEM_OTHER, largest * sizeof(float));
        if (!m.os.files || (m.dtype != ZT_F32 && !m.f32))
            rc = zt_fail(err, ZT_EFAIL, "out of memory merging %s", dir);
        else
            memset(m.os.files, 0, (size_t)ix.group_size * sizeof(zt_st_file *));
    }
    zt_ckpt_model_meta meta; /* the identity a FULL_STATE_DICT save gives its model, so the bytes agree */
    zt_ckpt_model_meta_fill(&meta, &st);
    if (rc == ZT_OK)
        rc = zt_hf_save_streamed(out, &cfg, &lay, m.dtype, max_shard_bytes, meta.kv, fill_param, &m, err);
    for (int q = 0; m.os.files && q < ix.group_size; q++)
        if (m.os.files[q])
            zt_st_close(m.os.files[q]);
    zt_free(ZT_MEM_OTHER, m.os.files, m.os.files ? (size_t)ix.group_size * sizeof(zt_st_file *) : 0);
    zt_free(ZT_MEM_OTHER, m.f32, m.f32 ? largest * sizeof(float) : 0);
    zt_layout_free(&lay);
    zt_ckpt_index_free(&ix);
    return rc;
}
