/* The edge cache's table; see edge.h. Each shard is an open-addressing hash
 * table (linear probing, backward-shift deletion) of pointers to one
 * allocation per user. Retirement markers are a sorted array replaced
 * copy-on-write, so readers take no lock for them; old arrays live until
 * destroy (retirements are rare). The GC watermarks are an array of P
 * values indexed by the user's input partition, replaced the same way when
 * the partitioning is set. */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np */
#include "cache/edge.h"
#include "base/clock.h"
#include "cache/members.h"
#include "core/markers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <xxhash.h>

typedef struct tuple {
    int64_t ts_ms, expiry_s;
    int32_t flags, partner_id;
} tuple_t;

/* Header of a user's allocation; followed by tuples[ntup], ids[n], idx[n],
 * user[ulen] (in that order, so every array stays aligned). */
typedef struct rec {
    uint64_t hash;
    uint64_t version; /* segd_edge_stamp_t.profile: new for every record built */
    int64_t erased_before_ms;
    uint32_t n, ntup, ulen, pad;
} rec_t;

struct join_scratch;
static void scratch_free(struct join_scratch *js);

typedef struct shard {
    pthread_rwlock_t lock;
    rec_t **slots;
    size_t cap, count;
    uint64_t entries, bytes;
    struct join_scratch *js; /* writers' scratch, reused under the write lock */
} shard_t;

typedef struct retired {
    uint64_t version;         /* segd_edge_stamp_t.retirements */
    size_t n;
    int64_t max_before;       /* the largest before_ms of pairs */
    segd_marker_t *pairs;     /* sorted by key */
    struct retired *older;    /* kept alive until destroy */
} retired_t;

/* W per input partition, from the stores' unit manifests; only raised. */
typedef struct wmarks {
    segd_partitioner_t partitioner;
    int32_t n;             /* P; 1 = one W for every user */
    struct wmarks *older;  /* kept alive until destroy */
    _Atomic int64_t w[];
} wmarks_t;

struct segd_edge {
    segd_edge_opts_t o;
    _Atomic int64_t now_ms;
    _Atomic(wmarks_t *) wmarks;
    shard_t *shards;
    size_t nshards;
    _Atomic(retired_t *) retired;
    pthread_mutex_t retire_mu; /* writers of the retirement set */
    _Atomic uint64_t puts, deltas, controls;
    _Atomic uint64_t deltas_done; /* deltas whose join has finished */
    segd_members_t *members; /* the identity table (cache/members.h) */
};

/* Versions for segd_edge_stamp_t, from one counter for the whole process:
 * a record or retirement set built later, in this edge or in one that
 * replaced it (a reload), never repeats one a reader may have kept. */
static _Atomic uint64_t versions;

static uint64_t next_version(void) { return atomic_fetch_add(&versions, 1) + 1; }

static tuple_t *rec_tuples(const rec_t *r) { return (tuple_t *)(r + 1); }
static int64_t *rec_ids(const rec_t *r) { return (int64_t *)(rec_tuples(r) + r->ntup); }
static uint32_t *rec_idx(const rec_t *r) { return (uint32_t *)(rec_ids(r) + r->n); }
static char *rec_user(const rec_t *r) { return (char *)(rec_idx(r) + r->n); }

static size_t rec_size(uint32_t n, uint32_t ntup, uint32_t ulen)
{
    return sizeof(rec_t) + ntup * sizeof(tuple_t) + n * (sizeof(int64_t) + sizeof(uint32_t)) +
           ulen;
}

void segd_edge_opts_default(segd_edge_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->horizon_ms = 24LL * 3600 * 1000;
    o->shards = 64;
}


void segd_edge_set_now(segd_edge_t *e, int64_t now_ms) { atomic_store(&e->now_ms, now_ms); }

int64_t segd_edge_now_ms(const segd_edge_t *e)
{
    int64_t t = atomic_load(&((segd_edge_t *)e)->now_ms);
    return t ? t : segd_wall_ms();
}

static wmarks_t *wmarks_new(segd_partitioner_t partitioner, int32_t n, int64_t w)
{
    wmarks_t *m = calloc(1, sizeof(*m) + (size_t)n * sizeof(m->w[0]));
    if (!m)
        return NULL;
    m->partitioner = partitioner;
    m->n = n;
    for (int32_t i = 0; i < n; i++)
        atomic_init(&m->w[i], w);
    return m;
}

