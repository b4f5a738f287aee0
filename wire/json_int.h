/* The fast JSON parser's internals, shared by wire/'s json_*.c modules:
 * json_scan.c (tokens: strings, numbers, literals), json_walk.c (objects,
 * arrays and duplicate keys) and json_event.c (the SegmentEvent fields and
 * the entry point): the parser's state and types, and the walk's entry
 * points. The scanner's are in json_scan.h. The helpers defined here are
 * static inline because the parser calls them per byte, per key or per
 * value. Other folders use json_event.h. */
#ifndef SEGD_JSON_INT_H
#define SEGD_JSON_INT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/hash.h"

/* One pass over the bytes, no tree: known fields are decoded straight into
 * ev, everything else is checked as jansson checks it (the accept/reject
 * decision must be the reference's) and skipped. jansson counts every value
 * (scalars too) against its depth limit of 2048; so does this. */

#define JP_MAX_DEPTH 2048
#define JP_INLINE_KEYS 4
#define JP_INDEX_FROM 64 /* keys in one object before a hash index is built */

typedef struct jp {
    const uint8_t *p, *end;
    int depth;
    char *err;
    size_t n;
    segd_err_t code; /* what the first failure returns */
} jp_t;

/* One key of an object: the decoded key's hash and length, and its raw,
 * still escaped bytes. The raw length equals the decoded length exactly
 * when the key has no escape, which lets most keys be compared as they are. */
typedef struct jp_key {
    uint64_t hash;
    const uint8_t *raw;
    size_t rawlen, len;
} jp_key_t;

/* The keys seen in one object, for JSON_REJECT_DUPLICATES. */
typedef struct jp_keyset {
    jp_key_t inl[JP_INLINE_KEYS];
    jp_key_t *v; /* inl, or heap once more are needed */
    size_t n, cap;
    uint32_t *index; /* open addressing over v, from JP_INDEX_FROM keys */
    size_t index_cap;
} jp_keyset_t;

static inline void jp_ws(jp_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

typedef struct jp_out {
    char *buf;  /* may be NULL: nothing kept */
    size_t cap; /* bytes of buf */
    size_t len; /* decoded length, even past cap */
} jp_out_t;

static inline void jp_out_byte(jp_out_t *o, uint8_t c)
{
    if (o->len < o->cap)
        o->buf[o->len] = (char)c;
    o->len++;
}

/* Objects: field() consumes the value of a key it knows and returns 1, or returns 0
 * to have the value skipped (an unknown key, checked for duplicates), -1 on
 * error. A known key seen twice is its own duplicate check (bit in *seen). */
typedef int (*jp_field_fn)(jp_t *j, const char *key, size_t len, void *ctx);

/* element() consumes one element (p on its first byte). */
typedef int (*jp_elem_fn)(jp_t *j, void *ctx);

/* Walk (json_walk.c). */
int segd_jp_object(jp_t *j, jp_field_fn field, void *ctx);
int segd_jp_array(jp_t *j, jp_elem_fn element, void *ctx);
int segd_jp_skip_value(jp_t *j);

#endif
