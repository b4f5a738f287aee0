/* The order of a Redis sorted set's answer (cache/resp_order.h): by score,
 * then by the member's bytes, for members that are decimal segment ids
 * and scores that are expires_at. Two ways:
 *
 * Fast (ids below 10^17, scores exact as doubles and spanning less than
 * what a 64-bit key leaves beside a rank): ids of one digit count are in
 * byte order already, so a merge of the digit-count runs gives each entry
 * its member rank; then one radix sort of (score - min) << bits | rank.
 *
 * General: a merge sort of (score, member digits as nibbles) items. */
#include "cache/resp_order.h"

#include <stdlib.h>
#include <string.h>

/* Decimal digits of v into end-backwards; returns the start. */
static char *fmt_u64(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

typedef struct item {
    double score;
    uint64_t hi, lo; /* digits 1-16 and 17-19, each its value + 1, from the top */
    uint32_t idx;    /* into the entries */
} item_t;

static const int64_t p10[19] = {1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL,
                                10000000LL, 100000000LL, 1000000000LL, 10000000000LL,
                                100000000000LL, 1000000000000LL, 10000000000000LL,
                                100000000000000LL, 1000000000000000LL, 10000000000000000LL,
                                100000000000000000LL, 1000000000000000000LL};

static void item_make(item_t *it, const segd_entry_t *e, uint32_t idx)
{
    char b[24], *end = b + sizeof(b);
    char *s = fmt_u64(end, (uint64_t)e->segment_id);
    it->score = (double)e->expiry_s;
    it->hi = it->lo = 0;
    it->idx = idx;
    for (int k = 0; s + k < end; k++) {
        uint64_t nib = (uint64_t)(s[k] - '0' + 1);
        if (k < 16)
            it->hi |= nib << (60 - 4 * k);
        else
            it->lo |= nib << (60 - 4 * (k - 16));
    }
}

static int item_le(const item_t *a, const item_t *b)
{
    if (a->score != b->score)
        return a->score < b->score;
    if (a->hi != b->hi)
        return a->hi < b->hi;
    return a->lo <= b->lo;
}

/* Stable merge sort of a[0..n) through tmp; skips merging runs already in
 * order. */
static void item_sort(item_t *a, item_t *tmp, size_t n)
{
    if (n < 2)
        return;
    if (n <= 12) {
        for (size_t i = 1; i < n; i++) {
            item_t x = a[i];
            size_t j = i;
            for (; j > 0 && !item_le(&a[j - 1], &x); j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    size_t h = n / 2;
    item_sort(a, tmp, h);
    item_sort(a + h, tmp, n - h);
    if (item_le(&a[h - 1], &a[h]))
        return;
    memcpy(tmp, a, h * sizeof(*a));
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        a[k++] = item_le(&tmp[i], &a[j]) ? tmp[i++] : a[j++];
    while (i < h)
        a[k++] = tmp[i++];
}

static int digits(int64_t v)
{
    int d = 1;
    while (d < 19 && v >= p10[d])
        d++;
    return d;
}

/* Fills lex[0..n) with the entries sel[] (ids in order, all below 10^17) in
 * the byte order of their members. An id of d digits compares as
 * id * 10^(17-d), its digits padded to 17 with zeros, and on a tie the
 * shorter one (the prefix) comes first, so the key is that * 18 + d. Ids
 * with the same digit count already form runs in that order. The runs come
 * in ascending digit count and mostly grow tenfold, so merging each into
 * the result in turn is cheap. keys and tmp have n slots each. */
static void member_order(const segd_entry_t *ents, const uint32_t *sel, size_t n, uint32_t *lex,
                         uint64_t *keys, uint64_t *tmp, uint32_t *idx_tmp)
{
    size_t have = 0; /* lex/keys[0..have): the runs merged so far */
    for (size_t i = 0; i < n;) {
        int d = digits(ents[sel[i]].segment_id);
        uint64_t scale = (uint64_t)p10[17 - d] * 18;
        size_t j = i;
        /* the run goes to the tail of tmp/idx_tmp, then merges with the head */
        for (; j < n && (d == 17 || ents[sel[j]].segment_id < p10[d]); j++) {
            tmp[j] = (uint64_t)ents[sel[j]].segment_id * scale + (uint64_t)d;
            idx_tmp[j] = sel[j];
        }
        if (have == 0) {
            memcpy(keys, tmp + i, (j - i) * sizeof(*keys));
            memcpy(lex, idx_tmp + i, (j - i) * sizeof(*lex));
        } else {
            /* merge keys[0..have) and tmp[i..j) backwards into keys[0..have + j - i) */
            size_t out = have + (j - i), a = have, b = j;
            while (b > i) {
                if (a > 0 && keys[a - 1] > tmp[b - 1]) {
                    keys[--out] = keys[--a];
                    lex[out] = lex[a];
                } else {
                    keys[--out] = tmp[--b];
                    lex[out] = idx_tmp[b];
                }
            }
        }
        have += j - i;
        i = j;
    }
}

/* LSD radix sort of distinct keys, a byte a pass, skipping bytes all keys
 * share. */
static void radix_sort(uint64_t *a, uint64_t *tmp, size_t n)
{
    uint64_t all_or = 0, all_and = ~0ULL;
    for (size_t i = 0; i < n; i++) {
        all_or |= a[i];
        all_and &= a[i];
    }
    uint64_t *src = a, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        if ((((all_or ^ all_and) >> shift) & 0xff) == 0)
            continue;
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++)
            count[((src[i] >> shift) & 0xff) + 1]++;
        for (int b = 0; b < 256; b++)
            count[b + 1] += count[b];
        for (size_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift) & 0xff]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof(*a));
}

/* The fast way into w->order; -1 when it does not apply. */
static int sort_fast(segd_resp_order_t *w, const segd_entry_t *ents, size_t n)
{
    if (n == 0)
        return 0;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        int64_t x = ents[w->order[i]].expiry_s;
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
    }
    if (ents[w->order[n - 1]].segment_id >= p10[17])
        return -1;
    int rank_bits = 1;
    while (rank_bits < 32 && ((size_t)1 << rank_bits) < n)
        rank_bits++;
    const int64_t exact = 1LL << 53;
    if (lo < -exact || hi > exact || (uint64_t)(hi - lo) >> (63 - rank_bits))
        return -1;
    /* keys_tmp and items (as scratch of n ids) are free until the radix sort */
    member_order(ents, w->order, n, w->lex, w->keys, w->keys_tmp, (uint32_t *)w->items);
    for (size_t r = 0; r < n; r++)
        w->keys[r] = (uint64_t)(ents[w->lex[r]].expiry_s - lo) << rank_bits | r;
    radix_sort(w->keys, w->keys_tmp, n);
    uint64_t mask = ((uint64_t)1 << rank_bits) - 1;
    for (size_t i = 0; i < n; i++)
        w->order[i] = w->lex[w->keys[i] & mask];
    return 0;
}