segd_err_t segd_edge_new(segd_edge_t **out, const segd_edge_opts_t *o)
{
    segd_edge_t *e = calloc(1, sizeof(*e));
    if (!e)
        return SEGD_ERR_NOMEM;
    wmarks_t *wm = wmarks_new(SEGD_PARTITIONER_MURMUR2, 1, 0);
    if (!wm) {
        free(e);
        return SEGD_ERR_NOMEM;
    }
    atomic_init(&e->wmarks, wm);
    if (o)
        e->o = *o;
    else
        segd_edge_opts_default(&e->o);
    if (!e->o.shards || (e->o.shards & (e->o.shards - 1)))
        e->o.shards = 64;
    e->nshards = e->o.shards;
    atomic_store(&e->now_ms, e->o.now_ms);
    e->shards = calloc(e->nshards, sizeof(*e->shards));
    if (!e->shards || segd_members_new(&e->members)) {
        free(e->shards);
        free(wm);
        free(e);
        return SEGD_ERR_NOMEM;
    }
    /* glibc's default rwlock lets a steady stream of readers starve the
     * writer: bidders would keep the cache from following the stream */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    for (size_t i = 0; i < e->nshards; i++)
        pthread_rwlock_init(&e->shards[i].lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    pthread_mutex_init(&e->retire_mu, NULL);
    *out = e;
    return SEGD_OK;
}

void segd_edge_destroy(segd_edge_t *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->nshards; i++) {
        shard_t *s = &e->shards[i];
        for (size_t j = 0; j < s->cap; j++)
            free(s->slots[j]);
        free(s->slots);
        scratch_free(s->js);
        pthread_rwlock_destroy(&s->lock);
    }
    for (retired_t *r = atomic_load(&e->retired), *next; r; r = next) {
        next = r->older;
        free(r->pairs);
        free(r);
    }
    for (wmarks_t *m = atomic_load(&e->wmarks), *next; m; m = next) {
        next = m->older;
        free(m);
    }
    pthread_mutex_destroy(&e->retire_mu);
    segd_members_destroy(e->members);
    free(e->shards);
    free(e);
}

/* ---------- retirements ---------- */

static int64_t retired_before(void *ctx, int64_t segment_id)
{
    const retired_t *r = ctx;
    const segd_marker_t *m = segd_markers_find(r->pairs, r->n, segment_id);
    return m ? m->before_ms : INT64_MIN;
}

/* A segment's retirement or its partner's (DESIGN 3.2) covers the tuple. */
static int retired_entry(const retired_t *r, int64_t segment_id, const tuple_t *t)
{
    if (t->ts_ms > r->max_before) /* newer than every marker */
        return 0;
    return t->ts_ms <= retired_before((void *)r, segment_id) ||
           t->ts_ms <= retired_before((void *)r, segd_retire_key_of_partner(t->partner_id));
}

segd_err_t segd_edge_retire(segd_edge_t *e, int64_t segment_id, int64_t before_ms)
{
    pthread_mutex_lock(&e->retire_mu);
    retired_t *cur = atomic_load(&e->retired);
    size_t n = cur ? cur->n : 0;
    retired_t *next = calloc(1, sizeof(*next));
    segd_marker_t *pairs = calloc(n + 1, sizeof(*pairs));
    if (!next || !pairs) {
        free(next);
        free(pairs);
        pthread_mutex_unlock(&e->retire_mu);
        return SEGD_ERR_NOMEM;
    }
    size_t w = segd_markers_put(pairs, cur ? cur->pairs : NULL, n, segment_id, before_ms);
    next->version = next_version();
    next->max_before = cur && cur->max_before > before_ms ? cur->max_before : before_ms;
    next->n = w;
    next->pairs = pairs;
    next->older = cur;
    atomic_store(&e->retired, next);
    pthread_mutex_unlock(&e->retire_mu);
    return SEGD_OK;
}

/* ---------- GC watermarks ---------- */

