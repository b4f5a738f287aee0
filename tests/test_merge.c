/* Property test of the merge operator and compaction filter through RocksDB:
 * random event sets (upserts, removes, erases, duplicates, equal timestamps,
 * expired TTLs, a retirement) applied in several random orders, with random
 * flushes (partial merges) and compactions, give byte-identical reads, equal
 * to a naive reference model, at several clocks and after final compaction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "consumer/apply.h"
#include "core/query.h"
#include "compactor/filter.h"
#include "store/store.h"

#define T0 1800000000000LL
#define HOUR_MS 3600000LL
#define N_USERS 8
#define N_SEGS 25
#define N_EVENTS 400
#define RETIRED_SEG 7
#define RETIRED_BEFORE (T0 - 10 * HOUR_MS)

static uint64_t rng;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void random_event(segd_event_t *ev)
{
    static const int32_t ttls[] = {60, 3600, 3 * 3600, 2 * 86400, 30 * 86400};
    char uid[16];
    segd_event_reset(ev);
    snprintf(uid, sizeof(uid), "user%d", (int)(rnd() % N_USERS));
    segd_event_set_user(ev, uid, strlen(uid));
    /* a coarse grid of timestamps makes equal-ts ties common */
    ev->ts_ms = T0 - (int64_t)(rnd() % 120) * 600000;
    uint64_t r = rnd() % 10;
    ev->op = r < 7 ? SEGD_OP_UPSERT : r < 9 ? SEGD_OP_REMOVE : SEGD_OP_ERASE_USER;
    if (ev->op == SEGD_OP_ERASE_USER)
        return;
    int n = 1 + (int)(rnd() % 4);
    for (int i = 0; i < n; i++) {
        segd_seg_update_t u = {(int64_t)(rnd() % N_SEGS), ttls[rnd() % 5],
                               (int32_t)(rnd() % 3), (int32_t)(rnd() % 3)};
        segd_event_add_segment(ev, &u);
    }
}

/* ---------- the reference model: keep every event, decide at read time ---------- */

static int model_read(const segd_event_t *evs, size_t n, const char *user, int64_t now_ms,
                      segd_entry_t *out)
{
    int64_t erased = 0;
    segd_entry_t best[N_SEGS];
    int have[N_SEGS] = {0};
    for (size_t i = 0; i < n; i++) {
        const segd_event_t *ev = &evs[i];
        if (strcmp(ev->user_id, user) != 0)
            continue;
        if (ev->op == SEGD_OP_ERASE_USER && ev->ts_ms > erased)
            erased = ev->ts_ms;
        for (size_t j = 0; j < ev->n_segments; j++) {
            const segd_seg_update_t *u = &ev->segments[j];
            int64_t expiry = 0;
            if (ev->op == SEGD_OP_UPSERT) /* roundup(floor(ts/1000)+ttl, 3600) */
                expiry = (ev->ts_ms / 1000 + u->ttl_s + 3599) / 3600 * 3600;
            segd_entry_t e = {u->segment_id, ev->ts_ms, expiry, u->flags, u->partner_id};
            segd_entry_t *b = &best[u->segment_id];
            int bigger = !have[u->segment_id] || e.ts_ms > b->ts_ms ||
                         (e.ts_ms == b->ts_ms &&
                          (e.expiry_s > b->expiry_s ||
                           (e.expiry_s == b->expiry_s &&
                            (e.flags > b->flags ||
                             (e.flags == b->flags && e.partner_id > b->partner_id)))));
            if (bigger)
                *b = e;
            have[u->segment_id] = 1;
        }
    }
    int k = 0;
    for (int s = 0; s < N_SEGS; s++) {
        if (!have[s] || best[s].expiry_s <= now_ms / 1000 || best[s].ts_ms <= erased)
            continue;
        if (s == RETIRED_SEG && best[s].ts_ms <= RETIRED_BEFORE)
            continue;
        out[k++] = best[s];
    }
    return k;
}

/* ---------- the store under test ---------- */

typedef struct run {
    char dir[64];
    segd_store_t *store;
} run_t;

static void run_open(run_t *r)
{
    snprintf(r->dir, sizeof(r->dir), "/tmp/segd-test-merge-XXXXXX");
    assert_non_null(mkdtemp(r->dir));
    segd_store_opts_t o;
    segd_store_opts_default(&o);
    segd_compactor_install(&o);
    o.path = r->dir;
    o.now_ms = T0;
    o.block_cache_mb = 8;
    char err[256];
    assert_int_equal(segd_store_open(&r->store, &o, err, sizeof(err)), SEGD_OK);
}

static void run_close(run_t *r)
{
    char cmd[128];
    segd_store_close(r->store);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", r->dir);
    assert_int_equal(system(cmd), 0);
}

/* Applies the events in order; random batch sizes, flushes and compactions
 * exercise partial merges, full merges and the filter in between. */
static void apply_all(run_t *r, segd_event_t *const *order, size_t n)
{
    segd_applier_t ap;
    char err[256];
    assert_int_equal(segd_applier_init(&ap, r->store), SEGD_OK);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(segd_applier_add(&ap, order[i]), SEGD_OK);
        if (rnd() % 3 == 0)
            assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
        if (rnd() % 40 == 0)
            assert_int_equal(segd_store_flush(r->store, err, sizeof(err)), SEGD_OK);
        if (rnd() % 150 == 0)
            assert_int_equal(segd_store_compact(r->store, err, sizeof(err)), SEGD_OK);
    }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    assert_int_equal(segd_store_retire(r->store, RETIRED_SEG, RETIRED_BEFORE, NULL, err,
                                       sizeof(err)), SEGD_OK);
}

