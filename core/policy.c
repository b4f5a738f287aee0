/* Clock, horizon, GC watermark and retirement markers shared by merge and
 * compaction. The marker set is copied on write. A rule (segd_policy_rule)
 * holds a reference to the set it read until segd_policy_rule_release; a
 * replaced set is freed by the next retirement once no rule holds it, so
 * the sets kept are the current one and those that rules still hold. */
#include "core/policy.h"

#include "core/markers.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct retired_set {
    struct retired_set *older; /* the next replaced set, on the policy's list */
    _Atomic size_t refs;       /* rules holding this set */
    size_t n;
    int64_t max_before; /* the largest before_ms of pairs */
    segd_marker_t pairs[]; /* sorted by key */
} retired_set_t;

struct segd_policy {
    _Atomic int64_t now_ms; /* 0 = wall clock */
    int64_t horizon_ms;
    /* The current set, NULL while there are no markers. Replaced under
     * both locks; read under set_lock, or by a writer under retire_lock. */
    retired_set_t *retired;
    retired_set_t *replaced; /* replaced sets not yet freed, newest first */
    _Atomic uint64_t sets_made, sets_kept; /* for tests: the memory bound */
    _Atomic uint64_t corrupt;
    _Atomic int64_t gc_watermark; /* W; only raised */
    _Atomic int64_t gc_grace_ms;
    _Atomic int64_t gc_start_floor; /* W's start phase: refuse below this */
    _Atomic int64_t import_floor;   /* restored state's: refuse below this */
    pthread_mutex_t retire_lock; /* serializes writers of `retired` */
    /* Guards taking a reference against freeing: held only for a pointer
     * load and an increment (readers) or a swap and a sweep (writers), so
     * a rule costs one uncontended lock, and no lookup takes any. */
    pthread_mutex_t set_lock;
};

segd_err_t segd_policy_new(segd_policy_t **out, int64_t horizon_ms)
{
    segd_policy_t *p = calloc(1, sizeof(*p));
    if (!p)
        return SEGD_ERR_NOMEM;
    p->horizon_ms = horizon_ms;
    atomic_init(&p->now_ms, 0);
    atomic_init(&p->sets_made, 0);
    atomic_init(&p->sets_kept, 0);
    atomic_init(&p->corrupt, 0);
    atomic_init(&p->gc_watermark, 0);
    atomic_init(&p->gc_grace_ms, 0);
    atomic_init(&p->gc_start_floor, 0);
    pthread_mutex_init(&p->retire_lock, NULL);
    pthread_mutex_init(&p->set_lock, NULL);
    *out = p;
    return SEGD_OK;
}

void segd_policy_destroy(segd_policy_t *p)
{
    if (!p)
        return;
    /* No rule may be in use now (the DB is closed), released or not. */
    free(p->retired);
    for (retired_set_t *s = p->replaced, *older; s; s = older) {
        older = s->older;
        free(s);
    }
    pthread_mutex_destroy(&p->set_lock);
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
    /* The set as it is now, read once and held: its lookups take no lock
     * and no atomic load per entry. A marker added later is seen by the
     * next rule, as retired_max_ms is. */
    pthread_mutex_lock(&p->set_lock);
    retired_set_t *r = p->retired;
    if (r)
        atomic_fetch_add(&r->refs, 1);
    pthread_mutex_unlock(&p->set_lock);
    rule->retired_before = r ? set_retired_before : NULL;
    rule->retired_ctx = r;
    rule->retired_max_ms = r ? r->max_before : 0;
    rule->gc_before_ms = atomic_load(&p->gc_watermark);
}

void segd_policy_rule_release(segd_prune_t *rule)
{
    if (rule->retired_before != set_retired_before || !rule->retired_ctx)
        return;
    retired_set_t *r = rule->retired_ctx;
    atomic_fetch_sub(&r->refs, 1); /* freed by the next retirement's sweep */
    rule->retired_before = NULL;
    rule->retired_ctx = NULL;
    rule->retired_max_ms = 0;
}

