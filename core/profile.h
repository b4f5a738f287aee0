/* Profiles in memory: the per-user sorted map segment -> (expiry, ts,
 * flags, partner), the DESIGN §3 join of several profiles into one, and
 * liveness and pruning against the erase marker, the retirements and the GC
 * watermark. Invariant: a profile's entries are sorted by segment id and ids
 * are unique. core/record.h encodes what this module builds; both are pure
 * C, shared by the store, snapshots and the edge cache. */
#ifndef SEGD_PROFILE_H
#define SEGD_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Retirement markers are keyed by an int64 (DESIGN 3.2): a segment id
 * (>= 0) retires that segment, and a negative key retires every entry of a
 * partner. Partner P's key is P - 2^32, negative for every int32 P, so both
 * kinds share the markers' sets, outbox entries, change events and
 * manifests, and every max-join of markers applies to partners unchanged. */
#define SEGD_PARTNER_RETIRE_BASE ((int64_t)1 << 32)
static inline int64_t segd_retire_key_of_partner(int32_t partner_id)
{
    return (int64_t)partner_id - SEGD_PARTNER_RETIRE_BASE;
}
/* 1 and *partner_id when key is a partner's, 0 for a segment id. */
static inline int segd_retire_key_partner(int64_t key, int32_t *partner_id)
{
    if (key >= 0)
        return 0;
    *partner_id = (int32_t)(key + SEGD_PARTNER_RETIRE_BASE);
    return 1;
}
/* Whether key names a segment or a partner (a reader's bound check). */
static inline int segd_retire_key_valid(int64_t key)
{
    return key >= segd_retire_key_of_partner(INT32_MIN);
}

typedef struct segd_entry {
    int64_t segment_id; /* >= 0 */
    int64_t ts_ms;      /* event time, the LWW clock */
    int64_t expiry_s;   /* Unix seconds; 0 = tombstone (REMOVE) */
    int32_t flags;      /* opaque, carried to readers */
    int32_t partner_id; /* opaque, carried to readers */
} segd_entry_t;

typedef struct segd_profile {
    int64_t erased_before_ms; /* entries with ts_ms <= this are dead; 0 = none */
    segd_entry_t *entries;    /* owned; sorted by segment_id */
    size_t n;
    size_t cap;
} segd_profile_t;

/* What is dead and what may be physically dropped (DESIGN §3).
 * retired_before may be NULL (no retirements); it is asked for an entry's
 * segment id and for its partner's key (segd_retire_key_of_partner), and
 * returns 0 or less for a key without a marker. */
typedef struct segd_prune {
    int64_t now_ms;
    int64_t horizon_ms;
    /* 1 when the join sees the key's whole history (full merge, compaction
     * filter, reads): only then may dead entries and erase markers below the
     * GC watermark be dropped. A partial merge must keep them to beat its base. */
    int complete;
    int64_t (*retired_before)(void *ctx, int64_t segment_id);
    void *retired_ctx;
    /* The store-wide GC watermark W (DESIGN §3). Dead entries and erase
     * markers are dropped only when their ts_ms < W, and 0 drops nothing by
     * age (a fresh store). horizon_ms no longer decides drops; W does. */
    int64_t gc_before_ms;
    /* With retired_before set: no key's retired_before exceeds this (read
     * with the rule, as retired_before's set is), or 0 = unknown. An entry
     * or a record head newer than it skips the lookups. */
    int64_t retired_max_ms;
} segd_prune_t;

/* The order of (ts, expiry, flags, partner) tuples: the record codec's
 * dictionary is sorted by it (its deltas need ts first), and the join ranks
 * entries of one segment with it. */
static inline int segd_entry_tuple_cmp(const segd_entry_t *a, const segd_entry_t *b)
{
    if (a->ts_ms != b->ts_ms)
        return a->ts_ms < b->ts_ms ? -1 : 1;
    if (a->expiry_s != b->expiry_s)
        return a->expiry_s < b->expiry_s ? -1 : 1;
    if (a->flags != b->flags)
        return a->flags < b->flags ? -1 : 1;
    if (a->partner_id != b->partner_id)
        return a->partner_id < b->partner_id ? -1 : 1;
    return 0;
}

void segd_profile_init(segd_profile_t *p);
void segd_profile_free(segd_profile_t *p);
void segd_profile_clear(segd_profile_t *p);
/* Applies p's erase marker to its own entries and drops it: what a linked
 * read does to each member before the join, because erasing one id removes
 * that id's segments, not those of the ids linked to it (DESIGN §10.5). */
void segd_profile_apply_own_erase(segd_profile_t *p);
segd_err_t segd_profile_reserve(segd_profile_t *p, size_t n);
/* Appends without ordering checks; callers append in id order or sort. */
segd_err_t segd_profile_push(segd_profile_t *p, const segd_entry_t *e);
/* Sorts by id and joins duplicate ids: for building a profile from an event. */
void segd_profile_normalize(segd_profile_t *p);

/* The join of two entries of one segment: the larger of
 * (ts_ms, is_tombstone, expiry_s, flags, partner_id) compared in that order,
 * so that at equal ts_ms a removal (expiry_s <= 0) beats an upsert. */
const segd_entry_t *segd_entry_join(const segd_entry_t *a, const segd_entry_t *b);

/* k-way join of sorted profiles into out (out must not alias an input).
 * With prune != NULL, dead entries below the GC watermark, entries covered by
 * the erase marker or a retirement, and an erase marker below the watermark
 * are dropped. Linear in the total input for small k, n log k otherwise. */
segd_err_t segd_profile_join(segd_profile_t *out, const segd_profile_t *const *in,
                             size_t k, const segd_prune_t *prune);

/* In-place prune with the same rules as segd_profile_join. */
void segd_profile_prune(segd_profile_t *p, const segd_prune_t *prune);

/* True iff e is live at now_ms: not expired, not erased, not retired. */
int segd_entry_live(const segd_entry_t *e, int64_t erased_before_ms,
                    const segd_prune_t *rule);

/* expiry_s for an UPSERT per DESIGN §3: roundup(floor(ts_ms/1000)+ttl_s, G). */
int64_t segd_expiry_for(int64_t ts_ms, int32_t ttl_s, int64_t granularity_s);

#endif
