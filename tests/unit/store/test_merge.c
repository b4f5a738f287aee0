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
#include <unistd.h>

#include <cmocka.h>

#include "app/app.h"
#include "consumer/apply.h"
#include "core/query.h"
#include "core/record.h"
#include "store/merge.h"
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
            /* at equal ts a removal (expiry 0) wins over an upsert */
            int e_rm = e.expiry_s == 0, b_rm = have[u->segment_id] && b->expiry_s == 0;
            int bigger = !have[u->segment_id] || e.ts_ms > b->ts_ms ||
                         (e.ts_ms == b->ts_ms && e_rm != b_rm && e_rm) ||
                         (e.ts_ms == b->ts_ms && e_rm == b_rm &&
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
    segd_app_store_opts(&o);
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
            /* no compaction before the reads: the GC watermark, not a full
             * merge, keeps compactions at later clocks from dropping what an
             * unmerged operand still needs (issue 9 defect 1) */
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

/* Counts records holding any entry, and those that are an erase marker only. */
static int count_kept(void *ctx, const char *u, size_t ul, const segd_profile_t *p)
{
    (void)u, (void)ul;
    int *c = ctx;
    c[p->n == 0 && p->erased_before_ms > 0]++;
    return 0;
}

/* After compaction past every expiry and the horizon, no entry is left: only
 * the erase markers, which W never drops (issue 29 finding 4). */
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
    int kept[2] = {0, 0};
    assert_int_equal(segd_store_scan(r.store, count_kept, kept, err, sizeof(err)), SEGD_OK);
    assert_int_equal(kept[0], 0); /* no entry, nor an empty value, remains */
    assert_true(kept[1] > 0);     /* the erased users' markers do */
    segd_store_stats_t st;
    assert_int_equal(segd_store_stats(r.store, &st, err, sizeof(err)), SEGD_OK);
    assert_int_equal(st.records, (uint64_t)kept[1]);
    run_close(&r);
}

/* issue 9 defect 1, the exact repro: REMOVE at T0-1h, full compaction, an
 * UPSERT stamped T0-2h arriving at T0 (unmerged, above the removal), then a
 * reopen at T0+25h where periodic compaction rewrites the bottom file alone.
 * Past the old horizon rule the tombstone went and the upsert came back. */
static void open_at(const char *dir, int64_t now_ms, int64_t periodic_s, segd_store_t **s)
{
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = dir;
    o.now_ms = now_ms;
    o.block_cache_mb = 8;
    o.periodic_compaction_s = periodic_s;
    char err[256];
    assert_int_equal(segd_store_open(s, &o, err, sizeof(err)), SEGD_OK);
}

static size_t live_of(segd_store_t *s, const char *uid)
{
    segd_profile_t p;
    segd_profile_init(&p);
    char err[256];
    assert_int_equal(segd_store_get(s, uid, strlen(uid), &p, err, sizeof(err)), SEGD_OK);
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    size_t live = 0;
    for (size_t i = 0; i < p.n; i++)
        live += (size_t)segd_entry_live(&p.entries[i], p.erased_before_ms, &rule);
    segd_profile_free(&p);
    return live;
}

static void apply_one(segd_store_t *s, segd_op_t op, int64_t ts_ms, int64_t seg)
{
    segd_event_t ev;
    segd_event_init(&ev);
    segd_event_set_user(&ev, "victim", 6);
    ev.op = op;
    ev.ts_ms = ts_ms;
    segd_seg_update_t u = {seg, 30 * 86400, 0, 0};
    if (op != SEGD_OP_ERASE_USER)
        segd_event_add_segment(&ev, &u);
    segd_applier_t ap;
    char err[256];
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
}

