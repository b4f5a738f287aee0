/* Duplicate keys in one JSON object (jansson's JSON_REJECT_DUPLICATES):
 * keys kept raw and compared without decoding when they have no escape,
 * inline for the first few, with a hash index once an object has many. */
#include <stdlib.h>
#include <string.h>

#include "wire/json_int.h"

void segd_jp_keyset_init(jp_keyset_t *ks)
{
    ks->v = ks->inl;
    ks->n = 0;
    ks->cap = JP_INLINE_KEYS;
    ks->index = NULL;
    ks->index_cap = 0;
}

void segd_jp_keyset_free(jp_keyset_t *ks)
{
    if (ks->v != ks->inl)
        free(ks->v);
    free(ks->index);
}

/* Decodes a key's raw bytes again (they were checked when first read). */
static char *key_decode(const jp_key_t *k)
{
    char *buf = malloc(k->len ? k->len : 1);
    if (!buf)
        return NULL;
    jp_t j = {k->raw - 1, k->raw + k->rawlen + 1, 0, NULL, 0, SEGD_OK};
    jp_out_t o = {buf, k->len, 0};
    segd_jp_string(&j, &o);
    return buf;
}

/* The decoded key's hash, for unknown keys only (known ones have a bit):
 * 0, or -1 when out of memory. */
int segd_jp_key_hash(jp_key_t *k)
{
    if (k->rawlen == k->len) { /* no escape: the raw bytes are the key */
        k->hash = fnv1a(k->raw, k->len);
        return 0;
    }
    char *d = key_decode(k);
    if (!d)
        return -1;
    k->hash = fnv1a(d, k->len);
    free(d);
    return 0;
}

/* 1 = equal decoded keys, 0 = not, -1 = out of memory */
static int key_equal(const jp_key_t *a, const jp_key_t *b)
{
    if (a->hash != b->hash || a->len != b->len)
        return 0;
    if (a->rawlen == a->len && b->rawlen == b->len)
        return !memcmp(a->raw, b->raw, a->len);
    char *x = key_decode(a), *y = key_decode(b);
    int eq = x && y ? !memcmp(x, y, a->len) : -1;
    free(x);
    free(y);
    return eq;
}

static int keyset_index(jp_keyset_t *ks, size_t cap)
{
    uint32_t *ix = malloc(cap * sizeof(*ix));
    if (!ix)
        return -1;
    memset(ix, 0xff, cap * sizeof(*ix));
    for (size_t i = 0; i < ks->n; i++) {
        size_t h = (size_t)ks->v[i].hash & (cap - 1);
        while (ix[h] != UINT32_MAX)
            h = (h + 1) & (cap - 1);
        ix[h] = (uint32_t)i;
    }
    free(ks->index);
    ks->index = ix;
    ks->index_cap = cap;
    return 0;
}

/* 0 = added, 1 = a duplicate, -1 = out of memory */
int segd_jp_keyset_add(jp_keyset_t *ks, const jp_key_t *k)
{
    if (ks->n >= UINT32_MAX - 1)
        return -1;
    if (!ks->index) {
        for (size_t i = 0; i < ks->n; i++) {
            int eq = key_equal(&ks->v[i], k);
            if (eq)
                return eq;
        }
    } else {
        for (size_t h = (size_t)k->hash & (ks->index_cap - 1); ks->index[h] != UINT32_MAX;
             h = (h + 1) & (ks->index_cap - 1)) {
            int eq = key_equal(&ks->v[ks->index[h]], k);
            if (eq)
                return eq;
        }
    }
    if (ks->n == ks->cap) {
        size_t cap = ks->cap * 2;
        jp_key_t *v = ks->v == ks->inl ? malloc(cap * sizeof(*v))
                                       : realloc(ks->v, cap * sizeof(*v));
        if (!v)
            return -1;
        if (ks->v == ks->inl)
            memcpy(v, ks->inl, sizeof(ks->inl));
        ks->v = v;
        ks->cap = cap;
    }
    ks->v[ks->n++] = *k;
    if (ks->n >= JP_INDEX_FROM && ks->n * 2 > ks->index_cap)
        return keyset_index(ks, ks->index_cap ? ks->index_cap * 2 : JP_INDEX_FROM * 4);
    if (ks->index) {
        size_t h = (size_t)k->hash & (ks->index_cap - 1);
        while (ks->index[h] != UINT32_MAX)
            h = (h + 1) & (ks->index_cap - 1);
        ks->index[h] = (uint32_t)(ks->n - 1);
    }
    return 0;
}
