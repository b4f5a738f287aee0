/* Listing components (see identity_components.h). Two steps through one
 * view: the heads of the `m` records give each component's size without
 * decoding its list, and after the sort only the lists that are reported
 * are read. The (master, size) pairs live in one arena of master bytes and
 * an array of entries, so a large graph costs two allocations that grow,
 * not one per component. */
#include "store/identity_components.h"

#include <rocksdb/c.h>
#include <stdlib.h>
#include <string.h>

#include "store/identity.h"
#include "store/identity_int.h"
#include "store/store_int.h"

#define LIST_HEAD_LEN 5 /* version, count (4 bytes BE): DESIGN §10.2 */

typedef struct comp_entry {
    size_t off; /* of the master in the arena; a pointer only once it stops growing */
    const char *master;
    size_t len;
    uint32_t size;
} comp_entry_t;

typedef struct comp_set {
    comp_entry_t *v;
    size_t n, cap;
    segd_buf_t names; /* every kept master's bytes, back to back */
} comp_set_t;

static void comp_set_free(comp_set_t *cs)
{
    free(cs->v);
    segd_buf_free(&cs->names);
}

static segd_err_t comp_set_add(comp_set_t *cs, const char *master, size_t len, uint32_t size)
{
    comp_entry_t *v = segd_array_grow(cs->v, &cs->cap, cs->n + 1, sizeof(*v));
    if (!v)
        return SEGD_ERR_NOMEM;
    cs->v = v;
    v[cs->n] = (comp_entry_t){.off = cs->names.len, .len = len, .size = size};
    segd_err_t err = segd_buf_append(&cs->names, master, len);
    if (!err)
        cs->n++;
    return err;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static segd_err_t corrupt_list(const char *k, size_t kl, char *errstr, size_t n)
{
    char bad[80]; /* the master: the key without its 'm' */
    segd_ident_printable(bad, sizeof(bad), (const uint8_t *)k + 1, kl - 1);
    return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                     "bad member list of %s (segd identity rebuild rewrites it)", bad);
}

/* One `m` record: its head says the size; kept when at least min_size. */
static segd_err_t scan_one(comp_set_t *cs, const segd_ident_list_opts_t *o, const char *k,
                           size_t kl, const uint8_t *val, size_t vl,
                           segd_ident_list_stats_t *st, char *errstr, size_t n)
{
    if (kl < 2 || kl > SEGD_IDENT_MAX_ID + 1 || vl < LIST_HEAD_LEN ||
        val[0] != SEGD_IDENT_VERSION)
        return corrupt_list(k, kl, errstr, n);
    uint32_t size = be32(val + 1);
    st->linked_components++;
    if (size < o->min_size)
        return SEGD_OK;
    st->matching++;
    return comp_set_add(cs, k + 1, kl - 1, size) ? SEGD_ERR_NOMEM : SEGD_OK;
}

/* Every `m` record of the view, in key order (the iterator's only pass). */
static segd_err_t scan_heads(segd_store_view_t *v, const segd_ident_list_opts_t *o,
                             comp_set_t *cs, segd_ident_list_stats_t *st, char *errstr,
                             size_t n)
{
    segd_store_t *s = segd_store_view_store(v);
    rocksdb_column_family_handle_t *cf = segd_store_ids_cf(s);
    if (!cf)
        return SEGD_OK;
    segd_err_t err = SEGD_OK;
    rocksdb_iterator_t *it =
        rocksdb_create_iterator_cf(segd_store_rocks(s), segd_store_view_read_options(v), cf);
    for (rocksdb_iter_seek(it, "m", 1); !err && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl), *val = rocksdb_iter_value(it, &vl);
        if (kl < 1 || k[0] != 'm')
            break;
        err = scan_one(cs, o, k, kl, (const uint8_t *)val, vl, st, errstr, n);
    }
    char *rerr = NULL;
    rocksdb_iter_get_error(it, &rerr);
    rocksdb_iter_destroy(it);
    if (rerr) {
        err = err ? err : segd_errf(SEGD_ERR_IO, errstr, n, "scan ids: %s", rerr);
        rocksdb_free(rerr);
    }
    if (err == SEGD_ERR_NOMEM)
        segd_errf(err, errstr, n, "out of memory listing components");
    return err;
}

/* Size descending, then master bytewise ascending: a total order, since a
 * master heads one component only. */
static int entry_cmp(const void *x, const void *y)
{
    const comp_entry_t *a = x, *b = y;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    return segd_ident_id_cmp(a->master, a->len, b->master, b->len);
}

