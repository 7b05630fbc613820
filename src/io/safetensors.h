/* safetensors.h — read (mmap, fully validated) and write safetensors files.
 *
 * Format: 8-byte little-endian header length n, n bytes of UTF-8 JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"k": "v"}}
 * then the data section.  Validation follows the reference parser (contract §5):
 * header <= 100 MB, valid UTF-8 JSON object, known dtypes, offsets contiguous from
 * 0 in file order of begin offsets and inside the file, prod(shape)*dtype size =
 * end - begin, no trailing bytes, no duplicate names.  Every fault is reported as
 * ZT_EINPUT with the file path and what was wrong. */
#ifndef ZT_SAFETENSORS_H
#define ZT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "../core/status.h"

#define ZT_ST_MAX_DIMS 8

typedef struct zt_st_tensor {
    char *name;                 /* owned by the file object */
    char st_dtype[8];           /* the file's dtype string: "F32", "BF16", "I64", ... */
    int has_zt_dtype;           /* 1 when st_dtype is F32, BF16 or F16 */
    zt_dtype dtype;             /* valid when has_zt_dtype */
    int ndim;
    int64_t shape[ZT_ST_MAX_DIMS];
    int64_t numel;
    const void *data;           /* points into the mmapped file (read); aligned for its
                                 * dtype only if the file's layout is (files ztrain writes
                                 * with one dtype are), so copy or convert via memcpy */
    size_t nbytes;
} zt_st_tensor;

typedef struct zt_st_file zt_st_file;

int zt_st_open(const char *path, zt_st_file **out, zt_err *err);
void zt_st_close(zt_st_file *f);
int zt_st_count(const zt_st_file *f);
const zt_st_tensor *zt_st_get(const zt_st_file *f, int i);
const zt_st_tensor *zt_st_find(const zt_st_file *f, const char *name); /* NULL if absent */
const char *zt_st_path(const zt_st_file *f);
/* The __metadata__ value of key (NULL if absent). */
const char *zt_st_metadata(const zt_st_file *f, const char *key);

/* A tensor to write: name, dtype, shape and a pointer to its data. */
typedef struct zt_st_out {
    const char *name;
    zt_dtype dtype;
    int ndim;
    int64_t shape[ZT_ST_MAX_DIMS];
    const void *data;
} zt_st_out;

/* Write n tensors (in the given order) to path atomically: the data goes to
 * a temporary file (zt_write_atomic), is flushed, then renamed over path, so a failure never leaves
 * a half-written file or damages an existing one.  metadata_format may be NULL;
 * otherwise it is stored as __metadata__ {"format": metadata_format}. */
int zt_st_write(const char *path, const zt_st_out *tensors, int n, const char *metadata_format,
                zt_err *err);
/* The same with __metadata__ from meta: key, value, key, value, ..., NULL. */
int zt_st_write_meta(const char *path, const zt_st_out *tensors, int n, const char *const *meta, zt_err *err);
/* The same, streaming: tensors[i].data is ignored, and fill(ctx, i, dst) writes
 * tensor i's bytes into dst just before they go to the file, so only the largest
 * tensor is ever held (merge-weights). */
typedef int (*zt_st_fill_fn)(void *ctx, int i, void *dst, zt_err *err);
int zt_st_write_fill_meta(const char *path, const zt_st_out *tensors, int n, const char *const *meta,
                          zt_st_fill_fn fill, void *ctx, zt_err *err);
/* Let the kernel drop the file's pages from this process (they are read again
 * from the page cache if touched): bounded memory while streaming a large file. */
void zt_st_drop_pages(zt_st_file *f);

/* A Hugging Face weights directory: model.safetensors, or shards listed in
 * model.safetensors.index.json ({"metadata": {...}, "weight_map": {name: file}}).
 * Every name in the weight map must exist in its shard and vice versa. */
typedef struct zt_weights zt_weights;

int zt_weights_open(const char *dir, zt_weights **out, zt_err *err);
void zt_weights_close(zt_weights *w);
int zt_weights_count(const zt_weights *w);
/* The files the weights were read from (1, or the shards in index order). */
int zt_weights_nfiles(const zt_weights *w);
const zt_st_file *zt_weights_file(const zt_weights *w, int i);
const zt_st_tensor *zt_weights_get(const zt_weights *w, int i);
/* Find a tensor by name; *file (optional) receives the path of the file holding it. */
const zt_st_tensor *zt_weights_find(const zt_weights *w, const char *name, const char **file);

#endif
