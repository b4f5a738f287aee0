/* Profiles in memory (segd_profile_t): growth, normalisation (sorted by
 * segment id), the DESIGN §3 join of several profiles into one, liveness
 * and pruning against the erase marker and the retirement rules. The
 * record codec (record.c) stores what this module builds; see profile.h. */
#include "core/profile.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void segd_profile_init(segd_profile_t *p) { memset(p, 0, sizeof(*p)); }

void segd_profile_free(segd_profile_t *p)
{
    free(p->entries);
    segd_profile_init(p);
}

void segd_profile_clear(segd_profile_t *p)
{
    p->n = 0;
    p->erased_before_ms = 0;
}

void segd_profile_apply_own_erase(segd_profile_t *p)
{
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->entries[i].ts_ms > p->erased_before_ms)
            p->entries[k++] = p->entries[i];
    p->n = k;
    p->erased_before_ms = 0;
}

segd_err_t segd_profile_reserve(segd_profile_t *p, size_t n)
{
    if (n <= p->cap)
        return SEGD_OK;
    size_t cap = p->cap ? p->cap : 16;
    while (cap < n)
        cap *= 2;
    segd_entry_t *e = realloc(p->entries, cap * sizeof(*e));
    if (!e)
        return SEGD_ERR_NOMEM;
    p->entries = e;
    p->cap = cap;
    return SEGD_OK;
}

segd_err_t segd_profile_push(segd_profile_t *p, const segd_entry_t *e)
{
    segd_err_t err = segd_profile_reserve(p, p->n + 1);
    if (err)
        return err;
    p->entries[p->n++] = *e;
    return SEGD_OK;
}

static int cmp_entry_id(const void *a, const void *b)
{
    const segd_entry_t *x = a, *y = b;
    return (x->segment_id > y->segment_id) - (x->segment_id < y->segment_id);
}

/* An event's few tens of entries sort faster by insertion than by glibc's
 * qsort (a merge sort through a malloc'd buffer): 7 % of backfill's CPU. */
#define INSERTION_SORT_MAX 32

void segd_profile_normalize(segd_profile_t *p)
{
    if (p->n < 2)
        return;
    if (p->n <= INSERTION_SORT_MAX) {
        for (size_t i = 1; i < p->n; i++) {
            segd_entry_t e = p->entries[i];
            size_t k = i;
            for (; k > 0 && p->entries[k - 1].segment_id > e.segment_id; k--)
                p->entries[k] = p->entries[k - 1];
            p->entries[k] = e;
        }
    } else {
        qsort(p->entries, p->n, sizeof(*p->entries), cmp_entry_id);
    }
    size_t w = 0;
    for (size_t r = 1; r < p->n; r++) {
        if (p->entries[r].segment_id == p->entries[w].segment_id)
            p->entries[w] = *segd_entry_join(&p->entries[w], &p->entries[r]);
        else
            p->entries[++w] = p->entries[r];
    }
    p->n = w + 1;
}

/* ---------- join and liveness ---------- */

/* segd_entry_tuple_cmp orders the codec's dictionary (by ts first, which its deltas
 * need); the join ranks a removal above an upsert of the same ts_ms, as
 * Cassandra's tombstones win ties. Still a total order, so the join (its
 * max) stays commutative, associative and idempotent. */
static int join_cmp(const segd_entry_t *a, const segd_entry_t *b)
{
    if (a->ts_ms != b->ts_ms)
        return a->ts_ms < b->ts_ms ? -1 : 1;
    int ra = a->expiry_s <= 0, rb = b->expiry_s <= 0;
    if (ra != rb)
        return ra < rb ? -1 : 1;
    return segd_entry_tuple_cmp(a, b);
}

const segd_entry_t *segd_entry_join(const segd_entry_t *a, const segd_entry_t *b)
{
    return join_cmp(a, b) >= 0 ? a : b;
}

static int64_t retired_before(const segd_prune_t *rule, int64_t seg)
{
    return rule && rule->retired_before ? rule->retired_before(rule->retired_ctx, seg)
                                        : 0;
}

/* Whether any marker could cover e: none is later than retired_max_ms (when
 * known), so most entries of a store whose retirements are old skip both
 * lookups. */
static int may_be_retired(const segd_entry_t *e, const segd_prune_t *rule)
{
    return rule && rule->retired_before &&
           (rule->retired_max_ms <= 0 || e->ts_ms <= rule->retired_max_ms);
}

/* Dead under the erase marker, its segment's retirement or its partner's. */
static int covered(const segd_entry_t *e, int64_t erased, const segd_prune_t *rule)
{
    return e->ts_ms <= erased ||
           (may_be_retired(e, rule) &&
            (e->ts_ms <= retired_before(rule, e->segment_id) ||
             e->ts_ms <= retired_before(rule, segd_retire_key_of_partner(e->partner_id))));
}

