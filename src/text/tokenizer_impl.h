/* tokenizer_impl.h — the tokenizer's struct, shared by its loading and
 * decoding (tokenizer.c) and its encoding (tokenizer_encode.c); private to
 * src/text. */
#ifndef ZT_TOKENIZER_IMPL_H
#define ZT_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "post_processor.h"
#include "pretok.h"
#include "strmap.h"
#include "tokenizer.h"

#define SP "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space */

enum { FAMILY_BYTE_LEVEL = 1, FAMILY_SENTENCEPIECE = 2 };
/* SentencePiece's "▁" before a segment (the text between added tokens):
 * Llama-2's Prepend normalizer puts one before every segment; the Metaspace
 * pre-tokenizer only when the segment does not already start with a space,
 * and with prepend_scheme "first" only for the segment at the start of the text. */
enum { SP_PREPEND_NEVER = 0, SP_PREPEND_EVERY, SP_PREPEND_METASPACE_ALWAYS, SP_PREPEND_METASPACE_FIRST };

typedef struct added_token {
    size_t content_off;     /* into strings */
    size_t len;
    int32_t id;
    int special;
} added_token;

struct zt_tokenizer {
    int family;
    zt_pretok_kind pretok;
    int add_prefix_space;   /* byte-level: a space before a segment not starting with one */
    int sp_normalizer;      /* SentencePiece: Llama-2's normalizer (Prepend + Replace) */
    int sp_prepend;         /* SentencePiece: when "▁" is put before a segment (SP_PREPEND_*) */
    int sp_split_words;     /* Metaspace split: every "▁" starts a new word */
    int dec_byte_fallback;  /* the decoder turns <0xNN> into the byte NN */
    int strip_leading;      /* SentencePiece decoder: Strip(" ", 1, 0) after Fuse */
    int byte_fallback, fuse_unk, ignore_merges;
    int sp_splits;          /* SentencePiece: text may be split where no token spans (below) */
    uint8_t *bigram;        /* 256 x 256 bits: byte pair (a, b) occurs inside some token */
    int32_t unk_id, eos_id, bos_id, pad_id;
    int32_t byte_id[256];   /* byte-level: the token of each byte; SentencePiece: <0xNN> (-1: none) */
    int vocab_size;

    zt_strmap vocab;        /* model-space key -> id */
    zt_merges merges;
    /* per id (vocab_size entries): decoded bytes and the tokenizer.json
     * spelling, as offsets + 1 into strings (0: no such id) */
    size_t *dec_off, *dec_len, *name_off;
    uint8_t *is_special;
    uint8_t *strings;       /* NUL-terminated byte strings, one accounted arena */
    size_t strings_len, strings_cap;

    added_token *added;
    int n_added, added_cap;
    uint8_t added_first[256]; /* 1 if some added token starts with this byte */
    zt_post_processor post;   /* what add_special_tokens=True puts around a sequence */
};

#endif
