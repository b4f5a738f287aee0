/* The identity graph (DESIGN §10): codecs of the `links` and `ids` values,
 * the online union-find applied into a batch through an overlay of what the
 * batch wrote, the two-read lookups and the offline rebuild. Invariants kept
 * by every write: each id's `i` record names the master of its component,
 * a master's `m` record lists every member (absent for a component of one),
 * and the master has the smallest (first_seen, id) of its members. */
#define _GNU_SOURCE /* qsort_r */
#include "store/identity.h"

#include <math.h>
#include <rocksdb/c.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/varint.h"
#include "store/store_int.h"

#define LINK_VALUE_LEN 18
#define REC_HEAD_LEN 13 /* version, first_seen (8), n_links (4) */
#define FAM_LINKS 'L'   /* overlay key tags: which family a key is of */
#define FAM_IDS 'I'

typedef struct ident_id {
    char s[SEGD_IDENT_MAX_ID];
    size_t len;
} ident_id_t;

typedef struct id_list {
    ident_id_t *v;
    size_t n, cap;
} id_list_t;

/* One key of the overlay: the family tag and the key bytes, the value the
 * batch put (or deleted: val NULL, present 0). */
typedef struct kv {
    uint8_t *key;
    size_t klen;
    uint8_t *val;
    size_t vlen;
    int present;
} kv_t;

typedef struct kvmap {
    kv_t *slots;
    size_t cap, n;
} kvmap_t;

struct segd_ident {
    segd_store_t *store;
    segd_ident_opts_t opts;
    kvmap_t overlay;
    segd_buf_t key, val, tmp;
    id_list_t la, lb, merged;
    uint64_t applied, refused;
    int64_t supernode_total;
    int64_t epoch_ms; /* the store's identity epoch (meta counter), for changes */
    int epoch_stale;  /* read it again before the next event (segd_ident_reset) */
    segd_ident_change_cb cb;
    void *cb_ctx;
    int64_t ts_ms; /* the event being applied */
};

void segd_ident_opts_default(segd_ident_opts_t *o)
{
    o->min_weight = SEGD_IDENT_MIN_WEIGHT;
    o->max_component = SEGD_IDENT_MAX_COMPONENT;
    o->max_links = SEGD_IDENT_MAX_LINKS;
}

/* ---------- small helpers ---------- */

static int id_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al < bl ? -1 : al > bl);
}

/* Whether (fa, a) is older than (fb, b): the master rule. */
static int older(int64_t fa, const char *a, size_t al, int64_t fb, const char *b, size_t bl)
{
    return fa != fb ? fa < fb : id_cmp(a, al, b, bl) < 0;
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

static segd_err_t list_push(id_list_t *l, const char *s, size_t len)
{
    ident_id_t *v = segd_array_grow(l->v, &l->cap, l->n + 1, sizeof(*v));
    if (!v)
        return SEGD_ERR_NOMEM;
    l->v = v;
    memcpy(v[l->n].s, s, len);
    v[l->n++].len = len;
    return SEGD_OK;
}

static void list_free(id_list_t *l)
{
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* ---------- codecs ---------- */

segd_err_t segd_link_key(const char *a, size_t a_len, const char *b, size_t b_len,
                         segd_buf_t *out)
{
    if (id_cmp(a, a_len, b, b_len) > 0)
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
    if (id_cmp(ev->id_a, ev->id_a_len, ev->id_b, ev->id_b_len) == 0)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, "id_a equals id_b");
    if (!(ev->weight >= 0.0 && ev->weight <= 1.0))
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, "weight %g not in [0, 1]",
                         ev->weight);
    if (ev->op != SEGD_LINK && ev->op != SEGD_UNLINK)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, "bad op");
    return SEGD_OK;
}

static segd_err_t rec_encode(const segd_ident_rec_t *r, segd_buf_t *out)
{
    uint8_t head[REC_HEAD_LEN];
    head[0] = SEGD_IDENT_VERSION;
    put_be64(head + 1, (uint64_t)r->first_seen_ms);
    put_be32(head + 9, r->n_links);
    out->len = 0;
    segd_err_t err = segd_buf_append(out, head, sizeof(head));
    return err ? err : segd_buf_append(out, r->master, r->master_len);
}

static segd_err_t rec_decode(const uint8_t *p, size_t len, segd_ident_rec_t *r)
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

static segd_err_t members_encode(const id_list_t *l, segd_buf_t *out)
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

static segd_err_t members_decode(const uint8_t *p, size_t len, id_list_t *l)
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
        if (list_push(l, (const char *)q, (size_t)n))
            return SEGD_ERR_NOMEM;
        q += n;
    }
    return q == end ? SEGD_OK : SEGD_ERR_CORRUPT;
}

/* ---------- the overlay: what this batch wrote, by family and key ---------- */

static uint64_t kv_hash(const uint8_t *k, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ k[i]) * 1099511628211ull;
    return h;
}

static kv_t *kv_find(kvmap_t *m, const uint8_t *k, size_t n)
{
    if (!m->cap)
        return NULL;
    for (size_t i = kv_hash(k, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        kv_t *s = &m->slots[i];
        if (!s->key || (s->klen == n && memcmp(s->key, k, n) == 0))
            return s;
    }
}

static segd_err_t kv_grow(kvmap_t *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    kv_t *old = m->slots;
    size_t old_cap = m->cap;
    if (!(m->slots = calloc(cap, sizeof(kv_t)))) {
        m->slots = old;
        return SEGD_ERR_NOMEM;
    }
    m->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key)
            *kv_find(m, old[i].key, old[i].klen) = old[i];
    free(old);
    return SEGD_OK;
}

/* Sets key to val (NULL: deleted); bytes copied. */
static segd_err_t kv_set(kvmap_t *m, const uint8_t *k, size_t kn, const void *val, size_t vn)
{
    if ((m->n + 1) * 2 > m->cap && kv_grow(m))
        return SEGD_ERR_NOMEM;
    kv_t *s = kv_find(m, k, kn);
    uint8_t *v = NULL;
    if (val && !(v = malloc(vn ? vn : 1)))
        return SEGD_ERR_NOMEM;
    if (val)
        memcpy(v, val, vn);
    if (!s->key) {
        if (!(s->key = malloc(kn))) {
            free(v);
            return SEGD_ERR_NOMEM;
        }
        memcpy(s->key, k, kn);
        s->klen = kn;
        m->n++;
    }
    free(s->val);
    s->val = v;
    s->vlen = vn;
    s->present = val != NULL;
    return SEGD_OK;
}

