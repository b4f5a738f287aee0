/* The GC watermark W (DESIGN §3, issue 9 defects 1-2): how it starts, moves
 * and persists; and that every accepted event has the same effect on the
 * store, on a cache fed every delta, and on a cache loaded from a snapshot
 * taken mid-way plus the deltas after it, whatever compactions ran and
 * however the clock moved, with late and future events refused the same way
 * everywhere. The reference is an independent model that keeps every
 * accepted event (removals win ties of ts). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>
#include <unistd.h>

#include "app/app.h"
#include "cache/edge.h"
#include "cache/edge_load.h"
#include "consumer/apply.h"
#include "config/config.h"
#include "consumer/ingest.h"
#include "wire/avro_codec.h"
#include <signal.h>
#include "publisher/snapshot.h"
#include "store/store.h"

#define T0 1800000000000LL
#define HOUR_MS 3600000LL
#define USERS 12
#define EARLY_USERS 6 /* written in the first rounds only */
#define SEGS 16
#define SKEW_MS 600000LL

static uint64_t rng;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static segd_store_t *open_store(const char *dir, int64_t now_ms)
{
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = dir;
    o.now_ms = now_ms;
    o.block_cache_mb = 8;
    /* the figures below are written for a 1-day horizon, not the default */
    o.horizon_ms = 24 * HOUR_MS;
    segd_store_t *s = NULL;
    char err[256];
    assert_int_equal(segd_store_open(&s, &o, err, sizeof(err)), SEGD_OK);
    return s;
}

static void make_dir(char *dir, size_t n, const char *what)
{
    snprintf(dir, n, "/tmp/segd-test-gc-%s-XXXXXX", what);
    assert_non_null(mkdtemp(dir));
}

static void remove_dir(const char *dir)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A fresh store takes any history; once caught up it refuses below
 * now - horizon but drops nothing until grace of open time has passed; then
 * W moves with the clock, never faster, and survives a reopen; closed time
 * does not move it. */
