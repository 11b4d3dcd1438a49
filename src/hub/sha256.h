/* SHA-256 (FIPS 180-4), streaming: the hub checks downloaded LFS files against the
 * sha256 the Hub names them by. Not a general crypto library: no HMAC, no other hashes. */
#ifndef TM_HUB_SHA256_H
#define TM_HUB_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct tm_sha256 {
    uint32_t state[8];
    uint64_t total;               /* bytes hashed so far */
    uint8_t block[64];
    size_t used;                  /* bytes waiting in block */
} tm_sha256;

void tm_sha256_init(tm_sha256 *s);
void tm_sha256_update(tm_sha256 *s, const void *data, size_t n);
/* Writes the 32-byte digest; s must be initialised again before reuse. */
void tm_sha256_final(tm_sha256 *s, uint8_t digest[32]);
/* Lowercase hex of a digest, NUL-terminated (65 bytes). */
void tm_sha256_hex(const uint8_t digest[32], char hex[65]);

#endif
