/* Tests for load/restore.c (issue 11): a store's state restored into an
 * empty store reads the same as the source at several clocks; restored
 * into a store that already holds some of the users it reads as the join of
 * both (the merge path's result); the unit's GC watermark becomes an ingest
 * floor that survives a reopen; retirements arrive before the data; the
 * partition's input offset moves to the unit's only after the data and
 * never backwards; a stopped restore sets no offset. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "store_util.h"

#include "app/app.h"
#include "consumer/apply.h"
#include "core/policy.h"
#include "core/record.h"
#include "load/restore.h"
#include "publisher/snapshot.h"
#include "store/store.h"
#include "store/sst.h"

#define NOW 1800000000000LL
#define DAY_MS 86400000LL
#define USERS 2000

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
    return test_store_open(dir, now_ms);
}

static void make_dir(char *dir, size_t n, const char *what)
{
    snprintf(dir, n, "/tmp/segd-test-restore-%s-XXXXXX", what);
    assert_non_null(mkdtemp(dir));
}

static void remove_dir(const char *dir)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A random operand: live entries, tombstones, expired entries, sometimes an
 * erase marker. */
static void random_profile(segd_profile_t *p)
{
    segd_profile_clear(p);
    int64_t id = (int64_t)(rnd() % 50);
    int n = 1 + (int)(rnd() % 12);
    for (int i = 0; i < n; i++, id += 1 + (int64_t)(rnd() % 40)) {
        segd_entry_t e = {.segment_id = id,
                          .ts_ms = NOW - (int64_t)(rnd() % (20 * DAY_MS)),
                          .flags = (int32_t)(rnd() % 3)};
        uint64_t k = rnd() % 10;
        e.expiry_s = k == 0 ? 0 : (NOW / 1000) + (int64_t)(rnd() % (40 * 86400)) - 5 * 86400;
        assert_int_equal(segd_profile_push(p, &e), SEGD_OK);
    }
    if (rnd() % 25 == 0)
        p->erased_before_ms = NOW - (int64_t)(rnd() % (10 * DAY_MS));
}

static void fill(segd_store_t *s, int users, int ops_per_user, uint64_t seed)
{
    rng = seed;
    segd_applier_t ap;
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    segd_profile_t p;
    segd_profile_init(&p);
    segd_buf_t op = {0};
    char uid[32], err[256];
    for (int k = 0; k < ops_per_user; k++)
        for (int u = 0; u < users; u++) {
            snprintf(uid, sizeof(uid), "user-%05d", u);
            random_profile(&p);
            assert_int_equal(segd_record_encode(&p, &op), SEGD_OK);
            assert_int_equal(segd_applier_add_operand(&ap, uid, strlen(uid), op.data, op.len,
                                                      p.n, NULL, -1, -1, NOW),
                             SEGD_OK);
        }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_profile_free(&p);
    segd_buf_free(&op);
}

typedef struct {
    segd_restore_t *r;
    int added;
} feed_t;

static int feed(void *ctx, const char *user, size_t len, const segd_profile_t *p)
{
    feed_t *f = ctx;
    char err[256];
    if (segd_restore_add(f->r, user, len, p, err, sizeof(err)) != SEGD_OK)
        fail_msg("restore add: %s", err);
    f->added++;
    return 0;
}

/* Another writer's merges, made as the ingest begins: after a load's
 * presence checks, before its files go in (segd run's other partitions
 * while a partition restores). */
typedef struct {
    segd_store_t *store;
    uint64_t seed;
    int users, done;
} meanwhile_t;

static void fill(segd_store_t *s, int users, int ops_per_user, uint64_t seed);

static void write_meanwhile(void *ctx, segd_bulk_phase_t phase, uint64_t done, uint64_t total)
{
    (void)total;
    meanwhile_t *m = ctx;
    if (phase != SEGD_BULK_INGEST || done != 0 || m->done)
        return;
    m->done = 1;
    uint64_t saved = rng;
    fill(m->store, m->users, 1, m->seed);
    rng = saved;
}

/* The exporter's identity epoch a unit carries (DESIGN §10.6). */
#define RESTORED_EPOCH 1800000000123LL

static segd_err_t restore_opts(segd_store_t *src, segd_store_t *dst, int64_t next_offset,
                               int64_t w, const segd_restore_opts_t *o,
                               segd_restore_stats_t *st, char *err, size_t n);

