/* post_processor.h — tokenizer.json's "post_processor", the special tokens a
 * tokenizer puts around one encoded sequence when `tokenizers` is asked for
 * encode(text, add_special_tokens=True) (transformers' default).
 *
 * Supported, as Llama-class tokenizers ship them:
 *   null                            nothing added;
 *   TemplateProcessing              "single": special tokens, then the sequence
 *                                   "A" once, then special tokens (BOS; BOS and
 *                                   EOS; ...), each special token's ids taken
 *                                   from "special_tokens" as `tokenizers` does;
 *   ByteLevel                       offsets only: adds no ids;
 *   Sequence of the above           (Llama 3: ByteLevel, TemplateProcessing).
 * A "single" with no "A", or two, or a special token missing from
 * "special_tokens" is refused at load with the JSON path; another type
 * (BertProcessing, RobertaProcessing, ...) is noted in `unsupported` and
 * refused where special tokens are asked for (text_data.h), so
 * `--add_special_tokens` never means less than it says. */
#ifndef ZT_POST_PROCESSOR_H
#define ZT_POST_PROCESSOR_H

#include <stdint.h>

#include "../core/status.h"

enum { ZT_POST_MAX = 16 };

typedef struct zt_post_processor {
    int32_t prefix[ZT_POST_MAX]; /* ids before the sequence */
    int32_t suffix[ZT_POST_MAX]; /* ids after it */
    int n_prefix, n_suffix;
    /* non-empty: a post-processor ztrain does not apply, why (refused only
     * when asked to add special tokens: the ids of plain encode stay usable) */
    char unsupported[200];
} zt_post_processor;

struct cJSON;
/* Parse tokenizer.json's "post_processor" value pp (NULL or JSON null: none)
 * into out; file names tokenizer.json in errors.  ZT_EINPUT when malformed. */
int zt_post_processor_load(const struct cJSON *pp, const char *file, zt_post_processor *out, zt_err *err);

#endif
