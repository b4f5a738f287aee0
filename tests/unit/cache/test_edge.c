/* The edge cache table (cache/edge.h): random deltas and snapshot records,
 * applied in a shuffled order with duplicates, read at several clocks, equal
 * a naive model of DESIGN §3 (per segment the largest (ts, expiry, flags,
 * partner); live iff not expired, not erased, not retired); lookups with a
 * short buffer report the size they need; the GC watermark per input
 * partition; readers on other threads while a
 * writer applies deltas see whole profiles (run under ASan/UBSan too). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/edge.h"

#define USERS 40
#define SEGMENTS 48
#define T_MS 1800000000000LL
#define HOUR_MS 3600000LL

typedef struct model {
    segd_entry_t best[USERS][SEGMENTS];
    int has[USERS][SEGMENTS];
    int64_t erased[USERS];
    int64_t retired[SEGMENTS];
} model_t;

static unsigned rng = 7;
static unsigned rnd(void)
{
    rng = rng * 1103515245u + 12345u;
    return (rng >> 8) & 0xffffff;
}

/* DESIGN §3's order, written out rather than taken from segd_entry_join:
 * (ts, removal, expiry, flags, partner); a removal wins a tie of ts. */
static int entry_less(const segd_entry_t *a, const segd_entry_t *b)
{
    int ra = a->expiry_s == 0, rb = b->expiry_s == 0;
    if (a->ts_ms != b->ts_ms)
        return a->ts_ms < b->ts_ms;
    if (ra != rb)
        return ra < rb;
    if (a->expiry_s != b->expiry_s)
        return a->expiry_s < b->expiry_s;
    if (a->flags != b->flags)
        return a->flags < b->flags;
    return a->partner_id < b->partner_id;
}

/* A random change within 20 h before T (inside the 24 h horizon). */
static void random_change(segd_change_t *c, char *user, size_t cap)
{
    segd_change_reset(c);
    snprintf(user, cap, "user-%02u", rnd() % USERS);
    c->user_id = user;
    c->user_id_len = strlen(user);
    if (rnd() % 15 == 0)
        c->profile.erased_before_ms = T_MS - (int64_t)(rnd() % 20) * HOUR_MS;
    int n = (int)(rnd() % 6);
    int64_t id = 0;
    for (int i = 0; i < n && id < SEGMENTS; i++) {
        id += 1 + rnd() % 9;
        if (id >= SEGMENTS)
            break;
        /* half on a coarse grid, so removals and upserts often tie */
        int64_t ago_s = rnd() % 2 ? (int64_t)(rnd() % 40) * 1800 : (int64_t)(rnd() % (20 * 3600));
        segd_entry_t e = {id, T_MS - ago_s * 1000, 0, (int32_t)(rnd() % 3), (int32_t)(rnd() % 2)};
        e.expiry_s = rnd() % 4 == 0 ? 0 /* tombstone */
                                     : e.ts_ms / 1000 + 3600 * (int64_t)(1 + rnd() % 48);
        segd_profile_push(&c->profile, &e);
    }
}

static void model_apply(model_t *m, const segd_change_t *c)
{
    int u = atoi(c->user_id + 5);
    if (c->profile.erased_before_ms > m->erased[u])
        m->erased[u] = c->profile.erased_before_ms;
    for (size_t i = 0; i < c->profile.n; i++) {
        const segd_entry_t *e = &c->profile.entries[i];
        segd_entry_t *b = &m->best[u][e->segment_id];
        if (!m->has[u][e->segment_id] || entry_less(b, e))
            *b = *e;
        m->has[u][e->segment_id] = 1;
    }
}

static size_t model_live(const model_t *m, int u, int64_t now_ms, segd_entry_t *out)
{
    size_t n = 0;
    for (int s = 0; s < SEGMENTS; s++) {
        const segd_entry_t *e = &m->best[u][s];
        if (m->has[u][s] && e->expiry_s > now_ms / 1000 && e->ts_ms > m->erased[u] &&
            e->ts_ms > m->retired[s])
            out[n++] = *e;
    }
    return n;
}