segd_err_t segd_edge_set_partitions(segd_edge_t *e, segd_partitioner_t partitioner,
                                    int32_t partitions)
{
    wmarks_t *cur = atomic_load(&e->wmarks);
    if (partitions < 1)
        return SEGD_ERR_INVALID;
    if (cur->n == partitions && (partitions == 1 || cur->partitioner == partitioner))
        return SEGD_OK;
    if (cur->n != 1) /* W values of one partitioning say nothing of another's users */
        return SEGD_ERR_INVALID;
    wmarks_t *next = wmarks_new(partitioner, partitions, atomic_load(&cur->w[0]));
    if (!next)
        return SEGD_ERR_NOMEM;
    next->older = cur; /* a lookup may still hold it */
    atomic_store(&e->wmarks, next);
    return SEGD_OK;
}

int32_t segd_edge_partitions(const segd_edge_t *e)
{
    return atomic_load(&((segd_edge_t *)e)->wmarks)->n;
}

static void raise_w(_Atomic int64_t *w, int64_t w_ms)
{
    int64_t cur = atomic_load(w);
    while (w_ms > cur && !atomic_compare_exchange_weak(w, &cur, w_ms))
        ;
}

void segd_edge_raise_gc_watermark(segd_edge_t *e, int64_t w_ms)
{
    wmarks_t *m = atomic_load(&e->wmarks);
    for (int32_t i = 0; i < m->n; i++)
        raise_w(&m->w[i], w_ms);
}

segd_err_t segd_edge_raise_partition_gc_watermark(segd_edge_t *e, int32_t partition,
                                                  int64_t w_ms)
{
    wmarks_t *m = atomic_load(&e->wmarks);
    if (partition < 0 || partition >= m->n)
        return SEGD_ERR_INVALID;
    raise_w(&m->w[partition], w_ms);
    return SEGD_OK;
}

int64_t segd_edge_gc_watermark(const segd_edge_t *e)
{
    wmarks_t *m = atomic_load(&((segd_edge_t *)e)->wmarks);
    int64_t w = atomic_load(&m->w[0]);
    for (int32_t i = 1; i < m->n; i++) {
        int64_t wi = atomic_load(&m->w[i]);
        w = wi < w ? wi : w;
    }
    return w;
}

int64_t segd_edge_partition_gc_watermark(const segd_edge_t *e, int32_t partition)
{
    wmarks_t *m = atomic_load(&((segd_edge_t *)e)->wmarks);
    return partition >= 0 && partition < m->n ? atomic_load(&m->w[partition]) : -1;
}

/* The W that judges this user: its partition's (one hash per join). */
static int64_t user_gc_watermark(segd_edge_t *e, const char *user, size_t len)
{
    wmarks_t *m = atomic_load(&e->wmarks);
    if (m->n == 1)
        return atomic_load(&m->w[0]);
    return atomic_load(&m->w[segd_partition_of(m->partitioner, user, len, m->n)]);
}

static void prune_rule(segd_edge_t *e, const char *user, size_t len, segd_prune_t *rule)
{
    retired_t *r = atomic_load(&e->retired);
    rule->now_ms = segd_edge_now_ms(e);
    rule->horizon_ms = e->o.horizon_ms;
    rule->complete = 1; /* the cache holds the key's whole history */
    rule->retired_before = r && r->n ? retired_before : NULL;
    rule->retired_ctx = r;
    rule->retired_max_ms = r && r->n ? r->max_before : 0;
    /* the W of the store that exported the user's unit, never now - horizon:
     * drops must match that store's */
    rule->gc_before_ms = user_gc_watermark(e, user, len);
}

/* ---------- records ---------- */

static tuple_t tuple_of(const segd_entry_t *en)
{
    tuple_t t = {en->ts_ms, en->expiry_s, en->flags, en->partner_id};
    return t;
}

static int tuple_eq(const tuple_t *a, const tuple_t *b)
{
    return a->ts_ms == b->ts_ms && a->expiry_s == b->expiry_s && a->flags == b->flags &&
           a->partner_id == b->partner_id;
}

/* Scratch for building records: distinct tuples and an open-addressing
 * index over them (a user has ~50 distinct tuples among ~1000 entries, so
 * hashing beats sorting: loading is bound by this). */
