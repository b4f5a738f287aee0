/* Bidder-side reads over decoded profiles; see query.h. */
#include "core/query.h"

size_t segd_query_select(const segd_profile_t *p, const segd_prune_t *rule,
                         const segd_query_t *q, segd_entry_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) {
        const segd_entry_t *e = &p->entries[i];
        if (!segd_entry_live(e, p->erased_before_ms, rule))
            continue;
        if (q && q->expiring_after_s && e->expiry_s <= q->expiring_after_s)
            continue;
        if (q && q->updated_since_ms && e->ts_ms < q->updated_since_ms)
            continue;
        out[n++] = *e;
    }
    return n;
}

static size_t lower_bound(const segd_profile_t *p, int64_t id)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->entries[mid].segment_id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

uint64_t segd_query_count_range(const segd_profile_t *p, const segd_prune_t *rule,
                                int64_t lo, int64_t hi)
{
    uint64_t n = 0;
    for (size_t i = lower_bound(p, lo); i < p->n && p->entries[i].segment_id <= hi; i++)
        n += (uint64_t)segd_entry_live(&p->entries[i], p->erased_before_ms, rule);
    return n;
}
