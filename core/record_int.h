/* The record codec's bit-level primitives, shared by record_encode.c and
 * record.c (decode): varints into a buffer, a bit writer and reader, Rice
 * codes with a raw escape, and mixed-radix dictionary indexes. They are
 * static inline because the codec calls them per entry on the ingest path,
 * and a call across files would not be inlined. Private to core/. */
#ifndef SEGD_RECORD_INT_H
#define SEGD_RECORD_INT_H

#include <stdint.h>
#include <string.h>

#include "base/varint.h"
#include "core/record.h"

#define RICE_ESCAPE_Q 24 /* quotients >= this are written raw (64 bits) */
#define MAX_RICE_K 56

/* ---------- varints and bits ---------- */

static inline void put_varint(segd_buf_t *b, uint64_t v) { b->len += segd_uv_put(b->data + b->len, v); }

static inline int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

typedef struct bit_writer {
    segd_buf_t *b;
    uint64_t acc;
    unsigned n;
} bit_writer_t;

/* Writes the low nbits (<= 32) of v; the buffer has room reserved. */
static inline void bw_put(bit_writer_t *w, uint64_t v, unsigned nbits)
{
    if (nbits < 64)
        v &= ((uint64_t)1 << nbits) - 1;
    w->acc |= v << w->n;
    w->n += nbits;
    while (w->n >= 8) {
        w->b->data[w->b->len++] = (uint8_t)w->acc;
        w->acc >>= 8;
        w->n -= 8;
    }
}

static inline void bw_put_wide(bit_writer_t *w, uint64_t v, unsigned nbits)
{
    while (nbits > 32) {
        bw_put(w, v & 0xffffffffu, 32);
        v >>= 32;
        nbits -= 32;
    }
    bw_put(w, v, nbits);
}

static inline void bw_flush(bit_writer_t *w)
{
    if (w->n)
        w->b->data[w->b->len++] = (uint8_t)w->acc;
    w->acc = 0;
    w->n = 0;
}

typedef struct bit_reader {
    const uint8_t *p, *end;
    uint64_t acc;
    unsigned n;
} bit_reader_t;

static inline void br_refill(bit_reader_t *r)
{
    while (r->n <= 56 && r->p < r->end) {
        r->acc |= (uint64_t)*r->p++ << r->n;
        r->n += 8;
    }
}

/* Reads nbits (<= 32); returns -1 past the end. */
static inline int br_get(bit_reader_t *r, unsigned nbits, uint64_t *v)
{
    if (r->n < nbits)
        br_refill(r);
    if (r->n < nbits)
        return -1;
    *v = nbits ? r->acc & (((uint64_t)1 << nbits) - 1) : 0;
    r->acc = nbits < 64 ? r->acc >> nbits : 0;
    r->n -= nbits;
    return 0;
}

static inline int br_get_wide(bit_reader_t *r, unsigned nbits, uint64_t *v)
{
    uint64_t lo, hi;
    if (nbits <= 32)
        return br_get(r, nbits, v);
    if (br_get(r, 32, &lo) || br_get(r, nbits - 32, &hi))
        return -1;
    *v = lo | hi << 32;
    return 0;
}

/* Counts leading one bits (the unary quotient), up to max. */
static inline int br_unary(bit_reader_t *r, unsigned max, unsigned *q)
{
    unsigned count = 0;
    for (;;) {
        if (r->n == 0)
            br_refill(r);
        if (r->n == 0)
            return -1;
        /* 64 valid one bits leave ~acc zero, where ctz is undefined */
        unsigned ones = ~r->acc ? (unsigned)__builtin_ctzll(~r->acc) : 64;
        if (ones > r->n)
            ones = r->n;
        if (count + ones >= max) {
            unsigned take = max - count;
            r->acc >>= take;
            r->n -= take;
            *q = max;
            return 0;
        }
        count += ones;
        if (ones < r->n) { /* found the terminating zero */
            r->acc >>= ones + 1;
            r->n -= ones + 1;
            *q = count;
            return 0;
        }
        r->acc = 0;
        r->n = 0;
    }
}

/* ---------- Rice codes ---------- */

