/* records.h — text kept as records, the way `datasets` users keep it: JSON
 * Lines (.jsonl, and .json, which `datasets`' json builder reads as JSON Lines
 * too), one JSON object per line, the text in one string member
 * (--text_field, default "text").  Each record is one document.
 *
 * Records of TRL's prompt-completion format ("prompt" and "completion") are
 * supervised fine-tuning data: text_data.h turns them into ids and a loss mask.
 *
 * The reader is strict: every non-blank line must be an object (core/json.h's
 * strict parser) holding the field as a string; anything else is ZT_EINPUT naming
 * the file, the line and what was expected, never JSON syntax tokenized as text. */
#ifndef ZT_RECORDS_H
#define ZT_RECORDS_H

#include <stddef.h>

#include "../core/status.h"

/* 1 if path names a JSON Lines file (.jsonl or .json), 0 otherwise. */
int zt_records_is_jsonl(const char *path);

/* Call fn(ctx, text, len) with field's string of each record of the JSON Lines
 * text[0..len) (read from path, named in errors), in file order.  A file of no
 * records is ZT_EINPUT. */
typedef int (*zt_record_fn)(void *ctx, const char *text, size_t len, zt_err *err);
int zt_records_each(const char *path, const char *data, size_t len, const char *field, zt_record_fn fn, void *ctx,
                    zt_err *err);

/* TRL's prompt-completion format: records with string members "prompt" and
 * "completion".  1 if the first record of the JSON Lines text is one (then every
 * record must be), 0 otherwise (a broken first line too: the readers name it). */
int zt_records_are_prompt_completion(const char *data, size_t len);
/* 1 if the first record of the JSON Lines text has a string member field. */
int zt_records_first_has(const char *data, size_t len, const char *field);
/* Call fn(ctx, prompt, completion) for each prompt-completion record, in order. */
typedef int (*zt_pair_fn)(void *ctx, const char *prompt, size_t prompt_len, const char *completion,
                          size_t completion_len, zt_err *err);
int zt_records_each_pair(const char *path, const char *data, size_t len, zt_pair_fn fn, void *ctx, zt_err *err);

/* Call fn(ctx, record, line) for each record (a JSON object) of the JSON Lines
 * text; expected says what a record holds, for the error on a line that is not
 * an object.  fn's non-zero status stops the walk and is returned. */
struct cJSON;
typedef int (*zt_record_obj_fn)(void *ctx, const struct cJSON *record, long line, zt_err *err);
int zt_records_each_object(const char *path, const char *data, size_t len, const char *expected, zt_record_obj_fn fn,
                           void *ctx, zt_err *err);

#endif
