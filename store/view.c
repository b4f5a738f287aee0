/* Reads of the profiles family and consistent views. A point read decodes
 * a user's record and prunes it at the policy's now; a scan does so for
 * every record. A view is a RocksDB snapshot, so that everything read
 * through it (records, positions, counters, markers) describes one state of
 * the store while writers go on. Reads are safe from any thread; a view
 * belongs to one thread at a time. */
#include <stdlib.h>
#include <string.h>

#include "core/record.h"
#include "store/store.h"
#include "store/store_impl.h"
#include "store/store_int.h"

segd_err_t segd_store_view_open(segd_store_t *s, segd_store_view_t **out, char *errstr,
                                size_t n)
{
    segd_store_view_t *v = calloc(1, sizeof(*v));
    if (!v)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    v->store = s;
    v->snap = rocksdb_create_snapshot(s->db);
    v->ropts = rocksdb_readoptions_create();
    rocksdb_readoptions_set_snapshot(v->ropts, v->snap);
    /* Views are opened for full scans, which must not evict the point
     * reads' working set from the block cache. A view used for a few point
     * reads turns filling back on (segd_store_view_set_fill_cache). */
    rocksdb_readoptions_set_fill_cache(v->ropts, 0);
    *out = v;
    return SEGD_OK;
}

void segd_store_view_close(segd_store_view_t *v)
{
    if (!v)
        return;
    rocksdb_readoptions_destroy(v->ropts);
    rocksdb_release_snapshot(v->store->db, v->snap);
    free(v);
}

segd_store_t *segd_store_view_store(segd_store_view_t *v) { return v->store; }

const rocksdb_readoptions_t *segd_store_view_read_options(segd_store_view_t *v)
{
    return v->ropts;
}

void segd_store_view_set_fill_cache(segd_store_view_t *v, int fill)
{
    rocksdb_readoptions_set_fill_cache(v->ropts, fill ? 1 : 0);
}

static segd_err_t get_with(segd_store_t *s, const rocksdb_readoptions_t *ropts,
                           const char *user, size_t user_len, segd_profile_t *out,
                           char *errstr, size_t n)
{
    char *rerr = NULL;
    size_t vlen = 0;
    /* Pinned, so that the record decodes straight from the block cache
     * without a copy of the value. */
    rocksdb_pinnableslice_t *v =
        rocksdb_get_pinned_cf(s->db, ropts, s->cf[CF_PROFILES], user, user_len, &rerr);
    if (rerr)
        return segd_store_rocks_err(rerr, SEGD_ERR_IO, errstr, n, "get");
    const char *data = v ? rocksdb_pinnableslice_value(v, &vlen) : NULL;
    segd_err_t err = segd_record_decode((const uint8_t *)data, data ? vlen : 0, out);
    rocksdb_pinnableslice_destroy(v);
    if (err)
        return segd_errf(err, errstr, n, "record of user %.*s: %s", (int)user_len, user,
                         segd_err_str(err));
    segd_prune_t rule;
    segd_policy_rule(s->policy, &rule, 1);
    segd_profile_prune(out, &rule);
    segd_policy_rule_release(&rule);
    return SEGD_OK;
}

segd_err_t segd_store_get(segd_store_t *s, const char *user, size_t user_len,
                          segd_profile_t *out, char *errstr, size_t n)
{
    return get_with(s, s->ropts, user, user_len, out, errstr, n);
}

segd_err_t segd_store_known(segd_store_t *s, const char *user, size_t user_len, int *known,
                            char *errstr, size_t n)
{
    char *rerr = NULL;
    rocksdb_pinnableslice_t *v =
        rocksdb_get_pinned_cf(s->db, s->ropts, s->cf[CF_PROFILES], user, user_len, &rerr);
    if (rerr)
        return segd_store_rocks_err(rerr, SEGD_ERR_IO, errstr, n, "get");
    *known = v != NULL;
    rocksdb_pinnableslice_destroy(v);
    return SEGD_OK;
}

