/* LEB128 varints, plain (record codec) and zigzag (Avro's "long", also the
 * outbox format). Inline: every encoder and decoder is a loop over these. */
#ifndef SEGD_VARINT_H
#define SEGD_VARINT_H

#include <stddef.h>
#include <stdint.h>

#define SEGD_ZZ_MAX 10 /* bytes of the longest encoding */

static inline uint64_t segd_zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t segd_unzigzag(uint64_t z) { return (int64_t)(z >> 1) ^ -(int64_t)(z & 1); }

/* Writes v at out (room for SEGD_ZZ_MAX bytes); returns the bytes written. */
static inline size_t segd_uv_put(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* Reads one varint at *p (< end), advancing *p; returns -1 (and leaves *p)
 * when truncated or longer than 10 bytes. */
static inline int segd_uv_get(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t z = 0;
    const uint8_t *q = *p;
    for (int shift = 0; shift < 70 && q < end; shift += 7) {
        uint8_t b = *q++;
        z |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = z;
            *p = q;
            return 0;
        }
    }
    return -1;
}

static inline size_t segd_zz_put(uint8_t *out, int64_t v) { return segd_uv_put(out, segd_zigzag(v)); }

static inline int segd_zz_get(const uint8_t **p, const uint8_t *end, int64_t *v)
{
    uint64_t z;
    if (segd_uv_get(p, end, &z))
        return -1;
    *v = segd_unzigzag(z);
    return 0;
}

#endif
