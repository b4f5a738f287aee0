/* Encoding a profile into a record (segd_record_encode): the dictionary of
 * distinct (ts, expiry, flags, partner) tuples, the plan that picks the
 * expiry unit and Rice parameters, and the writing of header, bitstream and
 * checksum in the layout record.c's header describes. */
#define _GNU_SOURCE /* qsort_r */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/record_int.h"

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
    return segd_entry_tuple_cmp(&t[*(const uint32_t *)a], &t[*(const uint32_t *)b]);
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
        while (table[h] != UINT32_MAX && segd_entry_tuple_cmp(&d->tuples[table[h]], e) != 0)
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
