/* The profile record format, and decoding it (segd_record_decode, and
 * segd_record_head for the fields a reader checks before decoding all).
 * Encoding is record_encode.c; the profile operations are profile.c; the
 * edge cache embeds all three, so core/ needs only base/. Layout (version 1):
 *   u8 version, varint erased_before_ms, varint n; when n > 0:
 *   varint ndict, varint g (expiry unit: gcd of expiries), u8 (k_id<<1|attrs),
 *   u8 k_ts, varint nrel + nrel zigzag relative expiries (sorted), zigzag
 *   first ts, [attrs: ndict x (flags, partner)], then a bitstream of: ts
 *   deltas of the sorted tuples (Rice k_ts), each tuple's relative-expiry
 *   index, id gaps (Rice k_id), and each entry's tuple index (mixed radix);
 *   finally u32 XXH32 of all preceding bytes.
 * Entries of one user share few (ts, expiry) tuples (one per event) and few
 * TTLs, so this stays near the entropy floor (DESIGN §8). */
#include "core/record.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/record_int.h"

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
    int64_t erased = h->erased_before_ms; /* kept whatever W (core/profile.c) */
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
