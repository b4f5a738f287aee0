/* Retirement markers as a sorted array of (key, before_ms): finding a key's
 * marker and adding one with the max-join. The store's policy
 * (core/policy.c) and the edge cache (cache/edge.c) each keep their marker
 * sets in this form, copied on write; keys are segment ids and partner
 * keys (segd_retire_key_of_partner). No state. */
#ifndef SEGD_MARKERS_H
#define SEGD_MARKERS_H

#include <stddef.h>
#include <stdint.h>

typedef struct segd_marker {
    int64_t key;
    int64_t before_ms; /* entries with ts_ms <= this are dead */
} segd_marker_t;

/* The marker of key in v[0..n) (sorted by key), NULL when there is none.
 * A key outside v's range (a partner key when v holds only segment
 * markers) is answered without the search: every entry of a read asks. */
const segd_marker_t *segd_markers_find(const segd_marker_t *v, size_t n, int64_t key);

/* Copies src[0..n) (sorted by key) into dst, which has room for n + 1,
 * with (key, before_ms) joined in: a key already there keeps the larger
 * before_ms. Returns dst's count. */
size_t segd_markers_put(segd_marker_t *dst, const segd_marker_t *src, size_t n, int64_t key,
                        int64_t before_ms);

/* Joins a[0..na) and b[0..nb) (each sorted by key; b may repeat a key)
 * into dst, which has room for na + nb: one marker per key, the largest
 * before_ms, never below 0. Returns dst's count. */
size_t segd_markers_join(segd_marker_t *dst, const segd_marker_t *a, size_t na,
                         const segd_marker_t *b, size_t nb);

#endif
