/* unicode.h — the little of Unicode that tokenization needs: UTF-8 decoding and
 * the three character classes the pre-tokenizer regexes test (\p{L}, \p{N}, \s).
 *
 * The class table is generated (tools/gen_unicode_classes.py, from Python's
 * unicodedata) as sorted ranges; ASCII is answered from a 128-entry table so the
 * common case costs one load. */
#ifndef ZT_UNICODE_H
#define ZT_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum { ZT_UC_OTHER = 0, ZT_UC_LETTER = 1, ZT_UC_NUMBER = 2, ZT_UC_SPACE = 3 };

typedef struct zt_uc_range {
    uint32_t first, last;
    uint8_t cls;
} zt_uc_range;

extern const zt_uc_range zt_uc_ranges[];
extern const int zt_uc_nranges;
extern const char zt_uc_version[];

/* The class of code point cp (ZT_UC_*). */
int zt_uc_class(uint32_t cp);

/* Decode the UTF-8 character at s[0..n) (n >= 1): returns its length (1-4) and
 * sets *cp, or returns 0 when the bytes are not valid UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF are invalid, as in Rust's str). */
int zt_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Encode cp as UTF-8 into out (4 bytes of room); returns the length. */
int zt_utf8_encode(uint32_t cp, uint8_t *out);

/* Offset of the first invalid UTF-8 byte in s[0..n), or n when all is valid. */
size_t zt_utf8_validate(const uint8_t *s, size_t n);

#endif
