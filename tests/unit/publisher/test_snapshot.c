/* Tests for publisher/snapshot.c, publisher/snapshot_plan.c and the unit
 * half of snapread/ and wire/manifest.c: units by stored offsets
 * and by buckets, every user in exactly the unit of its partition
 * (core/partition.h against the manifests), what each unit manifest
 * records, a unit that cannot be written failing alone, the fold of unit
 * manifests (the minimum-position rule), a fleet of two instances whose
 * units make one snapshot, a cache of units with different W judging each
 * user by its own unit's W (cache/edge_load.c), and the planning rules. */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/app.h"
#include "base/buf.h"
#include "cache/edge.h"
#include "cache/edge_load.h"
#include "snapread/snapshot.h"
#include "core/partition.h"
#include "core/record.h"
#include "publisher/snapshot.h"
#include "publisher/snapshot_plan.h"
#include "store/store.h"

#define NOW_MS 1800000000000LL
#define USERS 500
#define HOUR_MS 3600000LL

typedef struct fixture {
    char dir[64], snap[128];
    segd_store_t *s;
} fixture_t;

static void user_id(char *out, size_t cap, int i) { snprintf(out, cap, "user-%d", i); }

/* USERS users of one entry each; input offsets of "in" partitions 0, 2, 5;
 * change positions of segments.changes partitions 0 and 3. */
static void fill(segd_store_t *s)
{
    segd_profile_t p;
    segd_buf_t buf = {0};
    segd_batch_t *b;
    char err[256], user[32];
    segd_profile_init(&p);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    for (int i = 0; i < USERS; i++) {
        segd_profile_clear(&p);
        segd_entry_t e = {.segment_id = i, .ts_ms = NOW_MS - 1000,
                          .expiry_s = NOW_MS / 1000 + 86400};
        assert_int_equal(segd_profile_push(&p, &e), SEGD_OK);
        buf.len = 0;
        assert_int_equal(segd_record_encode(&p, &buf), SEGD_OK);
        user_id(user, sizeof(user), i);
        segd_batch_merge(b, user, strlen(user), buf.data, buf.len);
    }
    segd_batch_set_offset(b, "in", 0, 11);
    segd_batch_set_offset(b, "in", 2, 22);
    segd_batch_set_offset(b, "in", 5, 55);
    segd_batch_set_change_position(b, "segments.changes", 0, 100);
    segd_batch_set_change_position(b, "segments.changes", 3, 7);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_buf_free(&buf);
    segd_profile_free(&p);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/segd-test-snapshot-XXXXXX");
    if (!f || !mkdtemp(f->dir))
        return -1;
    snprintf(f->snap, sizeof(f->snap), "%s/snap", f->dir);
    char db[128], err[512];
    snprintf(db, sizeof(db), "%s/db", f->dir);
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = db;
    o.now_ms = NOW_MS;
    o.block_cache_mb = 8;
    if (segd_store_open(&f->s, &o, err, sizeof(err)))
        return -1;
    fill(f->s);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    char cmd[128];
    segd_store_close(f->s);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    int rc = system(cmd);
    free(f);
    return rc;
}

/* What a read saw: per user the unit it came from (-1 = none). */
typedef struct seen {
    int32_t unit[USERS];
    segd_partitioner_t partitioner;
    int32_t partitions;
    int twice, wrong;
    pthread_mutex_t mu; /* loads with threads > 1 call back from several threads */
} seen_t;

static int seen_cb(void *ctx, int32_t partition, const char *user, size_t len,
                   const segd_profile_t *p)
{
    seen_t *s = ctx;
    (void)p;
    int i = atoi(user + 5);
    assert_true(len > 5 && i >= 0 && i < USERS);
    int wrong = segd_partition_of(s->partitioner, user, len, s->partitions) != partition;
    pthread_mutex_lock(&s->mu);
    s->twice += s->unit[i] >= 0;
    s->unit[i] = partition;
    s->wrong += wrong;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void seen_init(seen_t *s, segd_partitioner_t partitioner, int32_t partitions)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    for (int i = 0; i < USERS; i++)
        s->unit[i] = -1;
    s->partitioner = partitioner;
    s->partitions = partitions;
}

