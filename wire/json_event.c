/* JSON-lines SegmentEvent parsing and writing; see json_event.h. The reference
 * parser and the writer use jansson; segd_json_event_parse (the second half)
 * is a hand-written strict parser for the one SegmentEvent shape, held equal
 * to the reference by tests/test_json_event.c and fuzz/fuzz_json_event.c. */
#include "wire/json_event.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int get_int(json_t *obj, const char *name, int required, long long lo,
                   long long hi, long long dflt, long long *out, char *errstr, size_t n)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) {
        if (required)
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "missing field %s", name), -1;
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "field %s is not an integer", name), -1;
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "field %s out of range", name), -1;
    *out = x;
    return 0;
}

static segd_err_t parse_segment(json_t *s, segd_event_t *ev, char *errstr, size_t n)
{
    long long id, ttl, flags, partner;
    if (!json_is_object(s))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "segment is not an object");
    if (get_int(s, "segment_id", 1, INT64_MIN, INT64_MAX, 0, &id, errstr, n) ||
        get_int(s, "ttl_s", ev->op == SEGD_OP_UPSERT, INT32_MIN, INT32_MAX, 0, &ttl,
                errstr, n) ||
        get_int(s, "flags", 0, INT32_MIN, INT32_MAX, 0, &flags, errstr, n) ||
        get_int(s, "partner_id", 0, INT32_MIN, INT32_MAX, 0, &partner, errstr, n))
        return SEGD_ERR_DECODE;
    segd_seg_update_t u = {id, (int32_t)ttl, (int32_t)flags, (int32_t)partner};
    return segd_event_add_segment(ev, &u);
}

static segd_err_t parse_object(json_t *root, segd_event_t *ev, char *errstr, size_t n)
{
    json_t *user = json_object_get(root, "user_id"), *op = json_object_get(root, "op");
    json_t *segs = json_object_get(root, "segments"), *src = json_object_get(root, "source");
    long long ts;
    if (!json_is_string(user))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "user_id missing or not a string");
    if (segd_event_set_user(ev, json_string_value(user), json_string_length(user)))
        return segd_errf(SEGD_ERR_LIMIT, errstr, n, "user_id longer than %d bytes",
                         SEGD_MAX_USER_ID);
    if (get_int(root, "ts_ms", 1, INT64_MIN, INT64_MAX, 0, &ts, errstr, n))
        return SEGD_ERR_DECODE;
    ev->ts_ms = ts;
    if (!json_is_string(op) || segd_op_parse(json_string_value(op), &ev->op))
        return segd_errf(SEGD_ERR_DECODE, errstr, n,
                         "op must be UPSERT, REMOVE or ERASE_USER");
    if (src && json_is_string(src))
        snprintf(ev->source, sizeof(ev->source), "%s", json_string_value(src));
    else if (src && !json_is_null(src))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "source is not a string");
    if (!segs && ev->op == SEGD_OP_ERASE_USER)
        return SEGD_OK;
    if (!json_is_array(segs))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "segments missing or not an array");
    size_t i;
    json_t *s;
    json_array_foreach(segs, i, s)
    {
        segd_err_t err = parse_segment(s, ev, errstr, n);
        if (err)
            return err;
    }
    return SEGD_OK;
}

segd_err_t segd_json_event_parse_reference(const char *line, size_t len, segd_event_t *ev,
                                 char *errstr, size_t n)
{
    json_error_t jerr;
    segd_event_reset(ev);
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "invalid JSON: %s", jerr.text);
    segd_err_t err = json_is_object(root)
                         ? parse_object(root, ev, errstr, n)
                         : segd_errf(SEGD_ERR_DECODE, errstr, n, "not a JSON object");
    json_decref(root);
    return err;
}

int segd_json_event_write(const segd_event_t *ev, FILE *f)
{
    json_t *segs = json_array();
    for (size_t i = 0; i < ev->n_segments; i++) {
        const segd_seg_update_t *u = &ev->segments[i];
        json_array_append_new(segs, json_pack("{s:I,s:i,s:i,s:i}", "segment_id",
                                              (json_int_t)u->segment_id, "ttl_s", u->ttl_s,
                                              "flags", u->flags, "partner_id",
                                              u->partner_id));
    }
    json_t *root = json_pack("{s:s%,s:I,s:s,s:o}", "user_id", ev->user_id, ev->user_id_len,
                             "ts_ms", (json_int_t)ev->ts_ms, "op", segd_op_name(ev->op),
                             "segments", segs);
    if (!root)
        return -1;
    if (ev->source[0])
        json_object_set_new(root, "source", json_string(ev->source));
    int rc = json_dumpf(root, f, JSON_COMPACT) || fputc('\n', f) == EOF ? -1 : 0;
    json_decref(root);
    return rc;
}

