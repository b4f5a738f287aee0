/* Profile record codec and the DESIGN §3 join. Layout (version 1):
 *   u8 version, varint erased_before_ms, varint n; when n > 0:
 *   varint ndict, varint g (expiry unit: gcd of expiries), u8 (k_id<<1|attrs),
 *   u8 k_ts, varint nrel + nrel zigzag relative expiries (sorted), zigzag
 *   first ts, [attrs: ndict x (flags, partner)], then a bitstream of: ts
 *   deltas of the sorted tuples (Rice k_ts), each tuple's relative-expiry
 *   index, id gaps (Rice k_id), and each entry's tuple index (mixed radix);
 *   finally u32 XXH32 of all preceding bytes.
 * Entries of one user share few (ts, expiry) tuples (one per event) and few
 * TTLs, so this stays near the entropy floor (DESIGN §8). */
#define _GNU_SOURCE /* qsort_r */
#include "core/record.h"

#include "base/varint.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define RICE_ESCAPE_Q 24 /* quotients >= this are written raw (64 bits) */
#define MAX_RICE_K 56

/* ---------- profiles and buffers ---------- */

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

static int tuple_cmp(const segd_entry_t *a, const segd_entry_t *b)
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

/* tuple_cmp orders the codec's dictionary (by ts first, which its deltas
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
    return tuple_cmp(a, b);
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

/* Dead under the erase marker, its segment's retirement or its partner's. */
static int covered(const segd_entry_t *e, int64_t erased, const segd_prune_t *rule)
{
    return e->ts_ms <= erased || e->ts_ms <= retired_before(rule, e->segment_id) ||
           e->ts_ms <= retired_before(rule, segd_retire_key_of_partner(e->partner_id));
}

int segd_entry_live(const segd_entry_t *e, int64_t erased_before_ms,
                    const segd_prune_t *rule)
{
    int64_t now_s = rule->now_ms / 1000;
    return e->expiry_s > now_s && !covered(e, erased_before_ms, rule);
}

/* Whether a join result may be physically dropped. Entries under an erase
 * marker or a retirement go at once, because the marker outlives them.
 * Other dead entries go only below the GC watermark W, since nothing older
 * than W can still arrive or still sit unmerged above this base (DESIGN
 * §3). Even then they go only when the join saw the key's whole history
 * (rule->complete); otherwise they must stay to beat an older base. */
static int droppable(const segd_entry_t *e, int64_t erased, const segd_prune_t *rule)
{
    if (covered(e, erased, rule))
        return 1;
    if (!rule->complete)
        return 0;
    return e->expiry_s <= rule->now_ms / 1000 && e->ts_ms < rule->gc_before_ms;
}

static int64_t pruned_marker(int64_t erased, const segd_prune_t *rule)
{
    if (rule && rule->complete && erased < rule->gc_before_ms)
        return 0;
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

/* ---------- varints and bits ---------- */

static void put_varint(segd_buf_t *b, uint64_t v) { b->len += segd_uv_put(b->data + b->len, v); }

static int64_t floor_div(int64_t a, int64_t b)
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
static void bw_put(bit_writer_t *w, uint64_t v, unsigned nbits)
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

static void bw_put_wide(bit_writer_t *w, uint64_t v, unsigned nbits)
{
    while (nbits > 32) {
        bw_put(w, v & 0xffffffffu, 32);
        v >>= 32;
        nbits -= 32;
    }
    bw_put(w, v, nbits);
}

static void bw_flush(bit_writer_t *w)
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

static void br_refill(bit_reader_t *r)
{
    while (r->n <= 56 && r->p < r->end) {
        r->acc |= (uint64_t)*r->p++ << r->n;
        r->n += 8;
    }
}

/* Reads nbits (<= 32); returns -1 past the end. */
static int br_get(bit_reader_t *r, unsigned nbits, uint64_t *v)
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

static int br_get_wide(bit_reader_t *r, unsigned nbits, uint64_t *v)
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
static int br_unary(bit_reader_t *r, unsigned max, unsigned *q)
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

static void rice_put(bit_writer_t *w, uint64_t v, unsigned k)
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

static int rice_get(bit_reader_t *r, unsigned k, uint64_t *v)
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

static uint64_t rice_cost(const uint64_t *v, size_t n, unsigned k)
{
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t q = v[i] >> k;
        bits += q < RICE_ESCAPE_Q ? q + 1 + k : RICE_ESCAPE_Q + 64;
    }
    return bits;
}