void segd_policy_set_counts(const segd_policy_t *p, uint64_t *made, uint64_t *kept)
{
    *made = atomic_load(&((segd_policy_t *)p)->sets_made);
    *kept = atomic_load(&((segd_policy_t *)p)->sets_kept);
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
    segd_policy_t *p = policy;
    pthread_mutex_lock(&p->set_lock);
    int64_t v = p->retired ? set_retired_before(p->retired, segment_id) : 0;
    pthread_mutex_unlock(&p->set_lock);
    return v;
}

static retired_set_t *set_new(segd_policy_t *p, size_t cap)
{
    retired_set_t *s = malloc(sizeof(*s) + (cap ? cap : 1) * sizeof(s->pairs[0]));
    if (!s)
        return NULL;
    s->older = NULL;
    atomic_init(&s->refs, 0);
    s->n = 0;
    s->max_before = 0;
    atomic_fetch_add(&p->sets_made, 1);
    atomic_fetch_add(&p->sets_kept, 1);
    return s;
}

/* Makes s current and frees every replaced set no rule holds. A rule takes
 * its reference under set_lock and only of the current set, so a replaced
 * set seen here without one never gets one again. Called with retire_lock. */
static void set_publish(segd_policy_t *p, retired_set_t *s)
{
    pthread_mutex_lock(&p->set_lock);
    retired_set_t *old = p->retired;
    p->retired = s;
    if (old) {
        old->older = p->replaced;
        p->replaced = old;
    }
    for (retired_set_t **at = &p->replaced; *at;) {
        retired_set_t *r = *at;
        if (atomic_load(&r->refs)) {
            at = &r->older;
            continue;
        }
        *at = r->older;
        free(r);
        atomic_fetch_sub(&p->sets_kept, 1);
    }
    pthread_mutex_unlock(&p->set_lock);
}

segd_err_t segd_policy_retire(segd_policy_t *p, int64_t segment_id, int64_t before_ms)
{
    if (before_ms < 0)
        before_ms = 0; /* a key's marker is never below 0, the lookup's "none" */
    pthread_mutex_lock(&p->retire_lock);
    retired_set_t *old = p->retired, *s = NULL;
    size_t n = old ? old->n : 0;
    /* A marker that would not change makes no set: retirements repeat
     * (every replayed control event, every carried marker). */
    if ((old ? set_retired_before(old, segment_id) : 0) >= before_ms)
        goto out;
    if (!(s = set_new(p, n + 1))) {
        pthread_mutex_unlock(&p->retire_lock);
        return SEGD_ERR_NOMEM;
    }
    s->n = segd_markers_put(s->pairs, old ? old->pairs : NULL, n, segment_id, before_ms);
    s->max_before = old && old->max_before > before_ms ? old->max_before : before_ms;
    set_publish(p, s);
out:
    pthread_mutex_unlock(&p->retire_lock);
    return SEGD_OK;
}

static int cmp_marker(const void *x, const void *y)
{
    int64_t a = ((const segd_marker_t *)x)->key, b = ((const segd_marker_t *)y)->key;
    return (a > b) - (a < b);
}

segd_err_t segd_policy_retire_all(segd_policy_t *p, segd_marker_t *v, size_t n)
{
    if (!n)
        return SEGD_OK;
    qsort(v, n, sizeof(*v), cmp_marker);
    pthread_mutex_lock(&p->retire_lock);
    retired_set_t *old = p->retired;
    size_t old_n = old ? old->n : 0;
    retired_set_t *s = set_new(p, old_n + n);
    if (!s) {
        pthread_mutex_unlock(&p->retire_lock);
        return SEGD_ERR_NOMEM;
    }
    s->n = segd_markers_join(s->pairs, old ? old->pairs : NULL, old_n, v, n);
    s->max_before = old ? old->max_before : 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->pairs[i].before_ms > s->max_before)
            s->max_before = s->pairs[i].before_ms;
    set_publish(p, s);
    pthread_mutex_unlock(&p->retire_lock);
    return SEGD_OK;
}

void segd_policy_count_corrupt(segd_policy_t *p) { atomic_fetch_add(&p->corrupt, 1); }

uint64_t segd_policy_corrupt_count(const segd_policy_t *p)
{
    return atomic_load(&((segd_policy_t *)p)->corrupt);
}
