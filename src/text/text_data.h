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

/* How documents are bounded, as transformers and TRL bound them:
 *   add_special_tokens     the tokenizer's post_processor around each document
 *                          (encode(text, add_special_tokens=True), transformers'
 *                          default): BOS, or BOS and EOS, ...;
 *   eos_between_documents  the tokenizer's eos after each document unless its
 *                          ids already end with it (TRL's SFT appends eos_token
 *                          to a text that does not end with it), so a
 *                          template that adds EOS does not get a second one;
 *                          nothing when the tokenizer names no eos.
 * text_field: the record member or table column of plain text (NULL: "text"). */
typedef struct zt_text_opts {
    const char *text_field;
    int add_special_tokens;
    int eos_between_documents;
} zt_text_opts;
#define ZT_TEXT_OPTS_DEFAULTS {"text", 1, 1}

/* One document's ids appended to out: the post_processor's prefix, the ids of
 * text[0..len), its suffix, then eos, each as o asks.  Every kind of record
 * (text, prompt + completion, a rendered conversation) goes through here.
 * ZT_EINPUT when special tokens are asked for and the tokenizer's
 * post_processor is one ztrain does not apply. */
int zt_text_encode_document(const zt_tokenizer *t, const zt_text_opts *o, const char *text, size_t len, int threads,
                            zt_ids *out, zt_err *err);

/* One line, for the start of a run: what is added around each document. */
void zt_text_describe_documents(const zt_tokenizer *t, const zt_text_opts *o, char *buf, size_t cap);

/* Append the ids of each file's documents to out: a text file is one document,
 * a JSON Lines file (records.h) or a table (io/table.h: Parquet, Arrow) one
 * document a record, each bounded as o says (zt_text_encode_document). */
int zt_text_tokenize_files(const zt_tokenizer *t, const char *const *paths, int n, const zt_text_opts *o, int threads,
                           zt_ids *out, zt_err *err);

/* The loss mask beside a cached X.npy: X.mask.npy (-1 if it does not fit cap). */
int zt_text_mask_path(const char *ids_path, char *buf, size_t cap);

/* Where the cache lives: $ZTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/ztrain/tokens,
 * else $HOME/.cache/ztrain/tokens. */
int zt_text_cache_dir(char *buf, size_t cap, zt_err *err);

/* The cached .npy of text_path tokenized with tok_dir's tokenizer (its
 * documents, as zt_text_tokenize_files makes them with o), made first if
 * missing; the key covers o and the eos id it appends.  out_path receives its path; *hit whether it existed; *vocab_size the
 * tokenizer's vocabulary size.  TRL's prompt-completion records (JSON Lines
 * records, or a table's "prompt" and "completion" columns) are cached as the
 * document prompt + completion (one string, bounded as o says), with the
 * completion mask beside (zt_text_mask_path: 0 over the post_processor's prefix
 * and the prompt's own ids, 1 after), and *has_mask says so.  Tables (.parquet, .arrow, a save_to_disk directory: io/table.h) are read
 * through Arrow, one document a row. */
int zt_text_cached_tokens(const char *text_path, const zt_text_opts *o, const char *tok_dir, const char *cache_dir,
                          int threads, char *out_path, size_t cap, int *hit, int *vocab_size, int *has_mask,
                          zt_err *err);

#endif
