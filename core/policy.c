/* Clock, horizon, GC watermark and retirement markers shared by merge and compaction. */
#include "core/policy.h"

#include "core/markers.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct retired_set {
    struct retired_set *older; /* kept until destroy: readers may hold it */
    size_t n;
    int64_t max_before; /* the largest before_ms of pairs */
    segd_marker_t pairs[]; /* sorted by key */
} retired_set_t;

struct segd_policy {
    _Atomic int64_t now_ms; /* 0 = wall clock */
    int64_t horizon_ms;
    _Atomic(retired_set_t *) retired;
    _Atomic uint64_t corrupt;
    _Atomic int64_t gc_watermark; /* W; only raised */
    _Atomic int64_t gc_grace_ms;
    _Atomic int64_t gc_start_floor; /* W's start phase: refuse below this */
    _Atomic int64_t import_floor;   /* restored state's: refuse below this */
    pthread_mutex_t retire_lock; /* serializes writers of `retired` */
};

segd_err_t segd_policy_new(segd_policy_t **out, int64_t horizon_ms)
{
    segd_policy_t *p = calloc(1, sizeof(*p));
    if (!p)
        return SEGD_ERR_NOMEM;
    p->horizon_ms = horizon_ms;
    atomic_init(&p->now_ms, 0);
    atomic_init(&p->retired, NULL);
    atomic_init(&p->corrupt, 0);
    atomic_init(&p->gc_watermark, 0);
    atomic_init(&p->gc_grace_ms, 0);
    atomic_init(&p->gc_start_floor, 0);
    pthread_mutex_init(&p->retire_lock, NULL);
    *out = p;
    return SEGD_OK;
}

void segd_policy_destroy(segd_policy_t *p)
{
    if (!p)
        return;
    retired_set_t *s = atomic_load(&p->retired);
    while (s) {
        retired_set_t *older = s->older;
        free(s);
        s = older;
    }
    pthread_mutex_destroy(&p->retire_lock);
    free(p);
}

void segd_policy_set_now(segd_policy_t *p, int64_t now_ms) { atomic_store(&p->now_ms, now_ms); }