static void assert_equal_to_model(segd_edge_t *e, const model_t *m, int64_t now_ms)
{
    segd_entry_t want[SEGMENTS], got[SEGMENTS];
    char user[16];
    segd_edge_set_now(e, now_ms);
    for (int u = 0; u < USERS; u++) {
        snprintf(user, sizeof(user), "user-%02d", u);
        size_t nw = model_live(m, u, now_ms, want), ng = 99;
        assert_int_equal(segd_edge_lookup(e, user, strlen(user), got, SEGMENTS, &ng), SEGD_OK);
        if (nw != ng)
            fail_msg("%s at %lld: model %zu, edge %zu", user, (long long)now_ms, nw, ng);
        if (nw)
            assert_memory_equal(want, got, nw * sizeof(*want));
    }
}

static void test_random_deltas_equal_model(void **state)
{
    (void)state;
    for (int round = 0; round < 4; round++) {
        model_t *m = calloc(1, sizeof(*m));
        for (int s = 0; s < SEGMENTS; s++)
            m->retired[s] = INT64_MIN;
        segd_edge_opts_t o;
        segd_edge_opts_default(&o);
        o.now_ms = T_MS;
        o.shards = 4;
        segd_edge_t *e;
        assert_int_equal(segd_edge_new(&e, &o), SEGD_OK);
        segd_change_t c, saved[64];
        char user[16], saved_user[64][16];
        segd_change_init(&c);
        for (int i = 0; i < 64; i++)
            segd_change_init(&saved[i]);
        for (int i = 0; i < 3000; i++) {
            random_change(&c, user, sizeof(user));
            model_apply(m, &c);
            /* snapshot records and deltas go through the same join */
            if (i % 7 == 0)
                assert_int_equal(segd_edge_put(e, user, strlen(user), &c.profile), SEGD_OK);
            else
                assert_int_equal(segd_edge_apply(e, &c), SEGD_OK);
            int k = (int)(rnd() % 64); /* keep some to deliver again later */
            memcpy(saved_user[k], user, sizeof(user));
            segd_change_reset(&saved[k]);
            saved[k].user_id = saved_user[k];
            saved[k].user_id_len = strlen(saved_user[k]);
            const segd_profile_t *in[1] = {&c.profile};
            assert_int_equal(segd_profile_join(&saved[k].profile, in, 1, NULL), SEGD_OK);
            if (i % 500 == 250) { /* a retirement control event */
                segd_change_t r;
                segd_change_init(&r);
                r.kind = SEGD_CHANGE_RETIRE;
                int64_t seg = rnd() % SEGMENTS, before = T_MS - (int64_t)(rnd() % 10) * HOUR_MS;
                assert_int_equal(segd_change_add_retirement(&r, seg, before), SEGD_OK);
                assert_int_equal(segd_edge_apply(e, &r), SEGD_OK);
                if (before > m->retired[seg])
                    m->retired[seg] = before;
                segd_change_free(&r);
            }
        }
        for (int k = 0; k < 64; k++) /* duplicates, late */
            if (saved[k].user_id_len)
                assert_int_equal(segd_edge_apply(e, &saved[k]), SEGD_OK);
        /* a retirement after the last delta: only reads can honour it */
        assert_int_equal(segd_edge_retire(e, 5, T_MS), SEGD_OK);
        m->retired[5] = T_MS;
        static const int64_t clocks[] = {0, HOUR_MS, 6 * HOUR_MS, 30 * HOUR_MS, 60 * HOUR_MS};
        for (size_t i = 0; i < sizeof(clocks) / sizeof(clocks[0]); i++)
            assert_equal_to_model(e, m, T_MS + clocks[i]);
        segd_edge_stats_t st;
        segd_edge_get_stats(e, &st);
        assert_true(st.users > 0 && st.users <= USERS);
        assert_true(st.retirements > 0);
        segd_change_free(&c);
        for (int i = 0; i < 64; i++)
            segd_change_free(&saved[i]);
        segd_edge_destroy(e);
        free(m);
    }
}