/* ---------- the fast parser ----------
 * One pass over the bytes, no tree: known fields are decoded straight into
 * ev, everything else is checked as jansson checks it (the accept/reject
 * decision must be the reference's) and skipped. jansson counts every value
 * (scalars too) against its depth limit of 2048; so does this. */

#define JP_MAX_DEPTH 2048
#define JP_INLINE_KEYS 4
#define JP_INDEX_FROM 64 /* keys in one object before a hash index is built */

typedef struct jp {
    const uint8_t *p, *end;
    int depth;
    char *err;
    size_t n;
    segd_err_t code; /* what the first failure returns */
} jp_t;

/* One key of an object: the decoded key's hash and length, and its raw,
 * still escaped bytes. The raw length equals the decoded length exactly
 * when the key has no escape, which lets most keys be compared as they are. */
typedef struct jp_key {
    uint64_t hash;
    const uint8_t *raw;
    size_t rawlen, len;
} jp_key_t;

/* The keys seen in one object, for JSON_REJECT_DUPLICATES. */
typedef struct jp_keyset {
    jp_key_t inl[JP_INLINE_KEYS];
    jp_key_t *v; /* inl, or heap once more are needed */
    size_t n, cap;
    uint32_t *index; /* open addressing over v, from JP_INDEX_FROM keys */
    size_t index_cap;
} jp_keyset_t;

static int jp_fail(jp_t *j, segd_err_t code, const char *fmt, const char *arg)
{
    if (j->code == SEGD_OK) {
        j->code = code;
        if (arg)
            segd_errf(code, j->err, j->n, fmt, arg);
        else
            segd_errf(code, j->err, j->n, "%s", fmt);
    }
    return -1;
}

static int jp_syntax(jp_t *j, const char *what)
{
    return jp_fail(j, SEGD_ERR_DECODE, "invalid JSON: %s", what);
}