/* The Rice parameter near log2(mean * ln 2), refined by exact cost. */
static unsigned choose_rice_k(const uint64_t *v, size_t n)
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

static unsigned radix_per_chunk(uint64_t nd)
{
    unsigned m = 0;
    for (uint64_t v = 1; nd > 1 && v * nd <= ((uint64_t)1 << 32); v *= nd)
        m++;
    return m;
}

static uint64_t ipow(uint64_t b, unsigned e)
{
    uint64_t r = 1;
    while (e--)
        r *= b;
    return r;
}

static unsigned bits_for_u64(uint64_t n) /* smallest b with 2^b >= n */
{
    unsigned b = 0;
    while (b < 64 && ((uint64_t)1 << b) < n)
        b++;
    return b;
}

static unsigned bits_for(uint32_t n) { return bits_for_u64(n); }

static void radix_put(bit_writer_t *w, const uint32_t *idx, size_t n, uint32_t nd)
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

static int radix_get(bit_reader_t *r, uint32_t *idx, size_t n, uint32_t nd)
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

/* ---------- dictionary of (ts, expiry, flags, partner) tuples ---------- */

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t expiry_unit(const segd_profile_t *p)
{
    uint64_t g = 0;
    for (size_t i = 0; i < p->n && g != 1; i++) {
        int64_t x = p->entries[i].expiry_s;
        g = gcd_u64(g, x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x);
    }
    return g == 0 || g > INT64_MAX ? 1 : (int64_t)g;
}

/* expiry in units of g, relative to the event time in the same units */
static int64_t rel_expiry(const segd_entry_t *t, int64_t g)
{
    int64_t ts_unit = floor_div(floor_div(t->ts_ms, 1000), g);
    return (int64_t)((uint64_t)(t->expiry_s / g) - (uint64_t)ts_unit);
}

typedef struct dict {
    segd_entry_t *tuples; /* distinct tuples, sorted */
    uint32_t *idx;        /* per entry: index into tuples */
    uint32_t n;
} dict_t;

static uint64_t tuple_hash(const segd_entry_t *e)
{
    uint64_t h = (uint64_t)e->ts_ms * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)e->expiry_s * 0xC2B2AE3D27D4EB4Full;
    h ^= ((uint64_t)(uint32_t)e->flags << 32 | (uint32_t)e->partner_id) *
         0x165667B19E3779F9ull;
    return h ^ (h >> 29);
}

static int cmp_tuple_idx(const void *a, const void *b, void *ctx)
{
    const segd_entry_t *t = ctx;
    return tuple_cmp(&t[*(const uint32_t *)a], &t[*(const uint32_t *)b]);
}

/* Distinct tuples via an open-addressing hash (provisional slots), then
 * sorted; entry indexes are remapped to sorted positions. */
