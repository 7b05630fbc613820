/* tokens.h — token streams for training and evaluation (contract §5).
 *
 *   .npy  a 1-D array of unsigned or signed integers (|u1 <u2 <u4 <u8 |i1 <i2 <i4 <i8),
 *         C order, NumPy format version 1.0, 2.0 or 3.0;
 *   .bin  raw little-endian uint16;
 *   .txt  UTF-8 bytes, each byte one token (vocabulary 256).
 * Tokens are returned as int32; values that don't fit (negative, or >= 2^31) are
 * bad input.  The file is read once into an accounted buffer. */
#ifndef ZT_TOKENS_H
#define ZT_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

typedef struct zt_tokens {
    int32_t *ids;
    size_t n;
    int32_t max_id; /* largest token in the stream, for the vocabulary check */
    uint8_t *loss_mask; /* n entries, 1 where the token counts as a target (NULL: every token) */
} zt_tokens;

int zt_tokens_load(const char *path, zt_tokens *out, zt_err *err);
void zt_tokens_free(zt_tokens *t);
/* Completion-only loss: read mask_path, a token file (as zt_tokens_load reads it)
 * of exactly t->n values, each 0 (the token is a prompt token: no loss when it is
 * the target) or 1, into t->loss_mask. */
int zt_tokens_load_mask(const char *mask_path, zt_tokens *t, zt_err *err);

/* Write a .npy of int32 (used by tests and tools); atomic like zt_st_write. */
int zt_tokens_write_npy(const char *path, const int32_t *ids, size_t n, zt_err *err);

#endif