static void jp_ws(jp_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int jp_enter(jp_t *j)
{
    if (++j->depth > JP_MAX_DEPTH)
        return jp_syntax(j, "maximum parsing depth reached");
    return 0;
}

#define FNV_OFFSET 14695981039346656037ull
#define FNV_PRIME 1099511628211ull

typedef struct jp_out {
    char *buf;  /* may be NULL: nothing kept */
    size_t cap; /* bytes of buf */
    size_t len; /* decoded length, even past cap */
} jp_out_t;

static inline void out_byte(jp_out_t *o, uint8_t c)
{
    if (o->len < o->cap)
        o->buf[o->len] = (char)c;
    o->len++;
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

static void out_utf8(jp_out_t *o, uint32_t cp)
{
    if (cp < 0x80) {
        out_byte(o, (uint8_t)cp);
    } else if (cp < 0x800) {
        out_byte(o, (uint8_t)(0xC0 | cp >> 6));
        out_byte(o, (uint8_t)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out_byte(o, (uint8_t)(0xE0 | cp >> 12));
        out_byte(o, (uint8_t)(0x80 | (cp >> 6 & 0x3F)));
        out_byte(o, (uint8_t)(0x80 | (cp & 0x3F)));
    } else {
        out_byte(o, (uint8_t)(0xF0 | cp >> 18));
        out_byte(o, (uint8_t)(0x80 | (cp >> 12 & 0x3F)));
        out_byte(o, (uint8_t)(0x80 | (cp >> 6 & 0x3F)));
        out_byte(o, (uint8_t)(0x80 | (cp & 0x3F)));
    }
}

static int hex4(const uint8_t *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* One \uXXXX escape (p after the 'u'), with its low surrogate if it is a
 * high one; jansson refuses \u0000 and unpaired surrogates. */
static int jp_unicode(jp_t *j, jp_out_t *o)
{
    uint32_t cp, lo;
    if (j->end - j->p < 4 || hex4(j->p, &cp))
        return jp_syntax(j, "invalid escape");
    j->p += 4;
    if (cp == 0)
        return jp_syntax(j, "\\u0000 is not allowed");
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return jp_syntax(j, "invalid Unicode (lone low surrogate)");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
            return jp_syntax(j, "invalid Unicode (lone high surrogate)");
        if (j->end - j->p < 6 || hex4(j->p + 2, &lo))
            return jp_syntax(j, "invalid escape");
        if (lo < 0xDC00 || lo > 0xDFFF)
            return jp_syntax(j, "invalid Unicode (bad low surrogate)");
        j->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    out_utf8(o, cp);
    return 0;
}

/* A multi-byte UTF-8 sequence starting at p (first byte >= 0x80), as
 * jansson's stream checks it: no overlong forms, surrogates or > U+10FFFF. */
static int jp_utf8(jp_t *j, jp_out_t *o)
{
    uint8_t c = *j->p;
    size_t k;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF)
        k = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        k = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        k = 4, cp = c & 0x07;
    else
        return jp_syntax(j, "invalid UTF-8");
    if ((size_t)(j->end - j->p) < k)
        return jp_syntax(j, "invalid UTF-8");
    for (size_t i = 1; i < k; i++) {
        if ((j->p[i] & 0xC0) != 0x80)
            return jp_syntax(j, "invalid UTF-8");
        cp = cp << 6 | (j->p[i] & 0x3F);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || (k == 3 && cp < 0x800) ||
        (k == 4 && cp < 0x10000))
        return jp_syntax(j, "invalid UTF-8");
    for (size_t i = 0; i < k; i++)
        out_byte(o, j->p[i]);
    j->p += k;
    return 0;
}

/* A string; p on the opening quote. Decodes into o. */
static int jp_string(jp_t *j, jp_out_t *o)
{
    o->len = 0;
    j->p++;
    for (;;) {
        /* the common case: a run of plain ASCII, copied at once */
        const uint8_t *run = j->p;
        while (j->p < j->end && *j->p >= 0x20 && *j->p < 0x80 && *j->p != '"' &&
               *j->p != '\\')
            j->p++;
        if (j->p > run) {
            size_t k = (size_t)(j->p - run);
            if (o->len < o->cap)
                memcpy(o->buf + o->len, run, o->cap - o->len < k ? o->cap - o->len : k);
            o->len += k;
        }
        if (j->p >= j->end)
            return jp_syntax(j, "premature end of input in string");
        uint8_t c = *j->p;
        if (c == '"') {
            j->p++;
            return 0;
        }
        if (c < 0x20)
            return jp_syntax(j, "control character in string");
        if (c >= 0x80) {
            if (jp_utf8(j, o))
                return -1;
            continue;
        }
        j->p++;
        if (c != '\\') {
            out_byte(o, c);
            continue;
        }
        if (j->p >= j->end)
            return jp_syntax(j, "premature end of input in string");
        c = *j->p++;
        switch (c) {
        case '"': case '\\': case '/': out_byte(o, c); break;
        case 'b': out_byte(o, '\b'); break;
        case 'f': out_byte(o, '\f'); break;
        case 'n': out_byte(o, '\n'); break;
        case 'r': out_byte(o, '\r'); break;
        case 't': out_byte(o, '\t'); break;
        case 'u':
            if (jp_unicode(j, o))
                return -1;
            break;
        default: return jp_syntax(j, "invalid escape");
        }
    }
}

/* jansson loses one NUL byte that directly follows a number or a literal
 * (its stream buffer reads an ungot NUL as "refill"), so {"a":1\0} is
 * accepted there; the reference decides, so the same byte is dropped here. */
static void jp_quirk_nul(jp_t *j)
{
    if (j->p < j->end && *j->p == 0)
        j->p++;
}

/* Parses a number, with p on '-' or a digit. Integers set *is_int and *v.
 * Reals are only checked for overflow, as jansson does: a value strtod
 * turns into +-HUGE_VAL is refused. */
static int jp_number(jp_t *j, int *is_int, long long *v)
{
    const uint8_t *s = j->p;
    int neg = 0;
    uint64_t mag = 0, limit;
    int big = 0;
    if (*j->p == '-')
        neg = 1, j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return jp_syntax(j, "invalid number");
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (*j->p == '0') {
        j->p++;
        if (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            return jp_syntax(j, "invalid number (leading zero)");
    } else {
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
            uint64_t d = (uint64_t)(*j->p++ - '0');
            if (mag > (limit - d) / 10)
                big = 1;
            else
                mag = mag * 10 + d;
        }
    }
    *is_int = 1;
    if (j->p < j->end && *j->p == '.') {
        *is_int = 0;
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return jp_syntax(j, "invalid number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        *is_int = 0;
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return jp_syntax(j, "invalid number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    size_t len = (size_t)(j->p - s);
    jp_quirk_nul(j);
    if (*is_int) {
        if (big)
            return jp_syntax(j, "too big integer");
        *v = neg ? (long long)(0 - mag) : (long long)mag;
        return 0;
    }
    /* A real. Only its overflow is an error, and reals appear only in
     * unknown fields, so this path is rare. */
    char small[64], *copy = len < sizeof(small) ? small : malloc(len + 1);
    if (!copy)
        return jp_fail(j, SEGD_ERR_NOMEM, "out of memory", NULL);
    memcpy(copy, s, len);
    copy[len] = 0;
    errno = 0;
    double d = strtod(copy, NULL);
    int overflow = (d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE;
    if (copy != small)
        free(copy);
    return overflow ? jp_syntax(j, "real number overflow") : 0;
}

static int jp_literal(jp_t *j)
{
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(words[i]);
        if ((size_t)(j->end - j->p) >= k && !memcmp(j->p, words[i], k)) {
            j->p += k;
            jp_quirk_nul(j);
            return 0;
        }
    }
    return jp_syntax(j, "invalid token");
}

static int jp_skip_value(jp_t *j);

/* ---- duplicate keys ---- */

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
    jp_string(&j, &o);
    return buf;
}

/* The decoded key's hash, for unknown keys only (known ones have a bit):
 * 0, or -1 when out of memory. */
static int key_hash(jp_key_t *k)
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

/* ---- objects ----
 * field() consumes the value of a key it knows and returns 1, or returns 0
 * to have the value skipped (an unknown key, checked for duplicates), -1 on
 * error. A known key seen twice is its own duplicate check (bit in *seen). */
typedef int (*jp_field_fn)(jp_t *j, const char *key, size_t len, void *ctx);

static int jp_object(jp_t *j, jp_field_fn field, void *ctx)
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
            jp_syntax(j, "string or '}' expected");
            goto out_free_keys;
        }
        jp_key_t k = {0, j->p + 1, 0, 0};
        jp_out_t o = {kb, sizeof(kb), 0};
        if (jp_string(j, &o))
            goto out_free_keys;
        k.rawlen = (size_t)(j->p - 1 - k.raw);
        k.len = o.len;
        jp_ws(j);
        if (j->p >= j->end || *j->p != ':') {
            jp_syntax(j, "':' expected");
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
                    jp_syntax(j, "duplicate object key");
                else
                    jp_fail(j, SEGD_ERR_NOMEM, "out of memory", NULL);
                goto out_free_keys;
            }
            if (jp_skip_value(j))
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
        jp_syntax(j, "'}' expected");
        goto out_free_keys;
    }
out_free_keys:
    keyset_free(&ks);
    return rc;
}

/* element() consumes one element (p on its first byte). */
typedef int (*jp_elem_fn)(jp_t *j, void *ctx);

static int jp_array(jp_t *j, jp_elem_fn element, void *ctx)
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
        return jp_syntax(j, "']' expected");
    }
}