static segd_err_t dict_build(dict_t *d, const segd_profile_t *p)
{
    size_t cap = 16;
    while (cap < 2 * p->n)
        cap *= 2;
    segd_err_t err = SEGD_ERR_NOMEM;
    uint32_t *table = malloc(cap * sizeof(*table)), *order = NULL, *rank = NULL;
    segd_entry_t *sorted = NULL;
    d->tuples = malloc(p->n * sizeof(*d->tuples));
    d->idx = malloc(p->n * sizeof(*d->idx));
    d->n = 0;
    if (!table || !d->tuples || !d->idx)
        goto out_free;
    memset(table, 0xff, cap * sizeof(*table));
    for (size_t i = 0; i < p->n; i++) {
        const segd_entry_t *e = &p->entries[i];
        size_t h = tuple_hash(e) & (cap - 1);
        while (table[h] != UINT32_MAX && tuple_cmp(&d->tuples[table[h]], e) != 0)
            h = (h + 1) & (cap - 1);
        if (table[h] == UINT32_MAX) {
            table[h] = d->n;
            d->tuples[d->n++] = *e;
        }
        d->idx[i] = table[h];
    }
    order = malloc(d->n * sizeof(*order));
    rank = malloc(d->n * sizeof(*rank));
    sorted = malloc(d->n * sizeof(*sorted));
    if (!order || !rank || !sorted)
        goto out_free;
    for (uint32_t i = 0; i < d->n; i++)
        order[i] = i;
    qsort_r(order, d->n, sizeof(*order), cmp_tuple_idx, d->tuples);
    for (uint32_t i = 0; i < d->n; i++) {
        rank[order[i]] = i;
        sorted[i] = d->tuples[order[i]];
    }
    for (size_t i = 0; i < p->n; i++)
        d->idx[i] = rank[d->idx[i]];
    free(d->tuples);
    d->tuples = sorted;
    sorted = NULL;
    err = SEGD_OK;
out_free:
    free(sorted);
    free(rank);
    free(order);
    free(table);
    return err;
}

static void dict_free(dict_t *d)
{
    free(d->tuples);
    free(d->idx);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static uint32_t find_i64(const int64_t *v, uint32_t n, int64_t x)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---------- encode ---------- */

typedef struct enc_plan {
    int64_t g;
    int attrs;
    uint64_t *vals;  /* ts deltas (nd - 1), then id gaps (n) */
    int64_t *rels;   /* distinct relative expiries, sorted */
    uint32_t *rel_idx;
    uint32_t nrel;
    unsigned k_ts, k_id;
} enc_plan_t;

static int has_attrs(const segd_profile_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->entries[i].flags || p->entries[i].partner_id)
            return 1;
    return 0;
}

static segd_err_t plan(enc_plan_t *e, const segd_profile_t *p, const dict_t *d)
{
    e->g = expiry_unit(p);
    e->attrs = has_attrs(p);
    e->vals = malloc((d->n + p->n) * sizeof(*e->vals));
    e->rels = malloc(d->n * sizeof(*e->rels));
    e->rel_idx = malloc(d->n * sizeof(*e->rel_idx));
    if (!e->vals || !e->rels || !e->rel_idx)
        return SEGD_ERR_NOMEM;
    uint64_t *tsd = e->vals, *gaps = e->vals + d->n - 1;
    for (uint32_t i = 1; i < d->n; i++)
        tsd[i - 1] = (uint64_t)d->tuples[i].ts_ms - (uint64_t)d->tuples[i - 1].ts_ms;
    for (size_t i = 0; i < p->n; i++)
        gaps[i] = i == 0 ? (uint64_t)p->entries[0].segment_id
                         : (uint64_t)(p->entries[i].segment_id - p->entries[i - 1].segment_id - 1);
    for (uint32_t i = 0; i < d->n; i++)
        e->rels[i] = rel_expiry(&d->tuples[i], e->g);
    qsort(e->rels, d->n, sizeof(*e->rels), cmp_i64);
    e->nrel = 0;
    for (uint32_t i = 0; i < d->n; i++)
        if (i == 0 || e->rels[i] != e->rels[e->nrel - 1])
            e->rels[e->nrel++] = e->rels[i];
    for (uint32_t i = 0; i < d->n; i++)
        e->rel_idx[i] = find_i64(e->rels, e->nrel, rel_expiry(&d->tuples[i], e->g));
    e->k_ts = choose_rice_k(tsd, d->n - 1);
    e->k_id = choose_rice_k(gaps, p->n);
    return SEGD_OK;
}

static void plan_free(enc_plan_t *e)
{
    free(e->vals);
    free(e->rels);
    free(e->rel_idx);
}

