/* chat_data.h — TRL's conversational records (JSON Lines) as token ids and a
 * loss mask, through the tokenizer's own chat template (text/chat.h):
 * {"messages": [...]} records (conversational language modeling) and
 * {"prompt": [...], "completion": [...]} records (conversational
 * prompt-completion), with TRL's assistant_only_loss.  Kept apart from
 * text_data.h's plain-text records, whose documents are strings. */
#ifndef ZT_CHAT_DATA_H
#define ZT_CHAT_DATA_H

#include <stddef.h>

#include "../core/status.h"
#include "chat.h"
#include "text_data.h"
#include "tokenizer.h"

enum { ZT_CHAT_MESSAGES = 1, ZT_CHAT_PROMPT_COMPLETION = 2 };

/* What the first record of the JSON Lines text is: ZT_CHAT_MESSAGES,
 * ZT_CHAT_PROMPT_COMPLETION (prompt and completion as lists of messages), or 0. */
int zt_chat_data_kind(const char *data, size_t len);

/* Append each record's ids to ids and one mask value per id to mask (1: the
 * loss is on that token).  assistant_only needs a template with
 * {% generation %} markers (ZT_EINPUT otherwise, as TRL refuses). */
int zt_chat_data_encode(const zt_tokenizer *t, const zt_chat *chat, const char *path, const char *data, size_t len,
                        int assistant_only, int threads, zt_ids *ids, zt_ids *mask, zt_err *err);

/* As zt_text_cached_tokens, for conversational records (the JSON Lines text
 * data[0..len) read from path): the cached ids (out_path) with their mask beside
 * (zt_text_mask_path), keyed by the tokenizer, its tokenizer_config.json (the
 * template), assistant_only and the records. */
int zt_chat_cached_tokens(const char *path, const char *data, size_t len, const char *tok_dir, const char *cache_dir,
                          int assistant_only, int threads, char *out_path, size_t cap, int *hit, int *vocab,
                          zt_err *err);

/* A Parquet or Arrow table (io/table.h) whose "messages" column, or "prompt"
 * and "completion" columns, hold lists of messages: its rows as JSON Lines
 * records (*data, accounted: free with zt_free(ZT_MEM_OTHER, *data, *cap)).
 * *data is NULL when the table is not conversational. */
int zt_chat_table_records(const char *path, char **data, size_t *len, size_t *cap, zt_err *err);

#endif