segd_err_t segd_store_view_get(segd_store_view_t *v, const char *user, size_t user_len,
                               segd_profile_t *out, char *errstr, size_t n)
{
    return get_with(v->store, v->ropts, user, user_len, out, errstr, n);
}

/* A record that does not decode is counted in the policy and skipped, so
 * one bad record does not stop a scan. A record left empty by pruning, with
 * no erasure to report, is not passed to cb. */
static segd_err_t scan_with(segd_store_t *s, const rocksdb_readoptions_t *ropts,
                            segd_scan_cb cb, void *ctx, char *errstr, size_t n)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ropts, s->cf[CF_PROFILES]);
    segd_profile_t p;
    segd_profile_init(&p);
    segd_prune_t rule;
    segd_policy_rule(s->policy, &rule, 1);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen), *v = rocksdb_iter_value(it, &vlen);
        if (segd_record_decode((const uint8_t *)v, vlen, &p) != SEGD_OK) {
            segd_policy_count_corrupt(s->policy);
            continue;
        }
        segd_profile_prune(&p, &rule);
        if ((p.n || p.erased_before_ms) && cb(ctx, k, klen, &p))
            break;
    }
    segd_profile_free(&p);
    segd_policy_rule_release(&rule);
    return segd_store_iter_close(it, "scan", errstr, n);
}

segd_err_t segd_store_scan(segd_store_t *s, segd_scan_cb cb, void *ctx, char *errstr,
                           size_t n)
{
    return scan_with(s, s->ropts, cb, ctx, errstr, n);
}

segd_err_t segd_store_view_scan(segd_store_view_t *v, segd_scan_cb cb, void *ctx,
                                char *errstr, size_t n)
{
    return scan_with(v->store, v->ropts, cb, ctx, errstr, n);
}

segd_err_t segd_store_view_scan_raw(segd_store_view_t *v, segd_scan_raw_cb cb, void *ctx,
                                    char *errstr, size_t n)
{
    segd_store_t *s = v->store;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, v->ropts, s->cf[CF_PROFILES]);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen), *val = rocksdb_iter_value(it, &vlen);
        if (cb(ctx, k, klen, (const uint8_t *)val, vlen))
            break;
    }
    return segd_store_iter_close(it, "scan", errstr, n);
}

segd_err_t segd_store_scan_users(segd_store_t *s, const char *after, size_t after_len,
                                 size_t max, segd_key_cb cb, void *ctx, int *end,
                                 char *errstr, size_t n)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ropts, s->cf[CF_PROFILES]);
    if (after) {
        rocksdb_iter_seek(it, after, after_len);
        size_t klen;
        const char *k = rocksdb_iter_valid(it) ? rocksdb_iter_key(it, &klen) : NULL;
        if (k && klen == after_len && !memcmp(k, after, klen))
            rocksdb_iter_next(it);
    } else {
        rocksdb_iter_seek_to_first(it);
    }
    size_t seen = 0;
    int stopped = 0;
    for (; rocksdb_iter_valid(it) && seen < max && !stopped; rocksdb_iter_next(it), seen++) {
        size_t klen;
        const char *k = rocksdb_iter_key(it, &klen);
        stopped = cb(ctx, k, klen);
    }
    *end = !rocksdb_iter_valid(it);
    segd_err_t err = segd_store_iter_close(it, "scan", errstr, n);
    if (err)
        *end = 0;
    return err;
}

segd_err_t segd_store_view_meta(segd_store_view_t *v, const char *prefix, segd_meta_cb cb,
                                void *ctx, char *errstr, size_t n)
{
    segd_store_t *s = v->store;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, v->ropts, s->cf[CF_META]);
    size_t plen = strlen(prefix);
    for (rocksdb_iter_seek(it, prefix, plen); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen), *val = rocksdb_iter_value(it, &vlen);
        if (klen < plen || memcmp(k, prefix, plen) != 0)
            break;
        if (cb(ctx, k + plen, klen - plen, val, vlen))
            break;
    }
    return segd_store_iter_close(it, "meta scan", errstr, n);
}