static void test_no_resurrection_under_unmerged_operand(void **state)
{
    (void)state;
    for (int erase = 0; erase < 2; erase++) {
        char dir[64], err[256], cmd[128];
        snprintf(dir, sizeof(dir), "/tmp/segd-test-merge-XXXXXX");
        assert_non_null(mkdtemp(dir));
        segd_store_t *s;
        open_at(dir, T0, 0, &s);
        apply_one(s, SEGD_OP_UPSERT, T0 - 3 * HOUR_MS, 5);
        apply_one(s, erase ? SEGD_OP_ERASE_USER : SEGD_OP_REMOVE, T0 - HOUR_MS, 5);
        assert_int_equal(segd_store_compact(s, err, sizeof(err)), SEGD_OK);
        apply_one(s, SEGD_OP_UPSERT, T0 - 2 * HOUR_MS, 5); /* late, older than the removal */
        assert_int_equal(live_of(s, "victim"), 0);
        segd_store_close(s);
        sleep(2); /* the bottom file is now older than the periodic period */
        open_at(dir, T0 + 25 * HOUR_MS, 1, &s);
        /* let periodic compaction run (it rewrites the bottom file alone) */
        size_t live = 0;
        for (int i = 0; i < 40 && !live; i++) {
            usleep(100000);
            live = live_of(s, "victim");
        }
        assert_int_equal(live, 0);
        segd_store_close(s);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* Partner 7 retired before 150 in this rule; nothing else is. */
static int64_t partner7_retired(void *ctx, int64_t key)
{
    (void)ctx;
    return key == segd_retire_key_of_partner(7) ? 150 : 0;
}

/* A partner's marker covers only that partner's entries: partner 7's entry
 * at ts 100 beat partner 3's at 90, and once 7 is retired both are dead.
 * A partial merge of the operand (its base unseen) must keep the covered
 * entry, or the full merge with the base brings partner 3's entry back; a
 * full merge keeps it too while it is above W, and drops it below W. */
static void test_partner_marker_keeps_the_winner(void **state)
{
    (void)state;
    segd_profile_t base, op, out;
    segd_profile_init(&base);
    segd_profile_init(&op);
    segd_profile_init(&out);
    const segd_entry_t q = {9, 90, 4000000000LL, 0, 3}, pe = {9, 100, 4000000000LL, 0, 7};
    assert_int_equal(segd_profile_reserve(&base, 1), SEGD_OK);
    base.entries[0] = q;
    base.n = 1;
    assert_int_equal(segd_profile_reserve(&op, 1), SEGD_OK);
    op.entries[0] = pe;
    op.n = 1;
    segd_prune_t rule = {.now_ms = 1000000, .retired_before = partner7_retired};
    segd_profile_prune(&op, &rule); /* a partial merge: complete = 0 */
    assert_int_equal(op.n, 1);
    rule.complete = 1;
    const segd_profile_t *in[2] = {&base, &op};
    assert_int_equal(segd_profile_join(&out, in, 2, &rule), SEGD_OK);
    for (size_t i = 0; i < out.n; i++)
        assert_false(segd_entry_live(&out.entries[i], out.erased_before_ms, &rule));
    assert_int_equal(out.n, 1); /* W = 0: the dead winner stays */
    assert_int_equal(out.entries[0].partner_id, 7);
    rule.gc_before_ms = 101; /* nothing older than W can arrive any more */
    assert_int_equal(segd_profile_join(&out, in, 2, &rule), SEGD_OK);
    assert_int_equal(out.n, 0);
    segd_profile_free(&base);
    segd_profile_free(&op);
    segd_profile_free(&out);
}

/* A base that does not decode is kept as it is and counted (issue 9, 19):
 * the merge used to rewrite the user from the operands alone, silently
 * dropping the base's entries, tombstones and erase marker. A corrupt operand
 * is skipped and counted. */
static void test_corrupt_base_kept(void **state)
{
    (void)state;
    segd_policy_t *pol;
    assert_int_equal(segd_policy_new(&pol, 24 * 3600 * 1000LL), SEGD_OK);
    segd_profile_t p;
    segd_profile_init(&p);
    segd_entry_t e = {7, 1000, 3600, 0, 0};
    assert_int_equal(segd_profile_push(&p, &e), SEGD_OK);
    segd_buf_t op = {0}, out = {0};
    assert_int_equal(segd_record_encode(&p, &op), SEGD_OK);
    static const char bad[] = "\x01not a record";
    const char *ops[] = {(const char *)op.data};
    size_t lens[] = {op.len};
    assert_int_equal(segd_merge_values(pol, bad, sizeof(bad) - 1, ops, lens, 1, 1, &out),
                     SEGD_OK);
    assert_int_equal(out.len, sizeof(bad) - 1);
    assert_memory_equal(out.data, bad, out.len);
    assert_int_equal(segd_policy_corrupt_count(pol), 1);
    /* a corrupt operand beside a good base: skipped, counted */
    const char *ops2[] = {bad, (const char *)op.data};
    size_t lens2[] = {sizeof(bad) - 1, op.len};
    assert_int_equal(segd_merge_values(pol, (const char *)op.data, op.len, ops2, lens2, 2, 1,
                                       &out), SEGD_OK);
    segd_profile_t got;
    segd_profile_init(&got);
    assert_int_equal(segd_record_decode(out.data, out.len, &got), SEGD_OK);
    assert_int_equal(got.n, 1);
    assert_int_equal(segd_policy_corrupt_count(pol), 2);
    segd_profile_free(&got);
    segd_profile_free(&p);
    segd_buf_free(&op);
    segd_buf_free(&out);
    segd_policy_destroy(pol);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corrupt_base_kept),
        cmocka_unit_test(test_no_resurrection_under_unmerged_operand),
        cmocka_unit_test(test_partner_marker_keeps_the_winner),
        cmocka_unit_test(test_orders_converge),
        cmocka_unit_test(test_compaction_empties_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
