/* Reads and writes of the identity graph's two RocksDB families (`links`
 * and `ids`, DESIGN §10.2), and the byte-keyed map behind the overlay. A
 * writer's puts go into its batch and its overlay at once, so that its later
 * reads in the same batch see them before the store. The online writer, the
 * rebuild and the lookups all read and write the families through here. */
#include <rocksdb/c.h>
#include <stdlib.h>
#include <string.h>

#include "store/identity_int.h"
#include "store/store_int.h"

/* ---------- the map: a batch's overlay, the rebuild's index ---------- */

static uint64_t kv_hash(const uint8_t *k, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ k[i]) * 1099511628211ull;
    return h;
}

kv_t *segd_ident_kv_find(kvmap_t *m, const uint8_t *k, size_t n)
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
            *segd_ident_kv_find(m, old[i].key, old[i].klen) = old[i];
    free(old);
    return SEGD_OK;
}

segd_err_t segd_ident_kv_set(kvmap_t *m, const uint8_t *k, size_t kn, const void *val, size_t vn)
{
    if ((m->n + 1) * 2 > m->cap && kv_grow(m))
        return SEGD_ERR_NOMEM;
    kv_t *s = segd_ident_kv_find(m, k, kn);
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

void segd_ident_kv_clear(kvmap_t *m)
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

segd_err_t segd_ident_fam_get(segd_store_t *s, const rocksdb_readoptions_t *ro, kvmap_t *ov,
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
        kv_t *e = segd_ident_kv_find(ov, tk.data, tk.len);
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

segd_err_t segd_ident_fam_put(segd_ident_t *id, segd_batch_t *b, char fam, const uint8_t *key,
                              size_t klen, const void *val, size_t vlen)
{
    rocksdb_writebatch_t *wb = segd_batch_writebatch(b);
    rocksdb_column_family_handle_t *cf = family(id->store, fam);
    segd_buf_t *tk = &id->tmp;
    tk->len = 0;
    if (segd_buf_append(tk, &fam, 1) || segd_buf_append(tk, key, klen) ||
        segd_ident_kv_set(&id->overlay, tk->data, tk->len, val, vlen))
        return SEGD_ERR_NOMEM;
    if (val)
        rocksdb_writebatch_put_cf(wb, cf, (const char *)key, klen, val, vlen);
    else
        rocksdb_writebatch_delete_cf(wb, cf, (const char *)key, klen);
    return SEGD_OK;
}

/* ---------- the ids family's records and member lists ---------- */

segd_err_t segd_ident_ids_key(segd_buf_t *k, char kind, const char *id, size_t len)
{
    k->len = 0;
    segd_err_t err = segd_buf_append(k, &kind, 1);
    return err ? err : segd_buf_append(k, id, len);
}

segd_err_t segd_ident_rec_load_at(segd_store_t *s, const rocksdb_readoptions_t *ro, kvmap_t *ov,
                                  segd_buf_t *k, segd_buf_t *v, const char *id, size_t len,
                                  segd_ident_rec_t *r, int *found, char *errstr, size_t n)
{
    segd_err_t err = segd_ident_ids_key(k, 'i', id, len);
    if (!err)
        err = segd_ident_fam_get(s, ro, ov, FAM_IDS, k->data, k->len, v, found, errstr, n);
    if (!err && *found && segd_ident_rec_decode(v->data, v->len, r))
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                        "bad ids record of %.*s (segd identity rebuild rewrites it)", (int)len,
                        id);
    return err;
}

segd_err_t segd_ident_rec_load(segd_store_t *s, kvmap_t *ov, segd_buf_t *k, segd_buf_t *v,
                               const char *id, size_t len, segd_ident_rec_t *r, int *found,
                               char *errstr, size_t n)
{
    return segd_ident_rec_load_at(s, NULL, ov, k, v, id, len, r, found, errstr, n);
}

segd_err_t segd_ident_members_load_at(segd_store_t *s, const rocksdb_readoptions_t *ro, kvmap_t *ov,
                                      segd_buf_t *k, segd_buf_t *v, const char *master, size_t len,
                                      id_list_t *l, char *errstr, size_t n)
{
    int found;
    l->n = 0;
    segd_err_t err = segd_ident_ids_key(k, 'm', master, len);
    if (!err)
        err = segd_ident_fam_get(s, ro, ov, FAM_IDS, k->data, k->len, v, &found, errstr, n);
    if (err)
        return err;
    if (!found)
        return segd_ident_list_push(l, master, len);
    if (segd_ident_members_decode(v->data, v->len, l))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "bad member list of %.*s (segd identity rebuild rewrites it)",
                         (int)len, master);
    return SEGD_OK;
}

segd_err_t segd_ident_members_load(segd_store_t *s, kvmap_t *ov, segd_buf_t *k, segd_buf_t *v,
                                   const char *master, size_t len, id_list_t *l, char *errstr,
                                   size_t n)
{
    return segd_ident_members_load_at(s, NULL, ov, k, v, master, len, l, errstr, n);
}

segd_err_t segd_ident_rec_store(segd_ident_t *id, segd_batch_t *b, const char *who, size_t len,
                                const segd_ident_rec_t *r)
{
    segd_err_t err = segd_ident_ids_key(&id->key, 'i', who, len);
    if (!err)
        err = segd_ident_rec_encode(r, &id->val);
    return err ? err : segd_ident_fam_put(id, b, FAM_IDS, id->key.data, id->key.len, id->val.data,
                                          id->val.len);
}

segd_err_t segd_ident_members_store(segd_ident_t *id, segd_batch_t *b, const char *master,
                                    size_t len, const id_list_t *l)
{
    segd_err_t err = segd_ident_ids_key(&id->key, 'm', master, len);
    if (err)
        return err;
    if (l && l->n > 1) {
        if ((err = segd_ident_members_encode(l, &id->val)))
            return err;
        return segd_ident_fam_put(id, b, FAM_IDS, id->key.data, id->key.len, id->val.data,
                                  id->val.len);
    }
    return segd_ident_fam_put(id, b, FAM_IDS, id->key.data, id->key.len, NULL, 0);
}

segd_err_t segd_ident_fam_scan(segd_store_t *s, char fam, segd_ident_fam_cb cb, void *ctx,
                               char *errstr, size_t n)
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
