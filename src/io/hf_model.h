/* hf_model.h — Hugging Face model directories <-> full parameter tensors.
 *
 * Loading reads DIR/config.json and the weights (single or sharded safetensors),
 * checks that every parameter the layout expects is present with its shape and
 * a float dtype, refuses tensors it does not know by name (except the rotary
 * inv_freq buffers old checkpoints carry, and a duplicate lm_head.weight of a
 * tied model), and hands each to a sink (the engine's is in train/weights.h,
 * which rounds it to the load dtype).
 * Saving writes config.json and the weights atomically as one set: every file
 * is written under a staging name first, and only then are they renamed into
 * place (zt_fileset, in an order that never shows a reader two models mixed);
 * a failure at any file leaves the directory's previous model as it was. */
#ifndef ZT_HF_MODEL_H
#define ZT_HF_MODEL_H

#include "../model/config.h"
#include "../model/layout.h"
#include "safetensors.h"

int zt_hf_read_config_dir(const char *dir, zt_llama_config *cfg, zt_err *err);
/* Hand each parameter's full tensor (numel elements of src_dt) to set(ctx, ...)
 * after the checks above: how the engine (train/weights.h) and evaluation's
 * frozen copy load their weights. */
typedef void (*zt_param_sink)(void *ctx, const zt_param *p, const void *src, zt_dtype src_dt);
int zt_hf_load_params_to(const char *dir, const zt_layout *lay, zt_param_sink set, void *ctx,
                         zt_err *err);
/* The same directory, streamed: fill(ctx, i, dst) writes parameter i (layout
 * order) in dtype just before it goes to disk, so one tensor is held at a time
 * (merge-weights).  Byte for byte what zt_hf_save_tensors_meta writes for the
 * same values and meta: each weights file's __metadata__ (key, value, ..., NULL;
 * NULL: {"format": "pt"}; a checkpoint's model carries its run id and step,
 * train/ckpt_identity.h). */
int zt_hf_save_streamed(const char *dir, const zt_llama_config *cfg, const zt_layout *lay, zt_dtype dtype,
                        size_t max_shard_bytes, const char *const *meta, zt_st_fill_fn fill, void *ctx,
                        zt_err *err);
/* Write a HF directory from full fp32 tensors given per layout parameter, in
 * dtype; more than max_shard_bytes of weights (0: no limit) are split into
 * shards with model.safetensors.index.json, as save_pretrained's max_shard_size
 * does. */
int zt_hf_save_tensors(const char *dir, const zt_llama_config *cfg, const zt_layout *lay,
                       float *const *values, zt_dtype dtype, size_t max_shard_bytes, zt_err *err);
int zt_hf_save_tensors_meta(const char *dir, const zt_llama_config *cfg, const zt_layout *lay,
                            float *const *values, zt_dtype dtype, size_t max_shard_bytes, const char *const *meta,
                            zt_err *err);
/* A randomly initialised model as HF's _init_weights makes it: normal(0,
 * initializer_range) for matrices, ones for norm weights, from a seeded
 * generator; written to dir in dtype.  *numel (optional) gets the parameter count. */
int zt_hf_init_random(const char *dir, const zt_llama_config *cfg, uint64_t seed, zt_dtype dtype,
                      size_t max_shard_bytes, size_t *numel, zt_err *err);

#endif
