/* libsegd-cache's public API (include/segd/cache.h): a facade over the edge
 * table (cache/edge.h) and the snapshot loader (cache/edge_load.h), turning
 * segd's internal error codes into the public status codes. The library is
 * built with -fvisibility=hidden: only what SEGD_CACHE_API marks is
 * exported, so the internal modules can change freely behind it. */
#include "segd/cache.h"

#include <stddef.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cache/edge.h"
#include "cache/edge_load.h"
#include "lib/cache_int.h"
#include "wire/change.h"
#include "wire/change_frame.h"
#include "wire/member.h"


/* The public segment is segd's entry, field for field: lookups hand the
 * caller's array straight to the table. */
_Static_assert(sizeof(segd_cache_segment_t) == sizeof(segd_entry_t), "segment layout");
_Static_assert(offsetof(segd_cache_segment_t, id) == offsetof(segd_entry_t, segment_id),
               "segment id");
_Static_assert(offsetof(segd_cache_segment_t, ts_ms) == offsetof(segd_entry_t, ts_ms), "ts");
_Static_assert(offsetof(segd_cache_segment_t, expires_at) == offsetof(segd_entry_t, expiry_s),
               "expiry");
_Static_assert(offsetof(segd_cache_segment_t, flags) == offsetof(segd_entry_t, flags), "flags");
_Static_assert(offsetof(segd_cache_segment_t, partner_id) ==
                   offsetof(segd_entry_t, partner_id),
               "partner");

int segd_cache_status_of(segd_err_t err)
{
    switch (err) {
    case SEGD_OK: return SEGD_CACHE_OK;
    case SEGD_ERR_NOMEM: return SEGD_CACHE_ENOMEM;
    case SEGD_ERR_INVALID:
    case SEGD_ERR_CONFIG: return SEGD_CACHE_EINVAL;
    case SEGD_ERR_NOTFOUND: return SEGD_CACHE_ENOTFOUND;
    case SEGD_ERR_CORRUPT:
    case SEGD_ERR_DECODE:
    case SEGD_ERR_SCHEMA:
    case SEGD_ERR_UNSORTED: return SEGD_CACHE_ECORRUPT;
    case SEGD_ERR_IO: return SEGD_CACHE_EIO;
    case SEGD_ERR_LIMIT: return SEGD_CACHE_ELIMIT;
    default: return SEGD_CACHE_EOTHER;
    }
}

SEGD_CACHE_API unsigned segd_cache_version(void) { return SEGD_CACHE_VERSION; }

SEGD_CACHE_API const char *segd_cache_strerror(int status)
{
    static const char *const text[] = {
        [SEGD_CACHE_OK] = "ok",
        [SEGD_CACHE_ENOMEM] = "out of memory",
        [SEGD_CACHE_EINVAL] = "invalid argument",
        [SEGD_CACHE_ENOTFOUND] = "not found",
        [SEGD_CACHE_ECORRUPT] = "corrupt or not a segd snapshot or change event",
        [SEGD_CACHE_EIO] = "I/O error",
        [SEGD_CACHE_ELIMIT] = "array too small",
        [SEGD_CACHE_EOTHER] = "error",
        [SEGD_CACHE_EGAP] = ("the change topic no longer holds deltas the snapshot needs: "
                             "load a newer snapshot"), /* one string: clang asks */
        [SEGD_CACHE_EKAFKA] = "Kafka: broker or topic not reachable",
    };
    return status >= 0 && status <= SEGD_CACHE_EKAFKA ? text[status] : "unknown status";
}

SEGD_CACHE_API int segd_cache_new(segd_cache_t **out, int64_t now_ms)
{
    if (!out || now_ms < 0)
        return SEGD_CACHE_EINVAL;
    *out = NULL;
    segd_cache_t *c = calloc(1, sizeof(*c));
    if (!c)
        return SEGD_CACHE_ENOMEM;
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = now_ms;
    segd_err_t err = segd_edge_new(&c->edge, &o);
    if (err) {
        free(c);
        return segd_cache_status_of(err);
    }
    *out = c;
    return SEGD_CACHE_OK;
}

SEGD_CACHE_API void segd_cache_destroy(segd_cache_t *c)
{
    if (!c)
        return;
    segd_edge_destroy(c->edge);
    if (c->loaded)
        segd_manifest_free(&c->manifest);
    free(c);
}

SEGD_CACHE_API void segd_cache_set_now(segd_cache_t *c, int64_t now_ms)
{
    segd_edge_set_now(c->edge, now_ms < 0 ? 0 : now_ms);
}