static void kv_clear(kvmap_t *m)
{
    for (size_t i = 0; i < m->cap; i++) {
        free(m->slots[i].key);
        free(m->slots[i].val);
    }
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

/* ---------- reads and writes of the two families ---------- */

static rocksdb_column_family_handle_t *family(segd_store_t *s, char fam)
{
    return fam == FAM_LINKS ? segd_store_links_cf(s) : segd_store_ids_cf(s);
}

/* Reads fam/key into out; *found = 0 when absent. Through the overlay when
 * ov is given (the batch's own writes first); with ro (a view's snapshot)
 * when given, else the store's read options (the latest state). */
static segd_err_t fam_get(segd_store_t *s, const rocksdb_readoptions_t *ro, kvmap_t *ov,
                          char fam, const uint8_t *key, size_t klen, segd_buf_t *out,
                          int *found, char *errstr, size_t n)
{
    *found = 0;
    out->len = 0;
    if (ov && ov->cap) {
        segd_buf_t tk = {0};
        if (segd_buf_append(&tk, &fam, 1) || segd_buf_append(&tk, key, klen)) {
            segd_buf_free(&tk);
            return SEGD_ERR_NOMEM;
        }
        kv_t *e = kv_find(ov, tk.data, tk.len);
        segd_buf_free(&tk);
        if (e && e->key) {
            *found = e->present;
            return e->present ? segd_buf_append(out, e->val, e->vlen) : SEGD_OK;
        }
    }
    rocksdb_column_family_handle_t *cf = family(s, fam);
    if (!cf)
        return SEGD_OK;
    char *rerr = NULL;
    rocksdb_pinnableslice_t *v = rocksdb_get_pinned_cf(
        segd_store_rocks(s), ro ? ro : segd_store_read_options(s), cf, (const char *)key, klen,
        &rerr);
    if (rerr) {
        segd_errf(SEGD_ERR_IO, errstr, n, "read %s: %s", fam == FAM_LINKS ? "links" : "ids",
                  rerr);
        rocksdb_free(rerr);
        return SEGD_ERR_IO;
    }
    if (!v)
        return SEGD_OK;
    size_t vlen;
    const char *p = rocksdb_pinnableslice_value(v, &vlen);
    segd_err_t err = segd_buf_append(out, p, vlen);
    rocksdb_pinnableslice_destroy(v);
    *found = 1;
    return err;
}

/* Puts (val != NULL) or deletes fam/key in the batch and the overlay. */
static segd_err_t fam_put(segd_ident_t *id, segd_batch_t *b, char fam, const uint8_t *key,
                          size_t klen, const void *val, size_t vlen)
{
    rocksdb_writebatch_t *wb = segd_batch_writebatch(b);
    rocksdb_column_family_handle_t *cf = family(id->store, fam);
    segd_buf_t *tk = &id->tmp;
    tk->len = 0;
    if (segd_buf_append(tk, &fam, 1) || segd_buf_append(tk, key, klen) ||
        kv_set(&id->overlay, tk->data, tk->len, val, vlen))
        return SEGD_ERR_NOMEM;
    if (val)
        rocksdb_writebatch_put_cf(wb, cf, (const char *)key, klen, val, vlen);
    else
        rocksdb_writebatch_delete_cf(wb, cf, (const char *)key, klen);
    return SEGD_OK;
}

static segd_err_t ids_key(segd_buf_t *k, char kind, const char *id, size_t len)
{
    k->len = 0;
    segd_err_t err = segd_buf_append(k, &kind, 1);
    return err ? err : segd_buf_append(k, id, len);
}

/* The `i` record of id; *found = 0 when the graph does not know it. */
static segd_err_t rec_load_at(segd_store_t *s, const rocksdb_readoptions_t *ro, kvmap_t *ov,
                              segd_buf_t *k, segd_buf_t *v, const char *id, size_t len,
                              segd_ident_rec_t *r, int *found, char *errstr, size_t n)
{
    segd_err_t err = ids_key(k, 'i', id, len);
    if (!err)
        err = fam_get(s, ro, ov, FAM_IDS, k->data, k->len, v, found, errstr, n);
    if (!err && *found && rec_decode(v->data, v->len, r))
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                        "bad ids record of %.*s (segd identity rebuild rewrites it)", (int)len,
                        id);
    return err;
}

static segd_err_t rec_load(segd_store_t *s, kvmap_t *ov, segd_buf_t *k, segd_buf_t *v,
                           const char *id, size_t len, segd_ident_rec_t *r, int *found,
                           char *errstr, size_t n)
{
    return rec_load_at(s, NULL, ov, k, v, id, len, r, found, errstr, n);
}

/* The members of master's component into l (sorted; {master} when it has
 * no `m` record). */
static segd_err_t members_load_at(segd_store_t *s, const rocksdb_readoptions_t *ro, kvmap_t *ov,
                                  segd_buf_t *k, segd_buf_t *v, const char *master, size_t len,
                                  id_list_t *l, char *errstr, size_t n)
{
    int found;
    l->n = 0;
    segd_err_t err = ids_key(k, 'm', master, len);
    if (!err)
        err = fam_get(s, ro, ov, FAM_IDS, k->data, k->len, v, &found, errstr, n);
    if (err)
        return err;
    if (!found)
        return list_push(l, master, len);
    if (members_decode(v->data, v->len, l))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "bad member list of %.*s (segd identity rebuild rewrites it)",
                         (int)len, master);
    return SEGD_OK;
}

static segd_err_t members_load(segd_store_t *s, kvmap_t *ov, segd_buf_t *k, segd_buf_t *v,
                               const char *master, size_t len, id_list_t *l, char *errstr,
                               size_t n)
{
    return members_load_at(s, NULL, ov, k, v, master, len, l, errstr, n);
}

/* ---------- online apply ---------- */

segd_err_t segd_ident_new(segd_store_t *s, const segd_ident_opts_t *o, segd_ident_t **out,
                          char *errstr, size_t errstr_size)
{
    if (!segd_store_links_cf(s) || !segd_store_ids_cf(s))
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "the store has no identity families (opened read-only?)");
    segd_ident_t *id = calloc(1, sizeof(*id));
    if (!id)
        return SEGD_ERR_NOMEM;
    id->store = s;
    if (o)
        id->opts = *o;
    else
        segd_ident_opts_default(&id->opts);
    segd_err_t err = segd_ident_rebuild_check(s, errstr, errstr_size);
    if (!err)
        err = segd_store_counter_get(s, SEGD_IDENT_SUPERNODE_COUNTER, &id->supernode_total,
                                     errstr, errstr_size);
    if (!err)
        err = segd_store_counter_get(s, SEGD_IDENT_EPOCH_COUNTER, &id->epoch_ms, errstr,
                                     errstr_size);
    if (err) {
        free(id);
        return err;
    }
    *out = id;
    return SEGD_OK;
}

void segd_ident_destroy(segd_ident_t *id)
{
    if (!id)
        return;
    kv_clear(&id->overlay);
    segd_buf_free(&id->key);
    segd_buf_free(&id->val);
    segd_buf_free(&id->tmp);
    list_free(&id->la);
    list_free(&id->lb);
    list_free(&id->merged);
    free(id);
}

/* The epoch is read again for the next batch: a restore beside segd run
 * (load/restore.c) may raise it while this handle lives. */
void segd_ident_reset(segd_ident_t *id)
{
    kv_clear(&id->overlay);
    id->epoch_stale = 1;
}
uint64_t segd_ident_applied(const segd_ident_t *id) { return id->applied; }
int64_t segd_ident_supernode_total(const segd_ident_t *id) { return id->supernode_total; }

