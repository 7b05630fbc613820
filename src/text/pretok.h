/* pretok.h — the pre-tokenizer regexes of byte-level BPE, implemented directly.
 *
 * `tokenizers` splits text with a regex before BPE (Split with behavior
 * Isolated, or ByteLevel with use_regex).  Two patterns cover the Llama-class
 * models; this module implements their leftmost-first alternation by hand over
 * Unicode classes instead of running a regex engine:
 *
 *   GPT-2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama-3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * In both, some alternative matches at every position (every character is a
 * letter, number, space or other), so the matches tile the text: a piece is
 * [i, zt_pretok_next(i)). */
#ifndef ZT_PRETOK_H
#define ZT_PRETOK_H

#include <stddef.h>
#include <stdint.h>

typedef enum zt_pretok_kind { ZT_PRETOK_NONE, ZT_PRETOK_GPT2, ZT_PRETOK_LLAMA3 } zt_pretok_kind;

/* The exact pattern strings (as in tokenizer.json) that the kinds implement. */
extern const char zt_pretok_gpt2_pattern[];
extern const char zt_pretok_llama3_pattern[];

/* End of the piece that starts at i (i < n) in valid UTF-8 text s[0..n). */
size_t zt_pretok_next(zt_pretok_kind kind, const uint8_t *s, size_t n, size_t i);

#endif
