/* The rebuild swap (app/rebuild.h, DESIGN 3.2): what the live store knows
 * and its input topics do not (offline erasures and retirements, restored
 * units' import floors, the misrouting counters) survives the swap into the
 * rebuilt store; and the swap refuses, changing nothing, while another
 * process holds the live store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/rebuild.h"
#include "cache/edge.h"
#include "wire/change.h"
#include "wire/outbox.h"
#include "base/args.h"
#include "cli/cli.h"
#include "consumer/pipeline.h"
#include "core/partition.h"
#include "core/record.h"
#include "store_util.h"

#define T0 1800000000000LL

static void path_in(const test_dir_t *f, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", f->dir, name);
}

static void swap_opts(segd_store_opts_t *o, const char *db)
{
    segd_app_store_opts(o);
    o->path = db;
    o->now_ms = T0;
    o->block_cache_mb = 8;
    o->min_free_mb = 0;
}

/* Merges one record (an erase marker, an entry or both) into user. */
static void put_record(segd_store_t *s, const char *user, int64_t erased_before_ms,
                       int64_t entry_ts_ms)
{
    segd_profile_t p;
    segd_buf_t buf = {0};
    segd_batch_t *b = NULL;
    char err[256];
    segd_profile_init(&p);
    p.erased_before_ms = erased_before_ms;
    if (entry_ts_ms) {
        segd_entry_t e = {.segment_id = 3, .ts_ms = entry_ts_ms,
                          .expiry_s = T0 / 1000 + 86400};
        assert_int_equal(segd_profile_push(&p, &e), SEGD_OK);
    }
    assert_int_equal(segd_record_encode(&p, &buf), SEGD_OK);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    segd_batch_merge(b, user, strlen(user), buf.data, buf.len);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_buf_free(&buf);
    segd_profile_free(&p);
}

static void set_counter(segd_store_t *s, const char *name, int64_t v)
{
    segd_batch_t *b = NULL;
    char err[256];
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    segd_batch_set_counter(b, name, v);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
}

static int64_t counter(segd_store_t *s, const char *name)
{
    int64_t v = -1;
    char err[256];
    assert_int_equal(segd_store_counter_get(s, name, &v, err, sizeof(err)), SEGD_OK);
    return v;
}

static int find_retired(void *ctx, int64_t segment_id, int64_t before_ms)
{
    if (segment_id == 7)
        *(int64_t *)ctx = before_ms;
    return 0;
}

/* Runs first: the child opens RocksDB, so the parent must not have started
 * RocksDB's threads before the fork. */
static void test_swap_refused_while_held(void **state)
{
    test_dir_t *f = *state;
    char db[256], done[256], cur[300], err[512];
    int up[2], down[2];
    path_in(f, "db", db, sizeof(db));
    path_in(f, "db.rebuilt", done, sizeof(done));
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* holds the live store open as segd run does */
        char c = 0;
        close(up[0]);
        close(down[1]); /* EOF, and exit, once the parent is gone */
        alarm(120);
        segd_store_t *s = test_store_open(db, T0);
        if (write(up[1], "x", 1) != 1 || read(down[0], &c, 1) < 0)
            _exit(2);
        segd_store_close(s);
        _exit(0);
    }
    char c;
    assert_int_equal(read(up[0], &c, 1), 1);
    segd_store_close(test_store_open(done, T0));
    segd_store_opts_t o;
    swap_opts(&o, db);
    int swapped = 1;
    assert_int_equal(segd_rebuild_swap(&o, SEGD_PARTITIONER_MURMUR2, NULL, &swapped, err, sizeof(err)), SEGD_ERR_BUSY);
    assert_int_equal(swapped, 0);
    assert_non_null(strstr(err, "in use by another process"));
    struct stat st;
    snprintf(cur, sizeof(cur), "%s/CURRENT", db);
    assert_int_equal(stat(cur, &st), 0);   /* the live store stays where it is */
    assert_int_equal(stat(done, &st), 0);  /* the rebuilt one waits */
    assert_int_equal(write(down[1], "x", 1), 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* once the holder is gone the swap goes through */
    assert_int_equal(segd_rebuild_swap(&o, SEGD_PARTITIONER_MURMUR2, NULL, &swapped, err, sizeof(err)), SEGD_OK);
    assert_int_equal(swapped, 1);
    assert_int_not_equal(stat(done, &st), 0);
    assert_int_equal(stat(cur, &st), 0);
    close(up[0]), close(up[1]), close(down[0]), close(down[1]);
}