typedef struct builder {
    tuple_t *tuples;
    uint32_t *idx;   /* per entry */
    uint32_t *slots; /* tuple number + 1; 0 = empty */
    size_t cap, slots_cap;
} builder_t;

static void builder_free(builder_t *b)
{
    free(b->tuples);
    free(b->idx);
    free(b->slots);
}

static segd_err_t builder_reserve(builder_t *b, size_t n)
{
    if (n <= b->cap)
        return SEGD_OK;
    size_t slots = 16;
    while (slots < 2 * n)
        slots *= 2;
    builder_free(b);
    b->tuples = malloc(n * sizeof(*b->tuples));
    b->idx = malloc(n * sizeof(*b->idx));
    b->slots = malloc(slots * sizeof(*b->slots));
    b->cap = b->tuples && b->idx && b->slots ? n : 0;
    b->slots_cap = slots;
    return b->cap ? SEGD_OK : SEGD_ERR_NOMEM;
}

/* Builds a user's allocation from a profile: each entry points at its
 * distinct (ts, expiry, flags, partner) tuple. */
static rec_t *rec_build(const char *user, size_t ulen, uint64_t hash, const segd_profile_t *p,
                        builder_t *b)
{
    if (builder_reserve(b, p->n ? p->n : 1))
        return NULL;
    size_t mask = b->slots_cap - 1, ntup = 0;
    memset(b->slots, 0, b->slots_cap * sizeof(*b->slots));
    for (size_t i = 0; i < p->n; i++) {
        tuple_t t = tuple_of(&p->entries[i]);
        size_t j = XXH3_64bits(&t, sizeof(t)) & mask;
        while (b->slots[j] && !tuple_eq(&b->tuples[b->slots[j] - 1], &t))
            j = (j + 1) & mask;
        if (!b->slots[j]) {
            b->tuples[ntup++] = t;
            b->slots[j] = (uint32_t)ntup;
        }
        b->idx[i] = b->slots[j] - 1;
    }
    rec_t *r = malloc(rec_size((uint32_t)p->n, (uint32_t)ntup, (uint32_t)ulen));
    if (!r)
        return NULL;
    r->hash = hash;
    r->version = next_version(); /* under the shard's write lock */
    r->erased_before_ms = p->erased_before_ms;
    r->n = (uint32_t)p->n;
    r->ntup = (uint32_t)ntup;
    r->ulen = (uint32_t)ulen;
    r->pad = 0;
    memcpy(rec_tuples(r), b->tuples, ntup * sizeof(tuple_t));
    int64_t *ids = rec_ids(r);
    for (size_t i = 0; i < p->n; i++)
        ids[i] = p->entries[i].segment_id;
    memcpy(rec_idx(r), b->idx, p->n * sizeof(uint32_t));
    memcpy(rec_user(r), user, ulen);
    return r;
}

static segd_err_t rec_expand(const rec_t *r, segd_profile_t *out)
{
    segd_profile_clear(out);
    if (segd_profile_reserve(out, r->n))
        return SEGD_ERR_NOMEM;
    const tuple_t *tup = rec_tuples(r);
    const int64_t *ids = rec_ids(r);
    const uint32_t *idx = rec_idx(r);
    for (uint32_t i = 0; i < r->n; i++) {
        const tuple_t *t = &tup[idx[i]];
        out->entries[i] = (segd_entry_t){ids[i], t->ts_ms, t->expiry_s, t->flags, t->partner_id};
    }
    out->n = r->n;
    out->erased_before_ms = r->erased_before_ms;
    return SEGD_OK;
}

/* ---------- shards ---------- */

static uint64_t hash_user(const char *user, size_t len) { return XXH3_64bits(user, len); }

static shard_t *shard_of(segd_edge_t *e, uint64_t h)
{
    return &e->shards[(h >> 48) & (e->nshards - 1)];
}

/* Slot of user in s, or of the empty slot where it would go. */
static size_t find_slot(const shard_t *s, uint64_t h, const char *user, size_t len)
{
    size_t mask = s->cap - 1, i = h & mask;
    for (;; i = (i + 1) & mask) {
        const rec_t *r = s->slots[i];
        if (!r || (r->hash == h && r->ulen == len && !memcmp(rec_user(r), user, len)))
            return i;
    }
}