static int skip_elem(jp_t *j, void *ctx)
{
    (void)ctx;
    return jp_skip_value(j);
}

/* Any value, checked and dropped; p on its first byte. */
static int jp_skip_value(jp_t *j)
{
    int is_int, rc;
    long long v;
    if (jp_enter(j))
        return -1;
    if (j->p >= j->end)
        return jp_syntax(j, "premature end of input");
    switch (*j->p) {
    case '{': rc = jp_object(j, NULL, NULL); break;
    case '[': rc = jp_array(j, skip_elem, NULL); break;
    case '"': {
        jp_out_t o = {NULL, 0, 0};
        rc = jp_string(j, &o);
        break;
    }
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        rc = jp_number(j, &is_int, &v);
        break;
    default: rc = jp_literal(j); break;
    }
    j->depth--;
    return rc;
}

/* ---- the SegmentEvent fields ---- */

/* An integer field's value: null (= absent) or an integer in [lo, hi]. */
static int jp_int_field(jp_t *j, const char *name, long long lo, long long hi, int *present,
                        long long *out)
{
    int is_int = 0;
    if (jp_enter(j))
        return -1;
    j->depth--; /* a scalar: counted, nothing nested */
    if (j->p < j->end && *j->p == 'n') {
        *present = 0;
        return jp_literal(j);
    }
    if (j->p >= j->end || !(*j->p == '-' || (*j->p >= '0' && *j->p <= '9')))
        return jp_fail(j, SEGD_ERR_DECODE, "field %s is not an integer", name);
    if (jp_number(j, &is_int, out))
        return -1;
    if (!is_int)
        return jp_fail(j, SEGD_ERR_DECODE, "field %s is not an integer", name);
    if (*out < lo || *out > hi)
        return jp_fail(j, SEGD_ERR_DECODE, "field %s out of range", name);
    *present = 1;
    return 0;
}