static segd_err_t rec_store(segd_ident_t *id, segd_batch_t *b, const char *who, size_t len,
                            const segd_ident_rec_t *r)
{
    segd_err_t err = ids_key(&id->key, 'i', who, len);
    if (!err)
        err = rec_encode(r, &id->val);
    return err ? err : fam_put(id, b, FAM_IDS, id->key.data, id->key.len, id->val.data,
                               id->val.len);
}

/* Writes master's member list (deleted for a component of one). */
static segd_err_t members_store(segd_ident_t *id, segd_batch_t *b, const char *master,
                                size_t len, const id_list_t *l)
{
    segd_err_t err = ids_key(&id->key, 'm', master, len);
    if (err)
        return err;
    if (l && l->n > 1) {
        if ((err = members_encode(l, &id->val)))
            return err;
        return fam_put(id, b, FAM_IDS, id->key.data, id->key.len, id->val.data, id->val.len);
    }
    return fam_put(id, b, FAM_IDS, id->key.data, id->key.len, NULL, 0);
}

static int ident_cmp(const void *x, const void *y)
{
    const ident_id_t *a = x, *b = y;
    return id_cmp(a->s, a->len, b->s, b->len);
}

/* Re-points every member of l to master w, telling the callback. */
static segd_err_t repoint(segd_ident_t *id, segd_batch_t *b, const id_list_t *l,
                          const char *w, size_t wlen, int64_t w_fs, char *errstr, size_t n)
{
    for (size_t i = 0; i < l->n; i++) {
        segd_ident_rec_t r;
        int found;
        segd_err_t err = rec_load(id->store, &id->overlay, &id->key, &id->val, l->v[i].s,
                                  l->v[i].len, &r, &found, errstr, n);
        if (!err && !found)
            err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "member %.*s has no ids record",
                            (int)l->v[i].len, l->v[i].s);
        if (err)
            return err;
        if (id_cmp(r.master, r.master_len, w, wlen) == 0)
            continue;
        memcpy(r.master, w, wlen);
        r.master_len = wlen;
        if ((err = rec_store(id, b, l->v[i].s, l->v[i].len, &r)))
            return err;
        segd_ident_change_t c = {l->v[i].s, l->v[i].len, w, wlen, id->ts_ms, w_fs, id->epoch_ms};
        if (id->cb && id->cb(id->cb_ctx, &c))
            return SEGD_ERR_NOMEM;
    }
    return SEGD_OK;
}

/* Makes w (a member of the components of masters m1 and m2, which may be
 * one) the master of their union: member lists merged, old lists dropped,
 * members re-pointed. */
static segd_err_t merge_into(segd_ident_t *id, segd_batch_t *b, const ident_id_t *w,
                             int64_t w_fs, const ident_id_t *m1, const ident_id_t *m2,
                             char *errstr, size_t n)
{
    segd_store_t *s = id->store;
    id->merged.n = 0;
    segd_err_t err = members_load(s, &id->overlay, &id->key, &id->val, m1->s, m1->len,
                                  &id->la, errstr, n);
    int two = ident_cmp(m1, m2) != 0;
    if (!err && two)
        err = members_load(s, &id->overlay, &id->key, &id->val, m2->s, m2->len, &id->lb,
                           errstr, n);
    for (size_t i = 0; !err && i < id->la.n; i++)
        err = list_push(&id->merged, id->la.v[i].s, id->la.v[i].len);
    for (size_t i = 0; !err && two && i < id->lb.n; i++)
        err = list_push(&id->merged, id->lb.v[i].s, id->lb.v[i].len);
    if (err)
        return err;
    qsort(id->merged.v, id->merged.n, sizeof(ident_id_t), ident_cmp);
    /* lists that overlap (a store damaged, or written by a half-applied
     * event) must not make a member count twice against the guard */
    size_t k = 0;
    for (size_t i = 0; i < id->merged.n; i++)
        if (!k || ident_cmp(&id->merged.v[k - 1], &id->merged.v[i]))
            id->merged.v[k++] = id->merged.v[i];
    id->merged.n = k;
    if (ident_cmp(m1, w) && (err = members_store(id, b, m1->s, m1->len, NULL)))
        return err;
    if (two && ident_cmp(m2, w) && (err = members_store(id, b, m2->s, m2->len, NULL)))
        return err;
    if ((err = members_store(id, b, w->s, w->len, &id->merged)))
        return err;
    return repoint(id, b, &id->merged, w->s, w->len, w_fs, errstr, n);
}

/* The master of x and its record (x's own when x is its own master). */
static segd_err_t master_of(segd_ident_t *id, const ident_id_t *x, ident_id_t *m,
                            segd_ident_rec_t *mr, char *errstr, size_t n)
{
    int found;
    segd_ident_rec_t r;
    segd_err_t err = rec_load(id->store, &id->overlay, &id->key, &id->val, x->s, x->len, &r,
                              &found, errstr, n);
    if (!err && !found)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%.*s has no ids record", (int)x->len,
                        x->s);
    if (err)
        return err;
    memcpy(m->s, r.master, r.master_len);
    m->len = r.master_len;
    if (ident_cmp(m, x) == 0) {
        *mr = r;
        return SEGD_OK;
    }
    err = rec_load(id->store, &id->overlay, &id->key, &id->val, m->s, m->len, mr, &found,
                   errstr, n);
    if (!err && !found)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "master %.*s has no ids record",
                        (int)m->len, m->s);
    return err;
}

/* After x's first-seen moved back: x becomes its component's master if it
 * is now older than the master. */
static segd_err_t promote_if_older(segd_ident_t *id, segd_batch_t *b, const ident_id_t *x,
                                   int64_t fs, char *errstr, size_t n)
{
    ident_id_t m;
    segd_ident_rec_t mr;
    segd_err_t err = master_of(id, x, &m, &mr, errstr, n);
    if (err || ident_cmp(&m, x) == 0 || !older(fs, x->s, x->len, mr.first_seen_ms, m.s, m.len))
        return err;
    return merge_into(id, b, x, fs, &m, &m, errstr, n);
}

/* Joins the components of a and b when their masters differ. */
static segd_err_t join(segd_ident_t *id, segd_batch_t *b, const ident_id_t *a,
                       const ident_id_t *bb, char *errstr, size_t n)
{
    ident_id_t ma, mb;
    segd_ident_rec_t ra, rb;
    segd_err_t err = master_of(id, a, &ma, &ra, errstr, n);
    if (!err)
        err = master_of(id, bb, &mb, &rb, errstr, n);
    if (err || ident_cmp(&ma, &mb) == 0)
        return err;
    int a_wins = older(ra.first_seen_ms, ma.s, ma.len, rb.first_seen_ms, mb.s, mb.len);
    return merge_into(id, b, a_wins ? &ma : &mb, a_wins ? ra.first_seen_ms : rb.first_seen_ms,
                      &ma, &mb, errstr, n);
}

/* The size of x's component (x unknown: 1). */
static segd_err_t component_size(segd_ident_t *id, const char *x, size_t len,
                                 const segd_ident_rec_t *r, int found, size_t *size,
                                 char *errstr, size_t n)
{
    const char *m = found ? r->master : x;
    size_t ml = found ? r->master_len : len;
    segd_err_t err = members_load(id->store, &id->overlay, &id->key, &id->val, m, ml, &id->la,
                                  errstr, n);
    *size = id->la.n;
    return err;
}

