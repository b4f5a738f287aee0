/* The fast JSON parser's walk over objects and arrays: a callback per key
 * or element, unknown values checked and skipped, and the duplicate-key set
 * (jansson's JSON_REJECT_DUPLICATES): keys kept raw and compared without
 * decoding when they have no escape, inline for the first few, with a hash
 * index once an object has many. The set is in this file because the walk
 * calls it per key and per object, and those calls are inlined here (the
 * parser was ~9% slower with them across files). */
#include <stdlib.h>
#include <string.h>

#include "wire/json_int.h"
#include "wire/json_scan.h"

static void keyset_init(jp_keyset_t *ks)
{
    ks->v = ks->inl;
    ks->n = 0;
    ks->cap = JP_INLINE_KEYS;
    ks->index = NULL;
    ks->index_cap = 0;
}

static void keyset_free(jp_keyset_t *ks)
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
static int key_hash(jp_key_t *k)
{
    if (k->rawlen == k->len) { /* no escape: the raw bytes are the key */
        k->hash = segd_fnv1a64(k->raw, k->len);
        return 0;
    }
    char *d = key_decode(k);
    if (!d)
        return -1;
    k->hash = segd_fnv1a64(d, k->len);
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
static int keyset_add(jp_keyset_t *ks, const jp_key_t *k)
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

int segd_jp_object(jp_t *j, jp_field_fn field, void *ctx)
{
    jp_keyset_t ks;
    char kb[16];
    int rc = -1;
    keyset_init(&ks);
    j->p++; /* '{' */
    jp_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        rc = 0;
        goto out_free_keys;
    }
    for (;;) {
        jp_ws(j);
        if (j->p >= j->end || *j->p != '"') {
            segd_jp_syntax(j, "string or '}' expected");
            goto out_free_keys;
        }
        jp_key_t k = {0, j->p + 1, 0, 0};
        jp_out_t o = {kb, sizeof(kb), 0};
        if (segd_jp_string(j, &o))
            goto out_free_keys;
        k.rawlen = (size_t)(j->p - 1 - k.raw);
        k.len = o.len;
        jp_ws(j);
        if (j->p >= j->end || *j->p != ':') {
            segd_jp_syntax(j, "':' expected");
            goto out_free_keys;
        }
        j->p++;
        jp_ws(j);
        int known = field && o.len <= sizeof(kb) ? field(j, kb, o.len, ctx) : 0;
        if (known < 0)
            goto out_free_keys;
        if (!known) {
            int dup = key_hash(&k);
            if (!dup)
                dup = keyset_add(&ks, &k);
            if (dup) {
                if (dup > 0)
                    segd_jp_syntax(j, "duplicate object key");
                else
                    segd_jp_fail(j, SEGD_ERR_NOMEM, "out of memory", NULL);
                goto out_free_keys;
            }
            if (segd_jp_skip_value(j))
                goto out_free_keys;
        }
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            rc = 0;
            goto out_free_keys;
        }
        segd_jp_syntax(j, "'}' expected");
        goto out_free_keys;
    }
out_free_keys:
    keyset_free(&ks);
    return rc;
}

int segd_jp_array(jp_t *j, jp_elem_fn element, void *ctx)
{
    j->p++; /* '[' */
    jp_ws(j);
    if (j->p < j->end && *j->p == ']') {
        j->p++;
        return 0;
    }
    for (;;) {
        jp_ws(j);
        if (element(j, ctx))
            return -1;
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return 0;
        }
        return segd_jp_syntax(j, "']' expected");
    }
}

static int skip_elem(jp_t *j, void *ctx)
{
    (void)ctx;
    return segd_jp_skip_value(j);
}

/* Any value, checked and dropped; p on its first byte. */
int segd_jp_skip_value(jp_t *j)
{
    int is_int, rc;
    long long v;
    if (segd_jp_enter(j))
        return -1;
    if (j->p >= j->end)
        return segd_jp_syntax(j, "premature end of input");
    switch (*j->p) {
    case '{': rc = segd_jp_object(j, NULL, NULL); break;
    case '[': rc = segd_jp_array(j, skip_elem, NULL); break;
    case '"': {
        jp_out_t o = {NULL, 0, 0};
        rc = segd_jp_string(j, &o);
        break;
    }
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        rc = segd_jp_number(j, &is_int, &v);
        break;
    default: rc = segd_jp_literal(j); break;
    }
    j->depth--;
    return rc;
}
