/* Zigzag LEB128 longs: Avro's "long" encoding, also used by the outbox
 * format. Inline because every encoder and decoder of publisher/ is a loop
 * over these. */
#ifndef SEGD_VARINT_H
#define SEGD_VARINT_H

#include <stddef.h>
#include <stdint.h>

#define SEGD_ZZ_MAX 10 /* bytes of the longest encoding */

/* Writes v at out (room for SEGD_ZZ_MAX bytes); returns the bytes written. */
static inline size_t segd_zz_put(uint8_t *out, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    size_t n = 0;
    while (z >= 0x80) {
        out[n++] = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    out[n++] = (uint8_t)z;
    return n;
}

/* Reads one long at *p (< end), advancing *p; returns -1 when truncated or
 * longer than 10 bytes. */
static inline int segd_zz_get(const uint8_t **p, const uint8_t *end, int64_t *v)
{
    uint64_t z = 0;
    const uint8_t *q = *p;
    for (int shift = 0; shift < 70 && q < end; shift += 7) {
        uint8_t b = *q++;
        z |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            *p = q;
            return 0;
        }
    }
    return -1;
}

#endif