/* The guard (DESIGN §10.4): what refuses ev before anything is written. */
static segd_err_t guard(segd_ident_t *id, const segd_link_event_t *ev,
                        const segd_ident_rec_t *ra, int fa, const segd_ident_rec_t *rb, int fb,
                        int new_edge, segd_ident_result_t *result, char *errstr, size_t n)
{
    *result = SEGD_IDENT_APPLIED;
    if (new_edge && ((fa && ra->n_links >= id->opts.max_links) ||
                     (fb && rb->n_links >= id->opts.max_links))) {
        *result = SEGD_IDENT_SUPERNODE_LINKS;
        return SEGD_OK;
    }
    if (!segd_link_joins(&id->opts, ev->op, ev->weight))
        return SEGD_OK;
    const char *ma = fa ? ra->master : ev->id_a, *mb = fb ? rb->master : ev->id_b;
    size_t mal = fa ? ra->master_len : ev->id_a_len, mbl = fb ? rb->master_len : ev->id_b_len;
    if (id_cmp(ma, mal, mb, mbl) == 0)
        return SEGD_OK;
    size_t sa, sb;
    segd_err_t err = component_size(id, ev->id_a, ev->id_a_len, ra, fa, &sa, errstr, n);
    if (!err)
        err = component_size(id, ev->id_b, ev->id_b_len, rb, fb, &sb, errstr, n);
    if (!err && sa + sb > id->opts.max_component)
        *result = SEGD_IDENT_SUPERNODE_COMPONENT;
    return err;
}

/* Step 1 of DESIGN §10.3: the edge's LWW join; *new_edge when it had none. */
static segd_err_t edge_load(segd_ident_t *id, const segd_link_event_t *ev,
                            segd_link_state_t *st, int *found, char *errstr, size_t n)
{
    segd_err_t err = segd_link_key(ev->id_a, ev->id_a_len, ev->id_b, ev->id_b_len, &id->key);
    if (!err)
        err = fam_get(id->store, NULL, &id->overlay, FAM_LINKS, id->key.data, id->key.len, &id->val,
                      found, errstr, n);
    if (!err && *found && segd_link_state_decode(id->val.data, id->val.len, st))
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "bad links value of %.*s and %.*s",
                        (int)ev->id_a_len, ev->id_a, (int)ev->id_b_len, ev->id_b);
    return err;
}

static segd_err_t edge_store(segd_ident_t *id, segd_batch_t *b, const segd_link_event_t *ev,
                             const segd_link_state_t *old, int found)
{
    segd_link_state_t e = {ev->ts_ms, ev->weight, ev->op == SEGD_LINK};
    segd_link_state_t st = found ? segd_link_state_join(old, &e) : e;
    uint8_t v[LINK_VALUE_LEN];
    segd_link_state_encode(&st, v);
    segd_err_t err = segd_link_key(ev->id_a, ev->id_a_len, ev->id_b, ev->id_b_len, &id->key);
    return err ? err : fam_put(id, b, FAM_LINKS, id->key.data, id->key.len, v, sizeof(v));
}

/* Step 2: an id's record with first_seen lowered to ts and the new edge
 * counted; an unknown id starts as its own master. */
static segd_err_t touch_id(segd_ident_t *id, segd_batch_t *b, const char *x, size_t len,
                           segd_ident_rec_t *r, int found, int new_edge, int *older_now)
{
    if (!found) {
        r->first_seen_ms = id->ts_ms;
        r->n_links = 0;
        memcpy(r->master, x, len);
        r->master_len = len;
    }
    *older_now = found && id->ts_ms < r->first_seen_ms;
    if (id->ts_ms < r->first_seen_ms)
        r->first_seen_ms = id->ts_ms;
    r->n_links += new_edge ? 1u : 0u;
    return rec_store(id, b, x, len, r);
}

static segd_err_t refuse(segd_ident_t *id, segd_batch_t *b)
{
    id->refused++;
    id->supernode_total++;
    segd_batch_set_counter(b, SEGD_IDENT_SUPERNODE_COUNTER, id->supernode_total);
    return SEGD_OK;
}

static segd_err_t apply_checked(segd_ident_t *id, segd_batch_t *b, const segd_link_event_t *ev,
                                segd_ident_result_t *result, char *errstr, size_t n)
{
    segd_ident_rec_t ra, rb;
    segd_link_state_t st;
    int fa, fb, fe, oa, ob;
    segd_err_t err = rec_load(id->store, &id->overlay, &id->key, &id->val, ev->id_a,
                              ev->id_a_len, &ra, &fa, errstr, n);
    if (!err)
        err = rec_load(id->store, &id->overlay, &id->key, &id->val, ev->id_b, ev->id_b_len,
                       &rb, &fb, errstr, n);
    if (!err)
        err = edge_load(id, ev, &st, &fe, errstr, n);
    if (!err)
        err = guard(id, ev, &ra, fa, &rb, fb, !fe, result, errstr, n);
    if (err || *result != SEGD_IDENT_APPLIED)
        return err ? err : refuse(id, b);
    ident_id_t a, bb;
    memcpy(a.s, ev->id_a, a.len = ev->id_a_len);
    memcpy(bb.s, ev->id_b, bb.len = ev->id_b_len);
    if ((err = edge_store(id, b, ev, &st, fe)) ||
        (err = touch_id(id, b, a.s, a.len, &ra, fa, !fe, &oa)) ||
        (err = touch_id(id, b, bb.s, bb.len, &rb, fb, !fe, &ob)))
        return err;
    if (oa && (err = promote_if_older(id, b, &a, ra.first_seen_ms, errstr, n)))
        return err;
    if (ob && (err = promote_if_older(id, b, &bb, rb.first_seen_ms, errstr, n)))
        return err;
    if (segd_link_joins(&id->opts, ev->op, ev->weight))
        err = join(id, b, &a, &bb, errstr, n);
    if (!err)
        id->applied++;
    return err;
}

segd_err_t segd_ident_apply(segd_ident_t *id, segd_batch_t *b, const segd_link_event_t *ev,
                            segd_ident_change_cb cb, void *ctx, segd_ident_result_t *result,
                            char *errstr, size_t errstr_size)
{
    segd_err_t err = segd_link_event_check(ev, errstr, errstr_size);
    if (err)
        return err;
    if (id->epoch_stale) {
        if ((err = segd_store_counter_get(id->store, SEGD_IDENT_EPOCH_COUNTER, &id->epoch_ms,
                                          errstr, errstr_size)))
            return err;
        id->epoch_stale = 0;
    }
    id->cb = cb;
    id->cb_ctx = ctx;
    id->ts_ms = ev->ts_ms;
    err = apply_checked(id, b, ev, result, errstr, errstr_size);
    id->cb = NULL;
    if (err == SEGD_ERR_NOMEM && !errstr[0])
        segd_errf(err, errstr, errstr_size, "identity apply: out of memory");
    return err;
}

/* ---------- reads ---------- */

static segd_err_t rebuild_mark(int64_t mark, char *errstr, size_t n)
{
    return mark ? segd_errf(SEGD_ERR_INVALID, errstr, n, SEGD_IDENT_REBUILD_MSG) : SEGD_OK;
}

