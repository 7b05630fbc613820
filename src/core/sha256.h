/* sha256.h — SHA-256 (FIPS 180-4), for content-addressed caches: a key that
 * changes whenever any byte of what it covers changes. */
#ifndef ZT_SHA256_H
#define ZT_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct zt_sha256 {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t block[64];
    size_t fill;
} zt_sha256;

void zt_sha256_init(zt_sha256 *s);
void zt_sha256_update(zt_sha256 *s, const void *data, size_t n);
void zt_sha256_final(zt_sha256 *s, uint8_t out[32]);
/* out: 64 lowercase hex digits + NUL */
void zt_sha256_hex(const uint8_t digest[32], char out[65]);

#endif
