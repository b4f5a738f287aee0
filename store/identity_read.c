/* The identity graph's readers: the rebuild mark check, the lookups (get,
 * check, members), the scan of every edge, a view's scan of every id for a
 * snapshot's members file (DESIGN §10.6), and linked reads that join the
 * records of a component's members. Each lookup reads through one store view
 * so it sees one state of the store while segd run writes. Called by the
 * CLI (segd get, segd identity), the publisher's snapshot, the writer (the
 * mark) and the rebuild (the edge scan). */
#include <rocksdb/c.h>
#include <stdlib.h>
#include <string.h>

#include "store/identity.h"
#include "store/identity_int.h"
#include "store/store_int.h"

/* ---------- the rebuild mark ---------- */

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

/* Checks the rebuild mark as the view holds it, so that the check and the
 * reads that follow it see the same state of the store. */
static segd_err_t view_rebuild_check(segd_store_view_t *v, char *errstr, size_t n)
{
    int64_t mark = 0;
    segd_err_t err = segd_store_view_counter(v, SEGD_IDENT_REBUILD_COUNTER, &mark, errstr, n);
    return err ? err : rebuild_mark(mark, errstr, n);
}

/* ---------- lookups ---------- */

segd_err_t segd_ident_get(segd_store_t *s, const char *id, size_t id_len, segd_ident_rec_t *rec,
                          char *errstr, size_t errstr_size)
{
    segd_buf_t k = {0}, v = {0};
    int found = 0;
    segd_err_t err =
        segd_ident_rec_load(s, NULL, &k, &v, id, id_len, rec, &found, errstr, errstr_size);
    segd_buf_free(&k);
    segd_buf_free(&v);
    return err ? err : found ? SEGD_OK : SEGD_ERR_NOTFOUND;
}

/* Reads id's master through ro. An id the graph does not know is its own
 * master. */
static segd_err_t master_or_self(segd_store_t *s, const rocksdb_readoptions_t *ro,
                                 const char *id, size_t len, segd_ident_rec_t *r,
                                 char *errstr, size_t n)
{
    if (len == 0 || len > SEGD_IDENT_MAX_ID)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "an id is 1..%d bytes",
                         SEGD_IDENT_MAX_ID);
    segd_buf_t k = {0}, v = {0};
    int found = 0;
    segd_err_t err = segd_ident_rec_load_at(s, ro, NULL, &k, &v, id, len, r, &found, errstr, n);
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

/* Opens a view for a few point reads. The graph reads of one lookup, and a
 * linked read's member records, then see one state of the store whatever a
 * concurrent writer (segd run) commits meanwhile. */
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
    *connected = segd_ident_id_cmp(ra.master, ra.master_len, rb.master, rb.master_len) == 0;
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
    err = segd_ident_members_load_at(s, ro, NULL, &k, &v, r.master, r.master_len, &l, errstr,
                                     errstr_size);
    if (!err && !cb(ctx, r.master, r.master_len))
        for (size_t i = 0; i < l.n; i++)
            if (segd_ident_id_cmp(l.v[i].s, l.v[i].len, r.master, r.master_len) &&
                cb(ctx, l.v[i].s, l.v[i].len))
                break;
    segd_ident_list_free(&l);
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

/* ---------- every edge ---------- */

typedef struct link_scan {
    segd_link_cb cb;
    void *ctx;
    int corrupt;
    char bad[80]; /* the key that did not decode, printable */
} link_scan_t;

static int link_entry(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    link_scan_t *ls = ctx;
    segd_link_state_t st;
    const uint8_t *sep = memchr(k, 0, kl);
    if (!sep || sep == k || sep + 1 == k + kl || segd_link_state_decode(v, vl, &st)) {
        ls->corrupt = 1;
        segd_ident_printable(ls->bad, sizeof(ls->bad), k, kl);
        return 1;
    }
    return ls->cb(ls->ctx, (const char *)k, (size_t)(sep - k), (const char *)sep + 1,
                  kl - (size_t)(sep - k) - 1, &st);
}

segd_err_t segd_ident_scan_links(segd_store_t *s, segd_link_cb cb, void *ctx, char *errstr,
                                 size_t errstr_size)
{
    link_scan_t ls = {cb, ctx, 0, ""};
    segd_err_t err = segd_ident_fam_scan(s, FAM_LINKS, link_entry, &ls, errstr, errstr_size);
    if (!err && ls.corrupt)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, errstr_size,
                        "bad key or value in links: %s (ids shown with '.' for the 0x00 "
                        "between them)",
                        ls.bad);
    return err;
}

/* ---------- a view's ids (snapshots, DESIGN §10.6) ---------- */

/* Reads the first-seen of r's master through the view. When id is its own
 * master, own_fs is the answer and nothing is read. */
static segd_err_t view_first_seen(segd_store_view_t *v, const segd_ident_rec_t *r,
                                  const char *id, size_t len, int64_t own_fs, segd_buf_t *key,
                                  segd_buf_t *val, int64_t *fs, char *errstr, size_t n)
{
    if (segd_ident_id_cmp(r->master, r->master_len, id, len) == 0) {
        *fs = own_fs;
        return SEGD_OK;
    }
    segd_ident_rec_t mr;
    int found;
    segd_err_t err =
        segd_ident_rec_load_at(segd_store_view_store(v), segd_store_view_read_options(v), NULL,
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
    if (!err) /* A snapshot must not carry a half-rebuilt graph to the caches. */
        err = view_rebuild_check(v, errstr, n);
    if (err)
        return err;
    segd_buf_t key = {0}, mval = {0};
    rocksdb_iterator_t *it =
        rocksdb_create_iterator_cf(segd_store_rocks(s), segd_store_view_read_options(v), cf);
    /* Only the `i` records are read, since the `m` lists follow from them. */
    for (rocksdb_iter_seek(it, "i", 1); !err && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl), *val = rocksdb_iter_value(it, &vl);
        if (kl < 1 || k[0] != 'i')
            break;
        segd_ident_rec_t r;
        int64_t fs = 0;
        if (kl < 2 || kl > SEGD_IDENT_MAX_ID + 1 ||
            segd_ident_rec_decode((const uint8_t *)val, vl, &r)) {
            char bad[80];
            segd_ident_printable(bad, sizeof(bad), (const uint8_t *)k, kl);
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