static void sort_entries(comp_set_t *cs)
{
    for (size_t i = 0; i < cs->n; i++)
        cs->v[i].master = (const char *)cs->names.data + cs->v[i].off;
    if (cs->n > 1)
        qsort(cs->v, cs->n, sizeof(*cs->v), entry_cmp);
}

/* refs = the master, then the other members of l in their (bytewise)
 * order. SEGD_ERR_CORRUPT when l disagrees with the head read in the scan
 * or lacks its master. */
static segd_err_t order_members(const comp_entry_t *e, const id_list_t *l,
                                segd_ident_idref_t *refs, char *errstr, size_t n)
{
    size_t k = 1;
    refs[0] = (segd_ident_idref_t){e->master, e->len};
    for (size_t i = 0; i < l->n; i++) {
        if (!segd_ident_id_cmp(l->v[i].s, l->v[i].len, e->master, e->len))
            continue;
        if (k == l->n)
            break; /* the master is not in the list */
        refs[k++] = (segd_ident_idref_t){l->v[i].s, l->v[i].len};
    }
    if (l->n != e->size || k != l->n)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "bad member list of %.*s (segd identity rebuild rewrites it)",
                         (int)e->len, e->master);
    return SEGD_OK;
}

/* Reads and hands out the first limit components of the sorted set. */
static segd_err_t report(segd_store_view_t *v, const segd_ident_list_opts_t *o,
                         const comp_set_t *cs, segd_ident_component_cb cb, void *ctx,
                         segd_ident_list_stats_t *st, char *errstr, size_t n)
{
    segd_store_t *s = segd_store_view_store(v);
    const rocksdb_readoptions_t *ro = segd_store_view_read_options(v);
    size_t want = o->limit && o->limit < cs->n ? (size_t)o->limit : cs->n;
    id_list_t l = {0};
    segd_buf_t k = {0}, val = {0};
    segd_ident_idref_t *refs = NULL;
    size_t refs_cap = 0;
    segd_err_t err = SEGD_OK;
    for (size_t i = 0; i < want; i++) {
        const comp_entry_t *e = &cs->v[i];
        err = segd_ident_members_load_at(s, ro, NULL, &k, &val, e->master, e->len, &l, errstr,
                                         n);
        segd_ident_idref_t *r = NULL;
        if (!err && !(r = segd_array_grow(refs, &refs_cap, l.n + 1, sizeof(*r))))
            err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory listing components");
        if (!err) {
            refs = r;
            err = order_members(e, &l, refs, errstr, n);
        }
        if (err)
            break;
        segd_ident_component_t c = {e->master, e->len, e->size, refs};
        st->reported++;
        if (cb(ctx, &c))
            break;
    }
    free(refs);
    segd_ident_list_free(&l);
    segd_buf_free(&k);
    segd_buf_free(&val);
    return err;
}

segd_err_t segd_ident_view_components(segd_store_view_t *v, const segd_ident_list_opts_t *o,
                                      segd_ident_component_cb cb, void *ctx,
                                      segd_ident_list_stats_t *st, char *errstr,
                                      size_t errstr_size)
{
    segd_ident_list_stats_t own;
    st = st ? st : &own;
    memset(st, 0, sizeof(*st));
    if (o->min_size < 2)
        return segd_errf(SEGD_ERR_INVALID, errstr, errstr_size,
                         "components of one id are not listed: the minimum size is 2");
    /* As the other reads: a half-rewritten `ids` family mixes two graphs. */
    int64_t mark = 0;
    segd_err_t err = segd_store_view_counter(v, SEGD_IDENT_REBUILD_COUNTER, &mark, errstr,
                                             errstr_size);
    if (!err && mark)
        err = segd_errf(SEGD_ERR_INVALID, errstr, errstr_size, SEGD_IDENT_REBUILD_MSG);
    comp_set_t cs = {0};
    if (!err)
        err = scan_heads(v, o, &cs, st, errstr, errstr_size);
    if (!err) {
        sort_entries(&cs);
        err = report(v, o, &cs, cb, ctx, st, errstr, errstr_size);
    }
    comp_set_free(&cs);
    return err;
}

segd_err_t segd_ident_components(segd_store_t *s, const segd_ident_list_opts_t *o,
                                 segd_ident_component_cb cb, void *ctx,
                                 segd_ident_list_stats_t *st, char *errstr,
                                 size_t errstr_size)
{
    segd_store_view_t *v = NULL;
    segd_err_t err = segd_store_view_open(s, &v, errstr, errstr_size);
    if (!err)
        err = segd_ident_view_components(v, o, cb, ctx, st, errstr, errstr_size);
    segd_store_view_close(v);
    return err;
}