segd_err_t segd_ident_rebuild_check(segd_store_t *s, char *errstr, size_t n)
{
    int64_t mark = 0;
    segd_err_t err = segd_store_counter_get(s, SEGD_IDENT_REBUILD_COUNTER, &mark, errstr, n);
    return err ? err : rebuild_mark(mark, errstr, n);
}

/* The rebuild mark as the view holds it: the reads that follow are of
 * the same state. */
static segd_err_t view_rebuild_check(segd_store_view_t *v, char *errstr, size_t n)
{
    int64_t mark = 0;
    segd_err_t err = segd_store_view_counter(v, SEGD_IDENT_REBUILD_COUNTER, &mark, errstr, n);
    return err ? err : rebuild_mark(mark, errstr, n);
}

segd_err_t segd_ident_get(segd_store_t *s, const char *id, size_t id_len, segd_ident_rec_t *rec,
                          char *errstr, size_t errstr_size)
{
    segd_buf_t k = {0}, v = {0};
    int found = 0;
    segd_err_t err = rec_load(s, NULL, &k, &v, id, id_len, rec, &found, errstr, errstr_size);
    segd_buf_free(&k);
    segd_buf_free(&v);
    return err ? err : found ? SEGD_OK : SEGD_ERR_NOTFOUND;
}

/* id's master through ro: its record's, or id itself when the graph does
 * not know it. */
static segd_err_t master_or_self(segd_store_t *s, const rocksdb_readoptions_t *ro,
                                 const char *id, size_t len, segd_ident_rec_t *r,
                                 char *errstr, size_t n)
{
    if (len == 0 || len > SEGD_IDENT_MAX_ID)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "an id is 1..%d bytes",
                         SEGD_IDENT_MAX_ID);
    segd_buf_t k = {0}, v = {0};
    int found = 0;
    segd_err_t err = rec_load_at(s, ro, NULL, &k, &v, id, len, r, &found, errstr, n);
    segd_buf_free(&k);
    segd_buf_free(&v);
    if (!err && !found) {
        memcpy(r->master, id, len);
        r->master_len = len;
        r->first_seen_ms = 0;
        r->n_links = 0;
    }
    return err;
}

/* A view for a few point reads: the graph reads of one lookup (and a
 * linked read's member records) then see one state of the store, whatever
 * a concurrent writer (segd run) commits meanwhile. */
static segd_err_t point_view(segd_store_t *s, segd_store_view_t **v, char *errstr, size_t n)
{
    segd_err_t err = segd_store_view_open(s, v, errstr, n);
    if (!err)
        segd_store_view_set_fill_cache(*v, 1);
    return err;
}

segd_err_t segd_ident_check(segd_store_t *s, const char *a, size_t a_len, const char *b,
                            size_t b_len, int *connected, segd_ident_rec_t *master,
                            char *errstr, size_t errstr_size)
{
    segd_store_view_t *v = NULL;
    segd_ident_rec_t ra, rb;
    segd_err_t err = point_view(s, &v, errstr, errstr_size);
    const rocksdb_readoptions_t *ro = v ? segd_store_view_read_options(v) : NULL;
    if (!err)
        err = view_rebuild_check(v, errstr, errstr_size);
    if (!err)
        err = master_or_self(s, ro, a, a_len, &ra, errstr, errstr_size);
    if (!err)
        err = master_or_self(s, ro, b, b_len, &rb, errstr, errstr_size);
    segd_store_view_close(v);
    if (err)
        return err;
    *connected = id_cmp(ra.master, ra.master_len, rb.master, rb.master_len) == 0;
    if (master)
        *master = ra;
    return SEGD_OK;
}

segd_err_t segd_ident_view_members(segd_store_view_t *vw, const char *id, size_t id_len,
                                   segd_ident_member_cb cb, void *ctx, char *errstr,
                                   size_t errstr_size)
{
    segd_store_t *s = segd_store_view_store(vw);
    const rocksdb_readoptions_t *ro = segd_store_view_read_options(vw);
    segd_ident_rec_t r;
    segd_err_t err = view_rebuild_check(vw, errstr, errstr_size);
    if (!err)
        err = master_or_self(s, ro, id, id_len, &r, errstr, errstr_size);
    if (err)
        return err;
    id_list_t l = {0};
    segd_buf_t k = {0}, v = {0};
    err = members_load_at(s, ro, NULL, &k, &v, r.master, r.master_len, &l, errstr,
                          errstr_size);
    if (!err && !cb(ctx, r.master, r.master_len))
        for (size_t i = 0; i < l.n; i++)
            if (id_cmp(l.v[i].s, l.v[i].len, r.master, r.master_len) &&
                cb(ctx, l.v[i].s, l.v[i].len))
                break;
    list_free(&l);
    segd_buf_free(&k);
    segd_buf_free(&v);
    return err;
}

segd_err_t segd_ident_members(segd_store_t *s, const char *id, size_t id_len,
                              segd_ident_member_cb cb, void *ctx, char *errstr,
                              size_t errstr_size)
{
    segd_store_view_t *v = NULL;
    segd_err_t err = point_view(s, &v, errstr, errstr_size);
    if (!err)
        err = segd_ident_view_members(v, id, id_len, cb, ctx, errstr, errstr_size);
    segd_store_view_close(v);
    return err;
}

/* Calls cb(ctx, key, value) for every key of a family in order. */
typedef int (*fam_cb)(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl);
static segd_err_t fam_scan(segd_store_t *s, char fam, fam_cb cb, void *ctx, char *errstr,
                           size_t n)
{
    rocksdb_column_family_handle_t *cf = family(s, fam);
    if (!cf)
        return SEGD_OK;
    rocksdb_iterator_t *it =
        rocksdb_create_iterator_cf(segd_store_rocks(s), segd_store_read_options(s), cf);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl), *v = rocksdb_iter_value(it, &vl);
        if (cb(ctx, (const uint8_t *)k, kl, (const uint8_t *)v, vl))
            break;
    }
    char *rerr = NULL;
    rocksdb_iter_get_error(it, &rerr);
    rocksdb_iter_destroy(it);
    if (rerr) {
        segd_errf(SEGD_ERR_IO, errstr, n, "scan: %s", rerr);
        rocksdb_free(rerr);
        return SEGD_ERR_IO;
    }
    return SEGD_OK;
}

typedef struct link_scan {
    segd_link_cb cb;
    void *ctx;
    int corrupt;
    char bad[80]; /* the key that did not decode, printable */
} link_scan_t;

/* A key for a message: bytes outside printable ASCII (the 0x00 between a
 * links key's ids among them) as '.'. */
static void printable(char *out, size_t n, const uint8_t *k, size_t kl)
{
    size_t i = 0;
    for (; i + 1 < n && i < kl; i++)
        out[i] = k[i] >= 0x20 && k[i] < 0x7f ? (char)k[i] : '.';
    out[i] = 0;
}

