/* What the store refuses or drops by age, kept in its meta family: the GC
 * watermark W and its start phase (DESIGN §3), the import floors of
 * restored partitions (§3.1, §7) and the retirement markers of segments
 * (§3.2). Each is written to meta before the policy (core/policy.h) learns
 * it, and all are read back into the policy at open. The merge operator and
 * the compaction filter then read them from the policy on RocksDB's threads. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "store/store_impl.h"

/* The meta keys, all with 8-byte big-endian values. W's start phase keeps
 * its floor and the open time it has run so far. Grace and horizon are the
 * largest that W was ever moved with. */
#define GC_WATERMARK_KEY "gc_watermark_ms"
#define GC_START_FLOOR_KEY "gc_start_floor_ms"
#define GC_START_OPEN_KEY "gc_start_open_ms"
#define GC_GRACE_KEY "gc_grace_ms"
#define GC_HORIZON_KEY "gc_horizon_ms"
/* import_floor/<topic>/<partition>: the W of the unit restored there. */
#define IMPORT_FLOOR_PREFIX "import_floor/"
/* retired/<segment id, 8 bytes big-endian>: entries at or before the value
 * are dead. */
#define RETIRED_PREFIX "retired/"
#define RETIRED_KEY_LEN (sizeof(RETIRED_PREFIX) - 1 + 8)

struct import_floor {
    char *topic;
    int32_t partition;
    int64_t floor_ms;
};

/* Until this runs the policy's W is 0, so compactions during the open drop
 * nothing by age, which is always safe. */
static segd_err_t load_gc_watermark(segd_store_t *s, char *errstr, size_t n)
{
    int64_t w, floor, grace, horizon;
    segd_err_t err = segd_store_meta_get_i64(s, GC_WATERMARK_KEY, &w, errstr, n);
    if (!err)
        err = segd_store_meta_get_i64(s, GC_HORIZON_KEY, &horizon, errstr, n);
    if (!err)
        err = segd_store_meta_get_i64(s, GC_START_FLOOR_KEY, &floor, errstr, n);
    if (!err)
        err = segd_store_meta_get_i64(s, GC_GRACE_KEY, &grace, errstr, n);
    if (!err)
        err = segd_store_meta_get_i64(s, GC_START_OPEN_KEY, &s->gc_start_open_ms, errstr, n);
    if (err)
        return err;
    /* A grace once used stays. A smaller one here, say `segd compact` with
     * the default beside a `segd run` configured larger, would let W outrun
     * operands that run accepted and put run's floor above now - horizon. */
    if (grace > segd_policy_gc_grace_ms(s->policy))
        segd_policy_set_gc_grace(s->policy, grace);
    /* The horizon stays the same way. `segd compact` with the default 24 h
     * beside a `segd run` configured with 7 days would move W six days too
     * far. */
    s->gc_horizon_ms = segd_policy_horizon_ms(s->policy);
    if (horizon > s->gc_horizon_ms)
        s->gc_horizon_ms = horizon;
    segd_policy_set_gc_watermark(s->policy, w);
    segd_policy_set_gc_start_floor(s->policy, floor);
    s->gc_start_floor_ms = floor;
    return SEGD_OK;
}

int64_t segd_store_gc_watermark(segd_store_t *s)
{
    return segd_policy_gc_watermark(s->policy);
}

/* Synced, because W must be on disk before any compaction output that used
 * it is. It waits for the disk reserve as bulk data does, since moving W
 * can always wait. */
static segd_err_t put_gc_meta(segd_store_t *s, const char *key, int64_t v, char *errstr,
                              size_t n)
{
    char val[8];
    put_be64(val, (uint64_t)v);
    return segd_store_put_meta(s, s->sync_wopts, key, val, 8, 1, errstr, n);
}

/* While W = 0 and no start phase has begun, nothing is refused by age. The
 * phase begins once the caller has caught up with its input. It refuses
 * ts_ms below F0 = now - horizon at once, but drops nothing until it has run
 * for grace of open time. By then every operand written before it began has
 * been merged, and every later one has ts_ms >= F0, so W = F0 is safe. */
