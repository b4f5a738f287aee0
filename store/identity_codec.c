/* The identity graph's byte formats (DESIGN §10.2): the `links` key and
 * its LWW value, the `ids` family's `i` record and `m` member list, the
 * check of a decoded link event, and the id order the master rule uses.
 * Pure functions with no store access; every other identity module and the
 * links consumer (through store/identity.h) call them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/varint.h"
#include "store/identity.h"
#include "store/identity_int.h"

void segd_ident_opts_default(segd_ident_opts_t *o)
{
    o->min_weight = SEGD_IDENT_MIN_WEIGHT;
    o->max_component = SEGD_IDENT_MAX_COMPONENT;
    o->max_links = SEGD_IDENT_MAX_LINKS;
}

/* ---------- ids, id lists and big-endian fields ---------- */

int segd_ident_id_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al < bl ? -1 : al > bl);
}

int segd_ident_older(int64_t fa, const char *a, size_t al, int64_t fb, const char *b, size_t bl)
{
    return fa != fb ? fa < fb : segd_ident_id_cmp(a, al, b, bl) < 0;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

segd_err_t segd_ident_list_push(id_list_t *l, const char *s, size_t len)
{
    ident_id_t *v = segd_array_grow(l->v, &l->cap, l->n + 1, sizeof(*v));
    if (!v)
        return SEGD_ERR_NOMEM;
    l->v = v;
    memcpy(v[l->n].s, s, len);
    v[l->n++].len = len;
    return SEGD_OK;
}

void segd_ident_list_free(id_list_t *l)
{
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* ---------- the links family ---------- */

segd_err_t segd_link_key(const char *a, size_t a_len, const char *b, size_t b_len,
                         segd_buf_t *out)
{
    if (segd_ident_id_cmp(a, a_len, b, b_len) > 0)
        return segd_link_key(b, b_len, a, a_len, out);
    out->len = 0;
    static const uint8_t sep = 0;
    segd_err_t err = segd_buf_reserve(out, a_len + b_len + 1);
    if (!err)
        err = segd_buf_append(out, a, a_len);
    if (!err)
        err = segd_buf_append(out, &sep, 1);
    if (!err)
        err = segd_buf_append(out, b, b_len);
    return err;
}

void segd_link_state_encode(const segd_link_state_t *st, uint8_t out[18])
{
    uint64_t w;
    memcpy(&w, &st->weight, 8);
    out[0] = SEGD_IDENT_VERSION;
    put_be64(out + 1, (uint64_t)st->ts_ms);
    put_be64(out + 9, w);
    out[17] = st->linked ? 1 : 0;
}

segd_err_t segd_link_state_decode(const uint8_t *data, size_t len, segd_link_state_t *st)
{
    if (len != LINK_VALUE_LEN || data[0] != SEGD_IDENT_VERSION || data[17] > 1)
        return SEGD_ERR_CORRUPT;
    uint64_t w = get_be64(data + 9);
    st->ts_ms = (int64_t)get_be64(data + 1);
    memcpy(&st->weight, &w, 8);
    st->linked = data[17];
    return isfinite(st->weight) ? SEGD_OK : SEGD_ERR_CORRUPT;
}

segd_link_state_t segd_link_state_join(const segd_link_state_t *x, const segd_link_state_t *y)
{
    if (x->ts_ms != y->ts_ms)
        return x->ts_ms > y->ts_ms ? *x : *y;
    if (x->linked != y->linked)
        return x->linked ? *y : *x; /* UNLINK wins a tie */
    return x->weight >= y->weight ? *x : *y;
}

int segd_link_joins(const segd_ident_opts_t *o, segd_link_op_t op, double weight)
{
    return op == SEGD_LINK && weight >= o->min_weight;
}

static segd_err_t check_id(const char *id, size_t len, const char *which, char *errstr,
                           size_t n)
{
    if (len == 0 || len > SEGD_IDENT_MAX_ID)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "%s must be 1..%d bytes", which,
                         SEGD_IDENT_MAX_ID);
    if (memchr(id, 0, len))
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "%s contains a NUL byte", which);
    return SEGD_OK;
}

