/* text_data.h — text files to token ids: documents, and the content-addressed
 * cache that lets `train`/`eval --data FILE.txt --tokenizer DIR` tokenize once.
 *
 * A cached stream is CACHE_DIR/<sha256>.npy (int32), where the SHA-256 covers a
 * format tag, the tokenizer's tokenizer.json bytes and the text's bytes: a
 * change to either gives a new key, and an unchanged pair is never tokenized
 * again.  Entries are written atomically, so concurrent runs can share a cache. */
#ifndef ZT_TEXT_DATA_H
#define ZT_TEXT_DATA_H

#include <stddef.h>

#include "../core/status.h"
#include "tokenizer.h"

typedef struct zt_text_file {
    const char *data;
    size_t len;
    void *map; /* NULL for an empty file */
} zt_text_file;

/* Map a regular file read-only (an empty file gives len 0). */
int zt_text_file_open(const char *path, zt_text_file *f, zt_err *err);
void zt_text_file_close(zt_text_file *f);

/* Append the ids of each file's documents to out: a text file is one document,
 * a JSON Lines file (records.h) or a table (io/table.h: Parquet, Arrow) one
 * document a record, its text in text_field
 * (NULL: "text"); append_eos puts the tokenizer's eos id after every document
 * (ZT_EINPUT if it names none). */
int zt_text_tokenize_files(const zt_tokenizer *t, const char *const *paths, int n, const char *text_field,
                           int append_eos, int threads, zt_ids *out, zt_err *err);

/* The loss mask beside a cached X.npy: X.mask.npy (-1 if it does not fit cap). */
int zt_text_mask_path(const char *ids_path, char *buf, size_t cap);

/* Where the cache lives: $ZTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/ztrain/tokens,
 * else $HOME/.cache/ztrain/tokens. */
int zt_text_cache_dir(char *buf, size_t cap, zt_err *err);

/* The cached .npy of text_path tokenized with tok_dir's tokenizer (its
 * documents, as zt_text_tokenize_files makes them, without eos), made first if
 * missing.  out_path receives its path; *hit whether it existed; *vocab_size the
 * tokenizer's vocabulary size.  TRL's prompt-completion records (JSON Lines
 * records, or a table's "prompt" and "completion" columns) are cached as the
 * ids of prompt + completion + eos each, with the completion mask beside
 * (zt_text_mask_path: 0 over each prompt's own ids, 1 after), and *has_mask says
 * so.  Tables (.parquet, .arrow, a save_to_disk directory: io/table.h) are read
 * through Arrow, one document a row. */
int zt_text_cached_tokens(const char *text_path, const char *text_field, const char *tok_dir, const char *cache_dir,
                          int threads, char *out_path, size_t cap, int *hit, int *vocab_size, int *has_mask,
                          zt_err *err);

#endif