static void put_header(segd_buf_t *out, const dict_t *d, const enc_plan_t *e)
{
    put_varint(out, d->n);
    put_varint(out, (uint64_t)e->g);
    out->data[out->len++] = (uint8_t)(e->k_id << 1 | (unsigned)e->attrs);
    out->data[out->len++] = (uint8_t)e->k_ts;
    put_varint(out, e->nrel);
    for (uint32_t i = 0; i < e->nrel; i++)
        put_varint(out, segd_zigzag(e->rels[i]));
    put_varint(out, segd_zigzag(d->tuples[0].ts_ms));
    for (uint32_t i = 0; e->attrs && i < d->n; i++) {
        put_varint(out, (uint32_t)d->tuples[i].flags);
        put_varint(out, (uint32_t)d->tuples[i].partner_id);
    }
}

static void put_bits(segd_buf_t *out, const segd_profile_t *p, const dict_t *d,
                     const enc_plan_t *e)
{
    bit_writer_t w = {out, 0, 0};
    for (uint32_t i = 0; i + 1 < d->n; i++)
        rice_put(&w, e->vals[i], e->k_ts);
    unsigned rb = bits_for(e->nrel);
    for (uint32_t i = 0; rb && i < d->n; i++)
        bw_put(&w, e->rel_idx[i], rb);
    for (size_t i = 0; i < p->n; i++)
        rice_put(&w, e->vals[d->n - 1 + i], e->k_id);
    radix_put(&w, d->idx, p->n, d->n);
    bw_flush(&w);
}

static void put_checksum(segd_buf_t *out)
{
    uint32_t h = XXH32(out->data, out->len, 0);
    for (int i = 0; i < 4; i++)
        out->data[out->len++] = (uint8_t)(h >> (8 * i));
}

segd_err_t segd_record_encode(const segd_profile_t *p, segd_buf_t *out)
{
    out->len = 0;
    if (p->n == 0 && p->erased_before_ms == 0)
        return SEGD_OK;
    /* worst case: header, 4 varints per tuple, ~100 bits per tuple and entry */
    segd_err_t err = segd_buf_reserve(out, 64 + p->n * (4 * 10 + 2 * 13));
    if (err)
        return err;
    out->data[out->len++] = SEGD_RECORD_VERSION;
    put_varint(out, (uint64_t)p->erased_before_ms);
    put_varint(out, p->n);
    if (p->n > 0) {
        dict_t d = {0};
        enc_plan_t e = {0};
        if ((err = dict_build(&d, p)) == SEGD_OK && (err = plan(&e, p, &d)) == SEGD_OK) {
            put_header(out, &d, &e);
            put_bits(out, p, &d, &e);
        }
        plan_free(&e);
        dict_free(&d);
        if (err)
            return err;
    }
    put_checksum(out);
    return SEGD_OK;
}

/* ---------- decode ---------- */

typedef struct rec_header {
    uint64_t erased, n, ndict, g, nrel;
    unsigned k_id, k_ts;
    int attrs;
} rec_header_t;

static int get_header(const uint8_t **p, const uint8_t *end, rec_header_t *h)
{
    memset(h, 0, sizeof(*h));
    if (*p >= end || *(*p)++ != SEGD_RECORD_VERSION)
        return -1;
    if (segd_uv_get(p, end, &h->erased) || h->erased > INT64_MAX ||
        segd_uv_get(p, end, &h->n))
        return -1;
    if (h->n == 0)
        return 0;
    /* every entry costs at least one bit */
    size_t avail = (size_t)(end - *p);
    if (h->n > (uint64_t)avail * 8 || segd_uv_get(p, end, &h->ndict) || h->ndict == 0 ||
        h->ndict > h->n || segd_uv_get(p, end, &h->g) || h->g == 0 || h->g > INT64_MAX ||
        end - *p < 2)
        return -1;
    uint8_t kb = *(*p)++;
    h->attrs = kb & 1;
    h->k_id = kb >> 1;
    h->k_ts = *(*p)++;
    if (h->k_id > MAX_RICE_K || h->k_ts > MAX_RICE_K || segd_uv_get(p, end, &h->nrel) ||
        h->nrel == 0 || h->nrel > h->ndict)
        return -1;
    return 0;
}