/* Reads every user at now_ms into one canonical byte string and checks each
 * user against the model. */
static void read_all(run_t *r, const segd_event_t *evs, size_t n, int64_t now_ms,
                     segd_buf_t *canon)
{
    segd_profile_t p;
    segd_profile_init(&p);
    segd_policy_set_now(segd_store_policy(r->store), now_ms);
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(r->store), &rule, 1);
    canon->len = 0;
    char err[256];
    for (int u = 0; u < N_USERS; u++) {
        char uid[16];
        snprintf(uid, sizeof(uid), "user%d", u);
        assert_int_equal(segd_store_get(r->store, uid, strlen(uid), &p, err, sizeof(err)),
                         SEGD_OK);
        segd_entry_t got[N_SEGS + 1], want[N_SEGS];
        assert_true(p.n <= N_SEGS);
        size_t k = segd_query_select(&p, &rule, NULL, got);
        int m = model_read(evs, n, uid, now_ms, want);
        assert_int_equal(k, (size_t)m);
        if (m)
            assert_memory_equal(got, want, k * sizeof(got[0]));
        assert_int_equal(segd_buf_reserve(canon, k * sizeof(got[0]) + 8), SEGD_OK);
        memcpy(canon->data + canon->len, &k, sizeof(k));
        canon->len += sizeof(k);
        memcpy(canon->data + canon->len, got, k * sizeof(got[0]));
        canon->len += k * sizeof(got[0]);
    }
    segd_profile_free(&p);
}

static const int64_t read_clocks[] = {T0, T0 + 2 * HOUR_MS, T0 + 72 * HOUR_MS};

static void test_orders_converge(void **state)
{
    (void)state;
    enum { ORDERS = 3, SEEDS = 4 };
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        rng = seed * 7919;
        segd_event_t evs[N_EVENTS];
        segd_event_t *order[N_EVENTS * 2];
        size_t n = 0;
        for (; n < N_EVENTS; n++) {
            segd_event_init(&evs[n]);
            random_event(&evs[n]);
        }
        segd_buf_t first[4] = {{0}}, cur = {0};
        for (int o = 0; o < ORDERS; o++) {
            /* every event once, ~15% twice (duplicates), shuffled */
            size_t m = 0;
            for (size_t i = 0; i < n; i++) {
                order[m++] = &evs[i];
                if (rnd() % 7 == 0)
                    order[m++] = &evs[i];
            }
            for (size_t i = m; i > 1; i--) {
                size_t j = rnd() % i;
                segd_event_t *t = order[i - 1];
                order[i - 1] = order[j];
                order[j] = t;
            }
            run_t r;
            run_open(&r);
            apply_all(&r, order, m);
            /* Merge every operand while the clock is still T0. Moving the clock
             * past the horizon with operands unmerged lets a compaction drop a
             * tombstone in the base that an unmerged older operand above it
             * still needs (see the session note: a limit of DESIGN §3). */
            char cerr[256];
            assert_int_equal(segd_store_compact(r.store, cerr, sizeof(cerr)), SEGD_OK);
            for (int c = 0; c < 3; c++) {
                read_all(&r, evs, n, read_clocks[c], &cur);
                if (o == 0)
                    segd_buf_reserve(&first[c], cur.len), memcpy(first[c].data, cur.data, cur.len),
                        first[c].len = cur.len;
                else {
                    assert_int_equal(cur.len, first[c].len);
                    assert_memory_equal(cur.data, first[c].data, cur.len);
                }
            }
            /* past every horizon: compaction may drop, reads must not change */
            char err[256];
            segd_policy_set_now(segd_store_policy(r.store), read_clocks[2]);
            assert_int_equal(segd_store_compact(r.store, err, sizeof(err)), SEGD_OK);
            read_all(&r, evs, n, read_clocks[2], &cur);
            assert_int_equal(cur.len, first[2].len);
            assert_memory_equal(cur.data, first[2].data, cur.len);
            run_close(&r);
        }
        for (int c = 0; c < 4; c++)
            segd_buf_free(&first[c]);
        segd_buf_free(&cur);
        for (size_t i = 0; i < n; i++)
            segd_event_free(&evs[i]);
    }
}

static int count_keys(void *ctx, const char *u, size_t ul, const segd_profile_t *p)
{
    (void)u, (void)ul, (void)p;
    (*(int *)ctx)++;
    return 0;
}

/* After compaction past every expiry and the horizon, no key is left. */
static void test_compaction_empties_store(void **state)
{
    (void)state;
    rng = 99;
    run_t r;
    run_open(&r);
    segd_event_t ev;
    segd_event_init(&ev);
    segd_applier_t ap;
    char err[256];
    assert_int_equal(segd_applier_init(&ap, r.store), SEGD_OK);
    for (int i = 0; i < 500; i++) {
        random_event(&ev);
        assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
        if (i % 50 == 0) {
            assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
            assert_int_equal(segd_store_flush(r.store, err, sizeof(err)), SEGD_OK);
        }
    }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
    int keys = 0;
    assert_int_equal(segd_store_scan(r.store, count_keys, &keys, err, sizeof(err)), SEGD_OK);
    assert_true(keys > 0);
    segd_policy_set_now(segd_store_policy(r.store), T0 + 90LL * 24 * HOUR_MS);
    assert_int_equal(segd_store_compact(r.store, err, sizeof(err)), SEGD_OK);
    segd_store_stats_t st;
    assert_int_equal(segd_store_stats(r.store, &st, err, sizeof(err)), SEGD_OK);
    assert_int_equal(st.records, 0);
    assert_int_equal(st.sst_bytes, 0); /* no key, not even an empty value, remains */
    run_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders_converge),
        cmocka_unit_test(test_compaction_empties_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