static segd_err_t grow(shard_t *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    rec_t **slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return SEGD_ERR_NOMEM;
    for (size_t i = 0; i < s->cap; i++) {
        rec_t *r = s->slots[i];
        if (!r)
            continue;
        size_t j = r->hash & (cap - 1);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = r;
    }
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return SEGD_OK;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void remove_slot(shard_t *s, size_t i)
{
    size_t mask = s->cap - 1, j = i;
    s->slots[i] = NULL;
    for (;;) {
        j = (j + 1) & mask;
        rec_t *r = s->slots[j];
        if (!r)
            break;
        size_t home = r->hash & mask;
        /* r may move to i iff its home is not in the cyclic range (i, j] */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            s->slots[i] = r;
            s->slots[j] = NULL;
            i = j;
        }
    }
    s->count--;
}

static void account(shard_t *s, const rec_t *r, int sign)
{
    if (!r)
        return;
    s->entries += (uint64_t)((int64_t)sign * r->n);
    s->bytes += (uint64_t)((int64_t)sign * (int64_t)rec_size(r->n, r->ntup, r->ulen));
}

typedef struct join_scratch {
    segd_profile_t cur, out, recent;
    builder_t b;
} join_scratch_t;

static void scratch_free(struct join_scratch *js)
{
    if (!js)
        return;
    segd_profile_free(&js->cur);
    segd_profile_free(&js->out);
    segd_profile_free(&js->recent);
    builder_free(&js->b);
    free(js);
}

/* A delta's entries older than the W of the user's partition are skipped.
 * The store accepted them before its W passed them + grace, so any unit
 * carrying that W already holds their effect. Joining them again could
 * resurrect an entry the unit dropped, and a conservative tail does
 * re-deliver such deltas. */
static const segd_profile_t *recent_part(const segd_profile_t *p, int64_t w,
                                         segd_profile_t *recent)
{
    size_t old = 0;
    for (size_t i = 0; i < p->n; i++)
        old += p->entries[i].ts_ms < w;
    if (!old)
        return p;
    segd_profile_clear(recent);
    if (segd_profile_reserve(recent, p->n - old))
        return NULL;
    for (size_t i = 0; i < p->n; i++)
        if (p->entries[i].ts_ms >= w)
            recent->entries[recent->n++] = p->entries[i];
    recent->erased_before_ms = p->erased_before_ms;
    return recent;
}

enum { JOIN_PUT, JOIN_DELTA, JOIN_REPLACE };

/* Joins p into the user's profile under the shard's write lock; a delta
 * (not a snapshot record) loses its entries older than W first. A replacing
 * delta (a rebuild swap's, wire/change.h) takes the user's place whole: it
 * is the swapped-in store's record, so nothing of the old one may stay, and
 * none of its entries is skipped (only pruned, as a snapshot record is). */
static segd_err_t join_into(segd_edge_t *e, const char *user, size_t len,
                            const segd_profile_t *p, int mode)
{
    if (len == 0 || len > UINT32_MAX)
        return SEGD_ERR_INVALID;
    uint64_t h = hash_user(user, len);
    shard_t *s = shard_of(e, h);
    segd_prune_t rule;
    prune_rule(e, user, len, &rule);
    segd_err_t err = SEGD_OK;
    pthread_rwlock_wrlock(&s->lock);
    /* allocation churn, not the join, dominated a put: scratch is reused */
    if (!s->js && !(s->js = calloc(1, sizeof(*s->js)))) {
        err = SEGD_ERR_NOMEM;
        goto out;
    }
    join_scratch_t *js = s->js;
    if ((s->count + 1) * 10 > s->cap * 7 && (err = grow(s)))
        goto out;
    if (mode == JOIN_DELTA && !(p = recent_part(p, rule.gc_before_ms, &js->recent))) {
        err = SEGD_ERR_NOMEM;
        goto out;
    }
    size_t i = find_slot(s, h, user, len);
    rec_t *old = s->slots[i];
    int join = old && mode != JOIN_REPLACE;
    if (join && (err = rec_expand(old, &js->cur)))
        goto out;
    const segd_profile_t *in[2] = {&js->cur, p};
    /* a new user (a snapshot load) or a replacement needs only the prune: one run */
    if ((err = join ? segd_profile_join(&js->out, in, 2, &rule)
                   : segd_profile_join(&js->out, in + 1, 1, &rule)))
        goto out;
    if (!js->out.n && !js->out.erased_before_ms) { /* nothing left: no such user */
        if (old) {
            account(s, old, -1);
            remove_slot(s, i);
            free(old);
        }
        goto out;
    }
    rec_t *r = rec_build(user, len, h, &js->out, &js->b);
    if (!r) {
        err = SEGD_ERR_NOMEM;
        goto out;
    }
    account(s, old, -1);
    account(s, r, 1);
    s->slots[i] = r;
    if (!old)
        s->count++;
    free(old);
out:
    pthread_rwlock_unlock(&s->lock);
    return err;
}