/* Reads the byte-aligned part of the dictionary: relative expiries, the first
 * ts and the attributes. */
static int get_dict_bytes(const uint8_t **p, const uint8_t *end, const rec_header_t *h,
                          int64_t *rels, segd_entry_t *t)
{
    uint64_t v, fl, pa;
    for (uint64_t i = 0; i < h->nrel; i++) {
        if (segd_uv_get(p, end, &v))
            return -1;
        rels[i] = segd_unzigzag(v);
    }
    if (segd_uv_get(p, end, &v))
        return -1;
    t[0].ts_ms = segd_unzigzag(v);
    for (uint64_t i = 0; i < h->ndict; i++) {
        t[i].flags = t[i].partner_id = 0;
        if (!h->attrs)
            continue;
        if (segd_uv_get(p, end, &fl) || segd_uv_get(p, end, &pa) || fl > UINT32_MAX ||
            pa > UINT32_MAX)
            return -1;
        t[i].flags = (int32_t)(uint32_t)fl;
        t[i].partner_id = (int32_t)(uint32_t)pa;
    }
    return 0;
}

static int get_dict_bits(bit_reader_t *r, const rec_header_t *h, const int64_t *rels,
                         segd_entry_t *t)
{
    uint64_t v;
    int64_t g = (int64_t)h->g;
    for (uint64_t i = 1; i < h->ndict; i++) {
        if (rice_get(r, h->k_ts, &v))
            return -1;
        t[i].ts_ms = (int64_t)((uint64_t)t[i - 1].ts_ms + v);
        if (t[i].ts_ms < t[i - 1].ts_ms)
            return -1;
    }
    unsigned rb = bits_for((uint32_t)h->nrel);
    for (uint64_t i = 0; i < h->ndict; i++) {
        v = 0;
        if ((rb && br_get(r, rb, &v)) || v >= h->nrel)
            return -1;
        int64_t ts_unit = floor_div(floor_div(t[i].ts_ms, 1000), g);
        t[i].expiry_s = (int64_t)(((uint64_t)rels[v] + (uint64_t)ts_unit) * (uint64_t)g);
    }
    return 0;
}

static int get_ids(bit_reader_t *r, const rec_header_t *h, segd_entry_t *e)
{
    uint64_t prev = 0, gap;
    for (uint64_t i = 0; i < h->n; i++) {
        if (rice_get(r, h->k_id, &gap))
            return -1;
        uint64_t base = i == 0 ? 0 : prev + 1;
        if (gap > (uint64_t)INT64_MAX - base)
            return -1;
        prev = base + gap;
        e[i].segment_id = (int64_t)prev;
    }
    return 0;
}

static int get_indexes(bit_reader_t *r, const rec_header_t *h, const segd_entry_t *dict,
                       uint32_t *idx, segd_entry_t *e)
{
    if (radix_get(r, idx, h->n, (uint32_t)h->ndict))
        return -1;
    for (uint64_t i = 0; i < h->n; i++) {
        const segd_entry_t *t = &dict[idx[i]];
        e[i].ts_ms = t->ts_ms;
        e[i].expiry_s = t->expiry_s;
        e[i].flags = t->flags;
        e[i].partner_id = t->partner_id;
    }
    /* the padding of the last byte must be zero and nothing may follow */
    return (r->n < 8 && r->acc == 0 && r->p == r->end) ? 0 : -1;
}

static int checksum_ok(const uint8_t *data, size_t len)
{
    if (len < 5)
        return 0;
    const uint8_t *c = data + len - 4;
    uint32_t want = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 |
                    (uint32_t)c[3] << 24;
    return XXH32(data, len - 4, 0) == want;
}

/* The head is the header up to the first ts: version, marker, n, then (n >
 * 0) ndict, g, the k bytes, nrel relative expiries, the first ts. */