segd_err_t segd_link_event_check(const segd_link_event_t *ev, char *errstr,
                                 size_t errstr_size)
{
    segd_err_t err = check_id(ev->id_a, ev->id_a_len, "id_a", errstr, errstr_size);
    if (!err)
        err = check_id(ev->id_b, ev->id_b_len, "id_b", errstr, errstr_size);
    if (err)
        return err;
    if (segd_ident_id_cmp(ev->id_a, ev->id_a_len, ev->id_b, ev->id_b_len) == 0)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, "id_a equals id_b");
    if (!(ev->weight >= 0.0 && ev->weight <= 1.0))
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, "weight %g not in [0, 1]",
                         ev->weight);
    if (ev->op != SEGD_LINK && ev->op != SEGD_UNLINK)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, "bad op");
    return SEGD_OK;
}

/* ---------- the ids family ---------- */

segd_err_t segd_ident_rec_encode(const segd_ident_rec_t *r, segd_buf_t *out)
{
    uint8_t head[REC_HEAD_LEN];
    head[0] = SEGD_IDENT_VERSION;
    put_be64(head + 1, (uint64_t)r->first_seen_ms);
    put_be32(head + 9, r->n_links);
    out->len = 0;
    segd_err_t err = segd_buf_append(out, head, sizeof(head));
    return err ? err : segd_buf_append(out, r->master, r->master_len);
}

segd_err_t segd_ident_rec_decode(const uint8_t *p, size_t len, segd_ident_rec_t *r)
{
    if (len <= REC_HEAD_LEN || len > REC_HEAD_LEN + SEGD_IDENT_MAX_ID ||
        p[0] != SEGD_IDENT_VERSION)
        return SEGD_ERR_CORRUPT;
    r->first_seen_ms = (int64_t)get_be64(p + 1);
    r->n_links = get_be32(p + 9);
    r->master_len = len - REC_HEAD_LEN;
    memcpy(r->master, p + REC_HEAD_LEN, r->master_len);
    return SEGD_OK;
}

segd_err_t segd_ident_members_encode(const id_list_t *l, segd_buf_t *out)
{
    uint8_t head[5];
    head[0] = SEGD_IDENT_VERSION;
    put_be32(head + 1, (uint32_t)l->n);
    out->len = 0;
    segd_err_t err = segd_buf_append(out, head, sizeof(head));
    for (size_t i = 0; !err && i < l->n; i++) {
        uint8_t len[SEGD_ZZ_MAX];
        size_t k = segd_uv_put(len, l->v[i].len);
        err = segd_buf_append(out, len, k);
        if (!err)
            err = segd_buf_append(out, l->v[i].s, l->v[i].len);
    }
    return err;
}

segd_err_t segd_ident_members_decode(const uint8_t *p, size_t len, id_list_t *l)
{
    l->n = 0;
    if (len < 5 || p[0] != SEGD_IDENT_VERSION)
        return SEGD_ERR_CORRUPT;
    uint32_t count = get_be32(p + 1);
    const uint8_t *q = p + 5, *end = p + len;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t n;
        if (segd_uv_get(&q, end, &n) || n == 0 || n > SEGD_IDENT_MAX_ID ||
            n > (uint64_t)(end - q))
            return SEGD_ERR_CORRUPT;
        if (segd_ident_list_push(l, (const char *)q, (size_t)n))
            return SEGD_ERR_NOMEM;
        q += n;
    }
    return q == end ? SEGD_OK : SEGD_ERR_CORRUPT;
}

/* ---------- messages ---------- */

void segd_ident_printable(char *out, size_t n, const uint8_t *k, size_t kl)
{
    size_t i = 0;
    for (; i + 1 < n && i < kl; i++)
        out[i] = k[i] >= 0x20 && k[i] < 0x7f ? (char)k[i] : '.';
    out[i] = 0;
}