static segd_err_t gc_start_phase(segd_store_t *s, int caught_up, int64_t now,
                                 int64_t elapsed, int64_t *next, char *errstr, size_t n)
{
    segd_err_t err;
    if (!s->gc_start_floor_ms) {
        if (!caught_up)
            return SEGD_OK;
        int64_t f0 = now - s->gc_horizon_ms;
        if (f0 <= 0)
            return SEGD_OK;
        if ((err = put_gc_meta(s, GC_START_OPEN_KEY, 0, errstr, n)) ||
            (err = put_gc_meta(s, GC_START_FLOOR_KEY, f0, errstr, n)))
            return err;
        s->gc_start_floor_ms = f0;
        s->gc_start_open_ms = 0;
        segd_policy_set_gc_start_floor(s->policy, f0);
        return SEGD_OK;
    }
    s->gc_start_open_ms += elapsed;
    if (s->gc_start_open_ms >= segd_policy_gc_grace_ms(s->policy))
        *next = s->gc_start_floor_ms;
    return put_gc_meta(s, GC_START_OPEN_KEY, s->gc_start_open_ms, errstr, n);
}

segd_err_t segd_store_gc_advance(segd_store_t *s, int flags, char *errstr, size_t n)
{
    if (s->read_only)
        return SEGD_OK;
    int64_t now = segd_policy_now_ms(s->policy), w = segd_policy_gc_watermark(s->policy);
    int64_t target = now - s->gc_horizon_ms -
                     segd_policy_gc_grace_ms(s->policy);
    int64_t elapsed = now > s->gc_moved_ms ? now - s->gc_moved_ms : 0, next = 0;
    s->gc_moved_ms = now;
    segd_err_t err = SEGD_OK;
    int history = w == 0 && !s->gc_start_floor_ms; /* a fresh store takes any age */
    if ((flags & SEGD_GC_MERGED_ALL) && !(history && (flags & SEGD_GC_KEEP_HISTORY)))
        next = target;
    else if (w > 0)
        next = w + elapsed < target ? w + elapsed : target;
    else
        err = gc_start_phase(s, flags & SEGD_GC_CAUGHT_UP, now, elapsed, &next, errstr, n);
    if (err || next <= w)
        return err;
    if ((err = put_gc_meta(s, GC_GRACE_KEY, segd_policy_gc_grace_ms(s->policy), errstr, n)) ||
        (err = put_gc_meta(s, GC_HORIZON_KEY, s->gc_horizon_ms, errstr, n)) ||
        (err = put_gc_meta(s, GC_WATERMARK_KEY, next, errstr, n)))
        return err;
    segd_policy_set_gc_watermark(s->policy, next);
    return SEGD_OK;
}

/* The entry of (topic, partition), made if missing; NULL when out of
 * memory. Called with floors_lock held. */
static struct import_floor *floor_entry(segd_store_t *s, const char *topic, int32_t partition,
                                        int make)
{
    for (size_t i = 0; i < s->n_floors; i++)
        if (s->floors[i].partition == partition && !strcmp(s->floors[i].topic, topic))
            return &s->floors[i];
    if (!make)
        return NULL;
    if (s->n_floors == s->cap_floors) {
        size_t cap = s->cap_floors ? 2 * s->cap_floors : 16;
        struct import_floor *f = realloc(s->floors, cap * sizeof(*f));
        if (!f)
            return NULL;
        s->floors = f;
        s->cap_floors = cap;
    }
    struct import_floor *f = &s->floors[s->n_floors];
    if (!(f->topic = strdup(topic)))
        return NULL;
    f->partition = partition;
    f->floor_ms = 0;
    s->n_floors++;
    return f;
}

