/* text.h — small string helpers shared by the parsers. */
#ifndef ZT_TEXT_H
#define ZT_TEXT_H

#include <stddef.h>

/* Levenshtein distance of the first 64 bytes of a and b: how the flag and
 * config parsers find the name a user probably meant. */
int zt_edit_distance(const char *a, const char *b);

/* buf = the NULL-terminated names of set joined by " | " (truncated to cap):
 * the "allowed values" part of an error message. */
void zt_join_names(char *buf, size_t cap, const char *const *set);

/* Index of s in the NULL-terminated set (case-insensitively when icase), or -1. */
int zt_index_of(const char *s, const char *const *set, int icase);

/* Offset of the first byte of s[0..len) that breaks UTF-8 (overlong forms,
 * surrogates and code points past U+10FFFF included, as Rust's str::from_utf8
 * rejects them), or len when all of it is valid. */
size_t zt_utf8_invalid_at(const unsigned char *s, size_t len);

#endif