/* The cache's marker lookups skip entries newer than every marker and keys
 * outside the markers' range: at each bound an entry at its marker's time
 * is dead and one a millisecond newer lives (segment and partner keys). */
static void test_retired_lookup_bounds(void **state)
{
    (void)state;
    segd_edge_t *e;
    assert_int_equal(segd_edge_new(&e, NULL), SEGD_OK);
    segd_edge_set_now(e, T_MS);
    const int64_t t_seg = T_MS - 2 * HOUR_MS, t_partner = T_MS - HOUR_MS;
    assert_int_equal(segd_edge_retire(e, 4, t_seg - HOUR_MS), SEGD_OK); /* lowest segment key */
    assert_int_equal(segd_edge_retire(e, 8, t_seg), SEGD_OK);            /* highest key */
    assert_int_equal(segd_edge_retire(e, segd_retire_key_of_partner(3), t_partner), SEGD_OK);
    const struct {
        int64_t seg, ts;
        int32_t partner;
        int live;
    } cases[] = {
        {4, t_seg - HOUR_MS, 0, 0}, {4, t_seg - HOUR_MS + 1, 0, 1}, {8, t_seg, 0, 0},
        {8, t_seg + 1, 0, 1},       {6, t_seg - 5 * HOUR_MS, 0, 1}, {9, t_seg - 5 * HOUR_MS, 0, 1},
        {6, t_partner, 3, 0},       {6, t_partner + 1, 3, 1},       {6, t_partner, 2, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char user[16];
        snprintf(user, sizeof(user), "b%zu", i);
        segd_profile_t p;
        segd_profile_init(&p);
        segd_entry_t en = {cases[i].seg, cases[i].ts, T_MS / 1000 + 3600, 0, cases[i].partner};
        assert_int_equal(segd_profile_push(&p, &en), SEGD_OK);
        assert_int_equal(segd_edge_put(e, user, strlen(user), &p), SEGD_OK);
        segd_profile_free(&p);
        segd_entry_t got[2];
        size_t n = 9;
        assert_int_equal(segd_edge_lookup(e, user, strlen(user), got, 2, &n), SEGD_OK);
        if ((int)n != cases[i].live)
            fail_msg("case %zu: %zu live entries, want %d", i, n, cases[i].live);
    }
    segd_edge_destroy(e);
}

static void test_short_buffer_and_profile(void **state)
{
    (void)state;
    segd_edge_t *e;
    assert_int_equal(segd_edge_new(&e, NULL), SEGD_OK);
    segd_edge_set_now(e, T_MS);
    segd_profile_t p, got;
    segd_profile_init(&p);
    segd_profile_init(&got);
    for (int i = 0; i < 10; i++) {
        segd_entry_t en = {i * 2, T_MS - 1000, i == 3 ? 0 : T_MS / 1000 + 3600, 0, 0};
        segd_profile_push(&p, &en);
    }
    assert_int_equal(segd_edge_put(e, "u", 1, &p), SEGD_OK);
    segd_entry_t out[4];
    size_t n = 0;
    assert_int_equal(segd_edge_lookup(e, "u", 1, out, 4, &n), SEGD_ERR_LIMIT);
    assert_int_equal(n, 9); /* the tombstone is not live */
    assert_int_equal(segd_edge_get_profile(e, "u", 1, &got), SEGD_OK);
    assert_int_equal(got.n, 10); /* but it is kept, to beat older deltas */
    assert_int_equal(segd_edge_get_profile(e, "nobody", 6, &got), SEGD_ERR_NOTFOUND);
    assert_int_equal(segd_edge_lookup(e, "nobody", 6, out, 4, &n), SEGD_OK);
    assert_int_equal(n, 0);
    /* an erase after everything: the entries go, the marker stays even once
     * the store's GC watermark passes it (issue 29 finding 4: an older event
     * can still come back into some store), and nothing by the cache's clock */
    segd_profile_clear(&p);
    p.erased_before_ms = T_MS;
    assert_int_equal(segd_edge_put(e, "u", 1, &p), SEGD_OK);
    assert_int_equal(segd_edge_lookup(e, "u", 1, out, 4, &n), SEGD_OK);
    assert_int_equal(n, 0);
    segd_edge_set_now(e, T_MS + 25 * HOUR_MS);
    segd_profile_clear(&p);
    assert_int_equal(segd_edge_put(e, "u", 1, &p), SEGD_OK); /* a join that prunes */
    segd_edge_stats_t st;
    segd_edge_get_stats(e, &st);
    assert_int_equal(st.users, 1);
    segd_edge_raise_gc_watermark(e, T_MS + 1);
    segd_edge_raise_gc_watermark(e, T_MS - HOUR_MS); /* never lowered */
    assert_int_equal(segd_edge_gc_watermark(e), T_MS + 1);
    assert_int_equal(segd_edge_put(e, "u", 1, &p), SEGD_OK);
    segd_edge_get_stats(e, &st);
    assert_int_equal(st.users, 1);
    assert_int_equal(segd_edge_get_profile(e, "u", 1, &got), SEGD_OK);
    assert_int_equal(got.n, 0);
    assert_int_equal(got.erased_before_ms, T_MS);
    segd_profile_free(&p);
    segd_profile_free(&got);
    segd_edge_destroy(e);
}

/* issue 9 defect 1 in the cache: a REMOVE, then the cache's clock passes the
 * old horizon and a join prunes, then a late, older UPSERT arrives (the store
 * still holds the tombstone and applies the upsert as dead). The cache must
 * not have dropped the tombstone by its own clock. */
static void test_late_delta_after_prune(void **state)
{
    (void)state;
    segd_edge_t *e;
    assert_int_equal(segd_edge_new(&e, NULL), SEGD_OK);
    segd_edge_set_now(e, T_MS);
    segd_profile_t p;
    segd_profile_init(&p);
    segd_entry_t up = {5, T_MS - 3 * HOUR_MS, T_MS / 1000 + 30 * 86400, 0, 0};
    segd_entry_t rm = {5, T_MS - HOUR_MS, 0, 0, 0};
    segd_entry_t late = {5, T_MS - 2 * HOUR_MS, T_MS / 1000 + 30 * 86400, 0, 0};
    segd_entry_t other = {6, T_MS + 24 * HOUR_MS, T_MS / 1000 + 30 * 86400, 0, 0};
    segd_profile_push(&p, &up);
    assert_int_equal(segd_edge_put(e, "v", 1, &p), SEGD_OK);
    segd_profile_clear(&p);
    segd_profile_push(&p, &rm);
    assert_int_equal(segd_edge_put(e, "v", 1, &p), SEGD_OK);
    segd_edge_set_now(e, T_MS + 25 * HOUR_MS);
    segd_profile_clear(&p);
    segd_profile_push(&p, &other); /* a join that prunes */
    assert_int_equal(segd_edge_put(e, "v", 1, &p), SEGD_OK);
    segd_profile_clear(&p);
    segd_profile_push(&p, &late);
    assert_int_equal(segd_edge_put(e, "v", 1, &p), SEGD_OK);
    segd_entry_t out[4];
    size_t n = 0;
    assert_int_equal(segd_edge_lookup(e, "v", 1, out, 4, &n), SEGD_OK);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].segment_id, 6);
    /* a tie of ts: the removal wins in the cache too (issue 9 defect 4) */
    segd_entry_t tie = {6, T_MS + 24 * HOUR_MS, 0, 0, 0};
    segd_profile_clear(&p);
    segd_profile_push(&p, &tie);
    assert_int_equal(segd_edge_put(e, "v", 1, &p), SEGD_OK);
    assert_int_equal(segd_edge_lookup(e, "v", 1, out, 4, &n), SEGD_OK);
    assert_int_equal(n, 0);
    segd_profile_free(&p);
    segd_edge_destroy(e);
}