static int set_floor(segd_store_t *s, const char *topic, int32_t partition, int64_t floor_ms)
{
    pthread_mutex_lock(&s->floors_lock);
    struct import_floor *f = floor_entry(s, topic, partition, 1);
    if (f && floor_ms > f->floor_ms)
        f->floor_ms = floor_ms;
    pthread_mutex_unlock(&s->floors_lock);
    if (f)
        segd_policy_raise_import_floor(s->policy, floor_ms);
    return f != NULL;
}

int64_t segd_store_import_floor(segd_store_t *s, const char *topic, int32_t partition)
{
    pthread_mutex_lock(&s->floors_lock);
    struct import_floor *f = s->n_floors ? floor_entry(s, topic, partition, 0) : NULL;
    int64_t v = f ? f->floor_ms : 0;
    pthread_mutex_unlock(&s->floors_lock);
    return v;
}

void segd_store_import_floors(segd_store_t *s, segd_floor_cb cb, void *ctx)
{
    pthread_mutex_lock(&s->floors_lock);
    for (size_t i = 0; i < s->n_floors; i++)
        if (cb(ctx, s->floors[i].topic, s->floors[i].partition, s->floors[i].floor_ms))
            break;
    pthread_mutex_unlock(&s->floors_lock);
}

segd_err_t segd_store_raise_import_floor(segd_store_t *s, const char *topic, int32_t partition,
                                         int64_t floor_ms, char *errstr, size_t n)
{
    if (s->read_only)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "store opened read-only");
    if (floor_ms <= segd_store_import_floor(s, topic, partition))
        return SEGD_OK;
    char key[600];
    snprintf(key, sizeof(key), IMPORT_FLOOR_PREFIX "%s/%" PRId32, topic, partition);
    segd_err_t err = put_gc_meta(s, key, floor_ms, errstr, n);
    if (!err && !set_floor(s, topic, partition, floor_ms))
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    return err;
}

/* Reads every import floor key into the table, at open. */
static segd_err_t load_import_floors(segd_store_t *s, char *errstr, size_t n)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ropts, s->cf[CF_META]);
    size_t plen = strlen(IMPORT_FLOOR_PREFIX);
    segd_err_t err = SEGD_OK;
    for (rocksdb_iter_seek(it, IMPORT_FLOOR_PREFIX, plen); !err && rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen), *v = rocksdb_iter_value(it, &vlen);
        if (klen < plen || memcmp(k, IMPORT_FLOOR_PREFIX, plen))
            break;
        char key[600];
        const char *slash;
        if (vlen != 8 || klen - plen >= sizeof(key)) {
            err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "bad import floor in meta");
            break;
        }
        memcpy(key, k + plen, klen - plen);
        key[klen - plen] = 0;
        if (!(slash = strrchr(key, '/'))) {
            err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "bad import floor key in meta");
            break;
        }
        key[slash - key] = 0;
        if (!set_floor(s, key, (int32_t)atoi(slash + 1), (int64_t)get_be64(v)))
            err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    }
    char *rerr = NULL;
    rocksdb_iter_get_error(it, &rerr);
    rocksdb_iter_destroy(it);
    if (rerr && !err)
        err = segd_store_rocks_err(rerr, SEGD_ERR_IO, errstr, n, "meta scan");
    else if (rerr)
        rocksdb_free(rerr);
    return err;
}

void segd_store_floors_free(segd_store_t *s)
{
    for (size_t i = 0; i < s->n_floors; i++)
        free(s->floors[i].topic);
    free(s->floors);
}

/* Reads every retirement marker into one set, at open: one set for N
 * markers rather than N growing copies. A scan that fails fails the open,
 * since a marker missed would bring retired entries back to life. */