/* Restores everything src holds as one unit of partition 3. */
static segd_err_t restore_from(segd_store_t *src, segd_store_t *dst, int64_t next_offset,
                               int64_t w, volatile sig_atomic_t *stop,
                               segd_restore_stats_t *st, char *err, size_t n)
{
    segd_restore_opts_t o;
    segd_restore_opts_default(&o);
    o.stop = stop;
    return restore_opts(src, dst, next_offset, w, &o, st, err, n);
}

static segd_err_t restore_opts(segd_store_t *src, segd_store_t *dst, int64_t next_offset,
                               int64_t w, const segd_restore_opts_t *opts,
                               segd_restore_stats_t *st, char *err, size_t n)
{
    static const segd_retirement_t ret[] = {{7, NOW - 3 * DAY_MS}};
    segd_restore_unit_t u = {.topic = "segments", .partition = 3, .next_offset = next_offset,
                             .gc_watermark_ms = w, .retirements = ret, .n_retirements = 1,
                             .identity_epoch_ms = RESTORED_EPOCH};
    segd_restore_opts_t o = *opts;
    o.memory_bytes = 256 << 10; /* spilled runs */
    feed_t f = {0};
    segd_err_t e = segd_restore_new(&f.r, dst, &o, err, n);
    if (e)
        return e;
    assert_int_equal(segd_store_scan(src, feed, &f, err, n), SEGD_OK);
    e = segd_restore_finish(f.r, &u, st, err, n);
    segd_restore_destroy(f.r);
    return e;
}

/* Every user's record, encoded, compared one by one. */
typedef struct {
    segd_store_t *other;
    uint64_t users;
} cmp_t;

static int compare_one(void *ctx, const char *user, size_t len, const segd_profile_t *p)
{
    cmp_t *c = ctx;
    segd_profile_t q;
    segd_profile_init(&q);
    char err[256];
    assert_int_equal(segd_store_get(c->other, user, len, &q, err, sizeof(err)), SEGD_OK);
    segd_buf_t a = {0}, b = {0};
    assert_int_equal(segd_record_encode(p, &a), SEGD_OK);
    assert_int_equal(segd_record_encode(&q, &b), SEGD_OK);
    if (a.len != b.len || memcmp(a.data, b.data, a.len))
        fail_msg("user %.*s differs", (int)len, user);
    c->users += p->n > 0;
    segd_buf_free(&a);
    segd_buf_free(&b);
    segd_profile_free(&q);
    return 0;
}