segd_err_t segd_edge_put(segd_edge_t *e, const char *user, size_t len, const segd_profile_t *p)
{
    atomic_fetch_add(&e->puts, 1);
    return join_into(e, user, len, p, JOIN_PUT);
}

void segd_edge_drop_partition(segd_edge_t *e, segd_partitioner_t partitioner,
                              int32_t partitions, int32_t partition)
{
    for (size_t k = 0; k < e->nshards; k++) {
        shard_t *s = &e->shards[k];
        pthread_rwlock_wrlock(&s->lock);
        /* remove_slot may shift the next record of the probe chain into
         * slot i, so slot i is looked at again until it keeps its record */
        for (size_t i = 0; i < s->cap; i++) {
            rec_t *r;
            while ((r = s->slots[i]) &&
                   segd_partition_of(partitioner, rec_user(r), r->ulen, partitions) == partition) {
                account(s, r, -1);
                remove_slot(s, i);
                free(r);
            }
        }
        pthread_rwlock_unlock(&s->lock);
    }
}

segd_err_t segd_edge_apply(segd_edge_t *e, const segd_change_t *c)
{
    if (c->kind == SEGD_CHANGE_RETIRE) {
        atomic_fetch_add(&e->controls, 1);
        for (size_t i = 0; i < c->n_retirements; i++) {
            segd_err_t err = segd_edge_retire(e, c->retirements[i].segment_id,
                                              c->retirements[i].retired_before_ms);
            if (err)
                return err;
        }
        return SEGD_OK;
    }
    atomic_fetch_add(&e->deltas, 1);
    segd_err_t err = join_into(e, c->user_id, c->user_id_len, &c->profile,
                               segd_change_is_replace(c) ? JOIN_REPLACE : JOIN_DELTA);
    atomic_fetch_add(&e->deltas_done, 1);
    return err;
}

void segd_edge_delta_counts(segd_edge_t *e, uint64_t *begun, uint64_t *done)
{
    /* done first: read the other way, a delta finishing in between would
     * show as done but not begun */
    *done = atomic_load(&e->deltas_done);
    *begun = atomic_load(&e->deltas);
}

/* ---------- reads ---------- */

segd_err_t segd_edge_lookup(segd_edge_t *e, const char *user, size_t len, segd_entry_t *out,
                            size_t cap, size_t *n)
{
    return segd_edge_find(e, user, len, out, cap, n, NULL);
}

/* The clock's second that judges liveness: an entry is live while
 * expiry_s > now_s (segd_edge_stamp_t relies on this being the only use). */
static int64_t now_s_of(const segd_edge_t *e) { return segd_edge_now_ms(e) / 1000; }

/* The one read path behind segd_edge_find, _lookup and _lookup_stamped. A
 * record stores its entries as ids pointing into a dictionary of distinct
 * (ts, expiry, flags, partner) tuples, and a user's entries share few of
 * them, so expiry and the erase marker are judged once per tuple rather than
 * once per entry. Only retirements depend on the segment id, so they are
 * checked per entry. The stamp is taken under the same read lock as the
 * entries, with the same retirement set and clock second, so a reply cached
 * under that stamp (cache/resp_reply_cache.h) always matches these entries.
 * Entries are counted past cap so the caller learns the room it needs. */
