/* ckpt_identity.h — what each file of a checkpoint says about itself, so that a
 * shard from another rank, another step or another run is refused by what it
 * holds, not only by the manifest (which anyone can rebuild).
 *
 * A save draws nothing: the run draws its run id once (zt_ckpt_new_run_id, 64
 * random bits as 16 hex digits, rank 0's shared by every rank).  Then each shard
 * zero/shard-R-of-G.safetensors records in its __metadata__
 *   format "ztrain-zero", run_id, step, rank R, group_size G, world_size, plan
 * and trainer_state.json and zero/index.json record the same run_id.  The loader
 * checks every shard it opens against trainer_state.json: rank = the R of its
 * name, group_size = G, world_size, step, plan and run_id all equal.
 *
 * Checkpoints written before identities (a shard's metadata is only the format,
 * trainer_state.json has no run_id) are still read, with a warning: only their
 * manifest guards them.  A mix (one side with an identity, the other without) is
 * refused. */
#ifndef ZT_CKPT_IDENTITY_H
#define ZT_CKPT_IDENTITY_H

#include "../comm/comm.h"
#include "../core/status.h"
#include "../io/safetensors.h"
#include "ckpt_state.h"

/* Collective: a fresh run id (16 lowercase hex digits) in id[17], the same on every rank. */
int zt_ckpt_new_run_id(zt_comm *comm, char id[17], zt_err *err);

/* The shard metadata of group rank `rank` of `group_size`: key/value pairs for
 * zt_st_write_meta in kv (NULL-terminated), the numbers' text beside them. */
typedef struct zt_ckpt_shard_meta {
    const char *kv[15];
    char step[24], rank[16], group[16], world[16], plan[200];
} zt_ckpt_shard_meta;
void zt_ckpt_shard_meta_fill(zt_ckpt_shard_meta *m, const zt_ckpt_state *st, int rank, int group_size);

/* The shard f, opened as group rank `rank` of `group_size`, belongs to the
 * checkpoint st describes: ZT_EINPUT naming the file and the field otherwise. */
int zt_ckpt_check_shard(const zt_st_file *f, int rank, int group_size, const zt_ckpt_state *st, zt_err *err);

/* The HF model a checkpoint carries (model.safetensors or its shards), and a
 * merge-weights of it, record {"format": "pt", "run_id", "step"} in each file's
 * __metadata__: kv (NULL-terminated) for zt_hf_save_*_meta. */
typedef struct zt_ckpt_model_meta {
    const char *kv[7];
    char step[24];
} zt_ckpt_model_meta;
void zt_ckpt_model_meta_fill(zt_ckpt_model_meta *m, const zt_ckpt_state *st);
/* The model files in dir (if any; a SHARDED_STATE_DICT checkpoint has none)
 * carry st's run id and step: ZT_EINPUT naming the file and the field when one
 * differs (another run's or another step's model put there).  A file with no
 * run_id at all, written before models carried one, is read with a warning. */
int zt_ckpt_check_model(const char *dir, const zt_ckpt_state *st, zt_err *err);
/* The same for a directory given as --model: when it is a checkpoint (it holds
 * trainer_state.json), its model is checked against that state; otherwise ZT_OK. */
int zt_ckpt_check_model_dir(const char *dir, zt_err *err);

/* The plan as the shards record it, e.g. "FSDP FULL_SHARD stage 3, world 2,
 * group 2, TRANSFORMER_BASED_WRAP, fp32 master". */
void zt_ckpt_plan_id(const zt_ckpt_plan *p, char *buf, size_t cap);

#endif
