/* Avro binary primitives of the hand-written codecs (change.c, member.c):
 * zigzag longs and length-prefixed bytes appended to a buffer whose room
 * the caller reserved, and a bounds-checked reader that turns any overrun
 * or out-of-range value into a flag checked once at the end, so decoders
 * of untrusted bytes stay straight-line. */
#ifndef SEGD_AVRO_BIN_H
#define SEGD_AVRO_BIN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/buf.h"
#include "base/varint.h"

static inline void segd_avro_put_long(segd_buf_t *b, int64_t v)
{
    b->len += segd_zz_put(b->data + b->len, v);
}

static inline void segd_avro_put_bytes(segd_buf_t *b, const void *p, size_t n)
{
    segd_avro_put_long(b, (int64_t)n);
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

typedef struct segd_avro_reader {
    const uint8_t *p, *end;
    int bad; /* set by the first overrun or bad value; later reads return 0 */
} segd_avro_reader_t;

static inline int64_t segd_avro_get_long(segd_avro_reader_t *r)
{
    int64_t v = 0;
    if (!r->bad && segd_zz_get(&r->p, r->end, &v))
        r->bad = 1;
    return v;
}

static inline int32_t segd_avro_get_int(segd_avro_reader_t *r)
{
    int64_t v = segd_avro_get_long(r);
    if (v < INT32_MIN || v > INT32_MAX)
        r->bad = 1;
    return (int32_t)v;
}

/* Length-prefixed bytes, borrowed from the input; NULL (and bad) past its end. */
static inline const char *segd_avro_get_bytes(segd_avro_reader_t *r, size_t *len)
{
    int64_t n = segd_avro_get_long(r);
    if (r->bad || n < 0 || n > r->end - r->p) {
        r->bad = 1;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p += n;
    *len = (size_t)n;
    return s;
}

#endif