static segd_err_t find_stamped(segd_edge_t *e, const char *user, size_t len, segd_entry_t *out,
                               size_t cap, size_t *n, int *known, segd_edge_stamp_t *st)
{
    uint64_t h = hash_user(user, len);
    shard_t *s = shard_of(e, h);
    int64_t now_s = now_s_of(e);
    retired_t *ret = atomic_load(&e->retired);
    segd_err_t err = SEGD_OK;
    *n = 0;
    pthread_rwlock_rdlock(&s->lock);
    const rec_t *r = s->cap ? s->slots[find_slot(s, h, user, len)] : NULL;
    if (known)
        *known = r != NULL;
    if (st) /* read with the entries, under the same lock */
        *st = (segd_edge_stamp_t){r ? r->version : 0, ret ? ret->version : 0, now_s};
    if (!r)
        goto out;
    /* liveness is a property of the tuple, except for retirements */
    const tuple_t *tup = rec_tuples(r);
    uint8_t live_small[256], *live = r->ntup <= sizeof(live_small) ? live_small
                                                                  : malloc(r->ntup);
    if (!live) {
        err = SEGD_ERR_NOMEM;
        goto out;
    }
    for (uint32_t t = 0; t < r->ntup; t++)
        live[t] = tup[t].expiry_s > now_s && tup[t].ts_ms > r->erased_before_ms;
    const int64_t *ids = rec_ids(r);
    const uint32_t *idx = rec_idx(r);
    size_t k = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        const tuple_t *t = &tup[idx[i]];
        if (!live[idx[i]] || (ret && ret->n && retired_entry(ret, ids[i], t)))
            continue;
        if (k < cap)
            out[k] = (segd_entry_t){ids[i], t->ts_ms, t->expiry_s, t->flags, t->partner_id};
        k++;
    }
    if (live != live_small)
        free(live);
    *n = k;
    if (k > cap)
        err = SEGD_ERR_LIMIT;
out:
    pthread_rwlock_unlock(&s->lock);
    return err;
}

segd_err_t segd_edge_find(segd_edge_t *e, const char *user, size_t len, segd_entry_t *out,
                          size_t cap, size_t *n, int *known)
{
    return find_stamped(e, user, len, out, cap, n, known, NULL);
}

segd_err_t segd_edge_lookup_stamped(segd_edge_t *e, const char *user, size_t len,
                                    segd_entry_t *out, size_t cap, size_t *n,
                                    segd_edge_stamp_t *st)
{
    return find_stamped(e, user, len, out, cap, n, NULL, st);
}

void segd_edge_stamp(segd_edge_t *e, const char *user, size_t len, segd_edge_stamp_t *st)
{
    uint64_t h = hash_user(user, len);
    shard_t *s = shard_of(e, h);
    int64_t now_s = now_s_of(e);
    retired_t *ret = atomic_load(&e->retired);
    pthread_rwlock_rdlock(&s->lock);
    const rec_t *r = s->cap ? s->slots[find_slot(s, h, user, len)] : NULL;
    *st = (segd_edge_stamp_t){r ? r->version : 0, ret ? ret->version : 0, now_s};
    pthread_rwlock_unlock(&s->lock);
}

segd_err_t segd_edge_get_profile(segd_edge_t *e, const char *user, size_t len,
                                 segd_profile_t *out)
{
    uint64_t h = hash_user(user, len);
    shard_t *s = shard_of(e, h);
    segd_err_t err = SEGD_ERR_NOTFOUND;
    segd_profile_clear(out);
    pthread_rwlock_rdlock(&s->lock);
    const rec_t *r = s->cap ? s->slots[find_slot(s, h, user, len)] : NULL;
    if (r)
        err = rec_expand(r, out);
    pthread_rwlock_unlock(&s->lock);
    return err;
}