int segd_entry_live(const segd_entry_t *e, int64_t erased_before_ms,
                    const segd_prune_t *rule)
{
    int64_t now_s = rule->now_ms / 1000;
    return e->expiry_s > now_s && !covered(e, erased_before_ms, rule);
}

/* Whether a join result may be physically dropped. Entries under an erase
 * marker or their segment's retirement go at once: the marker outlives
 * them, and it covers every older entry of the same user and segment too,
 * so nothing the dropped entry beat can come back. A partner's retirement
 * covers only that partner's entries: an entry it covers still beats
 * another partner's older entry of the segment (in a base this join did not
 * see, or arriving late), so it is dead like an expired entry. Those go
 * only below the GC watermark W, since nothing older than W can still
 * arrive or still sit unmerged above this base (DESIGN §3), and only when
 * the join saw the key's whole history (rule->complete). */
static int droppable(const segd_entry_t *e, int64_t erased, const segd_prune_t *rule)
{
    int retirable = may_be_retired(e, rule);
    if (e->ts_ms <= erased || (retirable && e->ts_ms <= retired_before(rule, e->segment_id)))
        return 1;
    if (!rule->complete)
        return 0;
    int dead = e->expiry_s <= rule->now_ms / 1000 ||
               (retirable &&
                e->ts_ms <= retired_before(rule, segd_retire_key_of_partner(e->partner_id)));
    return dead && e->ts_ms < rule->gc_before_ms;
}

/* An erase marker is never dropped, whatever W: W bounds what ingest still
 * accepts into this store, not what may come back into some store from the
 * topic (a rebuild replays it from its start with W = 0), an older snapshot
 * unit or a backfill file. Dropped, the marker let a rebuild or restore
 * bring erased personal data back (issue 29 finding 4). It is a key and a
 * time: keeping it costs a few bytes per erased user. */
static int64_t pruned_marker(int64_t erased, const segd_prune_t *rule)
{
    (void)rule;
    return erased;
}

void segd_profile_prune(segd_profile_t *p, const segd_prune_t *rule)
{
    size_t w = 0;
    for (size_t r = 0; r < p->n; r++)
        if (!droppable(&p->entries[r], p->erased_before_ms, rule))
            p->entries[w++] = p->entries[r];
    p->n = w;
    p->erased_before_ms = pruned_marker(p->erased_before_ms, rule);
}

/* Min-heap of run cursors keyed by the current segment id. */
typedef struct run_cursor {
    const segd_entry_t *cur, *end;
} run_cursor_t;

static void heap_sift_down(run_cursor_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && h[l].cur->segment_id < h[m].cur->segment_id)
            m = l;
        if (l + 1 < n && h[l + 1].cur->segment_id < h[m].cur->segment_id)
            m = l + 1;
        if (m == i)
            return;
        run_cursor_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Pops the smallest entry; the heap shrinks when a run is exhausted. */
static const segd_entry_t *heap_pop(run_cursor_t *h, size_t *n)
{
    const segd_entry_t *e = h[0].cur++;
    if (h[0].cur == h[0].end)
        h[0] = h[--*n];
    heap_sift_down(h, *n, 0);
    return e;
}

segd_err_t segd_profile_join(segd_profile_t *out, const segd_profile_t *const *in,
                             size_t k, const segd_prune_t *prune)
{
    size_t total = 0, nh = 0;
    int64_t erased = 0;
    for (size_t i = 0; i < k; i++) {
        total += in[i]->n;
        if (in[i]->erased_before_ms > erased)
            erased = in[i]->erased_before_ms;
    }
    segd_profile_clear(out);
    segd_err_t err = segd_profile_reserve(out, total);
    if (err)
        return err;
    run_cursor_t stack_heap[16];
    run_cursor_t *h = k <= 16 ? stack_heap : malloc(k * sizeof(*h));
    if (!h)
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < k; i++)
        if (in[i]->n)
            h[nh++] = (run_cursor_t){in[i]->entries, in[i]->entries + in[i]->n};
    for (size_t i = nh; i-- > 0;)
        heap_sift_down(h, nh, i);
    while (nh) {
        segd_entry_t e = *heap_pop(h, &nh);
        while (nh && h[0].cur->segment_id == e.segment_id)
            e = *segd_entry_join(&e, heap_pop(h, &nh));
        if (!prune || !droppable(&e, erased, prune))
            out->entries[out->n++] = e;
    }
    out->erased_before_ms = pruned_marker(erased, prune);
    if (h != stack_heap)
        free(h);
    return SEGD_OK;
}

int64_t segd_expiry_for(int64_t ts_ms, int32_t ttl_s, int64_t g)
{
    int64_t t = ts_ms / 1000 + ttl_s;
    return (t + g - 1) / g * g;
}