/* The first "p-<i>" of partition part among 2 by murmur2. */
static void user_in(char *out, size_t cap, int32_t part)
{
    for (int i = 0;; i++) {
        snprintf(out, cap, "p-%d", i);
        if (segd_partition_of(SEGD_PARTITIONER_MURMUR2, out, strlen(out), 2) == part)
            return;
    }
}

/* One W per input partition (units of stores with different W): a user's
 * deltas are skipped and its dead entries dropped by its partition's W
 * only; the partitioning is set once; a cache without one keeps one W. */
static void test_gc_watermark_per_partition(void **state)
{
    (void)state;
    segd_edge_t *e;
    char u0[16], u1[16];
    user_in(u0, sizeof(u0), 0);
    user_in(u1, sizeof(u1), 1);
    assert_int_equal(segd_edge_new(&e, NULL), SEGD_OK);
    segd_edge_set_now(e, T_MS);
    assert_int_equal(segd_edge_partitions(e), 1);
    segd_edge_raise_gc_watermark(e, T_MS - 50 * HOUR_MS); /* before: every partition's start */
    assert_int_equal(segd_edge_set_partitions(e, SEGD_PARTITIONER_MURMUR2, 0), SEGD_ERR_INVALID);
    assert_int_equal(segd_edge_set_partitions(e, SEGD_PARTITIONER_MURMUR2, 2), SEGD_OK);
    assert_int_equal(segd_edge_set_partitions(e, SEGD_PARTITIONER_MURMUR2, 2), SEGD_OK);
    assert_int_equal(segd_edge_set_partitions(e, SEGD_PARTITIONER_CRC32, 2), SEGD_ERR_INVALID);
    assert_int_equal(segd_edge_set_partitions(e, SEGD_PARTITIONER_MURMUR2, 3), SEGD_ERR_INVALID);
    assert_int_equal(segd_edge_partition_gc_watermark(e, 1), T_MS - 50 * HOUR_MS);
    assert_int_equal(segd_edge_raise_partition_gc_watermark(e, 0, T_MS - 10 * HOUR_MS), SEGD_OK);
    assert_int_equal(segd_edge_raise_partition_gc_watermark(e, 1, T_MS - 40 * HOUR_MS), SEGD_OK);
    assert_int_equal(segd_edge_raise_partition_gc_watermark(e, 2, T_MS), SEGD_ERR_INVALID);
    assert_int_equal(segd_edge_partition_gc_watermark(e, 2), -1);
    assert_int_equal(segd_edge_gc_watermark(e), T_MS - 40 * HOUR_MS); /* the smallest */
    /* the same delta at T - 20 h, below partition 0's W, above 1's */
    segd_change_t c;
    memset(&c, 0, sizeof(c));
    segd_profile_init(&c.profile);
    segd_entry_t up = {1, T_MS - 20 * HOUR_MS, T_MS / 1000 + 3600, 0, 0};
    segd_profile_push(&c.profile, &up);
    c.kind = SEGD_CHANGE_DELTA;
    c.user_id = u0;
    c.user_id_len = strlen(u0);
    assert_int_equal(segd_edge_apply(e, &c), SEGD_OK);
    c.user_id = u1;
    c.user_id_len = strlen(u1);
    assert_int_equal(segd_edge_apply(e, &c), SEGD_OK);
    segd_profile_t got;
    segd_profile_init(&got);
    assert_int_equal(segd_edge_get_profile(e, u0, strlen(u0), &got), SEGD_ERR_NOTFOUND);
    assert_int_equal(segd_edge_get_profile(e, u1, strlen(u1), &got), SEGD_OK);
    assert_int_equal(got.n, 1);
    /* a tombstone at T - 30 h: dropped for u0 (below its W), kept for u1 */
    segd_profile_t p;
    segd_profile_init(&p);
    segd_entry_t rm = {2, T_MS - 30 * HOUR_MS, 0, 0, 0};
    segd_profile_push(&p, &rm);
    assert_int_equal(segd_edge_put(e, u0, strlen(u0), &p), SEGD_OK);
    assert_int_equal(segd_edge_put(e, u1, strlen(u1), &p), SEGD_OK);
    assert_int_equal(segd_edge_get_profile(e, u0, strlen(u0), &got), SEGD_ERR_NOTFOUND);
    assert_int_equal(segd_edge_get_profile(e, u1, strlen(u1), &got), SEGD_OK);
    assert_int_equal(got.n, 2);
    /* raising every partition keeps the higher ones */
    segd_edge_raise_gc_watermark(e, T_MS - 20 * HOUR_MS);
    assert_int_equal(segd_edge_partition_gc_watermark(e, 0), T_MS - 10 * HOUR_MS);
    assert_int_equal(segd_edge_partition_gc_watermark(e, 1), T_MS - 20 * HOUR_MS);
    segd_profile_free(&p);
    segd_profile_free(&got);
    segd_profile_free(&c.profile);
    segd_edge_destroy(e);
}