static segd_err_t load_retirements(segd_store_t *s, char *errstr, size_t n)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ropts, s->cf[CF_META]);
    segd_marker_t *v = NULL;
    size_t nv = 0, cap = 0, plen = strlen(RETIRED_PREFIX);
    segd_err_t err = SEGD_OK;
    for (rocksdb_iter_seek(it, RETIRED_PREFIX, plen); rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen), *val = rocksdb_iter_value(it, &vlen);
        if (klen != RETIRED_KEY_LEN || memcmp(k, RETIRED_PREFIX, plen) != 0)
            break;
        if (vlen != 8)
            continue;
        if (nv == cap) {
            segd_marker_t *g = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof(*v));
            if (!g) {
                err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "retirement markers: out of memory");
                goto out_free;
            }
            v = g;
        }
        v[nv++] = (segd_marker_t){(int64_t)get_be64(k + plen), (int64_t)get_be64(val)};
    }
    char *rerr = NULL;
    rocksdb_iter_get_error(it, &rerr);
    if (rerr) {
        err = segd_store_rocks_err(rerr, SEGD_ERR_IO, errstr, n,
                                   "retirement markers unreadable, store not opened");
        goto out_free;
    }
    if ((err = segd_policy_retire_all(s->policy, v, nv)))
        segd_errf(err, errstr, n, "retirement markers: out of memory");
out_free:
    free(v);
    rocksdb_iter_destroy(it);
    return err;
}

/* Puts the marker of segment_id into wb, never lower than the one the
 * policy holds, since a retirement only grows. Returns the value put. */
static int64_t put_retired(segd_store_t *s, rocksdb_writebatch_t *wb, int64_t segment_id,
                           int64_t before_ms)
{
    char key[RETIRED_KEY_LEN], val[8];
    size_t plen = strlen(RETIRED_PREFIX);
    int64_t cur = segd_policy_retired_before(s->policy, segment_id);
    if (before_ms < cur)
        before_ms = cur;
    memcpy(key, RETIRED_PREFIX, plen);
    put_be64(key + plen, (uint64_t)segment_id);
    put_be64(val, (uint64_t)before_ms);
    rocksdb_writebatch_put_cf(wb, s->cf[CF_META], key, sizeof(key), val, 8);
    return before_ms;
}

void segd_batch_retire(segd_batch_t *b, int64_t segment_id, int64_t before_ms)
{
    put_retired(b->store, b->wb, segment_id, before_ms);
}

segd_err_t segd_store_retire_applied(segd_store_t *s, int64_t segment_id, int64_t before_ms)
{
    return segd_policy_retire(s->policy, segment_id, before_ms);
}

segd_err_t segd_store_retire(segd_store_t *s, int64_t segment_id, int64_t before_ms,
                             segd_batch_t *extra, char *errstr, size_t n)
{
    rocksdb_writebatch_t *wb = extra ? extra->wb : rocksdb_writebatch_create();
    before_ms = put_retired(s, wb, segment_id, before_ms);
    segd_err_t err = segd_store_write_wb(s, s->wopts, wb, 1, errstr, n);
    if (!err && extra)
        atomic_fetch_add(&s->outbox_depth, extra->outbox_delta);
    if (extra)
        segd_batch_clear(extra);
    else
        rocksdb_writebatch_destroy(wb);
    if (err)
        return err;
    return segd_policy_retire(s->policy, segment_id, before_ms);
}

static int retired_entry(void *ctx, const char *suffix, size_t slen, const char *val,
                         size_t vlen)
{
    segd_meta_walk_t *w = ctx;
    if (slen != 8 || vlen != 8)
        return 0;
    return w->cb.retired(w->ctx, (int64_t)get_be64(suffix), (int64_t)get_be64(val));
}

segd_err_t segd_store_view_retirements(segd_store_view_t *v, segd_retired_cb cb, void *ctx,
                                       char *errstr, size_t n)
{
    segd_meta_walk_t w = {.cb.retired = cb, .ctx = ctx};
    return segd_store_view_meta(v, RETIRED_PREFIX, retired_entry, &w, errstr, n);
}

/* Retirement markers, then the GC watermark, then the import floors: the
 * order segd_store_open has always read them in. */
segd_err_t segd_store_floors_load(segd_store_t *s, char *errstr, size_t n)
{
    segd_err_t err = load_retirements(s, errstr, n);
    if (!err)
        err = load_gc_watermark(s, errstr, n);
    if (!err)
        err = load_import_floors(s, errstr, n);
    return err;
}