static int link_entry(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    link_scan_t *ls = ctx;
    segd_link_state_t st;
    const uint8_t *sep = memchr(k, 0, kl);
    if (!sep || sep == k || sep + 1 == k + kl || segd_link_state_decode(v, vl, &st)) {
        ls->corrupt = 1;
        printable(ls->bad, sizeof(ls->bad), k, kl);
        return 1;
    }
    return ls->cb(ls->ctx, (const char *)k, (size_t)(sep - k), (const char *)sep + 1,
                  kl - (size_t)(sep - k) - 1, &st);
}

segd_err_t segd_ident_scan_links(segd_store_t *s, segd_link_cb cb, void *ctx, char *errstr,
                                 size_t errstr_size)
{
    link_scan_t ls = {cb, ctx, 0, ""};
    segd_err_t err = fam_scan(s, FAM_LINKS, link_entry, &ls, errstr, errstr_size);
    if (!err && ls.corrupt)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, errstr_size,
                        "bad key or value in links: %s (ids shown with '.' for the 0x00 "
                        "between them)",
                        ls.bad);
    return err;
}

/* ---------- offline rebuild ---------- */

/* One id of the rebuild: its bytes and its stored master in the arena. */
typedef struct rb_node {
    size_t off, moff;
    uint32_t len, mlen;
    int64_t first_seen_ms;
    uint32_t n_links;
    uint32_t parent, size;
    int derived; /* its `i` record is corrupt or absent: rebuilt from links */
} rb_node_t;

typedef struct rebuild {
    segd_store_t *s;
    const segd_ident_opts_t *o;
    segd_buf_t arena;
    rb_node_t *nodes;
    size_t n, cap;
    kvmap_t index;   /* id -> node number (4 bytes) */
    id_list_t old_m; /* masters with an `m` record before */
    uint32_t *order; /* nodes sorted by (root, id) */
    segd_ident_rebuild_stats_t st;
    segd_err_t err;
    int corrupt;
    char bad[80]; /* the ids key that cannot be rebuilt, printable */
} rebuild_t;

static const char *rb_id(const rebuild_t *r, const rb_node_t *x)
{
    return (const char *)r->arena.data + x->off;
}

static int rb_find_node(rebuild_t *r, const char *id, size_t len, uint32_t *out)
{
    kv_t *e = kv_find(&r->index, (const uint8_t *)id, len);
    if (!e || !e->key)
        return 0;
    memcpy(out, e->val, 4);
    return 1;
}

static segd_err_t rb_add(rebuild_t *r, const char *id, size_t len, const char *m, size_t mlen,
                         int64_t fs, uint32_t n_links)
{
    rb_node_t *v = segd_array_grow(r->nodes, &r->cap, r->n + 1, sizeof(*v));
    if (!v)
        return SEGD_ERR_NOMEM;
    r->nodes = v;
    uint32_t k = (uint32_t)r->n;
    rb_node_t *x = &v[r->n++];
    x->off = r->arena.len;
    x->len = (uint32_t)len;
    x->moff = x->off + len;
    x->mlen = (uint32_t)mlen;
    x->first_seen_ms = fs;
    x->n_links = n_links;
    x->parent = k;
    x->size = 1;
    x->derived = 0;
    segd_err_t err = segd_buf_append(&r->arena, id, len);
    if (!err)
        err = segd_buf_append(&r->arena, m, mlen);
    return err ? err : kv_set(&r->index, (const uint8_t *)id, len, &k, 4);
}

static int rb_ids_entry(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    rebuild_t *r = ctx;
    segd_ident_rec_t rec;
    if (kl < 2 || kl > SEGD_IDENT_MAX_ID + 1 || (k[0] != 'i' && k[0] != 'm') ||
        memchr(k + 1, 0, kl - 1)) {
        r->corrupt = 1;
        printable(r->bad, sizeof(r->bad), k, kl);
        return 1;
    }
    if (k[0] == 'm') { /* never decoded: every list is rewritten or deleted */
        r->err = list_push(&r->old_m, (const char *)k + 1, kl - 1);
        return r->err != SEGD_OK;
    }
    if (rec_decode(v, vl, &rec)) {
        /* first_seen and n_links come back from the id's edges (rb_edge),
         * the master from the components; "" never equals the new master,
         * so the record is rewritten */
        r->err = rb_add(r, (const char *)k + 1, kl - 1, "", 0, INT64_MAX, 0);
        if (!r->err)
            r->nodes[r->n - 1].derived = 1;
        return r->err != SEGD_OK;
    }
    r->err = rb_add(r, (const char *)k + 1, kl - 1, rec.master, rec.master_len,
                    rec.first_seen_ms, rec.n_links);
    return r->err != SEGD_OK;
}

/* The node of an edge's end; one without an `i` record (lost, or never
 * written by a store damaged in between) gets a derived node. */
static int rb_node_of(rebuild_t *r, const char *id, size_t len, uint32_t *out)
{
    if (rb_find_node(r, id, len, out))
        return 0;
    if ((r->err = rb_add(r, id, len, "", 0, INT64_MAX, 0)))
        return 1;
    *out = (uint32_t)(r->n - 1);
    r->nodes[*out].derived = 1;
    return 0;
}

/* A derived node's record from its edges, as §10.2 defines them: n_links
 * counts the keys naming it; first_seen is the smallest ts_ms they hold (the
 * edges keep their LWW winner's ts, so this is at or after the true
 * first-seen, and equal when each edge saw one event). */
static void rb_derive(rebuild_t *r, uint32_t x, const segd_link_state_t *st)
{
    rb_node_t *v = &r->nodes[x];
    if (!v->derived)
        return;
    v->n_links++;
    if (st->ts_ms < v->first_seen_ms)
        v->first_seen_ms = st->ts_ms;
}

static uint32_t rb_root(rebuild_t *r, uint32_t x)
{
    while (r->nodes[x].parent != x) {
        r->nodes[x].parent = r->nodes[r->nodes[x].parent].parent; /* halving */
        x = r->nodes[x].parent;
    }
    return x;
}

/* Unions the edge's ends in links key order, with the component guard
 * (min.weight may have been lowered since the online joins). */
static int rb_edge(void *ctx, const char *a, size_t al, const char *b, size_t bl,
                   const segd_link_state_t *st)
{
    rebuild_t *r = ctx;
    uint32_t x, y;
    if (rb_node_of(r, a, al, &x) || rb_node_of(r, b, bl, &y))
        return 1;
    rb_derive(r, x, st);
    rb_derive(r, y, st);
    if (!st->linked || !(st->weight >= r->o->min_weight))
        return 0;
    x = rb_root(r, x);
    y = rb_root(r, y);
    r->st.edges_used++;
    if (x == y)
        return 0;
    if (r->nodes[x].size + r->nodes[y].size > r->o->max_component) {
        r->st.refused++;
        return 0;
    }
    if (r->nodes[x].size < r->nodes[y].size) {
        uint32_t t = x;
        x = y;
        y = t;
    }
    r->nodes[y].parent = x;
    r->nodes[x].size += r->nodes[y].size;
    return 0;
}