static uint64_t compare_stores(segd_store_t *a, segd_store_t *b)
{
    char err[256];
    cmp_t ab = {b, 0}, ba = {a, 0};
    assert_int_equal(segd_store_scan(a, compare_one, &ab, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_scan(b, compare_one, &ba, err, sizeof(err)), SEGD_OK);
    assert_int_equal(ab.users, ba.users);
    return ab.users;
}

static void test_restore_equals_source(void **state)
{
    (void)state;
    char da[64], db[64], err[256];
    make_dir(da, sizeof(da), "src");
    make_dir(db, sizeof(db), "dst");
    segd_store_t *a = open_store(da, NOW), *b = open_store(db, NOW);
    fill(a, USERS, 3, 1);
    assert_int_equal(segd_store_retire(a, 7, NOW - 3 * DAY_MS, NULL, err, sizeof(err)), 0);
    segd_restore_stats_t st;
    assert_int_equal(restore_from(a, b, 1234, 0, NULL, &st, err, sizeof(err)), SEGD_OK);
    assert_int_equal(st.users, USERS);
    assert_int_equal(st.users_sst, USERS);
    assert_true(st.offset_set);
    int64_t off = 0;
    assert_int_equal(segd_store_offset_get(b, "segments", 3, &off, err, sizeof(err)), SEGD_OK);
    assert_int_equal(off, 1234);
    /* its identity epoch is at least the exporter's: the restored store's
     * membership changes do not lose to the registers caches hold */
    int64_t epoch = 0;
    assert_int_equal(segd_store_counter_get(b, "identity_epoch", &epoch, err, sizeof(err)), 0);
    assert_int_equal(epoch, RESTORED_EPOCH);
    static const int64_t clocks[] = {NOW, NOW + 6 * DAY_MS, NOW + 30 * DAY_MS};
    for (size_t c = 0; c < 3; c++) {
        segd_store_close(a);
        segd_store_close(b);
        a = open_store(da, clocks[c]);
        b = open_store(db, clocks[c]);
        assert_true(compare_stores(a, b) > 0 || c == 2);
    }
    segd_store_close(a);
    segd_store_close(b);
    remove_dir(da);
    remove_dir(db);
}

/* Into a store that holds part of the history: the join of both, as the
 * merge path makes it (store c gets both fills through the merge path). */
static void test_restore_into_present_users(void **state)
{
    (void)state;
    char da[64], db[64], dc[64], err[256];
    make_dir(da, sizeof(da), "src");
    make_dir(db, sizeof(db), "dst");
    make_dir(dc, sizeof(dc), "ref");
    segd_store_t *a = open_store(da, NOW), *b = open_store(db, NOW), *c = open_store(dc, NOW);
    fill(a, USERS, 2, 11);
    fill(b, USERS / 2, 2, 12);
    fill(c, USERS, 2, 11);
    fill(c, USERS / 2, 2, 12);
    assert_int_equal(segd_store_retire(c, 7, NOW - 3 * DAY_MS, NULL, err, sizeof(err)), 0);
    /* the store is further on the partition than the unit: it stays */
    segd_batch_t *bt = NULL;
    assert_int_equal(segd_batch_new(b, &bt), SEGD_OK);
    segd_batch_set_offset(bt, "segments", 3, 5000);
    assert_int_equal(segd_store_write_sync(b, bt, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(bt);
    segd_restore_stats_t st;
    assert_int_equal(restore_from(a, b, 1234, 0, NULL, &st, err, sizeof(err)), SEGD_OK);
    assert_int_equal(st.users_merged, USERS / 2);
    assert_int_equal(st.users_sst, USERS - USERS / 2);
    assert_false(st.offset_set);
    assert_int_equal(st.offset_before, 5000);
    int64_t off = 0;
    assert_int_equal(segd_store_offset_get(b, "segments", 3, &off, err, sizeof(err)), SEGD_OK);
    assert_int_equal(off, 5000);
    assert_true(compare_stores(b, c) > USERS / 2);
    segd_store_close(a);
    segd_store_close(b);
    segd_store_close(c);
    remove_dir(da);
    remove_dir(db);
    remove_dir(dc);
}

/* Beside another writer (shared): merges made between the load's start and
 * its ingest, for users of the unit, are joined, not replaced. Without
 * `shared` the ingested values would hide them (the test's check). */
static void beside_writer(int direct)
{
    char da[64], db[64], dc[64], err[256];
    make_dir(da, sizeof(da), "src");
    make_dir(db, sizeof(db), "dst");
    make_dir(dc, sizeof(dc), "ref");
    segd_store_t *a = open_store(da, NOW), *b = open_store(db, NOW), *c = open_store(dc, NOW);
    fill(a, USERS, 2, 31);
    fill(c, USERS, 2, 31);
    fill(c, USERS / 4, 1, 32);
    assert_int_equal(segd_store_retire(c, 7, NOW - 3 * DAY_MS, NULL, err, sizeof(err)), 0);
    meanwhile_t m = {b, 32, USERS / 4, 0};
    segd_restore_opts_t o;
    segd_restore_opts_default(&o);
    o.shared = 1;
    o.direct = direct;
    o.progress = write_meanwhile;
    o.progress_ctx = &m;
    segd_restore_stats_t st;
    assert_int_equal(restore_opts(a, b, 10, 0, &o, &st, err, sizeof(err)), SEGD_OK);
    assert_true(m.done);
    assert_int_equal(st.users_sst, USERS);
    assert_int_equal(compare_stores(b, c) > 0, 1);
    /* and after full compactions fold the ingested operands in (and move
     * W to its target in both) */
    assert_int_equal(segd_store_compact(b, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_compact(c, err, sizeof(err)), SEGD_OK);
    assert_true(segd_store_gc_watermark(b) > 0);
    assert_true(compare_stores(b, c) > 0);
    segd_store_close(a);
    segd_store_close(b);
    segd_store_close(c);
    remove_dir(da);
    remove_dir(db);
    remove_dir(dc);
}

static void test_restore_beside_writer(void **state)
{
    (void)state;
    beside_writer(0);
}

/* direct: the unit's users in key order straight into SST files (no sort,
 * no join): the same store */
static void test_restore_direct_beside_writer(void **state)
{
    (void)state;
    beside_writer(1);
}

/* direct and a user out of key order: SEGD_ERR_UNSORTED, nothing ingested
 * (the restorer then loads the unit again), no offset */
static void test_restore_direct_unsorted(void **state)
{
    (void)state;
    char db[64], err[256];
    make_dir(db, sizeof(db), "dst");
    segd_store_t *b = open_store(db, NOW);
    segd_restore_opts_t o;
    segd_restore_opts_default(&o);
    o.shared = 1;
    o.direct = 1;
    segd_restore_t *r = NULL;
    assert_int_equal(segd_restore_new(&r, b, &o, err, sizeof(err)), SEGD_OK);
    segd_profile_t p;
    segd_profile_init(&p);
    segd_entry_t e = {.segment_id = 1, .ts_ms = NOW - 1000, .expiry_s = NOW / 1000 + 86400};
    assert_int_equal(segd_profile_push(&p, &e), SEGD_OK);
    assert_int_equal(segd_restore_add(r, "b", 1, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_restore_add(r, "a", 1, &p, err, sizeof(err)), SEGD_ERR_UNSORTED);
    assert_int_equal(segd_restore_add(r, "b", 1, &p, err, sizeof(err)), SEGD_ERR_UNSORTED);
    segd_restore_destroy(r);
    segd_profile_t q;
    segd_profile_init(&q);
    assert_int_equal(segd_store_get(b, "b", 1, &q, err, sizeof(err)), SEGD_OK);
    assert_int_equal(q.n, 0);
    int64_t off;
    assert_int_equal(segd_store_offset_get(b, "segments", 3, &off, err, sizeof(err)),
                     SEGD_ERR_NOTFOUND);
    segd_profile_free(&p);
    segd_profile_free(&q);
    segd_store_close(b);
    remove_dir(db);
}

/* A restore whose partition was revoked (cancel set) after its last record
 * writes neither its data nor its offset: the partition's sweep may have
 * begun (found by review: the offset of a cancelled load was written over
 * a sweep's mark). */
static void test_restore_cancelled_writes_nothing(void **state)
{
    (void)state;
    char da[64], db[64], err[256];
    make_dir(da, sizeof(da), "src");
    make_dir(db, sizeof(db), "dst");
    segd_store_t *a = open_store(da, NOW), *b = open_store(db, NOW);
    fill(a, USERS, 2, 41);
    _Atomic int cancel = 1;
    segd_restore_opts_t o;
    segd_restore_opts_default(&o);
    o.shared = 1;
    o.direct = 1;
    o.cancel = &cancel;
    segd_restore_stats_t st;
    assert_int_equal(restore_opts(a, b, 77, 0, &o, &st, err, sizeof(err)), SEGD_ERR_ABORTED);
    int64_t off;
    assert_int_equal(segd_store_offset_get(b, "segments", 3, &off, err, sizeof(err)),
                     SEGD_ERR_NOTFOUND);
    int empty = 0;
    assert_int_equal(segd_store_profiles_empty(b, &empty, err, sizeof(err)), SEGD_OK);
    assert_true(empty);
    segd_store_close(a);
    segd_store_close(b);
    remove_dir(da);
    remove_dir(db);
}

typedef struct revoked_restore {
    segd_store_t *src, *dst;
    segd_restore_opts_t o;
    segd_err_t rc;
    _Atomic int done;
    char err[256];
} revoked_restore_t;

static void *restore_thread(void *arg)
{
    revoked_restore_t *t = arg;
    segd_restore_stats_t st;
    t->rc = restore_opts(t->src, t->dst, 77, 0, &t->o, &st, t->err, sizeof(t->err));
    t->done = 1;
    return NULL;
}

/* A revoke (cancel set under the restorer's lock) that comes while finish
 * is on its last step writes no offset: finish checks cancel and writes the
 * offset under that lock. It checked, then wrote without it, so a revoke
 * in between left an offset for a partition owned elsewhere. The test
 * holds the lock as a revoke would while the restore runs, then cancels. */
static void test_revoke_during_finish_writes_no_offset(void **state)
{
    (void)state;
    char da[64], db[64], err[256];
    make_dir(da, sizeof(da), "src");
    make_dir(db, sizeof(db), "dst");
    revoked_restore_t t = {.src = open_store(da, NOW)};
    t.dst = open_store(db, NOW);
    fill(t.src, USERS, 2, 43);
    _Atomic int cancel = 0;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    segd_restore_opts_default(&t.o);
    t.o.shared = 1;
    t.o.direct = 1;
    t.o.cancel = &cancel;
    t.o.cancel_lock = &lock;
    pthread_mutex_lock(&lock); /* the revoke path has begun */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, restore_thread, &t), 0);
    /* long enough for the restore to reach its offset; with the fix it
     * waits there for the lock instead */
    for (int i = 0; i < 100 && !t.done; i++)
        usleep(50 * 1000);
    cancel = 1;
    pthread_mutex_unlock(&lock);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(t.rc, SEGD_ERR_ABORTED);
    int64_t off;
    assert_int_equal(segd_store_offset_get(t.dst, "segments", 3, &off, err, sizeof(err)),
                     SEGD_ERR_NOTFOUND);
    segd_store_close(t.src);
    segd_store_close(t.dst);
    remove_dir(da);
    remove_dir(db);
}

/* The unit's W is the floor of ITS partition here, for good (not of the
 * store's other partitions, whose history must stay acceptable; nor part of
 * the store's own floor, so W's start phase still begins); a unit exported
 * from the restored store carries it as its W; a stopped restore leaves no
 * offset (the next one repeats). */
static int64_t floor_of(segd_store_t *s, int32_t partition)
{
    return segd_store_import_floor(s, "segments", partition);
}

static int64_t exported_w(segd_store_t *s, const char *dir)
{
    char dest[128], err[512];
    snprintf(dest, sizeof(dest), "%s/units", dir);
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    o.topic = "segments";
    o.partition_count = 8;
    o.threads = 1;
    segd_manifest_t m;
    if (segd_snapshot_export(s, dest, &o, &m, NULL, err, sizeof(err)) != SEGD_OK)
        fail_msg("export: %s", err);
    int64_t w = m.gc_watermark_ms;
    assert_int_equal(m.units, 1);
    segd_manifest_free(&m);
    return w;
}

static void test_floor_and_stop(void **state)
{
    (void)state;
    char da[64], db[64], err[256];
    make_dir(da, sizeof(da), "src");
    make_dir(db, sizeof(db), "dst");
    segd_store_t *a = open_store(da, NOW), *b = open_store(db, NOW);
    fill(a, 200, 1, 21);
    int64_t w = NOW - 5 * DAY_MS;
    volatile sig_atomic_t stop = 1;
    assert_int_equal(restore_from(a, b, 77, w, &stop, NULL, err, sizeof(err)),
                     SEGD_ERR_ABORTED);
    int64_t off = 0;
    assert_int_equal(segd_store_offset_get(b, "segments", 3, &off, err, sizeof(err)),
                     SEGD_ERR_NOTFOUND);
    /* the floor was taken before the data, and holds across a reopen */
    segd_store_close(b);
    b = open_store(db, NOW);
    assert_int_equal(floor_of(b, 3), w);
    assert_int_equal(floor_of(b, 4), 0);
    assert_int_equal(segd_policy_import_floor(segd_store_policy(b)), w); /* backfill's */
    /* the store's own floor is untouched: history of other partitions goes
     * in, and W's start phase can begin once caught up */
    assert_int_equal(segd_policy_ts_floor(segd_store_policy(b)), 0);
    assert_int_equal(segd_policy_check_ts(segd_store_policy(b), w - DAY_MS, -1), SEGD_TS_OK);
    /* a lower W later does not lower it */
    stop = 0;
    assert_int_equal(restore_from(a, b, 77, w - DAY_MS, &stop, NULL, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(floor_of(b, 3), w);
    assert_int_equal(segd_store_offset_get(b, "segments", 3, &off, err, sizeof(err)), SEGD_OK);
    assert_int_equal(off, 77);
    assert_int_equal(segd_store_gc_watermark(b), 0); /* a floor, not a watermark */
    /* the unit this store exports for partition 3 says the data lacks what
     * was dropped below w, though the store's own W is 0 */
    assert_int_equal(exported_w(b, db), w);
    assert_int_equal(segd_store_gc_advance(b, SEGD_GC_CAUGHT_UP, err, sizeof(err)), SEGD_OK);
    assert_true(segd_policy_ts_floor(segd_store_policy(b)) > 0); /* the start phase began */
    segd_store_close(a);
    segd_store_close(b);
    remove_dir(da);
    remove_dir(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restore_equals_source),
        cmocka_unit_test(test_restore_into_present_users),
        cmocka_unit_test(test_restore_beside_writer),
        cmocka_unit_test(test_restore_direct_beside_writer),
        cmocka_unit_test(test_restore_direct_unsorted),
        cmocka_unit_test(test_restore_cancelled_writes_nothing),
        cmocka_unit_test(test_revoke_during_finish_writes_no_offset),
        cmocka_unit_test(test_floor_and_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