SEGD_CACHE_API int segd_cache_load_snapshot(segd_cache_t *c, const char *dir,
                                            unsigned threads, uint64_t *users)
{
    if (!c || !dir)
        return SEGD_CACHE_EINVAL;
    segd_snapshot_read_opts_t o = {.threads = threads ? threads : 1};
    segd_manifest_t m;
    char why[512];
    segd_err_t err = segd_edge_load_snapshot(c->edge, dir, &o, &m, why, sizeof(why));
    if (err) {
        segd_manifest_free(&m);
        return segd_cache_status_of(err);
    }
    if (users)
        *users = m.records;
    if (c->loaded) /* a tail made later starts from the newest snapshot's positions */
        segd_manifest_free(&c->manifest);
    c->manifest = m;
    c->loaded = 1;
    return segd_cache_status_of(err);
}

SEGD_CACHE_API int segd_cache_apply_change(segd_cache_t *c, const void *msg, size_t len)
{
    if (!c || (!msg && len))
        return SEGD_CACHE_EINVAL;
    const uint8_t *body;
    size_t blen;
    segd_frame_kind_t kind;
    segd_member_t mem;
    segd_change_t ch;
    segd_change_init(&ch);
    /* the change topic carries ChangeEvents and MemberEvents: no registry
     * here, so either Confluent id and the body's first byte decide */
    segd_err_t err = segd_change_unframe_kind(msg, len, -1, -1, &body, &blen, &kind);
    if (!err && kind == SEGD_FRAME_MEMBER) {
        if (!(err = segd_member_decode(body, blen, &mem)))
            err = segd_edge_apply_member(c->edge, &mem);
    } else if (!err) {
        err = segd_change_decode(body, blen, &ch);
        if (!err && ch.kind == SEGD_CHANGE_DELTA && ch.user_id_len == 0)
            err = SEGD_ERR_CORRUPT;
        if (!err)
            err = segd_edge_apply(c->edge, &ch);
    }
    if (!err)
        atomic_fetch_add(&c->changes, 1);
    segd_change_free(&ch);
    return segd_cache_status_of(err);
}

static size_t keep_matching(segd_cache_segment_t *s, size_t n, const segd_cache_filter_t *f)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i].expires_at > f->expiring_after && s[i].ts_ms >= f->updated_since_ms)
            s[k++] = s[i];
    return k;
}

SEGD_CACHE_API int segd_cache_lookup(segd_cache_t *c, const char *user, size_t len,
                                     const segd_cache_filter_t *f, segd_cache_segment_t *out,
                                     size_t cap, size_t *n, int *known)
{
    if (!c || !user || !n || (!out && cap))
        return SEGD_CACHE_EINVAL;
    segd_err_t err =
        segd_edge_find(c->edge, user, len, (segd_entry_t *)out, cap, n, known);
    if (!err && f)
        *n = keep_matching(out, *n, f);
    return segd_cache_status_of(err);
}

SEGD_CACHE_API int segd_cache_lookup_linked(segd_cache_t *c, const char *user, size_t len,
                                            const segd_cache_filter_t *f,
                                            segd_cache_segment_t *out, size_t cap, size_t *n,
                                            int *known, segd_cache_member_cb on_member,
                                            void *ctx)
{
    if (!c || !user || !len || !n || (!out && cap))
        return SEGD_CACHE_EINVAL;
    segd_err_t err = segd_edge_lookup_linked(c->edge, user, len, (segd_entry_t *)out, cap, n,
                                             known, on_member, ctx);
    if (!err && f)
        *n = keep_matching(out, *n, f);
    return segd_cache_status_of(err);
}

SEGD_CACHE_API int segd_cache_count_range(segd_cache_t *c, const char *user, size_t len,
                                          int64_t lo, int64_t hi, uint64_t *count)
{
    if (!c || !user || !count)
        return SEGD_CACHE_EINVAL;
    segd_entry_t small[256], *buf = small;
    size_t cap = sizeof(small) / sizeof(small[0]), n = 0;
    segd_err_t err = segd_edge_lookup(c->edge, user, len, buf, cap, &n);
    if (err == SEGD_ERR_LIMIT) {
        /* a delta may add entries between the two reads: grow until it fits */
        while (err == SEGD_ERR_LIMIT) {
            if (buf != small)
                free(buf);
            cap = n + n / 4 + 16;
            if (!(buf = malloc(cap * sizeof(*buf))))
                return SEGD_CACHE_ENOMEM;
            err = segd_edge_lookup(c->edge, user, len, buf, cap, &n);
        }
    }
    uint64_t k = 0;
    for (size_t i = 0; !err && i < n; i++)
        k += buf[i].segment_id >= lo && buf[i].segment_id <= hi;
    if (buf != small)
        free(buf);
    if (!err)
        *count = k;
    return segd_cache_status_of(err);
}

SEGD_CACHE_API void segd_cache_stats(segd_cache_t *c, segd_cache_stats_t *st)
{
    segd_edge_stats_t es;
    segd_edge_get_stats(c->edge, &es);
    st->users = es.users;
    st->entries = es.entries;
    st->bytes = es.bytes;
    st->changes = atomic_load(&c->changes);
}