static int rb_order_cmp(const void *p, const void *q, void *ctx)
{
    const rebuild_t *r = ctx;
    uint32_t a = *(const uint32_t *)p, b = *(const uint32_t *)q;
    uint32_t ra = r->nodes[a].parent, rb = r->nodes[b].parent; /* roots, flattened */
    if (ra != rb)
        return ra < rb ? -1 : 1;
    return id_cmp(rb_id(r, &r->nodes[a]), r->nodes[a].len, rb_id(r, &r->nodes[b]),
                  r->nodes[b].len);
}

#define RB_BATCH_OPS 4096

typedef struct rb_writer {
    rebuild_t *r;
    segd_ident_t w; /* only its buffers, overlay and store: fam_put's writer */
    segd_batch_t *b;
    segd_ident_rebuild_cb cb;
    void *cctx;
    kvmap_t new_m; /* masters of components of more than one id */
    int64_t now_ms;
} rb_writer_t;

/* Writes the batch once it is full, and always when it is the last (the
 * one that clears the mark, even with nothing else in it). */
static segd_err_t rb_flush(rb_writer_t *wr, int last, char *errstr, size_t n)
{
    if (!last && segd_batch_count(wr->b) < RB_BATCH_OPS)
        return SEGD_OK;
    /* every batch raises the epoch (a set, so once is as good as many): a
     * rebuild cut short has raised it before any change it wrote */
    segd_batch_set_counter(wr->b, SEGD_IDENT_EPOCH_COUNTER, wr->w.epoch_ms);
    /* the mark: set with every batch but the last, cleared by the last, so
     * the ids family is never a mix of two rebuilds' states unmarked; the
     * rebuild is one batch (nothing to mark) when it fits in one */
    segd_batch_set_counter(wr->b, SEGD_IDENT_REBUILD_COUNTER, last ? 0 : wr->w.epoch_ms);
    if (wr->cb && wr->cb(wr->cctx, wr->b, NULL))
        return SEGD_ERR_NOMEM;
    segd_err_t err = segd_store_write(wr->r->s, wr->b, errstr, n);
    if (err)
        return err;
    segd_batch_clear(wr->b);
    kv_clear(&wr->w.overlay);
    return SEGD_OK;
}

/* Re-points the members of one component (order[from..to)) to its master. */
static segd_err_t rb_write_component(rb_writer_t *wr, size_t from, size_t to)
{
    rebuild_t *r = wr->r;
    const rb_node_t *m = &r->nodes[r->order[from]];
    for (size_t i = from + 1; i < to; i++) {
        const rb_node_t *x = &r->nodes[r->order[i]];
        if (older(x->first_seen_ms, rb_id(r, x), x->len, m->first_seen_ms, rb_id(r, m), m->len))
            m = x;
    }
    const char *ms = rb_id(r, m);
    id_list_t *l = &wr->w.merged;
    l->n = 0;
    segd_err_t err = SEGD_OK;
    for (size_t i = from; !err && i < to; i++) {
        const rb_node_t *x = &r->nodes[r->order[i]];
        const char *xs = rb_id(r, x), *old = (const char *)r->arena.data + x->moff;
        if (x->derived && !x->n_links) { /* a corrupt record no edge names: no id */
            if (!(err = ids_key(&wr->w.key, 'i', xs, x->len)))
                err = fam_put(&wr->w, wr->b, FAM_IDS, wr->w.key.data, wr->w.key.len, NULL, 0);
            r->st.repaired++;
            continue;
        }
        r->st.repaired += x->derived ? 1u : 0u;
        if (to - from > 1 && (err = list_push(l, xs, x->len)))
            break;
        if (id_cmp(old, x->mlen, ms, m->len) == 0)
            continue;
        segd_ident_rec_t rec = {x->first_seen_ms, x->n_links, {0}, m->len};
        memcpy(rec.master, ms, m->len);
        if ((err = rec_store(&wr->w, wr->b, xs, x->len, &rec)))
            break;
        r->st.repointed++;
        segd_ident_change_t c = {xs, x->len, ms, m->len, wr->now_ms, m->first_seen_ms,
                                 wr->w.epoch_ms};
        if (wr->cb && wr->cb(wr->cctx, wr->b, &c))
            err = SEGD_ERR_NOMEM;
    }
    if (err || to - from == 1)
        return err;
    r->st.linked_components++;
    if ((err = members_store(&wr->w, wr->b, ms, m->len, l)))
        return err;
    uint32_t one = 1;
    return kv_set(&wr->new_m, (const uint8_t *)ms, m->len, &one, 4);
}

static segd_err_t rb_write(rb_writer_t *wr, void (*progress)(void *, uint64_t, uint64_t),
                           void *pctx, char *errstr, size_t n)
{
    rebuild_t *r = wr->r;
    segd_err_t err = SEGD_OK;
    for (size_t i = 0; !err && i < r->n;) {
        size_t j = i + 1;
        while (j < r->n && r->nodes[r->order[j]].parent == r->nodes[r->order[i]].parent)
            j++;
        err = rb_write_component(wr, i, j);
        if (!err)
            err = rb_flush(wr, 0, errstr, n);
        r->st.components++;
        i = j;
        if (progress)
            progress(pctx, i, r->n);
    }
    for (size_t i = 0; !err && i < r->old_m.n; i++) {
        const ident_id_t *m = &r->old_m.v[i];
        kv_t *e = kv_find(&wr->new_m, (const uint8_t *)m->s, m->len);
        if (!e || !e->key)
            err = members_store(&wr->w, wr->b, m->s, m->len, NULL);
    }
    return err ? err : rb_flush(wr, 1, errstr, n);
}

static segd_err_t rb_load(rebuild_t *r, char *errstr, size_t n)
{
    segd_err_t err = fam_scan(r->s, FAM_IDS, rb_ids_entry, r, errstr, n);
    if (!err && !r->err && !r->corrupt)
        err = segd_ident_scan_links(r->s, rb_edge, r, errstr, n);
    if (!err && r->err)
        err = segd_errf(r->err, errstr, n, "rebuild: %s", segd_err_str(r->err));
    if (!err && r->corrupt)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "rebuild: bad ids key %s", r->bad);
    if (err)
        return err;
    if (r->n && !(r->order = malloc(r->n * sizeof(*r->order))))
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < r->n; i++) {
        r->nodes[i].parent = rb_root(r, (uint32_t)i);
        r->order[i] = (uint32_t)i;
    }
    qsort_r(r->order, r->n, sizeof(*r->order), rb_order_cmp, r);
    r->st.ids = r->n;
    return SEGD_OK;
}