typedef struct reader_ctx {
    segd_edge_t *e;
    atomic_int stop; /* written by the test thread, read by the reader */
    uint64_t lookups, torn;
} reader_ctx_t;

/* Every delta the writer applies sets all of a user's 32 segments to the
 * same ts, so a reader must never see two different ts in one lookup. */
static void *reader(void *arg)
{
    reader_ctx_t *r = arg;
    segd_entry_t out[64];
    char user[16];
    while (!atomic_load(&r->stop)) {
        snprintf(user, sizeof(user), "user-%02u", (unsigned)(r->lookups % 8));
        size_t n = 0;
        if (segd_edge_lookup(r->e, user, strlen(user), out, 64, &n) == SEGD_OK)
            for (size_t i = 1; i < n; i++)
                r->torn += out[i].ts_ms != out[0].ts_ms;
        r->lookups++;
    }
    return NULL;
}

static void test_concurrent_readers(void **state)
{
    (void)state;
    segd_edge_opts_t o;
    segd_edge_opts_default(&o);
    o.now_ms = T_MS;
    o.shards = 2;
    segd_edge_t *e;
    assert_int_equal(segd_edge_new(&e, &o), SEGD_OK);
    reader_ctx_t r[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (reader_ctx_t){e, 0, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, reader, &r[i]), 0);
    }
    segd_change_t c;
    segd_change_init(&c);
    char user[16];
    for (int i = 0; i < 20000; i++) {
        segd_change_reset(&c);
        snprintf(user, sizeof(user), "user-%02d", i % 8);
        c.user_id = user;
        c.user_id_len = strlen(user);
        for (int s = 0; s < 32; s++) {
            segd_entry_t en = {s, T_MS - 100000 + i, T_MS / 1000 + 3600, 0, 0};
            segd_profile_push(&c.profile, &en);
        }
        assert_int_equal(segd_edge_apply(e, &c), SEGD_OK);
    }
    for (int i = 0; i < 3; i++) {
        atomic_store(&r[i].stop, 1);
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].torn, 0);
        assert_true(r[i].lookups > 0);
    }
    segd_change_free(&c);
    segd_edge_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_deltas_equal_model),
        cmocka_unit_test(test_retired_lookup_bounds),
        cmocka_unit_test(test_short_buffer_and_profile),
        cmocka_unit_test(test_late_delta_after_prune),
        cmocka_unit_test(test_gc_watermark_per_partition),
        cmocka_unit_test(test_concurrent_readers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