static void sort_general(segd_resp_order_t *w, const segd_entry_t *ents, size_t n)
{
    item_t *items = w->items;
    for (size_t i = 0; i < n; i++)
        item_make(&items[i], &ents[w->order[i]], w->order[i]);
    item_sort(items, w->tmp, n);
    for (size_t i = 0; i < n; i++)
        w->order[i] = items[i].idx;
}

segd_err_t segd_resp_order_reserve(segd_resp_order_t *w, size_t n)
{
    if (n <= w->cap)
        return SEGD_OK;
    void *p[6] = {w->items, w->tmp, w->order, w->lex, w->keys, w->keys_tmp};
    size_t size[6] = {sizeof(item_t), sizeof(item_t), 4, 4, 8, 8};
    int ok = 1;
    for (int i = 0; i < 6; i++) {
        void *q = realloc(p[i], n * size[i]);
        ok &= q != NULL;
        p[i] = q ? q : p[i];
    }
    w->items = p[0];
    w->tmp = p[1];
    w->order = p[2];
    w->lex = p[3];
    w->keys = p[4];
    w->keys_tmp = p[5];
    if (!ok)
        return SEGD_ERR_NOMEM; /* the arrays that grew are kept; cap is not raised */
    w->cap = n;
    return SEGD_OK;
}

void segd_resp_order_sort(segd_resp_order_t *o, const segd_entry_t *ents, size_t n)
{
    if (sort_fast(o, ents, n))
        sort_general(o, ents, n);
}

void segd_resp_order_free(segd_resp_order_t *o)
{
    free(o->items);
    free(o->tmp);
    free(o->order);
    free(o->lex);
    free(o->keys);
    free(o->keys_tmp);
    memset(o, 0, sizeof(*o));
}
