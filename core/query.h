/* What a bidder reads from a profile: live entries, optionally only those
 * expiring after T or written since T, and live counts in an id range.
 * Pure functions over a decoded profile; no RocksDB (the edge cache uses
 * them too). Dead entries are never returned, compacted or not. */
#ifndef SEGD_QUERY_H
#define SEGD_QUERY_H

#include <stdint.h>

#include "core/profile.h"

typedef struct segd_query {
    int64_t expiring_after_s; /* keep expiry_s > this; 0 = no filter */
    int64_t updated_since_ms; /* keep ts_ms >= this; 0 = no filter */
} segd_query_t;

/* Copies the matching live entries of p into out (capacity >= p->n) and
 * returns their number; they stay sorted by id. */
size_t segd_query_select(const segd_profile_t *p, const segd_prune_t *rule,
                         const segd_query_t *q, segd_entry_t *out);

/* Number of live entries with lo <= segment_id <= hi. */
uint64_t segd_query_count_range(const segd_profile_t *p, const segd_prune_t *rule,
                                int64_t lo, int64_t hi);

#endif