segd_err_t segd_record_head(const uint8_t *data, size_t len, segd_record_head_t *out)
{
    *out = (segd_record_head_t){0, 0, INT64_MAX, INT64_MAX};
    if (len == 0)
        return SEGD_OK;
    if (!checksum_ok(data, len))
        return SEGD_ERR_CORRUPT;
    const uint8_t *cur = data, *end = data + len - 4;
    rec_header_t h;
    uint64_t v;
    if (get_header(&cur, end, &h))
        return SEGD_ERR_CORRUPT;
    out->erased_before_ms = (int64_t)h.erased;
    out->n = h.n;
    if (h.n == 0)
        return cur == end && h.erased ? SEGD_OK : SEGD_ERR_CORRUPT;
    uint64_t rel0 = 0;
    for (uint64_t i = 0; i <= h.nrel; i++) { /* the relative expiries, then the first ts */
        if (segd_uv_get(&cur, end, &v))
            return SEGD_ERR_CORRUPT;
        if (i == 0)
            rel0 = v;
    }
    out->min_ts_ms = segd_unzigzag(v);
    /* expiry = (rel + ts unit) * g; both terms are smallest here, relative
     * expiries being sorted and ts units growing with ts */
    int64_t g = (int64_t)h.g;
    __int128 bound = ((__int128)segd_unzigzag(rel0) + floor_div(floor_div(out->min_ts_ms, 1000), g)) * g;
    out->min_expiry_s = bound < INT64_MIN || bound > INT64_MAX ? INT64_MIN : (int64_t)bound;
    return SEGD_OK;
}

int segd_record_head_unpruned(const segd_record_head_t *h, const segd_prune_t *rule)
{
    int64_t erased = h->erased_before_ms;
    if (rule->complete && erased && erased < rule->gc_before_ms)
        return 0; /* the marker goes */
    if (h->n == 0)
        return 1;
    /* covered() needs ts <= erased (0 without a marker) or <= a retirement */
    if (h->min_ts_ms <= erased)
        return 0;
    if (rule->retired_before && (rule->retired_max_ms <= 0 || h->min_ts_ms <= rule->retired_max_ms))
        return 0;
    /* an entry is dropped by age only when expired and below W */
    return !rule->complete || h->min_ts_ms >= rule->gc_before_ms ||
           h->min_expiry_s > rule->now_ms / 1000;
}

segd_err_t segd_record_decode(const uint8_t *data, size_t len, segd_profile_t *p)
{
    segd_profile_clear(p);
    if (len == 0)
        return SEGD_OK;
    if (!checksum_ok(data, len))
        return SEGD_ERR_CORRUPT;
    const uint8_t *cur = data, *end = data + len - 4;
    rec_header_t h;
    if (get_header(&cur, end, &h))
        return SEGD_ERR_CORRUPT;
    p->erased_before_ms = (int64_t)h.erased;
    if (h.n == 0) /* the encoder writes an empty profile as zero bytes */
        return cur == end && h.erased ? SEGD_OK : SEGD_ERR_CORRUPT;
    segd_err_t err = SEGD_ERR_NOMEM;
    segd_entry_t *dict = malloc(h.ndict * sizeof(*dict));
    int64_t *rels = malloc(h.nrel * sizeof(*rels));
    uint32_t *idx = malloc(h.n * sizeof(*idx));
    if (!dict || !rels || !idx || segd_profile_reserve(p, h.n))
        goto out_free;
    err = SEGD_ERR_CORRUPT;
    if (get_dict_bytes(&cur, end, &h, rels, dict))
        goto out_free;
    bit_reader_t r = {cur, end, 0, 0};
    if (get_dict_bits(&r, &h, rels, dict) || get_ids(&r, &h, p->entries) ||
        get_indexes(&r, &h, dict, idx, p->entries))
        goto out_free;
    p->n = h.n;
    err = SEGD_OK;
out_free:
    free(idx);
    free(rels);
    free(dict);
    return err;
}