segd_err_t segd_ident_rebuild(segd_store_t *s, const segd_ident_opts_t *o,
                              void (*progress)(void *ctx, uint64_t done, uint64_t total),
                              void *pctx, segd_ident_rebuild_cb cb, void *cctx,
                              segd_ident_rebuild_stats_t *st, char *errstr,
                              size_t errstr_size)
{
    if (!segd_store_links_cf(s) || !segd_store_ids_cf(s) || segd_store_is_read_only(s))
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "rebuild needs the store opened for writing");
    rebuild_t r = {.s = s, .o = o};
    rb_writer_t wr = {.r = &r, .cb = cb, .cctx = cctx, .now_ms = segd_wall_ms()};
    wr.w.store = s;
    wr.w.opts = *o;
    int64_t epoch = 0;
    segd_err_t err = segd_store_counter_get(s, SEGD_IDENT_EPOCH_COUNTER, &epoch, errstr,
                                            errstr_size);
    /* later than every epoch before, and readable as the rebuild's time */
    wr.w.epoch_ms = epoch + 1 > wr.now_ms ? epoch + 1 : wr.now_ms;
    if (!err)
        err = rb_load(&r, errstr, errstr_size);
    if (!err)
        err = segd_batch_new(s, &wr.b);
    /* the last batch is written even when nothing was rewritten: the epoch
     * is raised all the same (the rebuild is the start of an epoch whatever
     * it found) and the mark of an interrupted rebuild is cleared */
    if (!err)
        err = rb_write(&wr, progress, pctx, errstr, errstr_size);
    if (st) {
        *st = r.st;
        st->epoch_ms = wr.w.epoch_ms;
    }
    segd_batch_destroy(wr.b);
    kv_clear(&wr.new_m);
    kv_clear(&wr.w.overlay);
    segd_buf_free(&wr.w.key);
    segd_buf_free(&wr.w.val);
    segd_buf_free(&wr.w.tmp);
    list_free(&wr.w.merged);
    kv_clear(&r.index);
    list_free(&r.old_m);
    segd_buf_free(&r.arena);
    free(r.nodes);
    free(r.order);
    return err;
}

/* ---------- a view's ids (snapshots, DESIGN §10.6) ---------- */

/* The master's first-seen through the view (a master is its own: no read). */
static segd_err_t view_first_seen(segd_store_view_t *v, const segd_ident_rec_t *r,
                                  const char *id, size_t len, int64_t own_fs, segd_buf_t *key,
                                  segd_buf_t *val, int64_t *fs, char *errstr, size_t n)
{
    if (id_cmp(r->master, r->master_len, id, len) == 0) {
        *fs = own_fs;
        return SEGD_OK;
    }
    segd_ident_rec_t mr;
    int found;
    segd_err_t err = rec_load_at(segd_store_view_store(v), segd_store_view_read_options(v), NULL,
                                 key, val, r->master, r->master_len, &mr, &found, errstr, n);
    if (!err && !found)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "master %.*s of %.*s has no ids record",
                        (int)r->master_len, r->master, (int)len, id);
    if (!err)
        *fs = mr.first_seen_ms;
    return err;
}

segd_err_t segd_ident_view_scan(segd_store_view_t *v, segd_ident_entry_cb cb, void *ctx,
                                int64_t *epoch_ms, char *errstr, size_t n)
{
    segd_store_t *s = segd_store_view_store(v);
    *epoch_ms = 0;
    rocksdb_column_family_handle_t *cf = segd_store_ids_cf(s);
    if (!cf)
        return SEGD_OK;
    segd_err_t err = segd_store_view_counter(v, SEGD_IDENT_EPOCH_COUNTER, epoch_ms, errstr, n);
    if (!err) /* a snapshot must not carry a half-rebuilt graph to the caches */
        err = view_rebuild_check(v, errstr, n);
    if (err)
        return err;
    segd_buf_t key = {0}, mval = {0};
    rocksdb_iterator_t *it =
        rocksdb_create_iterator_cf(segd_store_rocks(s), segd_store_view_read_options(v), cf);
    /* `i` records only: the `m` lists follow from them */
    for (rocksdb_iter_seek(it, "i", 1); !err && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl), *val = rocksdb_iter_value(it, &vl);
        if (kl < 1 || k[0] != 'i')
            break;
        segd_ident_rec_t r;
        int64_t fs = 0;
        if (kl < 2 || kl > SEGD_IDENT_MAX_ID + 1 || rec_decode((const uint8_t *)val, vl, &r)) {
            char bad[80];
            printable(bad, sizeof(bad), (const uint8_t *)k, kl);
            err = segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                            "bad ids record %s (segd identity rebuild rewrites it)", bad);
            break;
        }
        err = view_first_seen(v, &r, k + 1, kl - 1, r.first_seen_ms, &key, &mval, &fs, errstr,
                              n);
        if (!err && cb(ctx, k + 1, kl - 1, r.master, r.master_len, fs))
            break;
    }
    char *rerr = NULL;
    rocksdb_iter_get_error(it, &rerr);
    rocksdb_iter_destroy(it);
    segd_buf_free(&key);
    segd_buf_free(&mval);
    if (rerr) {
        err = err ? err : segd_errf(SEGD_ERR_IO, errstr, n, "scan ids: %s", rerr);
        rocksdb_free(rerr);
    }
    return err;
}

/* ---------- linked reads ---------- */

typedef struct linked {
    segd_store_view_t *v;
    segd_profile_t *parts;
    size_t n, cap;
    segd_ident_member_cb cb;
    void *ctx;
    segd_err_t err;
    char *errstr;
    size_t errstr_size;
} linked_t;

static int linked_member(void *ctx, const char *m, size_t len)
{
    linked_t *l = ctx;
    segd_profile_t *v = segd_array_grow(l->parts, &l->cap, l->n + 1, sizeof(*v));
    if (!v) {
        l->err = SEGD_ERR_NOMEM;
        return 1;
    }
    l->parts = v;
    segd_profile_init(&v[l->n]);
    l->err = segd_store_view_get(l->v, m, len, &v[l->n], l->errstr, l->errstr_size);
    segd_profile_apply_own_erase(&v[l->n++]);
    if (!l->err && l->cb && l->cb(l->ctx, m, len))
        l->err = SEGD_ERR_ABORTED;
    return l->err != SEGD_OK;
}

segd_err_t segd_ident_view_get_linked(segd_store_view_t *v, const char *id, size_t id_len,
                                      segd_profile_t *out, segd_ident_member_cb cb, void *ctx,
                                      char *errstr, size_t errstr_size)
{
    linked_t l = {.v = v, .cb = cb, .ctx = ctx, .errstr = errstr, .errstr_size = errstr_size};
    segd_err_t err =
        segd_ident_view_members(v, id, id_len, linked_member, &l, errstr, errstr_size);
    if (!err)
        err = l.err;
    const segd_profile_t **in = NULL;
    if (!err && !(in = malloc((l.n ? l.n : 1) * sizeof(*in))))
        err = SEGD_ERR_NOMEM;
    for (size_t i = 0; !err && i < l.n; i++)
        in[i] = &l.parts[i];
    if (!err) {
        segd_profile_clear(out);
        err = segd_profile_join(out, (const segd_profile_t *const *)in, l.n, NULL);
    }
    free(in);
    for (size_t i = 0; i < l.n; i++)
        segd_profile_free(&l.parts[i]);
    free(l.parts);
    return err;
}

segd_err_t segd_ident_get_linked(segd_store_t *s, const char *id, size_t id_len,
                                 segd_profile_t *out, segd_ident_member_cb cb, void *ctx,
                                 char *errstr, size_t errstr_size)
{
    segd_store_view_t *v = NULL;
    segd_err_t err = point_view(s, &v, errstr, errstr_size);
    if (!err)
        err = segd_ident_view_get_linked(v, id, id_len, out, cb, ctx, errstr, errstr_size);
    segd_store_view_close(v);
    return err;
}
