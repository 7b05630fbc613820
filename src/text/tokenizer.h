/* tokenizer.h — Hugging Face `tokenizers` BPE tokenizers (tokenizer.json), in C.
 *
 * Two families, the ones Llama-class models use:
 *   byte-level BPE   (GPT-2, Llama-3): a pre-tokenizer regex (GPT-2 or Llama-3
 *                    pattern) splits the text, each piece's bytes are merged;
 *   SentencePiece-style BPE (Llama-2, Mistral): spaces become U+2581 "▁", one is
 *                    prepended, characters are merged, and a character missing
 *                    from the vocabulary falls back to its bytes <0xNN>.
 * Added and special tokens are matched in the raw text first (longest match)
 * and never split.  Anything else in tokenizer.json is refused with ZT_EINPUT
 * naming its JSON path, so a tokenizer ztrain loads encodes exactly as
 * `tokenizers` does: encode(text, add_special_tokens=False).ids.
 *
 * A loaded tokenizer is read-only, so one may be shared by threads. */
#ifndef ZT_TOKENIZER_H
#define ZT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

typedef struct zt_tokenizer zt_tokenizer;

/* A growable array of token ids (accounted memory). */
typedef struct zt_ids {
    int32_t *v;
    size_t n, cap;
} zt_ids;

int zt_ids_push(zt_ids *ids, int32_t id);            /* ZT_OK or ZT_EFAIL (memory) */
int zt_ids_append(zt_ids *ids, const int32_t *v, size_t n);
void zt_ids_free(zt_ids *ids);

/* Load DIR/tokenizer.json (and the eos/bos/pad names from DIR/tokenizer_config.json
 * or DIR/special_tokens_map.json when present). */
int zt_tok_load(const char *dir, zt_tokenizer **out, zt_err *err);
/* Load from a tokenizer.json path; config_dir (may be NULL) is where eos/bos are looked up. */
int zt_tok_load_file(const char *json_path, const char *config_dir, zt_tokenizer **out, zt_err *err);
void zt_tok_free(zt_tokenizer *t);

int zt_tok_vocab_size(const zt_tokenizer *t); /* largest id + 1, added tokens included */
int32_t zt_tok_eos_id(const zt_tokenizer *t); /* -1 when the directory names none */
int32_t zt_tok_bos_id(const zt_tokenizer *t);
int32_t zt_tok_pad_id(const zt_tokenizer *t); /* -1 when the directory names none */
int32_t zt_tok_token_id(const zt_tokenizer *t, const char *token); /* by its tokenizer.json string; -1 if none */
int zt_tok_is_special(const zt_tokenizer *t, int32_t id);
const char *zt_tok_family(const zt_tokenizer *t); /* "byte-level BPE" or "SentencePiece-style BPE" */

/* Append the ids of UTF-8 text[0..len) to out.  threads > 1 encodes pieces of
 * the text in parallel (split only where splitting cannot change the result);
 * 0 means OpenMP's default.  Invalid UTF-8 is ZT_EINPUT naming the byte offset. */
int zt_tok_encode(const zt_tokenizer *t, const char *text, size_t len, int threads, zt_ids *out, zt_err *err);
/* The same with the size of the parallel pieces chosen (zt_tok_encode: 64 KiB);
 * tests use small pieces to prove that splitting never changes the ids. */
int zt_tok_encode_chunked(const zt_tokenizer *t, const char *text, size_t len, int threads, size_t chunk_bytes,
                          zt_ids *out, zt_err *err);

/* The bytes that token id stands for in decoded text (byte-level: its raw
 * bytes; SentencePiece: "▁" as a space and <0xNN> as the byte NN), or NULL for
 * an id outside the vocabulary.  Concatenating these for a sequence is its
 * decoded text, except that a SentencePiece decoder then strips one leading
 * space (zt_tok_decode does both). */
const uint8_t *zt_tok_id_bytes(const zt_tokenizer *t, int32_t id, size_t *len);

/* Decode ids into a malloc'ed, NUL-terminated buffer (*out, *len); special
 * tokens are written as their text unless skip_special.  An id outside the
 * vocabulary is ZT_EINPUT. */
int zt_tok_decode(const zt_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out,
                  size_t *len, zt_err *err);

/* GPT-2's byte-level alphabet, in which byte-level tokenizer.json files spell
 * their tokens: the character that stands for byte b, and the byte that
 * character cp stands for (-1: cp is not in the alphabet). */
uint32_t zt_tok_byte_to_char(uint8_t b);
int zt_tok_char_to_byte(uint32_t cp);

#endif