int64_t segd_policy_now_ms(const segd_policy_t *p)
{
    int64_t fixed = atomic_load(&((segd_policy_t *)p)->now_ms);
    if (fixed)
        return fixed;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t segd_policy_horizon_ms(const segd_policy_t *p) { return p->horizon_ms; }

/* A key's marker in one set, 0 when none. */
static int64_t set_retired_before(void *set, int64_t key)
{
    const retired_set_t *s = set;
    const segd_marker_t *m = segd_markers_find(s->pairs, s->n, key);
    return m ? m->before_ms : 0;
}

void segd_policy_rule(segd_policy_t *p, segd_prune_t *rule, int complete)
{
    rule->now_ms = segd_policy_now_ms(p);
    rule->horizon_ms = p->horizon_ms;
    rule->complete = complete;
    /* The set as it is now, read once: its lookups take no atomic load per
     * entry, and it stays valid (sets are kept until destroy). A marker
     * added later is seen by the next rule, as retired_max_ms is. */
    retired_set_t *r = atomic_load(&p->retired);
    rule->retired_before = r && r->n ? set_retired_before : NULL;
    rule->retired_ctx = r;
    rule->retired_max_ms = r ? r->max_before : 0;
    rule->gc_before_ms = atomic_load(&p->gc_watermark);
}

int64_t segd_policy_gc_watermark(const segd_policy_t *p)
{
    return atomic_load(&((segd_policy_t *)p)->gc_watermark);
}

void segd_policy_set_gc_watermark(segd_policy_t *p, int64_t w_ms)
{
    int64_t cur = atomic_load(&p->gc_watermark);
    while (w_ms > cur && !atomic_compare_exchange_weak(&p->gc_watermark, &cur, w_ms))
        ;
}

void segd_policy_set_gc_grace(segd_policy_t *p, int64_t grace_ms)
{
    atomic_store(&p->gc_grace_ms, grace_ms);
}

int64_t segd_policy_gc_grace_ms(const segd_policy_t *p)
{
    return atomic_load(&((segd_policy_t *)p)->gc_grace_ms);
}

void segd_policy_set_gc_start_floor(segd_policy_t *p, int64_t floor_ms)
{
    atomic_store(&p->gc_start_floor, floor_ms);
}

int64_t segd_policy_ts_floor(const segd_policy_t *p)
{
    int64_t w = segd_policy_gc_watermark(p);
    return w > 0 ? w + segd_policy_gc_grace_ms(p)
                 : atomic_load(&((segd_policy_t *)p)->gc_start_floor);
}

int64_t segd_policy_floor_explain(const segd_policy_t *p, int64_t floor_ms, char *why,
                                  size_t n)
{
    int64_t own = segd_policy_ts_floor(p), w = segd_policy_gc_watermark(p);
    if (floor_ms > own)
        snprintf(why, n, "%" PRId64 " (the import floor: the W of a snapshot unit restored "
                 "into this store)", floor_ms);
    else if (w > 0)
        snprintf(why, n, "%" PRId64 " (W + grace: gc_watermark_ms %" PRId64
                 " + store.gc.grace.s %" PRId64 ")", own, w, segd_policy_gc_grace_ms(p) / 1000);
    else if (own > 0)
        snprintf(why, n, "%" PRId64 " (the horizon: now - store.horizon.s when the store "
                 "caught up with its input; W has not started)", own);
    else
        snprintf(why, n, "0 (none: the store still takes history of any age)");
    return floor_ms > own ? floor_ms : own;
}

int64_t segd_policy_import_floor(const segd_policy_t *p)
{
    return atomic_load(&((segd_policy_t *)p)->import_floor);
}

void segd_policy_raise_import_floor(segd_policy_t *p, int64_t floor_ms)
{
    int64_t cur = atomic_load(&p->import_floor);
    while (floor_ms > cur && !atomic_compare_exchange_weak(&p->import_floor, &cur, floor_ms))
        ;
}

segd_ts_verdict_t segd_policy_check_ts(const segd_policy_t *p, int64_t ts_ms,
                                       int64_t max_skew_ms)
{
    return segd_policy_check_ts_floor(p, ts_ms, max_skew_ms, 0);
}

segd_ts_verdict_t segd_policy_check_ts_floor(const segd_policy_t *p, int64_t ts_ms,
                                             int64_t max_skew_ms, int64_t floor_ms)
{
    if (ts_ms < segd_policy_ts_floor(p) || ts_ms < floor_ms)
        return SEGD_TS_TOO_LATE;
    if (max_skew_ms >= 0 && ts_ms > segd_policy_now_ms(p) + max_skew_ms)
        return SEGD_TS_FROM_FUTURE;
    return SEGD_TS_OK;
}

int64_t segd_policy_retired_before(void *policy, int64_t segment_id)
{
    retired_set_t *s = atomic_load(&((segd_policy_t *)policy)->retired);
    return s ? set_retired_before(s, segment_id) : 0;
}

segd_err_t segd_policy_retire(segd_policy_t *p, int64_t segment_id, int64_t before_ms)
{
    pthread_mutex_lock(&p->retire_lock);
    retired_set_t *old = atomic_load(&p->retired);
    size_t n = old ? old->n : 0;
    retired_set_t *s = malloc(sizeof(*s) + (n + 1) * sizeof(s->pairs[0]));
    if (!s) {
        pthread_mutex_unlock(&p->retire_lock);
        return SEGD_ERR_NOMEM;
    }
    /* a key's marker is never below 0, the lookup's "none" */
    s->n = segd_markers_put(s->pairs, old ? old->pairs : NULL, n, segment_id,
                            before_ms > 0 ? before_ms : 0);
    s->max_before = old && old->max_before > before_ms ? old->max_before : before_ms;
    s->older = old;
    atomic_store(&p->retired, s);
    pthread_mutex_unlock(&p->retire_lock);
    return SEGD_OK;
}

void segd_policy_count_corrupt(segd_policy_t *p) { atomic_fetch_add(&p->corrupt, 1); }

uint64_t segd_policy_corrupt_count(const segd_policy_t *p)
{
    return atomic_load(&((segd_policy_t *)p)->corrupt);
}