static inline void rice_put(bit_writer_t *w, uint64_t v, unsigned k)
{
    uint64_t q = v >> k;
    if (q < RICE_ESCAPE_Q) {
        bw_put(w, ((uint64_t)1 << q) - 1, (unsigned)q + 1);
        bw_put_wide(w, v, k);
    } else {
        bw_put(w, ((uint64_t)1 << RICE_ESCAPE_Q) - 1, RICE_ESCAPE_Q);
        bw_put_wide(w, v, 64);
    }
}

static inline int rice_get(bit_reader_t *r, unsigned k, uint64_t *v)
{
    unsigned q;
    uint64_t low;
    if (br_unary(r, RICE_ESCAPE_Q, &q))
        return -1;
    if (q == RICE_ESCAPE_Q)
        return br_get_wide(r, 64, v);
    if (br_get_wide(r, k, &low))
        return -1;
    *v = ((uint64_t)q << k) | low;
    return 0;
}

static inline uint64_t rice_cost(const uint64_t *v, size_t n, unsigned k)
{
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t q = v[i] >> k;
        bits += q < RICE_ESCAPE_Q ? q + 1 + k : RICE_ESCAPE_Q + 64;
    }
    return bits;
}

/* The Rice parameter near log2(mean * ln 2), refined by exact cost. */
static inline unsigned choose_rice_k(const uint64_t *v, size_t n)
{
    double mean = 0;
    for (size_t i = 0; i < n; i++)
        mean += (double)v[i];
    mean = n ? mean / (double)n : 0;
    unsigned k0 = 0;
    while (k0 < MAX_RICE_K && (double)((uint64_t)1 << (k0 + 1)) <= mean * 0.69)
        k0++;
    unsigned best = k0;
    uint64_t best_cost = rice_cost(v, n, k0);
    for (unsigned k = k0 ? k0 - 1 : 0; k <= k0 + 1 && k <= MAX_RICE_K; k++) {
        uint64_t c = rice_cost(v, n, k);
        if (c < best_cost) {
            best_cost = c;
            best = k;
        }
    }
    return best;
}

/* ---------- mixed-radix dictionary indexes ----------
 * Indexes in [0, nd) are packed m to a 32-bit chunk as base-nd digits, so an
 * index costs log2(nd) bits rather than ceil(log2(nd)). */

static inline unsigned radix_per_chunk(uint64_t nd)
{
    unsigned m = 0;
    for (uint64_t v = 1; nd > 1 && v * nd <= ((uint64_t)1 << 32); v *= nd)
        m++;
    return m;
}

static inline uint64_t ipow(uint64_t b, unsigned e)
{
    uint64_t r = 1;
    while (e--)
        r *= b;
    return r;
}

static inline unsigned bits_for_u64(uint64_t n) /* smallest b with 2^b >= n */
{
    unsigned b = 0;
    while (b < 64 && ((uint64_t)1 << b) < n)
        b++;
    return b;
}

static inline unsigned bits_for(uint32_t n) { return bits_for_u64(n); }

static inline void radix_put(bit_writer_t *w, const uint32_t *idx, size_t n, uint32_t nd)
{
    unsigned m = radix_per_chunk(nd);
    for (size_t i = 0; m && i < n; i += m) {
        unsigned r = (unsigned)(n - i < m ? n - i : m);
        uint64_t v = 0;
        for (unsigned j = r; j-- > 0;)
            v = v * nd + idx[i + j];
        bw_put(w, v, bits_for_u64(ipow(nd, r)));
    }
}

static inline int radix_get(bit_reader_t *r, uint32_t *idx, size_t n, uint32_t nd)
{
    unsigned m = radix_per_chunk(nd);
    if (!m) {
        memset(idx, 0, n * sizeof(*idx));
        return 0;
    }
    for (size_t i = 0; i < n; i += m) {
        unsigned cnt = (unsigned)(n - i < m ? n - i : m);
        uint64_t limit = ipow(nd, cnt), v;
        if (br_get(r, bits_for_u64(limit), &v) || v >= limit)
            return -1;
        for (unsigned j = 0; j < cnt; j++, v /= nd)
            idx[i + j] = (uint32_t)(v % nd);
    }
    return 0;
}

#endif