/* A string field's value into o; *is_null for null. */
static int jp_str_field(jp_t *j, jp_out_t *o, int *is_null)
{
    if (jp_enter(j))
        return -1;
    j->depth--;
    *is_null = 0;
    if (j->p < j->end && *j->p == '"')
        return jp_string(j, o);
    if (j->p < j->end && *j->p == 'n' && !jp_literal(j)) {
        *is_null = 1;
        return 0;
    }
    return -2; /* not a string: the caller says why */
}

enum { F_USER = 1, F_TS = 2, F_OP = 4, F_SEGS = 8, F_SOURCE = 16,
       F_SEG_ID = 1, F_TTL = 2, F_FLAGS = 4, F_PARTNER = 8 };

typedef struct jp_event {
    segd_event_t *ev;
    unsigned seen;
    int op_set, ts_set;
    size_t missing_ttl; /* segments without ttl_s: refused if op is UPSERT */
} jp_event_t;

typedef struct jp_seg {
    segd_seg_update_t u;
    unsigned seen;
    int has_id, has_ttl;
} jp_seg_t;

#define KEY_IS(key, len, lit) ((len) == sizeof(lit) - 1 && !memcmp((key), lit, sizeof(lit) - 1))

static int seg_field(jp_t *j, const char *key, size_t len, void *ctx)
{
    jp_seg_t *s = ctx;
    long long v;
    int present, *has = NULL;
    unsigned bit;
    const char *name;
    if (KEY_IS(key, len, "segment_id"))
        bit = F_SEG_ID, name = "segment_id", has = &s->has_id;
    else if (KEY_IS(key, len, "ttl_s"))
        bit = F_TTL, name = "ttl_s", has = &s->has_ttl;
    else if (KEY_IS(key, len, "flags"))
        bit = F_FLAGS, name = "flags";
    else if (KEY_IS(key, len, "partner_id"))
        bit = F_PARTNER, name = "partner_id";
    else
        return 0;
    if (s->seen & bit)
        return jp_syntax(j, "duplicate object key");
    s->seen |= bit;
    int wide = bit == F_SEG_ID;
    if (jp_int_field(j, name, wide ? INT64_MIN : INT32_MIN, wide ? INT64_MAX : INT32_MAX,
                     &present, &v))
        return -1;
    if (!present)
        v = 0;
    if (has)
        *has = present;
    if (bit == F_SEG_ID)
        s->u.segment_id = v;
    else if (bit == F_TTL)
        s->u.ttl_s = (int32_t)v;
    else if (bit == F_FLAGS)
        s->u.flags = (int32_t)v;
    else
        s->u.partner_id = (int32_t)v;
    return 1;
}

static int seg_elem(jp_t *j, void *ctx)
{
    jp_event_t *e = ctx;
    jp_seg_t s;
    memset(&s, 0, sizeof(s));
    if (jp_enter(j))
        return -1;
    if (j->p >= j->end || *j->p != '{') {
        /* the reference reads the whole document first: a syntax error
         * later in the line is refused all the same */
        return jp_fail(j, SEGD_ERR_DECODE, "segment is not an object", NULL);
    }
    if (jp_object(j, seg_field, &s))
        return -1;
    j->depth--;
    if (!s.has_id)
        return jp_fail(j, SEGD_ERR_DECODE, "missing field %s", "segment_id");
    if (!s.has_ttl)
        e->missing_ttl++;
    if (segd_event_add_segment(e->ev, &s.u))
        return jp_fail(j, SEGD_ERR_NOMEM, "out of memory", NULL);
    return 0;
}