static void test_swap_keeps_live_markers(void **state)
{
    test_dir_t *f = *state;
    char db[256], done[256], err[512];
    path_in(f, "db", db, sizeof(db));
    path_in(f, "db.rebuilt", done, sizeof(done));
    /* the live store: erased, retired and restored offline */
    segd_store_t *live = test_store_open(db, T0);
    put_record(live, "u1", T0 - 1000, 0);
    put_record(live, "u2", T0 - 3000, T0 - 2000); /* erased, then a later entry */
    assert_int_equal(segd_store_retire(live, 7, T0 - 500, NULL, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_raise_import_floor(live, "ev", 1, T0 - 2000, err, sizeof(err)),
                     SEGD_OK);
    set_counter(live, SEGD_COUNTER_MISROUTED, 5);
    set_counter(live, SEGD_COUNTER_UNCHECKED, 3);
    segd_store_close(live);
    /* the rebuilt store: the topic's events, none of that */
    segd_store_t *re = test_store_open(done, T0);
    put_record(re, "u1", 0, T0 - 5000);
    put_record(re, "u2", 0, T0 - 2000);
    put_record(re, "u3", 0, T0 - 5000);
    set_counter(re, SEGD_COUNTER_MISROUTED, 9);
    segd_store_close(re);

    segd_store_opts_t o;
    swap_opts(&o, db);
    int swapped = 0;
    assert_int_equal(segd_rebuild_swap(&o, SEGD_PARTITIONER_MURMUR2, NULL, &swapped, err, sizeof(err)), SEGD_OK);
    assert_int_equal(swapped, 1);

    segd_store_t *s = test_store_open(db, T0);
    segd_profile_t p;
    segd_profile_init(&p);
    assert_int_equal(segd_store_get(s, "u1", 2, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.erased_before_ms, T0 - 1000);
    const segd_prune_t rule = {.now_ms = T0};
    for (size_t i = 0; i < p.n; i++) /* the entry the topic brought back stays erased */
        assert_false(segd_entry_live(&p.entries[i], p.erased_before_ms, &rule));
    assert_int_equal(segd_store_get(s, "u2", 2, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.erased_before_ms, T0 - 3000);
    assert_int_equal(p.n, 1); /* the entry after the erasure lives */
    assert_int_equal(segd_store_get(s, "u3", 2, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.erased_before_ms, 0);
    assert_int_equal(p.n, 1);
    segd_profile_free(&p);
    int64_t retired = 0;
    segd_store_view_t *v = NULL;
    assert_int_equal(segd_store_view_open(s, &v, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_view_retirements(v, find_retired, &retired, err, sizeof(err)),
                     SEGD_OK);
    segd_store_view_close(v);
    assert_int_equal(retired, T0 - 500);
    assert_int_equal(segd_store_import_floor(s, "ev", 1), T0 - 2000);
    assert_int_equal(counter(s, SEGD_COUNTER_MISROUTED), 9); /* the larger total */
    assert_int_equal(counter(s, SEGD_COUNTER_UNCHECKED), 3);
    segd_store_close(s);
}

#define DAY_MS (86400LL * 1000)

/* Issue 29 finding 4: an offline erasure whose time W has passed. The live
 * store's compactions keep the marker (nothing older than W can come back
 * into that store, but the topic's older events come back into a rebuilt
 * one), so the swap carries it and the user stays erased. */
static void test_erasure_below_w_survives_swap(void **state)
{
    test_dir_t *f = *state;
    char db[256], done[256], err[512];
    path_in(f, "db", db, sizeof(db));
    path_in(f, "db.rebuilt", done, sizeof(done));
    segd_store_t *live = test_store_open(db, T0);
    put_record(live, "u1", 0, T0 - 5000); /* the topic's event */
    put_record(live, "u1", T0 - 1000, 0); /* segd erase --db u1 */
    put_record(live, "u2", T0 - 1000, 0); /* erased with nothing stored */
    segd_store_close(live);
    /* a month on, compacted: W (now - horizon - grace) far past the erasure */
    const int64_t later = T0 + 30 * DAY_MS;
    live = test_store_open(db, later);
    assert_int_equal(segd_store_compact(live, err, sizeof(err)), SEGD_OK);
    assert_true(segd_store_gc_watermark(live) > T0);
    segd_profile_t p;
    segd_profile_init(&p);
    assert_int_equal(segd_store_get(live, "u2", 2, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.erased_before_ms, T0 - 1000); /* the marker-only record stays */
    segd_store_close(live);
    /* the rebuild replays the topic from its start: u1's event is back */
    segd_store_t *re = test_store_open(done, T0);
    put_record(re, "u1", 0, T0 - 5000);
    put_record(re, "u2", 0, T0 - 4000);
    segd_store_close(re);

    segd_store_opts_t o;
    swap_opts(&o, db);
    o.now_ms = later;
    int swapped = 0;
    assert_int_equal(segd_rebuild_swap(&o, SEGD_PARTITIONER_MURMUR2, NULL, &swapped, err, sizeof(err)), SEGD_OK);
    assert_int_equal(swapped, 1);
    segd_store_t *s = test_store_open(db, T0);
    const segd_prune_t rule = {.now_ms = T0};
    const char *users[] = {"u1", "u2"};
    for (size_t u = 0; u < 2; u++) {
        assert_int_equal(segd_store_get(s, users[u], 2, &p, err, sizeof(err)), SEGD_OK);
        assert_int_equal(p.erased_before_ms, T0 - 1000);
        for (size_t i = 0; i < p.n; i++)
            assert_false(segd_entry_live(&p.entries[i], p.erased_before_ms, &rule));
    }
    segd_profile_free(&p);
    segd_store_close(s);
}

/* A cache following the change stream, as the live store's deltas left it. */
static int cache_put(void *ctx, const char *user, size_t len, const segd_profile_t *p)
{
    assert_int_equal(segd_edge_put(ctx, user, len, p), SEGD_OK);
    return 0;
}

/* The swap's replacing deltas, through the wire, into the cache. */
static int cache_apply(void *ctx, uint64_t seq, const uint8_t *value, size_t vlen)
{
    segd_outbox_entry_t e;
    segd_change_t c, back;
    segd_buf_t wire = {0};
    (void)seq;
    segd_outbox_entry_init(&e);
    segd_change_init(&c);
    segd_change_init(&back);
    assert_int_equal(segd_outbox_decode(value, vlen, &e), SEGD_OK);
    assert_int_equal(e.kind, SEGD_OUTBOX_REPLACE);
    assert_int_equal(e.n_items, 3); /* gone, late, new: not "same" */
    for (size_t i = 0; i < e.n_items; i++) {
        segd_change_reset(&c);
        c.user_id = e.items[i].user;
        c.user_id_len = e.items[i].user_len;
        assert_int_equal(segd_record_decode(e.items[i].operand, e.items[i].operand_len,
                                            &c.profile), SEGD_OK);
        assert_int_equal(segd_change_mark_replace(&c), SEGD_OK);
        wire.len = 0;
        assert_int_equal(segd_change_encode(&c, &wire), SEGD_OK);
        assert_int_equal(segd_change_decode(wire.data, wire.len, &back), SEGD_OK);
        assert_true(segd_change_is_replace(&back));
        assert_int_equal(segd_edge_apply(ctx, &back), SEGD_OK);
    }
    segd_buf_free(&wire);
    segd_change_free(&c);
    segd_change_free(&back);
    segd_outbox_entry_free(&e);
    return 0;
}

static int change_position(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    if (!strcmp(topic, "changes") && partition == 0)
        *(int64_t *)ctx = next;
    return 0;
}

typedef struct cmp_ctx {
    segd_edge_t *edge;
    int users;
} cmp_ctx_t;

/* Every user of the store as the cache holds it. */
static int cache_equals(void *ctx, const char *user, size_t len, const segd_profile_t *p)
{
    cmp_ctx_t *c = ctx;
    segd_profile_t got;
    segd_profile_init(&got);
    assert_int_equal(segd_edge_get_profile(c->edge, user, len, &got), SEGD_OK);
    assert_int_equal(got.erased_before_ms, p->erased_before_ms);
    assert_int_equal(got.n, p->n);
    for (size_t i = 0; i < p->n; i++) {
        assert_int_equal(got.entries[i].segment_id, p->entries[i].segment_id);
        assert_int_equal(got.entries[i].ts_ms, p->entries[i].ts_ms);
        assert_int_equal(got.entries[i].expiry_s, p->entries[i].expiry_s);
    }
    segd_profile_free(&got);
    c->users++;
    return 0;
}

/* Issue 29 finding 5: a running cache equals the store after a swap. The
 * cache holds the live store's state; the rebuilt store lost a backfilled
 * user ("gone"), took an event the live store refused ("late"), has a user
 * the live store never saw ("new") and agrees on "same". The swap leaves
 * replacing deltas in the swapped-in store's outbox for exactly the users
 * that differ; applied, the cache equals the store, "gone" removed. */
static void test_swap_brings_caches_along(void **state)
{
    test_dir_t *f = *state;
    char db[256], done[256], err[512];
    path_in(f, "db", db, sizeof(db));
    path_in(f, "db.rebuilt", done, sizeof(done));
    segd_store_t *live = test_store_open(db, T0);
    put_record(live, "same", 0, T0 - 5000);
    put_record(live, "gone", 0, T0 - 4000);
    put_record(live, "late", 0, T0 - 3000);
    segd_batch_t *b = NULL;
    assert_int_equal(segd_batch_new(live, &b), SEGD_OK);
    segd_batch_set_change_position(b, "changes", 0, 42); /* it publishes a change stream */
    assert_int_equal(segd_store_write(live, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_edge_opts_t eo;
    segd_edge_opts_default(&eo);
    eo.now_ms = T0;
    segd_edge_t *edge = NULL;
    assert_int_equal(segd_edge_new(&edge, &eo), SEGD_OK);
    assert_int_equal(segd_store_scan(live, cache_put, edge, err, sizeof(err)), SEGD_OK);
    segd_store_close(live);
    segd_store_t *re = test_store_open(done, T0);
    put_record(re, "same", 0, T0 - 5000);
    put_record(re, "late", 0, T0 - 3000);
    put_record(re, "late", 0, T0 - 2000); /* refused as too late by the live store */
    put_record(re, "new", 0, T0 - 1000);
    segd_store_close(re);

    segd_store_opts_t o;
    swap_opts(&o, db);
    int swapped = 0;
    assert_int_equal(segd_rebuild_swap(&o, SEGD_PARTITIONER_MURMUR2, NULL, &swapped, err, sizeof(err)), SEGD_OK);
    assert_int_equal(swapped, 1);
    segd_store_t *s = test_store_open(db, T0);
    assert_int_equal(segd_store_outbox_scan(s, 0, 1000, cache_apply, edge, err, sizeof(err)),
                     SEGD_OK);
    cmp_ctx_t cmp = {edge, 0};
    assert_int_equal(segd_store_scan(s, cache_equals, &cmp, err, sizeof(err)), SEGD_OK);
    assert_int_equal(cmp.users, 3);
    segd_edge_stats_t st;
    segd_edge_get_stats(edge, &st);
    assert_int_equal(st.users, 3); /* "gone" is gone from the cache too */
    assert_int_equal(segd_store_outbox_depth(s), 1); /* one entry: gone, late, new */
    int64_t pos = 0; /* units of the swapped-in store tail from the live store's positions */
    segd_store_view_t *v = NULL;
    assert_int_equal(segd_store_view_open(s, &v, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_view_positions(v, "changes", change_position, &pos, err,
                                               sizeof(err)), SEGD_OK);
    segd_store_view_close(v);
    assert_int_equal(pos, 42);
    segd_store_close(s);
    segd_edge_destroy(edge);
}

/* The first of u0, u1, ... whose partition among 4 is (mine) or is not
 * (!mine) partition 1. */
static void user_in(int mine, char *out, size_t size)
{
    for (int i = 0;; i++) {
        snprintf(out, size, "u%d", i);
        if ((segd_partition_of(SEGD_PARTITIONER_MURMUR2, out, strlen(out), 4) == 1) == mine)
            return;
    }
}

static int count_kind(void *ctx, uint64_t seq, const uint8_t *value, size_t vlen)
{
    int *kinds = ctx;
    segd_outbox_entry_t e;
    (void)seq;
    segd_outbox_entry_init(&e);
    assert_int_equal(segd_outbox_decode(value, vlen, &e), SEGD_OK);
    kinds[e.kind]++;
    if (e.kind == SEGD_OUTBOX_REPLACE)
        kinds[4] += (int)e.n_items;
    segd_outbox_entry_free(&e);
    return 0;
}

/* In a fleet each member's store holds the offsets of the partitions it
 * owns, and a rebuild replays every partition. A replacing delta for a user
 * of another member's partition would overwrite, in that partition's
 * caches, what its owner published since (review: and bring back what it
 * erased offline). Only the live store's users get one; and its unpublished
 * retirement goes on to the caches, carried as it is. */
static void test_swap_replaces_only_owned_users(void **state)
{
    test_dir_t *f = *state;
    char db[256], done[256], err[512], mine[16], theirs[16];
    user_in(1, mine, sizeof(mine));
    user_in(0, theirs, sizeof(theirs));
    path_in(f, "db", db, sizeof(db));
    path_in(f, "db.rebuilt", done, sizeof(done));
    segd_store_t *live = test_store_open(db, T0);
    segd_batch_t *b = NULL;
    segd_buf_t retire = {0};
    segd_retirement_t r = {.segment_id = 9, .retired_before_ms = T0 - 100};
    assert_int_equal(segd_outbox_retire_value(&r, 1, T0, &retire), SEGD_OK);
    assert_int_equal(segd_batch_new(live, &b), SEGD_OK);
    segd_batch_set_change_position(b, "changes", 0, 42);
    segd_batch_set_partition_count(b, "in", 4);
    segd_batch_set_offset(b, "in", 1, 100); /* this member owns partition 1 only */
    segd_batch_outbox_append(b, retire.data, retire.len);
    /* an unpublished delta of a user whose partition left this member (its
     * sweep ran): nobody else will read that event again, so it is carried */
    segd_outbox_builder_t ob;
    segd_outbox_builder_init(&ob);
    const uint8_t operand[] = {0};
    assert_int_equal(segd_outbox_add(&ob, theirs, strlen(theirs), operand, 0, "in", 2, 7,
                                     T0 - 500), SEGD_OK);
    assert_int_equal(segd_outbox_finish(&ob, T0, &retire), SEGD_OK);
    segd_batch_outbox_append(b, retire.data, retire.len);
    segd_outbox_builder_free(&ob);
    assert_int_equal(segd_store_write(live, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_buf_free(&retire);
    segd_store_close(live);
    segd_store_t *re = test_store_open(done, T0);
    put_record(re, mine, 0, T0 - 1000);
    put_record(re, theirs, 0, T0 - 1000);
    segd_store_close(re);
    segd_store_opts_t o;
    swap_opts(&o, db);
    int swapped = 0;
    assert_int_equal(segd_rebuild_swap(&o, SEGD_PARTITIONER_MURMUR2, NULL, &swapped, err,
                                       sizeof(err)), SEGD_OK);
    assert_int_equal(swapped, 1);
    segd_store_t *s = test_store_open(db, T0);
    int kinds[5] = {0};
    assert_int_equal(segd_store_outbox_scan(s, 0, 1000, count_kind, kinds, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(kinds[SEGD_OUTBOX_REPLACE], 1);
    assert_int_equal(kinds[4], 1); /* mine, not theirs */
    assert_int_equal(kinds[SEGD_OUTBOX_RETIRE], 1);
    assert_int_equal(kinds[SEGD_OUTBOX_DATA], 1); /* theirs' delta, carried */
    segd_store_close(s);
}

/* The live store DB (user "old") and a rebuilt store beside it (user
 * "new"), as segd rebuild leaves them. */
static void make_stores(const char *db, const char *done)
{
    segd_store_t *live = test_store_open(db, T0);
    put_record(live, "old", 0, T0 - 5000);
    segd_store_close(live);
    segd_store_t *re = test_store_open(done, T0);
    put_record(re, "new", 0, T0 - 5000);
    segd_store_close(re);
}

/* DB holds the rebuilt store's data, DB.rebuilt is gone and exactly one
 * DB.replaced-* exists: one swap happened. */
static void assert_swapped_once(const test_dir_t *f, const char *db, const char *done)
{
    char err[256], cmd[512];
    struct stat st;
    assert_int_not_equal(stat(done, &st), 0); /* not made again, empty */
    segd_store_t *s = test_store_open(db, T0);
    segd_profile_t p;
    segd_profile_init(&p);
    assert_int_equal(segd_store_get(s, "new", 3, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.n, 1);
    assert_int_equal(segd_store_get(s, "old", 3, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.n, 0);
    segd_profile_free(&p);
    segd_store_close(s);
    snprintf(cmd, sizeof(cmd), "test $(ls -d %s/db.replaced-* | wc -l) -eq 1", f->dir);
    assert_int_equal(system(cmd), 0);
}

/* Two segd run starts at once both see DB.rebuilt before either takes the
 * lock. The later one, run here after the first swapped, decides again
 * under the lock: it swaps nothing and reports no error. (It used to open
 * the missing DB.rebuilt with create_if_missing and swap that empty store
 * in for the rebuilt one.) */
static void test_second_start_swaps_nothing(void **state)
{
    test_dir_t *f = *state;
    char db[256], done[256], err[512];
    path_in(f, "db", db, sizeof(db));
    path_in(f, "db.rebuilt", done, sizeof(done));
    make_stores(db, done);
    segd_store_opts_t o;
    swap_opts(&o, db);
    int swapped = 0;
    assert_int_equal(segd_rebuild_swap(&o, SEGD_PARTITIONER_MURMUR2, NULL, &swapped, err, sizeof(err)), SEGD_OK);
    assert_int_equal(swapped, 1);
    swapped = 1;
    segd_err_t e = segd_rebuild_swap_locked(&o, SEGD_PARTITIONER_MURMUR2, NULL, &swapped, err, sizeof(err));
    if (e != SEGD_OK)
        fail_msg("second start: %s", err);
    assert_int_equal(swapped, 0);
    assert_swapped_once(f, db, done);
}

typedef struct swap_start {
    const segd_store_opts_t *o;
    int swapped;
    segd_err_t err;
    char errstr[512];
} swap_start_t;

static void *start_swap(void *arg)
{
    swap_start_t *w = arg;
    w->err = segd_rebuild_swap(w->o, SEGD_PARTITIONER_MURMUR2, NULL, &w->swapped, w->errstr, sizeof(w->errstr));
    return NULL;
}

/* The same with two starts on two threads: whichever way they interleave,
 * one swaps, the other swaps nothing (or is refused while the first holds
 * the lock), and DB keeps the rebuilt store's data. */
static void test_two_starts_at_once(void **state)
{
    test_dir_t *f = *state;
    char db[256], done[256];
    path_in(f, "db", db, sizeof(db));
    path_in(f, "db.rebuilt", done, sizeof(done));
    make_stores(db, done);
    segd_store_opts_t o;
    swap_opts(&o, db);
    swap_start_t w[2] = {{.o = &o}, {.o = &o}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, start_swap, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(w[0].swapped + w[1].swapped, 1);
    for (int i = 0; i < 2; i++)
        if (w[i].err != SEGD_OK && !(w[i].err == SEGD_ERR_BUSY && !w[i].swapped))
            fail_msg("start %d: %s", i, w[i].errstr);
    assert_swapped_once(f, db, done);
}

/* A live store with restored units (import floors) holds data no topic
 * does: segd rebuild refuses before it touches a broker or writes a store. */
static void test_rebuild_refuses_restored(void **state)
{
    test_dir_t *f = *state;
    char db[256], tmp[300], err[256];
    path_in(f, "db", db, sizeof(db));
    segd_store_t *s = test_store_open(db, T0);
    assert_int_equal(segd_store_raise_import_floor(s, "ev", 0, T0 - 1000, err, sizeof(err)),
                     SEGD_OK);
    segd_store_close(s);
    char *argv[] = {"rebuild", "--brokers", "127.0.0.1:1", "--topic", "ev", "--db", db, NULL};
    assert_int_equal(segd_cmd_rebuild(7, argv), SEGD_EXIT_REFUSED);
    struct stat st;
    snprintf(tmp, sizeof(tmp), "%s.rebuild.tmp", db);
    assert_int_not_equal(stat(tmp, &st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_swap_refused_while_held, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_swap_keeps_live_markers, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_erasure_below_w_survives_swap, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_swap_brings_caches_along, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_swap_replaces_only_owned_users, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_refuses_restored, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_second_start_swaps_nothing, test_dir_setup,
                                        test_dir_teardown),
        cmocka_unit_test_setup_teardown(test_two_starts_at_once, test_dir_setup,
                                        test_dir_teardown),
    };
    if (getenv("TEST_FILTER")) /* e.g. "test_swap*" */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