void segd_edge_get_stats(segd_edge_t *e, segd_edge_stats_t *st)
{
    memset(st, 0, sizeof(*st));
    for (size_t i = 0; i < e->nshards; i++) {
        shard_t *s = &e->shards[i];
        pthread_rwlock_rdlock(&s->lock);
        st->users += s->count;
        st->entries += s->entries;
        st->bytes += s->bytes;
        pthread_rwlock_unlock(&s->lock);
    }
    retired_t *r = atomic_load(&e->retired);
    st->retirements = r ? r->n : 0;
    st->puts = atomic_load(&e->puts);
    st->deltas = atomic_load(&e->deltas);
    st->control_events = atomic_load(&e->controls);
    segd_members_stats_t ms;
    segd_members_get_stats(e->members, &ms);
    st->ids = ms.ids;
    st->id_bytes = ms.bytes;
    st->bytes += ms.bytes;
    st->member_events = ms.applied;
    st->member_stale = ms.stale;
}

/* ---------- identity (DESIGN §10.5) ---------- */

segd_err_t segd_edge_apply_member(segd_edge_t *e, const segd_member_t *m)
{
    atomic_fetch_add(&e->controls, 1);
    return segd_members_apply(e->members, m, NULL);
}

segd_err_t segd_edge_members(segd_edge_t *e, const char *id, size_t len,
                             segd_edge_member_cb cb, void *ctx)
{
    segd_member_list_t l = {0};
    segd_err_t err = segd_members_component(e->members, id, len, &l);
    for (size_t i = 0; !err && i < l.n; i++)
        if (cb(ctx, l.bytes + l.off[i], l.off[i + 1] - l.off[i]))
            err = SEGD_ERR_ABORTED;
    segd_member_list_free(&l);
    return err;
}

segd_err_t segd_edge_scan_registers(segd_edge_t *e, segd_edge_register_cb cb, void *ctx)
{
    return segd_members_scan(e->members, cb, ctx);
}

segd_err_t segd_edge_get_linked(segd_edge_t *e, const char *id, size_t len,
                                segd_profile_t *out, segd_edge_member_cb cb, void *ctx,
                                int *known)
{
    segd_member_list_t l = {0};
    segd_profile_t *parts = NULL;
    const segd_profile_t **in = NULL;
    size_t got = 0;
    int any = 0;
    segd_err_t err = segd_members_component(e->members, id, len, &l);
    if (!err && (!(parts = calloc(l.n, sizeof(*parts))) || !(in = calloc(l.n, sizeof(*in)))))
        err = SEGD_ERR_NOMEM;
    for (size_t i = 0; !err && cb && i < l.n; i++)
        if (cb(ctx, l.bytes + l.off[i], l.off[i + 1] - l.off[i]))
            err = SEGD_ERR_ABORTED;
    for (size_t i = 0; !err && i < l.n; i++) {
        segd_profile_init(&parts[i]);
        got = i + 1;
        err = segd_edge_get_profile(e, l.bytes + l.off[i], l.off[i + 1] - l.off[i], &parts[i]);
        if (err == SEGD_ERR_NOTFOUND) /* a member the cache holds nothing of */
            err = SEGD_OK;
        else if (!err)
            any = 1;
        segd_profile_apply_own_erase(&parts[i]);
        in[i] = &parts[i];
    }
    if (!err) {
        segd_profile_clear(out);
        err = segd_profile_join(out, in, l.n, NULL);
    }
    if (known)
        *known = !err && any;
    for (size_t i = 0; i < got; i++)
        segd_profile_free(&parts[i]);
    free(parts);
    free(in);
    segd_member_list_free(&l);
    return err;
}

segd_err_t segd_edge_lookup_linked(segd_edge_t *e, const char *id, size_t len,
                                   segd_entry_t *out, size_t cap, size_t *n, int *known,
                                   segd_edge_member_cb cb, void *ctx)
{
    segd_profile_t p;
    segd_profile_init(&p);
    *n = 0;
    segd_err_t err = segd_edge_get_linked(e, id, len, &p, cb, ctx, known);
    if (!err) {
        /* liveness as the store's reads judge it (segd_entry_live), with the
         * cache's clock and retirements: the join left no erase marker */
        segd_prune_t rule;
        prune_rule(e, id, len, &rule);
        size_t k = 0;
        for (size_t i = 0; i < p.n; i++) {
            if (!segd_entry_live(&p.entries[i], 0, &rule))
                continue;
            if (k < cap)
                out[k] = p.entries[i];
            k++;
        }
        *n = k;
        if (k > cap)
            err = SEGD_ERR_LIMIT;
    }
    segd_profile_free(&p);
    return err;
}