static int ev_field(jp_t *j, const char *key, size_t len, void *ctx)
{
    jp_event_t *e = ctx;
    segd_event_t *ev = e->ev;
    unsigned bit;
    if (KEY_IS(key, len, "user_id"))
        bit = F_USER;
    else if (KEY_IS(key, len, "ts_ms"))
        bit = F_TS;
    else if (KEY_IS(key, len, "op"))
        bit = F_OP;
    else if (KEY_IS(key, len, "segments"))
        bit = F_SEGS;
    else if (KEY_IS(key, len, "source"))
        bit = F_SOURCE;
    else
        return 0;
    if (e->seen & bit)
        return jp_syntax(j, "duplicate object key");
    e->seen |= bit;
    int is_null, rc;
    if (bit == F_USER) {
        jp_out_t o = {ev->user_id, SEGD_MAX_USER_ID, 0};
        rc = jp_str_field(j, &o, &is_null);
        if (rc == -1)
            return -1;
        if (rc || is_null)
            return jp_fail(j, SEGD_ERR_DECODE, "user_id missing or not a string", NULL);
        if (o.len > SEGD_MAX_USER_ID)
            return jp_fail(j, SEGD_ERR_LIMIT, "user_id longer than 256 bytes", NULL);
        ev->user_id[o.len] = 0;
        ev->user_id_len = o.len;
    } else if (bit == F_TS) {
        long long v;
        if (jp_int_field(j, "ts_ms", INT64_MIN, INT64_MAX, &e->ts_set, &v))
            return -1;
        ev->ts_ms = v;
    } else if (bit == F_OP) {
        char name[16];
        jp_out_t o = {name, sizeof(name) - 1, 0};
        rc = jp_str_field(j, &o, &is_null);
        if (rc == -1)
            return -1;
        if (!rc && !is_null && o.len < sizeof(name)) {
            name[o.len] = 0;
            if (strlen(name) == o.len && !segd_op_parse(name, &ev->op)) {
                e->op_set = 1;
                return 1;
            }
        }
        return jp_fail(j, SEGD_ERR_DECODE, "op must be UPSERT, REMOVE or ERASE_USER", NULL);
    } else if (bit == F_SOURCE) {
        jp_out_t o = {ev->source, sizeof(ev->source) - 1, 0};
        rc = jp_str_field(j, &o, &is_null);
        if (rc == -1)
            return -1;
        if (rc)
            return jp_fail(j, SEGD_ERR_DECODE, "source is not a string", NULL);
        /* as snprintf("%s") into the field: cut at its size */
        ev->source[is_null ? 0 : o.len < sizeof(ev->source) ? o.len : sizeof(ev->source) - 1] =
            0;
    } else {
        if (jp_enter(j))
            return -1;
        if (j->p >= j->end || *j->p != '[')
            return jp_fail(j, SEGD_ERR_DECODE, "segments missing or not an array", NULL);
        if (jp_array(j, seg_elem, e))
            return -1;
        j->depth--;
    }
    return 1;
}

segd_err_t segd_json_event_parse(const char *line, size_t len, segd_event_t *ev,
                                 char *errstr, size_t n)
{
    jp_t j = {(const uint8_t *)line, (const uint8_t *)line + len, 0, errstr, n, SEGD_OK};
    jp_event_t e = {ev, 0, 0, 0, 0};
    segd_event_reset(ev);
    jp_ws(&j);
    if (j.p >= j.end || *j.p != '{') {
        if (j.p < j.end && *j.p == '[') { /* valid JSON, but not an object */
            if (jp_skip_value(&j))
                return j.code ? j.code : SEGD_ERR_DECODE;
            jp_ws(&j);
            if (j.p != j.end)
                return jp_syntax(&j, "end of input expected"), j.code;
            return segd_errf(SEGD_ERR_DECODE, errstr, n, "not a JSON object");
        }
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "invalid JSON: '[' or '{' expected");
    }
    j.depth = 1;
    if (jp_object(&j, ev_field, &e))
        return j.code ? j.code : SEGD_ERR_DECODE;
    jp_ws(&j);
    if (j.p != j.end)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "invalid JSON: end of input expected");
    if (!(e.seen & F_USER))
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "user_id missing or not a string");
    if (!e.ts_set)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "missing field ts_ms");
    if (!e.op_set)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "op must be UPSERT, REMOVE or ERASE_USER");
    if (!(e.seen & F_SEGS) && ev->op != SEGD_OP_ERASE_USER)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "segments missing or not an array");
    if (ev->op == SEGD_OP_UPSERT && e.missing_ttl)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "missing field ttl_s");
    return SEGD_OK;
}