static void read_unit_manifest(const char *snap, const char *topic, int32_t p,
                               segd_manifest_t *m)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/%s/p-%05d/manifest.json", snap, topic, (int)p);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    char text[16384];
    size_t n = fread(text, 1, sizeof(text), fp);
    fclose(fp);
    segd_manifest_init(m);
    assert_int_equal(segd_manifest_parse(text, n, m, err, sizeof(err)), SEGD_OK);
}

/* The store holds offsets of "in" 0, 2, 5: those three units, P = 6; each
 * unit records its own offset and every change position. */
static void test_units_by_offsets(void **state)
{
    fixture_t *f = *state;
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    segd_manifest_t m;
    size_t failed = 9;
    char err[512] = "";
    assert_int_equal(segd_snapshot_export(f->s, f->snap, &o, &m, &failed, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(failed, 0);
    assert_string_equal(m.topic, "in");
    assert_int_equal(m.partitions, 6);
    assert_int_equal(m.units, 3);
    segd_manifest_free(&m);
    const int32_t units[] = {0, 2, 5};
    const int64_t offsets[] = {11, 22, 55};
    for (int k = 0; k < 3; k++) {
        read_unit_manifest(f->snap, "in", units[k], &m);
        assert_int_equal(m.partition, units[k]);
        assert_int_equal(m.partitions, 6);
        assert_int_equal(m.partitioner, SEGD_PARTITIONER_MURMUR2);
        assert_int_equal(m.n_inputs, 1);
        assert_string_equal(m.inputs[0].topic, "in");
        assert_int_equal(m.inputs[0].partition, units[k]);
        assert_int_equal(m.inputs[0].offset, offsets[k]);
        assert_int_equal(m.n_changes, 2); /* all of them, not only partition p's */
        assert_int_equal(m.changes[0].partition, 0);
        assert_int_equal(m.changes[0].offset, 100);
        assert_int_equal(m.changes[1].partition, 3);
        assert_int_equal(m.changes[1].offset, 7);
        segd_manifest_free(&m);
    }
    /* units 1, 3 and 4 are missing (another instance's): the read names one
     * and loads the others, each user from the unit of its partition */
    seen_t s;
    seen_init(&s, SEGD_PARTITIONER_MURMUR2, 6);
    segd_snapshot_read_opts_t ro = {.keep_going = 1};
    assert_int_equal(segd_snapshot_read(f->snap, &ro, &m, seen_cb, &s, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    assert_non_null(strstr(err, "p-00001"));
    assert_int_equal(m.units, 3);
    assert_int_equal(s.twice, 0);
    assert_int_equal(s.wrong, 0);
    for (int i = 0; i < USERS; i++) {
        char user[32];
        user_id(user, sizeof(user), i);
        int32_t p = segd_partition_of(SEGD_PARTITIONER_MURMUR2, user, strlen(user), 6);
        int exported = p == 0 || p == 2 || p == 5;
        assert_int_equal(s.unit[i], exported ? p : -1);
    }
    segd_manifest_free(&m);
}

/* A topic the store holds no offsets of: --buckets units, all of them; the
 * load (on several threads) holds every user exactly once. */
static void test_units_by_buckets(void **state)
{
    fixture_t *f = *state;
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    o.topic = "bk";
    o.buckets = 4;
    o.partitioner = SEGD_PARTITIONER_CRC32;
    segd_manifest_t m;
    char err[512] = "";
    assert_int_equal(segd_snapshot_export(f->s, f->snap, &o, &m, NULL, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(m.units, 4);
    assert_int_equal(m.partitions, 4);
    assert_int_equal(m.records, USERS);
    segd_manifest_free(&m);
    read_unit_manifest(f->snap, "bk", 3, &m);
    assert_int_equal(m.n_inputs, 0); /* no offset of "bk" */
    assert_int_equal(m.partitioner, SEGD_PARTITIONER_CRC32);
    segd_manifest_free(&m);
    for (uint32_t threads = 1; threads <= 3; threads += 2) {
        seen_t s;
        seen_init(&s, SEGD_PARTITIONER_CRC32, 4);
        segd_snapshot_read_opts_t ro = {.threads = threads};
        char src[160];
        snprintf(src, sizeof(src), "%s/bk", f->snap);
        assert_int_equal(segd_snapshot_read(src, &ro, &m, seen_cb, &s, err, sizeof(err)),
                         SEGD_OK);
        assert_int_equal(m.units, 4);
        assert_int_equal(m.records, USERS);
        assert_int_equal(s.twice, 0);
        assert_int_equal(s.wrong, 0);
        for (int i = 0; i < USERS; i++)
            assert_true(s.unit[i] >= 0);
        segd_manifest_free(&m);
    }
}

static int64_t unit_created(const char *snap, int32_t p)
{
    segd_manifest_t m;
    read_unit_manifest(snap, "bk", p, &m);
    int64_t t = m.created_at_ms;
    segd_manifest_free(&m);
    return t;
}

/* A unit whose directory cannot be written fails alone: its previous unit
 * stays, the others are replaced, and the snapshot still loads whole. */
static void test_failed_unit_keeps_previous(void **state)
{
    fixture_t *f = *state;
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    o.topic = "bk";
    o.buckets = 4;
    segd_manifest_t m;
    char err[512] = "", lock[256];
    assert_int_equal(segd_snapshot_export(f->s, f->snap, &o, &m, NULL, err, sizeof(err)),
                     SEGD_OK);
    segd_manifest_free(&m);
    int64_t before2 = unit_created(f->snap, 2), before1 = unit_created(f->snap, 1);
    snprintf(lock, sizeof(lock), "%s/bk/p-00002/.segd-export.lock", f->snap);
    assert_int_equal(unlink(lock), 0);
    assert_int_equal(mkdir(lock, 0755), 0); /* open(O_RDWR) fails: EISDIR */
    size_t failed = 0;
    assert_int_equal(segd_snapshot_export(f->s, f->snap, &o, &m, &failed, err, sizeof(err)),
                     SEGD_ERR_IO);
    assert_int_equal(failed, 1);
    assert_non_null(strstr(err, "bk/p-00002"));
    assert_int_equal(m.units, 3); /* what landed */
    segd_manifest_free(&m);
    assert_int_equal(unit_created(f->snap, 2), before2);
    /* later even within the same millisecond: a unit never reuses its
     * previous file's name under a reader of the previous manifest */
    assert_true(unit_created(f->snap, 1) > before1);
    seen_t s;
    seen_init(&s, SEGD_PARTITIONER_MURMUR2, 4);
    assert_int_equal(segd_snapshot_read(f->snap, NULL, &m, seen_cb, &s, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(m.records, USERS);
    assert_int_equal(m.created_at_ms, before2); /* the fold's oldest unit */
    assert_int_equal(s.wrong, 0);
    segd_manifest_free(&m);
}

/* One instance of a fleet: a store holding the users of its partitions of
 * "in" (P = 4) and offsets of those partitions only. */
static segd_store_t *instance(const char *dir, const char *name, const int32_t *own,
                              size_t n_own, int64_t change0)
{
    char db[160], err[512], user[32];
    snprintf(db, sizeof(db), "%s/%s", dir, name);
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = db;
    o.now_ms = NOW_MS;
    o.block_cache_mb = 8;
    segd_store_t *s = NULL;
    assert_int_equal(segd_store_open(&s, &o, err, sizeof(err)), SEGD_OK);
    segd_profile_t p;
    segd_buf_t buf = {0};
    segd_batch_t *b;
    segd_profile_init(&p);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    for (int i = 0; i < USERS; i++) {
        user_id(user, sizeof(user), i);
        int32_t part = segd_partition_of(SEGD_PARTITIONER_MURMUR2, user, strlen(user), 4);
        int ours = 0;
        for (size_t k = 0; k < n_own; k++)
            ours |= own[k] == part;
        if (!ours)
            continue;
        segd_profile_clear(&p);
        segd_entry_t e = {.segment_id = i, .ts_ms = NOW_MS - 1000,
                          .expiry_s = NOW_MS / 1000 + 86400};
        assert_int_equal(segd_profile_push(&p, &e), SEGD_OK);
        assert_int_equal(segd_record_encode(&p, &buf), SEGD_OK);
        segd_batch_merge(b, user, strlen(user), buf.data, buf.len);
    }
    for (size_t k = 0; k < n_own; k++)
        segd_batch_set_offset(b, "in", own[k], 1000 + own[k]);
    segd_batch_set_change_position(b, "segments.changes", 0, change0);
    segd_batch_set_change_position(b, "segments.changes", own[1], 500 + own[1]);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_buf_free(&buf);
    segd_profile_free(&p);
    return s;
}

/* Two instances, one owning partitions 1 and 3, the other 0 and 2, export
 * into one destination: the second takes P = 4 from the topology the first
 * wrote (its own offsets say 3); the four units load as one snapshot holding
 * every user once, tailing each change partition from the minimum over the
 * units (3 and 2, each listed by one instance's units only: from the
 * beginning). */
static void test_fleet_units(void **state)
{
    fixture_t *f = *state;
    const int32_t own_a[] = {1, 3}, own_b[] = {0, 2};
    segd_store_t *a = instance(f->dir, "a", own_a, 2, 90);
    segd_store_t *b = instance(f->dir, "b", own_b, 2, 70);
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    segd_manifest_t m;
    char err[512] = "";
    assert_int_equal(segd_snapshot_export(a, f->snap, &o, &m, NULL, err, sizeof(err)), SEGD_OK);
    assert_int_equal(m.partitions, 4); /* largest stored + 1 */
    segd_manifest_free(&m);
    assert_int_equal(segd_snapshot_export(b, f->snap, &o, &m, NULL, err, sizeof(err)), SEGD_OK);
    assert_int_equal(m.partitions, 4); /* from a's topology, not 3 */
    assert_int_equal(m.units, 2);
    segd_manifest_free(&m);
    segd_store_close(a);
    segd_store_close(b);
    seen_t s;
    seen_init(&s, SEGD_PARTITIONER_MURMUR2, 4);
    assert_int_equal(segd_snapshot_read(f->snap, NULL, &m, seen_cb, &s, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(m.units, 4);
    assert_int_equal(m.records, USERS);
    assert_int_equal(m.n_inputs, 4);
    assert_int_equal(s.twice, 0);
    assert_int_equal(s.wrong, 0);
    for (int i = 0; i < USERS; i++)
        assert_true(s.unit[i] >= 0);
    /* change partition 0: min(90, 70); 3 only in a's units, 2 only in b's: gone */
    assert_int_equal(m.n_changes, 1);
    assert_int_equal(m.changes[0].partition, 0);
    assert_int_equal(m.changes[0].offset, 70);
    segd_manifest_free(&m);
}

/* A user of partition `part` of P = 2 (murmur2): user-<i> for the first i. */
static void user_of(char *out, size_t cap, int32_t part)
{
    for (int i = 0;; i++) {
        user_id(out, cap, i);
        if (segd_partition_of(SEGD_PARTITIONER_MURMUR2, out, strlen(out), 2) == part)
            return;
    }
}

/* One instance owning partition `part` of "in" (P = 2) and one user's
 * entries, fully compacted with this grace: W = NOW - 24 h - grace, and the
 * dead entries below W are gone from the store and its unit. */
static void export_instance_unit(const char *dir, const char *snap, int32_t part,
                                 int64_t grace_ms, const segd_entry_t *en, size_t n)
{
    char db[160], err[512], user[32];
    snprintf(db, sizeof(db), "%s/w%d", dir, (int)part);
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = db;
    o.now_ms = NOW_MS;
    o.block_cache_mb = 8;
    o.gc_grace_ms = grace_ms;
    o.horizon_ms = HOUR_MS * 24; /* the figures here are for a 1-day horizon */
    segd_store_t *s = NULL;
    assert_int_equal(segd_store_open(&s, &o, err, sizeof(err)), SEGD_OK);
    segd_profile_t p;
    segd_buf_t buf = {0};
    segd_batch_t *b;
    segd_profile_init(&p);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(segd_profile_push(&p, &en[i]), SEGD_OK);
    assert_int_equal(segd_record_encode(&p, &buf), SEGD_OK);
    user_of(user, sizeof(user), part);
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    segd_batch_merge(b, user, strlen(user), buf.data, buf.len);
    segd_batch_set_offset(b, "in", part, 100 + part);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    assert_int_equal(segd_store_compact(s, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_gc_watermark(s), NOW_MS - HOUR_MS * 24 - grace_ms);
    segd_snapshot_opts_t so;
    segd_snapshot_opts_default(&so);
    so.partition_count = 2;
    segd_manifest_t m;
    assert_int_equal(segd_snapshot_export(s, snap, &so, &m, NULL, err, sizeof(err)), SEGD_OK);
    assert_int_equal(m.units, 1);
    assert_int_equal(m.gc_watermark_ms, NOW_MS - HOUR_MS * 24 - grace_ms);
    segd_manifest_free(&m);
    segd_store_close(s);
    segd_buf_free(&buf);
    segd_profile_free(&p);
}

/* An old delta re-delivered by a conservative tail. */
static void apply_delta(segd_edge_t *e, const char *user, const segd_entry_t *en)
{
    segd_change_t c;
    memset(&c, 0, sizeof(c));
    c.kind = SEGD_CHANGE_DELTA;
    c.user_id = user;
    c.user_id_len = strlen(user);
    segd_profile_init(&c.profile);
    assert_int_equal(segd_profile_push(&c.profile, en), SEGD_OK);
    assert_int_equal(segd_edge_apply(e, &c), SEGD_OK);
    segd_profile_free(&c.profile);
}

/* Two instances with different W export the two units of "in": unit 0's
 * store (W0 = NOW - 3 d) dropped user A's tombstone of segment 1 (ts NOW -
 * 10 d); unit 1's store has W1 = NOW - 21 d. A cache of both units judges
 * each user by its unit's W: an UPSERT of A's segment 1 at NOW - 15 d (older
 * than the tombstone; >= W1, the folded minimum) is skipped, not resurrected,
 * while user B's delta at NOW - 20 d (>= W1, < W0) is joined. */
static void test_cache_keeps_each_units_w(void **state)
{
    fixture_t *f = *state;
    const int64_t day = 24 * HOUR_MS, far_s = NOW_MS / 1000 + 86400;
    const segd_entry_t a_entries[] = {{.segment_id = 1, .ts_ms = NOW_MS - 10 * day},
                                      {.segment_id = 2, .ts_ms = NOW_MS - 1000,
                                       .expiry_s = far_s}};
    const segd_entry_t b_entries[] = {{.segment_id = 3, .ts_ms = NOW_MS - 1000,
                                       .expiry_s = far_s}};
    export_instance_unit(f->dir, f->snap, 0, 2 * day, a_entries, 2);
    export_instance_unit(f->dir, f->snap, 1, 20 * day, b_entries, 1);
    segd_edge_t *e = NULL;
    segd_manifest_t m;
    char err[512] = "", ua[32], ub[32];
    assert_int_equal(segd_edge_new(&e, NULL), SEGD_OK);
    segd_edge_set_now(e, NOW_MS);
    assert_int_equal(segd_edge_load_snapshot(e, f->snap, NULL, &m, err, sizeof(err)), SEGD_OK);
    assert_int_equal(m.units, 2);
    assert_int_equal(m.gc_watermark_ms, NOW_MS - 21 * day); /* the fold reports the minimum */
    assert_int_equal(segd_edge_partitions(e), 2);
    assert_int_equal(segd_edge_partition_gc_watermark(e, 0), NOW_MS - 3 * day);
    assert_int_equal(segd_edge_partition_gc_watermark(e, 1), NOW_MS - 21 * day);
    assert_int_equal(segd_edge_gc_watermark(e), NOW_MS - 21 * day);
    segd_manifest_free(&m);
    user_of(ua, sizeof(ua), 0);
    user_of(ub, sizeof(ub), 1);
    segd_profile_t p;
    segd_profile_init(&p);
    assert_int_equal(segd_edge_get_profile(e, ua, strlen(ua), &p), SEGD_OK);
    assert_int_equal(p.n, 1); /* unit 0 lacks the tombstone its store dropped */
    const segd_entry_t old_a = {.segment_id = 1, .ts_ms = NOW_MS - 15 * day, .expiry_s = far_s};
    const segd_entry_t old_b = {.segment_id = 4, .ts_ms = NOW_MS - 20 * day, .expiry_s = far_s};
    apply_delta(e, ua, &old_a);
    apply_delta(e, ub, &old_b);
    segd_entry_t out[4];
    size_t n = 0;
    assert_int_equal(segd_edge_lookup(e, ua, strlen(ua), out, 4, &n), SEGD_OK);
    assert_int_equal(n, 1); /* segment 1 stays removed */
    assert_int_equal(out[0].segment_id, 2);
    assert_int_equal(segd_edge_lookup(e, ub, strlen(ub), out, 4, &n), SEGD_OK);
    assert_int_equal(n, 2); /* above unit 1's W: joined */
    assert_int_equal(out[0].segment_id, 3);
    assert_int_equal(out[1].segment_id, 4);
    segd_profile_free(&p);
    segd_edge_destroy(e);
}

static void unit(segd_manifest_t *m, int32_t p, int64_t w, const int64_t *pos, size_t n)
{
    segd_manifest_init(m);
    m->topic = strdup("in");
    m->changes_topic = strdup("segments.changes");
    m->partition = p;
    m->partitions = 3;
    m->units = 1;
    m->records = 10 + (uint64_t)p;
    m->gc_watermark_ms = w;
    m->created_at_ms = 1000 + p;
    for (size_t i = 0; i < n; i += 2)
        assert_int_equal(segd_manifest_add_change(m, "segments.changes", (int32_t)pos[i],
                                                  pos[i + 1]), 0);
    assert_int_equal(segd_manifest_add_retirement(m, 9, 100 * (p + 1)), 0);
}

/* Per change partition the minimum over the units; a partition some unit
 * does not list is dropped (read from the beginning); W the smallest. */
static void test_fold_min_positions(void **state)
{
    (void)state;
    segd_manifest_t a, b, c, into;
    char err[256];
    const int64_t pa[] = {0, 100, 1, 50}, pb[] = {0, 80, 1, 60, 2, 5}, pc[] = {1, 70, 0, 90};
    unit(&a, 0, 500, pa, 4);
    unit(&b, 1, 300, pb, 6);
    unit(&c, 2, 400, pc, 4);
    segd_manifest_init(&into);
    assert_int_equal(segd_manifest_fold(&into, &a, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_manifest_fold(&into, &b, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_manifest_fold(&into, &c, err, sizeof(err)), SEGD_OK);
    assert_int_equal(into.units, 3);
    assert_int_equal(into.partition, -1);
    assert_int_equal(into.records, 33);
    assert_int_equal(into.gc_watermark_ms, 300);
    assert_int_equal(into.created_at_ms, 1000);
    assert_int_equal(into.n_changes, 2); /* partition 2: only b lists it */
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(into.changes[i].offset, into.changes[i].partition == 0 ? 80 : 50);
    assert_int_equal(into.n_retirements, 1);
    assert_int_equal(into.retirements[0].retired_before_ms, 300);
    /* a unit of another partitioning does not fold */
    segd_manifest_t other;
    unit(&other, 1, 0, pa, 0);
    other.partitions = 4;
    assert_int_equal(segd_manifest_fold(&into, &other, err, sizeof(err)), SEGD_ERR_CORRUPT);
    segd_manifest_free(&other);
    segd_manifest_free(&a);
    segd_manifest_free(&b);
    segd_manifest_free(&c);
    segd_manifest_free(&into);
}

static segd_err_t plan(const segd_snapshot_opts_t *o, const segd_topic_offset_t *off,
                       size_t n, int32_t topo, segd_snapshot_plan_t *p)
{
    char err[256];
    return segd_snapshot_plan(o, off, n, topo, p, err, sizeof(err));
}

static void test_plan(void **state)
{
    (void)state;
    segd_topic_offset_t off[] = {{"in", 3, 1}, {"in", 1, 1}, {"other", 0, 1}};
    segd_snapshot_opts_t o;
    segd_snapshot_plan_t p;
    segd_snapshot_opts_default(&o);
    assert_int_equal(plan(&o, off, 3, 0, &p), SEGD_ERR_CONFIG); /* two topics */
    o.links_topic = "other"; /* the identity graph's offsets are no unit's */
    assert_int_equal(plan(&o, off, 3, 0, &p), SEGD_OK);
    assert_string_equal(p.topic, "in");
    segd_snapshot_plan_free(&p);
    assert_int_equal(plan(&o, off + 2, 1, 0, &p), SEGD_ERR_CONFIG); /* links only: no topic */
    o.links_topic = NULL;
    assert_int_equal(plan(&o, off, 0, 0, &p), SEGD_ERR_CONFIG); /* none, no --topic */
    assert_int_equal(plan(&o, off, 2, 0, &p), SEGD_OK);          /* the only topic */
    assert_string_equal(p.topic, "in");
    assert_int_equal(p.partitions, 4); /* largest stored + 1 */
    assert_int_equal(p.n_units, 2);
    assert_int_equal(p.units[0], 1);
    assert_int_equal(p.units[1], 3);
    segd_snapshot_plan_free(&p);
    o.topic = "in";
    assert_int_equal(plan(&o, off, 3, 8, &p), SEGD_OK); /* a fleet's topology */
    assert_int_equal(p.partitions, 8);
    segd_snapshot_plan_free(&p);
    assert_int_equal(plan(&o, off, 3, 2, &p), SEGD_OK); /* a stale one loses */
    assert_int_equal(p.partitions, 4);
    segd_snapshot_plan_free(&p);
    o.partition_count = 3; /* below a stored partition */
    assert_int_equal(plan(&o, off, 3, 0, &p), SEGD_ERR_CONFIG);
    o.partition_count = 16;
    const int32_t only[] = {9, 3, 9};
    o.partitions = only;
    o.n_partitions = 3;
    assert_int_equal(plan(&o, off, 3, 0, &p), SEGD_OK);
    /* once each; 9 holds no offset (a partition still restoring): its unit
     * would replace a good one with an empty one, so it is left out */
    assert_int_equal(p.n_units, 1);
    assert_int_equal(p.units[0], 3);
    segd_snapshot_plan_free(&p);
    const int32_t unstored[] = {9};
    o.partitions = unstored;
    o.n_partitions = 1;
    assert_int_equal(plan(&o, off, 3, 0, &p), SEGD_ERR_CONFIG); /* no unit to export */
    o.partition_count = 0;
    o.partitions = NULL;
    o.topic = "fresh"; /* no offsets: every bucket */
    o.buckets = 8;
    assert_int_equal(plan(&o, off, 3, 0, &p), SEGD_OK);
    assert_int_equal(p.partitions, 8);
    assert_int_equal(p.n_units, 8);
    assert_false(p.by_offsets);
    segd_snapshot_plan_free(&p);
    o.topic = "../up"; /* becomes a path component */
    assert_int_equal(plan(&o, off, 3, 0, &p), SEGD_ERR_CONFIG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_units_by_offsets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_units_by_buckets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_unit_keeps_previous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fleet_units, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_keeps_each_units_w, setup, teardown),
        cmocka_unit_test(test_fold_min_positions),
        cmocka_unit_test(test_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