static void test_watermark_lifecycle(void **state)
{
    (void)state;
    char dir[64], err[256];
    make_dir(dir, sizeof(dir), "life");
    segd_store_t *s = open_store(dir, T0);
    segd_policy_t *pol = segd_store_policy(s);
    assert_int_equal(segd_store_gc_watermark(s), 0);
    assert_int_equal(segd_policy_check_ts(pol, T0 - 400 * 24 * HOUR_MS, SKEW_MS), SEGD_TS_OK);
    assert_int_equal(segd_policy_check_ts(pol, T0 + SKEW_MS, SKEW_MS), SEGD_TS_OK);
    assert_int_equal(segd_policy_check_ts(pol, T0 + SKEW_MS + 1, SKEW_MS), SEGD_TS_FROM_FUTURE);
    /* not caught up: time passes, nothing starts */
    segd_policy_set_now(pol, T0 + 10 * HOUR_MS);
    assert_int_equal(segd_store_gc_advance(s, 0, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_policy_ts_floor(pol), 0);
    /* caught up at T1: the floor is T1 - 24 h at once, W still 0 */
    const int64_t t1 = T0 + 10 * HOUR_MS;
    assert_int_equal(segd_store_gc_advance(s, SEGD_GC_CAUGHT_UP, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_policy_ts_floor(pol), t1 - 24 * HOUR_MS);
    assert_int_equal(segd_policy_check_ts(pol, t1 - 24 * HOUR_MS - 1, SKEW_MS), SEGD_TS_TOO_LATE);
    assert_int_equal(segd_store_gc_watermark(s), 0);
    segd_policy_set_now(pol, t1 + 47 * HOUR_MS);
    assert_int_equal(segd_store_gc_advance(s, 0, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_gc_watermark(s), 0);
    /* the phase's open time survives a reopen; closed time does not count */
    segd_store_close(s);
    s = open_store(dir, t1 + 200 * HOUR_MS);
    pol = segd_store_policy(s);
    assert_int_equal(segd_policy_ts_floor(pol), t1 - 24 * HOUR_MS);
    assert_int_equal(segd_store_gc_advance(s, 0, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_gc_watermark(s), 0);
    segd_policy_set_now(pol, t1 + 201 * HOUR_MS); /* 48 h of open time in all */
    assert_int_equal(segd_store_gc_advance(s, 0, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_gc_watermark(s), t1 - 24 * HOUR_MS);
    assert_int_equal(segd_policy_ts_floor(pol), t1 + 24 * HOUR_MS);
    /* from now on W moves at most as fast as the clock, toward now - 72 h */
    segd_policy_set_now(pol, t1 + 211 * HOUR_MS);
    assert_int_equal(segd_store_gc_advance(s, 0, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_gc_watermark(s), t1 - 14 * HOUR_MS);
    segd_store_close(s);
    s = open_store(dir, t1 + 400 * HOUR_MS);
    pol = segd_store_policy(s);
    assert_int_equal(segd_store_gc_watermark(s), t1 - 14 * HOUR_MS);
    segd_policy_set_now(pol, t1 + 401 * HOUR_MS);
    assert_int_equal(segd_store_gc_advance(s, 0, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_gc_watermark(s), t1 - 13 * HOUR_MS);
    /* a full compaction merges every operand: W may take its target */
    assert_int_equal(segd_store_compact(s, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_gc_watermark(s), t1 + 401 * HOUR_MS - 72 * HOUR_MS);
    /* a clock moved back never lowers W */
    segd_policy_set_now(pol, T0);
    assert_int_equal(segd_store_gc_advance(s, 0, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_gc_watermark(s), t1 + 401 * HOUR_MS - 72 * HOUR_MS);
    segd_store_close(s);
    remove_dir(dir);
}

/* What a store opened at dir with these settings shows after a full
 * compaction (which moves W to its target). */
typedef struct gc_seen {
    int64_t w, grace, floor;
} gc_seen_t;

static gc_seen_t compact_with(const char *dir, int64_t now_ms, int64_t horizon_ms,
                              int64_t grace_ms)
{
    char err[256];
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = dir;
    o.now_ms = now_ms;
    o.block_cache_mb = 8;
    o.horizon_ms = horizon_ms;
    o.gc_grace_ms = grace_ms;
    segd_store_t *s = NULL;
    assert_int_equal(segd_store_open(&s, &o, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_compact(s, err, sizeof(err)), SEGD_OK);
    segd_policy_t *pol = segd_store_policy(s);
    gc_seen_t seen = {segd_store_gc_watermark(s), segd_policy_gc_grace_ms(pol),
                      segd_policy_ts_floor(pol)};
    segd_store_close(s);
    return seen;
}

/* The grace W was moved with is kept: a store run with 5 days, then
 * compacted by a tool with the default 2, keeps 5 (W = now - 24 h - 5 d,
 * floor now - 24 h) for both. */
static void test_grace_is_kept(void **state)
{
    (void)state;
    char dir[64];
    make_dir(dir, sizeof(dir), "grace");
    const int64_t day = 24 * HOUR_MS;
    gc_seen_t g = compact_with(dir, T0, day, 5 * day);
    assert_int_equal(g.w, T0 - day - 5 * day);
    g = compact_with(dir, T0 + 10 * HOUR_MS, day, 2 * day);
    assert_int_equal(g.grace, 5 * day);
    assert_int_equal(g.w, T0 + 10 * HOUR_MS - day - 5 * day);
    assert_int_equal(g.floor, T0 + 10 * HOUR_MS - day);
    remove_dir(dir);
}

/* The horizon W was moved with is kept too: `segd compact` with a shorter
 * horizon (its default was 24 h then) beside a `segd run` configured with 7
 * days moved W six days past what run still accepts and keeps (review of
 * issue 9). */
static void test_horizon_is_kept(void **state)
{
    (void)state;
    char dir[64];
    make_dir(dir, sizeof(dir), "horizon");
    const int64_t day = 24 * HOUR_MS, grace = 2 * day;
    gc_seen_t g = compact_with(dir, T0, 7 * day, grace);
    assert_int_equal(g.w, T0 - 7 * day - grace);
    g = compact_with(dir, T0 + 10 * HOUR_MS, day, grace); /* a shorter horizon */
    assert_int_equal(g.w, T0 + 10 * HOUR_MS - 7 * day - grace);
    remove_dir(dir);
}

/* ---------- the same deltas into a store, two caches and a model ---------- */

typedef struct delta {
    char user[SEGD_MAX_USER_ID + 1];
    segd_profile_t p; /* the event's operand */
} delta_t;

typedef struct world {
    segd_event_t *accepted;
    size_t n_accepted, cap_accepted;
    delta_t *deltas;
    size_t n_deltas, cap_deltas;
    uint64_t too_late, from_future;
} world_t;

static void random_event(segd_event_t *ev, int64_t now_ms, int early)
{
    static const int32_t ttls[] = {600, 3600, 6 * 3600, 86400, 30 * 86400};
    char uid[16];
    segd_event_reset(ev);
    /* users only written early keep old removals as their last word: a
     * snapshot drops those, and an old delta joined again must not win */
    snprintf(uid, sizeof(uid), "user%02d",
             early && rnd() % 2 ? USERS + (int)(rnd() % EARLY_USERS) : (int)(rnd() % USERS));
    segd_event_set_user(ev, uid, strlen(uid));
    /* a 30-min grid from 40 h before to 20 min after now: ties, late and
     * future events are all common */
    ev->ts_ms = now_ms - 40 * HOUR_MS + (int64_t)(rnd() % 82) * 1800000;
    uint64_t r = rnd() % 20;
    ev->op = r < 13 ? SEGD_OP_UPSERT : r < 19 ? SEGD_OP_REMOVE : SEGD_OP_ERASE_USER;
    if (ev->op == SEGD_OP_ERASE_USER)
        return;
    int n = 1 + (int)(rnd() % 3);
    for (int i = 0; i < n; i++) {
        segd_seg_update_t u = {(int64_t)(rnd() % SEGS), ttls[rnd() % 5], (int32_t)(rnd() % 2),
                               0};
        segd_event_add_segment(ev, &u);
    }
}

static void keep_event(world_t *w, const segd_event_t *ev)
{
    if (w->n_accepted == w->cap_accepted) {
        w->cap_accepted = w->cap_accepted ? 2 * w->cap_accepted : 256;
        w->accepted = realloc(w->accepted, w->cap_accepted * sizeof(*w->accepted));
        assert_non_null(w->accepted);
    }
    segd_event_t *c = &w->accepted[w->n_accepted++];
    segd_event_init(c);
    segd_event_set_user(c, ev->user_id, ev->user_id_len);
    c->ts_ms = ev->ts_ms;
    c->op = ev->op;
    for (size_t i = 0; i < ev->n_segments; i++)
        segd_event_add_segment(c, &ev->segments[i]);
    if (w->n_deltas == w->cap_deltas) {
        w->cap_deltas = w->cap_deltas ? 2 * w->cap_deltas : 256;
        w->deltas = realloc(w->deltas, w->cap_deltas * sizeof(*w->deltas));
        assert_non_null(w->deltas);
    }
    delta_t *d = &w->deltas[w->n_deltas++];
    memcpy(d->user, ev->user_id, ev->user_id_len + 1); /* "userNN" */
    segd_profile_init(&d->p);
    assert_int_equal(segd_event_to_profile(ev, 3600, &d->p), SEGD_OK);
}

/* Keeps every accepted event, decides at read time. */
static size_t model_live(const world_t *w, const char *user, int64_t now_ms, segd_entry_t *out)
{
    segd_entry_t best[SEGS];
    int have[SEGS] = {0};
    int64_t erased = 0;
    for (size_t i = 0; i < w->n_accepted; i++) {
        const segd_event_t *ev = &w->accepted[i];
        if (strcmp(ev->user_id, user))
            continue;
        if (ev->op == SEGD_OP_ERASE_USER && ev->ts_ms > erased)
            erased = ev->ts_ms;
        for (size_t j = 0; j < ev->n_segments; j++) {
            const segd_seg_update_t *u = &ev->segments[j];
            int64_t exp = ev->op == SEGD_OP_UPSERT
                              ? (ev->ts_ms / 1000 + u->ttl_s + 3599) / 3600 * 3600
                              : 0;
            segd_entry_t e = {u->segment_id, ev->ts_ms, exp, u->flags, u->partner_id};
            segd_entry_t *b = &best[u->segment_id];
            int bigger = !have[u->segment_id];
            if (!bigger && e.ts_ms != b->ts_ms)
                bigger = e.ts_ms > b->ts_ms;
            else if (!bigger && (e.expiry_s == 0) != (b->expiry_s == 0))
                bigger = e.expiry_s == 0; /* a removal wins a tie */
            else if (!bigger)
                bigger = e.expiry_s > b->expiry_s ||
                         (e.expiry_s == b->expiry_s &&
                          (e.flags > b->flags ||
                           (e.flags == b->flags && e.partner_id > b->partner_id)));
            if (bigger)
                *b = e;
            have[u->segment_id] = 1;
        }
    }
    size_t k = 0;
    for (int s = 0; s < SEGS; s++)
        if (have[s] && best[s].expiry_s > now_ms / 1000 && best[s].ts_ms > erased)
            out[k++] = best[s];
    return k;
}

static size_t store_live(segd_store_t *s, const char *user, segd_entry_t *out)
{
    segd_profile_t p;
    segd_profile_init(&p);
    char err[256];
    assert_int_equal(segd_store_get(s, user, strlen(user), &p, err, sizeof(err)), SEGD_OK);
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    size_t k = 0;
    for (size_t i = 0; i < p.n; i++)
        if (segd_entry_live(&p.entries[i], p.erased_before_ms, &rule))
            out[k++] = p.entries[i];
    segd_profile_free(&p);
    return k;
}

static void assert_all_agree(const world_t *w, segd_store_t *s, segd_edge_t *const *caches,
                             size_t nc, int64_t now_ms)
{
    segd_policy_set_now(segd_store_policy(s), now_ms);
    for (int u = 0; u < USERS + EARLY_USERS; u++) {
        char user[16];
        snprintf(user, sizeof(user), "user%02d", u);
        segd_entry_t want[SEGS], got[SEGS];
        size_t nw = model_live(w, user, now_ms, want), ng = store_live(s, user, got);
        if (nw != ng)
            fail_msg("%s at T0%+lld h: model %zu live, store %zu", user,
                     (long long)((now_ms - T0) / HOUR_MS), nw, ng);
        if (nw)
            assert_memory_equal(want, got, nw * sizeof(*want));
        for (size_t c = 0; c < nc; c++) {
            segd_edge_set_now(caches[c], now_ms);
            assert_int_equal(segd_edge_lookup(caches[c], user, strlen(user), got, SEGS, &ng),
                             SEGD_OK);
            if (nw != ng)
                fail_msg("%s at T0%+lld h: model %zu live, cache %zu: %zu", user,
                         (long long)((now_ms - T0) / HOUR_MS), nw, c, ng);
            if (nw)
                assert_memory_equal(want, got, nw * sizeof(*want));
        }
    }
}

/* Applies the deltas [from, to) to a cache as change events, in a random
 * order, each once or twice. */
static void feed(segd_edge_t *e, const world_t *w, size_t from, size_t to)
{
    size_t n = to - from, *order = malloc((n ? n : 1) * sizeof(*order));
    for (size_t i = 0; i < n; i++)
        order[i] = from + i;
    for (size_t i = n; i > 1; i--) {
        size_t j = rnd() % i, t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    segd_change_t c;
    segd_change_init(&c);
    for (size_t i = 0; i < n; i++) {
        const delta_t *d = &w->deltas[order[i]];
        segd_change_reset(&c);
        c.user_id = d->user;
        c.user_id_len = strlen(d->user);
        const segd_profile_t *in[] = {&d->p};
        assert_int_equal(segd_profile_join(&c.profile, in, 1, NULL), SEGD_OK);
        for (int k = 0; k < (rnd() % 5 ? 1 : 2); k++)
            assert_int_equal(segd_edge_apply(e, &c), SEGD_OK);
    }
    segd_change_free(&c);
    free(order);
}

static void test_store_snapshot_caches_agree(void **state)
{
    (void)state;
    enum { ROUNDS = 24, PER_ROUND = 60, SNAP_ROUND = 11 };
    for (uint64_t seed = 1; seed <= 3; seed++) {
        rng = seed * 104729;
        char dir[64], snap[64], err[256];
        make_dir(dir, sizeof(dir), "db");
        make_dir(snap, sizeof(snap), "snap");
        segd_store_t *s = open_store(dir, T0);
        segd_policy_t *pol = segd_store_policy(s);
        world_t w = {0};
        segd_event_t ev;
        segd_event_init(&ev);
        segd_edge_t *all = NULL, *from_snap = NULL;
        segd_edge_opts_t eo;
        segd_edge_opts_default(&eo);
        eo.shards = 4;
        assert_int_equal(segd_edge_new(&all, &eo), SEGD_OK);
        size_t snap_deltas = 0;
        int64_t now = T0;
        for (int r = 0; r < ROUNDS; r++, now += 6 * HOUR_MS) {
            segd_policy_set_now(pol, now);
            /* the pipeline's order: move W, then check and apply a batch */
            assert_int_equal(segd_store_gc_advance(s, r == 2 ? SEGD_GC_CAUGHT_UP : 0, err,
                                                   sizeof(err)), SEGD_OK);
            segd_applier_t ap;
            assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
            for (int i = 0; i < PER_ROUND; i++) {
                random_event(&ev, now, r < 2);
                switch (segd_policy_check_ts(pol, ev.ts_ms, SKEW_MS)) {
                case SEGD_TS_TOO_LATE: w.too_late++; continue;
                case SEGD_TS_FROM_FUTURE: w.from_future++; continue;
                default: break;
                }
                assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
                keep_event(&w, &ev);
                if (rnd() % 8 == 0)
                    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
            }
            assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
            segd_applier_free(&ap);
            /* operands sit in levels above their bases for a while; a full
             * merge at least daily stands for periodic compaction's bound */
            assert_int_equal(segd_store_flush(s, err, sizeof(err)), SEGD_OK);
            if (r % 4 == 3)
                assert_int_equal(segd_store_compact(s, err, sizeof(err)), SEGD_OK);
            if (r == SNAP_ROUND) {
                segd_snapshot_opts_t so;
                segd_snapshot_opts_default(&so);
                so.topic = "gc"; /* no offsets: --buckets units */
                so.buckets = 4;
                segd_manifest_t m;
                assert_int_equal(segd_snapshot_export(s, snap, &so, &m, NULL, err, sizeof(err)),
                                 SEGD_OK);
                assert_int_equal(m.units, 4);
                assert_true(m.gc_watermark_ms > 0);
                assert_int_equal(m.gc_watermark_ms, segd_store_gc_watermark(s));
                segd_manifest_free(&m);
                snap_deltas = w.n_deltas;
            }
        }
        /* a cache from the snapshot, its W from the manifest, plus the change
         * stream tailed from its very beginning (the most conservative tail:
         * every delta before the snapshot comes again) */
        segd_manifest_t m;
        assert_int_equal(segd_edge_new(&from_snap, &eo), SEGD_OK);
        segd_edge_set_now(from_snap, now);
        assert_int_equal(segd_edge_load_snapshot(from_snap, snap, NULL, &m, err, sizeof(err)),
                         SEGD_OK);
        assert_int_equal(segd_edge_gc_watermark(from_snap), m.gc_watermark_ms);
        segd_manifest_free(&m);
        feed(from_snap, &w, 0, w.n_deltas);
        assert_true(snap_deltas > 0);
        /* a cache fed every delta, in any order; it learns the store's W */
        segd_edge_set_now(all, now);
        feed(all, &w, 0, w.n_deltas);
        segd_edge_raise_gc_watermark(all, segd_store_gc_watermark(s));
        feed(all, &w, w.n_deltas / 2, w.n_deltas); /* joins that prune */
        assert_true(w.too_late > 0 && w.from_future > 0);
        fprintf(stderr, "  seed %llu: %zu accepted, %llu too_late, %llu from_future, W = T0%+lld h\n",
                (unsigned long long)seed, w.n_accepted, (unsigned long long)w.too_late,
                (unsigned long long)w.from_future,
                (long long)((segd_store_gc_watermark(s) - T0) / HOUR_MS));
        segd_edge_t *caches[] = {all, from_snap};
        static const int64_t later_h[] = {0, 1, 7, 30, 100, 200};
        for (size_t i = 0; i < sizeof(later_h) / sizeof(later_h[0]); i++)
            assert_all_agree(&w, s, caches, 2, now + later_h[i] * HOUR_MS);
        /* past every expiry: compactions drop what W allows, reads stay */
        segd_policy_set_now(pol, now + 200 * HOUR_MS);
        assert_int_equal(segd_store_compact(s, err, sizeof(err)), SEGD_OK);
        assert_all_agree(&w, s, caches, 2, now + 200 * HOUR_MS);
        segd_edge_destroy(all);
        segd_edge_destroy(from_snap);
        segd_store_close(s);
        for (size_t i = 0; i < w.n_accepted; i++)
            segd_event_free(&w.accepted[i]);
        for (size_t i = 0; i < w.n_deltas; i++)
            segd_profile_free(&w.deltas[i].p);
        free(w.accepted);
        free(w.deltas);
        segd_event_free(&ev);
        remove_dir(dir);
        remove_dir(snap);
    }
}

/* Files per level of the profiles family, read through a read-only handle
 * beside the open store. Returns the number of non-empty levels; *l0 gets
 * the L0 file count. */
static int profile_levels(const char *dir, int *l0)
{
    const char *names[] = {"default", "profiles", "meta", "outbox"};
    rocksdb_options_t *o = rocksdb_options_create();
    const rocksdb_options_t *cfo[4] = {o, o, o, o};
    rocksdb_column_family_handle_t *cf[4];
    char *err = NULL;
    rocksdb_t *db = NULL;
    for (int i = 0; i < 20 && !db; i++) { /* a compaction may delete a file meanwhile */
        if (err) {
            free(err);
            err = NULL;
            usleep(50000);
        }
        db = rocksdb_open_for_read_only_column_families(o, dir, 4, names, cfo, cf, 0, &err);
    }
    if (!db)
        fail_msg("read-only open of %s: %s", dir, err);
    int levels = 0;
    for (int l = 0; l < 7; l++) {
        char prop[64];
        snprintf(prop, sizeof(prop), "rocksdb.num-files-at-level%d", l);
        char *v = rocksdb_property_value_cf(db, cf[1], prop);
        int n = v ? atoi(v) : 0;
        free(v);
        if (l == 0)
            *l0 = n;
        levels += n > 0;
    }
    for (int i = 0; i < 4; i++)
        rocksdb_column_family_handle_destroy(cf[i]);
    rocksdb_close(db);
    rocksdb_options_destroy(o);
    return levels;
}

/* The grace bound (DESIGN §3.1): an operand written above its base reaches
 * the base's level through periodic compaction within about one period once
 * flushes keep RocksDB recomputing what is due (segd run flushes the
 * profiles family at least hourly). Scaled down: a 2 s period, a flush
 * every 250 ms of unrelated writes. */
static void test_operand_merged_within_period(void **state)
{
    (void)state;
    char dir[64], err[256];
    make_dir(dir, sizeof(dir), "period");
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = dir;
    o.now_ms = T0;
    o.block_cache_mb = 8;
    o.periodic_compaction_s = 2;
    segd_store_t *s = NULL;
    assert_int_equal(segd_store_open(&s, &o, err, sizeof(err)), SEGD_OK);
    segd_event_t ev;
    segd_event_init(&ev);
    segd_applier_t ap;
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    for (int u = 0; u < 2000; u++) { /* the base, then all in one level */
        char uid[16];
        snprintf(uid, sizeof(uid), "base%04d", u);
        segd_event_reset(&ev);
        segd_event_set_user(&ev, uid, strlen(uid));
        ev.ts_ms = T0 - HOUR_MS;
        ev.op = SEGD_OP_REMOVE;
        segd_seg_update_t up = {u % 50, 0, 0, 0};
        segd_event_add_segment(&ev, &up);
        assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
    }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_compact(s, err, sizeof(err)), SEGD_OK);
    int l0 = 0;
    assert_int_equal(profile_levels(dir, &l0), 1);
    segd_event_reset(&ev); /* the late operand above one base record */
    segd_event_set_user(&ev, "base0007", 8);
    ev.ts_ms = T0 - 2 * HOUR_MS;
    ev.op = SEGD_OP_UPSERT;
    segd_seg_update_t up = {7, 86400, 0, 0};
    segd_event_add_segment(&ev, &up);
    assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_flush(s, err, sizeof(err)), SEGD_OK);
    assert_int_equal(profile_levels(dir, &l0), 2);
    double waited = 0;
    for (int i = 0; i < 240; i++, waited += 0.25) {
        usleep(250000);
        char uid[16];
        snprintf(uid, sizeof(uid), "other%04d", i); /* traffic elsewhere */
        segd_event_reset(&ev);
        segd_event_set_user(&ev, uid, strlen(uid));
        ev.ts_ms = T0;
        ev.op = SEGD_OP_UPSERT;
        segd_event_add_segment(&ev, &up);
        assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
        assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
        assert_int_equal(segd_store_flush(s, err, sizeof(err)), SEGD_OK);
        if (waited >= 2 && profile_levels(dir, &l0) == 1 && l0 == 0)
            break;
    }
    fprintf(stderr, "  operand merged into the base level after %.2f s (period 2 s)\n", waited);
    /* merged, by the periodic compaction alone: how soon is RocksDB's
     * scheduling on a loaded machine (CI, three suites on 2 cores: 6 s was
     * not enough), so the bound is the loop's 60 s, not a timed 3 periods */
    assert_true(profile_levels(dir, &l0) == 1 && l0 == 0);
    segd_applier_free(&ap);
    segd_event_free(&ev);
    segd_store_close(s);
    remove_dir(dir);
}

/* Two retirements of one id in one batch, the later event with the earlier
 * time: the marker on disk must be the larger, as the running process has
 * it, so that a restart does not lower it. */
static void test_retire_in_batch_keeps_max(void **state)
{
    (void)state;
    char dir[64], err[256];
    make_dir(dir, sizeof(dir), "retiremax");
    segd_store_t *s = open_store(dir, T0);
    segd_applier_t a;
    assert_int_equal(segd_applier_init(&a, s), SEGD_OK);
    segd_event_t ev;
    segd_event_init(&ev);
    const int64_t times[2] = {T0 - HOUR_MS, T0 - 2 * HOUR_MS};
    for (int i = 0; i < 2; i++) {
        segd_event_reset(&ev);
        assert_int_equal(segd_event_set_user(&ev, SEGD_CONTROL_RETIRE_USER,
                                             strlen(SEGD_CONTROL_RETIRE_USER)), SEGD_OK);
        ev.op = SEGD_OP_REMOVE;
        ev.ts_ms = times[i];
        segd_seg_update_t u = {.segment_id = 5};
        assert_int_equal(segd_event_add_segment(&ev, &u), SEGD_OK);
        assert_int_equal(segd_applier_add_from(&a, &ev, "t", 0, i, 0), SEGD_OK);
    }
    assert_int_equal(segd_applier_flush(&a, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_policy_retired_before(segd_store_policy(s), 5), times[0]);
    segd_applier_free(&a);
    segd_event_free(&ev);
    segd_store_close(s);
    s = open_store(dir, T0);
    assert_int_equal(segd_policy_retired_before(segd_store_policy(s), 5), times[0]);
    segd_store_close(s);
    remove_dir(dir);
}

/* A rule's lookups are skipped for entries newer than every marker
 * (retired_max_ms) and for keys outside the markers' range: an entry at a
 * marker's time is still dead, one a millisecond newer lives; a partner's
 * marker covers its entries beside segment markers; a rule made before a
 * marker is added does not see it, the next one does. */
static void test_retired_lookup_bounds(void **state)
{
    (void)state;
    segd_policy_t *p = NULL;
    assert_int_equal(segd_policy_new(&p, 7LL * 86400 * 1000), SEGD_OK);
    segd_policy_set_now(p, T0);
    const int64_t t_seg = T0 - 2 * HOUR_MS, t_partner = T0 - HOUR_MS;
    assert_int_equal(segd_policy_retire(p, 5, t_seg), SEGD_OK);
    assert_int_equal(segd_policy_retire(p, 9, t_seg - HOUR_MS), SEGD_OK);
    segd_prune_t before_partner;
    segd_policy_rule(p, &before_partner, 1);
    assert_int_equal(segd_policy_retire(p, segd_retire_key_of_partner(3), t_partner), SEGD_OK);
    segd_prune_t rule;
    segd_policy_rule(p, &rule, 1);
    assert_int_equal(rule.retired_max_ms, t_partner);
    const int64_t exp_s = T0 / 1000 + 86400;
    const struct {
        int64_t seg, ts;
        int32_t partner;
        int live;
    } cases[] = {
        {5, t_seg, 0, 0},          /* at the segment's marker */
        {5, t_seg + 1, 0, 1},      /* after it */
        {9, t_seg - HOUR_MS, 0, 0}, /* the highest key */
        {4, t_seg - HOUR_MS, 0, 1}, /* below every segment key */
        {10, t_seg - HOUR_MS, 0, 1},/* above every segment key */
        {7, t_partner, 3, 0},      /* at the partner's marker: the newest marker */
        {7, t_partner + 1, 3, 1},  /* newer than every marker */
        {7, t_partner, 4, 1},      /* another partner */
        {5, t_seg + 1, 3, 0},      /* past its segment's marker, under its partner's */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        segd_entry_t e = {.segment_id = cases[i].seg, .ts_ms = cases[i].ts,
                          .expiry_s = exp_s, .partner_id = cases[i].partner};
        if (segd_entry_live(&e, 0, &rule) != cases[i].live)
            fail_msg("case %zu: live %d, want %d", i, !cases[i].live, cases[i].live);
    }
    segd_entry_t e = {.segment_id = 7, .ts_ms = t_partner, .expiry_s = exp_s, .partner_id = 3};
    assert_true(segd_entry_live(&e, 0, &before_partner)); /* made before the marker */
    segd_policy_destroy(p);
}

/* Retirements that change no marker make no set; one that does replaces
 * the set, and the replaced one is freed at once when no rule holds it, or
 * by the first retirement after the rule that held it lets go. The rule
 * keeps answering from the set it read. */
static void test_retire_sets_bounded(void **state)
{
    (void)state;
    segd_policy_t *p = NULL;
    uint64_t made, kept;
    assert_int_equal(segd_policy_new(&p, 7LL * 86400 * 1000), SEGD_OK);
    assert_int_equal(segd_policy_retire(p, 5, T0), SEGD_OK);
    for (int i = 0; i < 1000; i++) { /* as a replayed control event does */
        assert_int_equal(segd_policy_retire(p, 5, T0 - (i % 2) * HOUR_MS), SEGD_OK);
        assert_int_equal(segd_policy_retire(p, 6, 0), SEGD_OK); /* 0 = no marker */
    }
    segd_policy_set_counts(p, &made, &kept);
    assert_int_equal(made, 1);
    assert_int_equal(kept, 1);
    for (int64_t id = 100; id < 1100; id++) /* new markers, no rule held */
        assert_int_equal(segd_policy_retire(p, id, T0), SEGD_OK);
    segd_policy_set_counts(p, &made, &kept);
    assert_int_equal(made, 1001);
    assert_int_equal(kept, 1);
    segd_prune_t rule;
    segd_policy_rule(p, &rule, 1);
    assert_int_equal(segd_policy_retire(p, 5, T0 + 1), SEGD_OK);
    assert_int_equal(segd_policy_retire(p, 7, T0), SEGD_OK);
    segd_policy_set_counts(p, &made, &kept);
    assert_int_equal(kept, 2); /* the current set and the rule's */
    assert_int_equal(rule.retired_before(rule.retired_ctx, 5), T0);
    assert_int_equal(rule.retired_before(rule.retired_ctx, 7), 0);
    assert_int_equal(segd_policy_retired_before(p, 5), T0 + 1);
    segd_policy_rule_release(&rule);
    segd_policy_rule_release(&rule); /* twice is harmless */
    assert_null(rule.retired_before);
    assert_int_equal(segd_policy_retire(p, 8, T0), SEGD_OK);
    segd_policy_set_counts(p, &made, &kept);
    assert_int_equal(kept, 1);
    segd_policy_destroy(p);
}

typedef struct rule_reader {
    segd_policy_t *p;
    _Atomic int *stop;
    int bad;
} rule_reader_t;

/* Takes rules as the merge operator does, while markers are added: a marker
 * once seen never goes away, and a rule's set is never freed under it
 * (ASan would see the read). */
static void *read_rules(void *arg)
{
    rule_reader_t *r = arg;
    while (!atomic_load(r->stop)) {
        segd_prune_t rule;
        segd_policy_rule(r->p, &rule, 1);
        if (rule.retired_before && rule.retired_before(rule.retired_ctx, 1) != T0)
            r->bad = 1;
        segd_policy_rule_release(&rule);
    }
    return NULL;
}

static void test_retire_beside_readers(void **state)
{
    (void)state;
    segd_policy_t *p = NULL;
    _Atomic int stop = 0;
    pthread_t t[2];
    rule_reader_t r[2];
    uint64_t made, kept;
    assert_int_equal(segd_policy_new(&p, 7LL * 86400 * 1000), SEGD_OK);
    assert_int_equal(segd_policy_retire(p, 1, T0), SEGD_OK);
    for (int i = 0; i < 2; i++) {
        r[i] = (rule_reader_t){.p = p, .stop = &stop};
        assert_int_equal(pthread_create(&t[i], NULL, read_rules, &r[i]), 0);
    }
    for (int64_t id = 2; id < 2002; id++)
        assert_int_equal(segd_policy_retire(p, id, T0), SEGD_OK);
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_false(r[i].bad);
    }
    assert_int_equal(segd_policy_retire(p, 1, T0 + 1), SEGD_OK);
    segd_policy_set_counts(p, &made, &kept);
    assert_int_equal(kept, 1);
    segd_policy_destroy(p);
}

#define OPEN_MARKERS 3000

/* The markers a store holds are read at open into one set. */
static void test_open_loads_markers_once(void **state)
{
    (void)state;
    char dir[64], err[256];
    uint64_t made, kept;
    make_dir(dir, sizeof(dir), "markersload");
    segd_store_t *s = open_store(dir, T0);
    for (int64_t id = 0; id < OPEN_MARKERS; id++)
        assert_int_equal(segd_store_retire(s, id * 7 - 100, T0 - id, NULL, err, sizeof(err)),
                         SEGD_OK);
    segd_store_close(s);
    s = open_store(dir, T0);
    segd_policy_set_counts(segd_store_policy(s), &made, &kept);
    assert_int_equal(made, 1);
    assert_int_equal(kept, 1);
    for (int64_t id = 0; id < OPEN_MARKERS; id++)
        assert_int_equal(segd_policy_retired_before(segd_store_policy(s), id * 7 - 100),
                         T0 - id);
    assert_int_equal(segd_policy_retired_before(segd_store_policy(s), 1), 0);
    segd_store_close(s);
    remove_dir(dir);
}

/* Flips bytes in the middle of the one table file that holds "retired/"
 * keys: a data block of markers no longer passes its checksum. */
static void corrupt_marker_table(const char *dir)
{
    char cmd[256], path[512];
    snprintf(cmd, sizeof(cmd), "grep -l -a 'retired/' %s/*.sst", dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    assert_non_null(fgets(path, sizeof(path), f));
    char extra[512];
    assert_null(fgets(extra, sizeof(extra), f)); /* exactly one such file */
    pclose(f);
    path[strcspn(path, "\n")] = 0;
    FILE *t = fopen(path, "r+b");
    assert_non_null(t);
    assert_int_equal(fseek(t, 0, SEEK_END), 0);
    long size = ftell(t);
    assert_true(size > 16384);
    assert_int_equal(fseek(t, size / 3, SEEK_SET), 0);
    char junk[256];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(fwrite(junk, 1, sizeof(junk), t), sizeof(junk));
    fclose(t);
}

/* A marker scan that fails at open fails the open: a marker dropped
 * silently would bring retired entries back to life. */
static void test_open_fails_on_unreadable_markers(void **state)
{
    (void)state;
    char dir[64], err[512];
    make_dir(dir, sizeof(dir), "markerscorrupt");
    segd_store_t *s = open_store(dir, T0);
    for (int64_t id = 0; id < OPEN_MARKERS; id++)
        assert_int_equal(segd_store_retire(s, id, T0, NULL, err, sizeof(err)), SEGD_OK);
    segd_store_close(s);
    segd_store_close(open_store(dir, T0)); /* recovery flushes the markers to a table */
    corrupt_marker_table(dir);
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = dir;
    o.now_ms = T0;
    o.block_cache_mb = 8;
    s = NULL;
    err[0] = 0;
    segd_err_t e = segd_store_open(&s, &o, err, sizeof(err));
    if (e == SEGD_OK)
        segd_store_close(s);
    assert_int_not_equal(e, SEGD_OK);
    assert_null(s);
    if (!strstr(err, "retirement markers unreadable"))
        fail_msg("open failed, but not on the markers: %s", err);
    remove_dir(dir);
}

/* The reserved control id is valid only as segd produces it (op REMOVE): an
 * ordinary producer's upsert or erase under it would retire segments
 * store-wide, so validation refuses it (it goes to the dead-letter topic). */
static void test_control_id_only_remove(void **state)
{
    (void)state;
    char err[256];
    segd_limits_t lim;
    segd_limits_default(&lim);
    segd_event_t ev;
    segd_event_init(&ev);
    assert_int_equal(segd_event_set_user(&ev, SEGD_CONTROL_RETIRE_USER,
                                         strlen(SEGD_CONTROL_RETIRE_USER)), SEGD_OK);
    ev.ts_ms = T0;
    segd_seg_update_t u = {.segment_id = 5, .ttl_s = 60};
    assert_int_equal(segd_event_add_segment(&ev, &u), SEGD_OK);
    ev.op = SEGD_OP_REMOVE;
    assert_int_equal(segd_event_validate(&ev, &lim, err, sizeof(err)), SEGD_OK);
    ev.op = SEGD_OP_UPSERT;
    assert_int_equal(segd_event_validate(&ev, &lim, err, sizeof(err)), SEGD_ERR_INVALID);
    assert_non_null(strstr(err, "reserved"));
    /* the partner form likewise */
    assert_int_equal(segd_event_set_user(&ev, SEGD_CONTROL_RETIRE_PARTNER_USER,
                                         strlen(SEGD_CONTROL_RETIRE_PARTNER_USER)), SEGD_OK);
    assert_int_equal(segd_event_validate(&ev, &lim, err, sizeof(err)), SEGD_ERR_INVALID);
    assert_non_null(strstr(err, "reserved"));
    ev.op = SEGD_OP_REMOVE;
    assert_int_equal(segd_event_validate(&ev, &lim, err, sizeof(err)), SEGD_OK);
    segd_event_free(&ev);
}

/* Encodes ev single-object framed, as producers and segd's tools send it. */
static void encode_event(const segd_event_t *ev, segd_buf_t *out)
{
    char err[256];
    segd_avro_codec_t *c = NULL;
    assert_int_equal(segd_avro_codec_new(&c, NULL, NULL, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_avro_encode(c, SEGD_FRAMING_SINGLE_OBJECT, 0, ev, out), SEGD_OK);
    segd_avro_codec_destroy(c);
}

/* A retirement's control event below the ingest floor is taken: a marker
 * only removes, and a store of the fleet whose floor is above its time
 * would otherwise keep live what the others retire. An ordinary event at
 * the same time is still refused as too_late. */
static void test_control_event_below_floor_taken(void **state)
{
    (void)state;
    char dir[64], err[256], why[256];
    make_dir(dir, sizeof(dir), "ctlfloor");
    segd_store_t *s = open_store(dir, T0);
    segd_policy_t *pol = segd_store_policy(s);
    assert_int_equal(segd_store_gc_advance(s, SEGD_GC_CAUGHT_UP, err, sizeof(err)), SEGD_OK);
    const int64_t late = T0 - 48 * HOUR_MS; /* below the floor T0 - 24 h */
    assert_int_equal(segd_policy_check_ts(pol, late, SKEW_MS), SEGD_TS_TOO_LATE);
    segd_config_t cfg;
    segd_config_init(&cfg);
    const char *const kv[] = {"db", dir, "brokers", "localhost:9", "topics", "t", "group", "g",
                              NULL};
    for (size_t i = 0; kv[i]; i += 2)
        assert_int_equal(segd_config_set(&cfg, kv[i], kv[i + 1], err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_finish(&cfg, err, sizeof(err)), SEGD_OK);
    volatile sig_atomic_t stop = 0;
    segd_backoff_t bo = {0};
    segd_ingest_t *g = NULL;
    assert_int_equal(segd_ingest_new(&g, &cfg, s, &stop, &bo, err, sizeof(err)), SEGD_OK);
    segd_event_t ev;
    segd_event_init(&ev);
    segd_buf_t buf = {0};
    const segd_event_t *got = NULL;
    int reason = 0;
    const char *const users[2] = {SEGD_CONTROL_RETIRE_USER, SEGD_CONTROL_RETIRE_PARTNER_USER};
    for (int i = 0; i < 2; i++) {
        segd_event_reset(&ev);
        assert_int_equal(segd_event_set_user(&ev, users[i], strlen(users[i])), SEGD_OK);
        ev.op = SEGD_OP_REMOVE;
        ev.ts_ms = late;
        segd_seg_update_t u = {.segment_id = 5, .partner_id = 7};
        assert_int_equal(segd_event_add_segment(&ev, &u), SEGD_OK);
        encode_event(&ev, &buf);
        reason = 0;
        assert_int_equal(segd_ingest_check(g, NULL, 0, NULL, 0, buf.data, buf.len, &got,
                                           &reason, why, sizeof(why)), 1);
    }
    segd_event_reset(&ev);
    assert_int_equal(segd_event_set_user(&ev, "u1", 2), SEGD_OK);
    ev.op = SEGD_OP_REMOVE;
    ev.ts_ms = late;
    segd_seg_update_t u = {.segment_id = 5};
    assert_int_equal(segd_event_add_segment(&ev, &u), SEGD_OK);
    encode_event(&ev, &buf);
    assert_int_equal(segd_ingest_check(g, NULL, 0, NULL, 0, buf.data, buf.len, &got, &reason,
                                       why, sizeof(why)), 0);
    assert_int_equal(reason, SEGD_DLQ_TOO_LATE);
    segd_buf_free(&buf);
    segd_event_free(&ev);
    segd_ingest_destroy(g);
    segd_config_free(&cfg);
    segd_store_close(s);
    remove_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watermark_lifecycle),
        cmocka_unit_test(test_grace_is_kept),
        cmocka_unit_test(test_horizon_is_kept),
        cmocka_unit_test(test_operand_merged_within_period),
        cmocka_unit_test(test_store_snapshot_caches_agree),
        cmocka_unit_test(test_retire_in_batch_keeps_max),
        cmocka_unit_test(test_retired_lookup_bounds),
        cmocka_unit_test(test_retire_sets_bounded),
        cmocka_unit_test(test_retire_beside_readers),
        cmocka_unit_test(test_open_loads_markers_once),
        cmocka_unit_test(test_open_fails_on_unreadable_markers),
        cmocka_unit_test(test_control_id_only_remove),
        cmocka_unit_test(test_control_event_below_floor_taken),
    };
    if (getenv("TEST_FILTER")) /* e.g. "test_retire*" */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
