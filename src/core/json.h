/* json.h — the strict JSON front end every JSON file ztrain reads goes through
 * (config.json, the safetensors header and shard index, the DeepSpeed config,
 * trainer state): the same validation everywhere. */
#ifndef ZT_JSON_H
#define ZT_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Strict JSON, as serde_json (the reference parsers') accepts it.  cJSON alone is
 * too lenient (control bytes count as whitespace, "01" parses) and keeps no
 * source text, so "64" and "64.0" look alike; zt_json validates UTF-8 and every
 * token first, then lets cJSON build the tree, and records where each number
 * token starts so integers can be read exactly.  Numbers appear in nums in
 * document order, which is the order of a pre-order walk of the cJSON tree. */
struct cJSON;
typedef struct zt_json {
    struct cJSON *root;
    char *text;       /* owned, NUL-terminated copy of the source */
    size_t len;       /* source bytes (without the NUL) */
    size_t *nums;     /* byte offset in text of each number token */
    size_t nnum;
} zt_json;

/* Parse len bytes of text (need not be NUL-terminated).  Errors are ZT_EINPUT
 * "PATH: WHAT is not valid ... at byte offset N", offsets counted from base (so a
 * safetensors header reports file offsets).  Trailing JSON whitespace is allowed. */
int zt_json_parse(const char *path, const char *what, const void *text, size_t len, size_t base,
                  zt_json *out, zt_err *err);
/* Read a whole file (at most max_bytes) and parse it as above. */
int zt_json_parse_file(const char *path, size_t max_bytes, zt_json *out, zt_err *err);
void zt_json_free(zt_json *j);
/* Number tokens inside item (itself included): how far a document-order walk
 * advances through nums when it skips item. */
size_t zt_json_count_numbers(const struct cJSON *item);
/* Number token k as an exact integer: 0 ok, 1 not an integer literal (has a
 * fraction or exponent, or k is out of range), 2 outside int64. */
int zt_json_int(const zt_json *j, size_t k, int64_t *out);
/* The first key that an object inside item (itself included, depth first)
 * repeats: cJSON keeps a repeated key as a second member, a lookup takes the
 * first, Python's json the last and pyarrow refuses, so a reader that cannot
 * say which was meant refuses it.  NULL when none; -1 in *oom when scratch
 * could not be had (then NULL). */
const char *zt_json_duplicate_key(const struct cJSON *item, int *oom);
/* Make every number of the tree print as its source token: cJSON keeps a double,
 * so a re-printed 8.0 would read 8 and 1.0e-5 would read 1e-05, and a file that
 * is read, completed and written again (io/hf_carry.c) would change numbers it
 * did not mean to touch.  Each number node becomes a raw node holding its token
 * text; afterwards the tree is for printing and copying only (cJSON_IsNumber is
 * false on those nodes, and nums no longer walks it).  0 ok, -1 out of memory
 * (the tree is then partly converted, still printable). */
int zt_json_keep_number_text(zt_json *j);

/* The one writer of the JSON files ztrain makes (checkpoint index, trainer state,
 * manifest, tokenizer.json, config.json): text, as cJSON_Print returned it, written
 * atomically to path (core/fs.h), followed by a newline when `newline`, then freed
 * with cJSON_free whatever happens.  A NULL text is the printer's out of memory,
 * reported as such. */
int zt_json_write_text(const char *path, char *text, int newline, zt_err *err);

#endif
