/* Tests for the store handle (store/store.c and its modules batch.c, positions.c, floors.c,
 * outbox.c, faults.c): offsets in the same batch as data, reopening,
 * read-only readers beside a writer, fixed settings, retirement markers,
 * the exact outbox depth, the fault-injection points. */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>

#include <cmocka.h>
#include <rocksdb/c.h>

#include "app/app.h"
#include "compactor/filter.h"
#include "consumer/apply.h"
#include "core/record.h"
#include "publisher/snapshot.h"
#include "store/store.h"

#define NOW_MS 1800000000000LL

typedef struct fixture {
    char dir[64];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/segd-test-store-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    int rc = system(cmd);
    free(f);
    return rc;
}

static segd_store_t *open_store(const char *dir, int read_only, int64_t granularity)
{
    segd_store_opts_t o;
    segd_app_store_opts(&o);
    o.path = dir;
    o.read_only = read_only;
    o.now_ms = NOW_MS;
    o.block_cache_mb = 8;
    if (granularity)
        o.granularity_s = granularity;
    segd_store_t *s = NULL;
    char err[512];
    if (segd_store_open(&s, &o, err, sizeof(err)) != SEGD_OK)
        return NULL;
    return s;
}

static void add_upsert(segd_applier_t *ap, const char *user, int64_t seg)
{
    segd_event_t ev;
    segd_event_init(&ev);
    segd_event_set_user(&ev, user, strlen(user));
    ev.ts_ms = NOW_MS - 1000;
    ev.op = SEGD_OP_UPSERT;
    segd_seg_update_t u = {seg, 86400, 0, 0};
    segd_event_add_segment(&ev, &u);
    assert_int_equal(segd_applier_add(ap, &ev), SEGD_OK);
    segd_event_free(&ev);
}

static void test_offsets_travel_with_data(void **state)
{
    fixture_t *f = *state;
    char err[512];
    segd_store_t *s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    int64_t off = -1;
    assert_int_equal(segd_store_offset_get(s, "events", 3, &off, err, sizeof(err)),
                     SEGD_ERR_NOTFOUND);
    segd_applier_t ap;
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    add_upsert(&ap, "alice", 42);
    segd_batch_set_offset(ap.batch, "events", 3, 1234);
    segd_batch_outbox_append(ap.batch, "v", 1);
    assert_int_equal(segd_batch_count(ap.batch), 3);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    /* a batch built but never written leaves neither data nor offset */
    add_upsert(&ap, "bob", 7);
    segd_batch_set_offset(ap.batch, "events", 3, 9999);
    segd_applier_free(&ap);
    segd_store_close(s);

    s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    assert_int_equal(segd_store_offset_get(s, "events", 3, &off, err, sizeof(err)), SEGD_OK);
    assert_int_equal(off, 1234);
    segd_profile_t p;
    segd_profile_init(&p);
    assert_int_equal(segd_store_get(s, "alice", 5, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.entries[0].segment_id, 42);
    assert_int_equal(segd_store_get(s, "bob", 3, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.n, 0);
    segd_profile_free(&p);
    segd_store_close(s);
}

/* The nice values of the process's threads named rocksdb:low* (RocksDB's
 * compaction pool): how many there are, and how many run at nice 19. */
static void compaction_threads(int *threads, int *at_19)
{
    char path[320], line[1024];
    *threads = *at_19 = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        size_t len = f ? fread(line, 1, sizeof(line) - 1, f) : 0;
        if (f)
            fclose(f);
        line[len] = 0;
        char *open = strchr(line, '('), *close = strrchr(line, ')');
        long nice = 0;
        if (!open || !close || strncmp(open + 1, "rocksdb:low", 11))
            continue;
        /* after ") S": ppid pgrp session tty tpgid flags minflt cminflt majflt
         * cmajflt utime stime cutime cstime priority nice */
        if (sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                              "%*d %ld", &nice) != 1)
            continue;
        (*threads)++;
        *at_19 += nice == 19;
    }
    if (d)
        closedir(d);
}

/* Compactions run at the lowest CPU priority, so that on few cores they
 * take what the pipeline thread leaves idle (store/store.c make_options):
 * the thread that ran a manual compaction's job is at nice 19 after it. */
static void test_compactions_yield_the_cpu(void **state)
{
    fixture_t *f = *state;
    char err[512];
    segd_store_t *s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    segd_applier_t ap;
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    for (int round = 0; round < 3; round++) {
        char user[32];
        for (int u = 0; u < 200; u++) {
            snprintf(user, sizeof(user), "user-%d", u);
            add_upsert(&ap, user, round * 1000 + u);
        }
        assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
        assert_int_equal(segd_store_flush(s, err, sizeof(err)), SEGD_OK);
    }
    assert_int_equal(segd_store_compact(s, err, sizeof(err)), SEGD_OK);
    int threads, at_19;
    compaction_threads(&threads, &at_19);
    fprintf(stderr, "test: %d compaction threads, %d at nice 19\n", threads, at_19);
    assert_true(threads > 0);
    assert_true(at_19 > 0);
    segd_applier_free(&ap);
    segd_store_close(s);
}

/* The batch is one write: whichever store write an injected failure hits,
 * after a crash data and offset are there together or not at all (two
 * writes, data then offsets or the reverse, fail this at nth 1 or 2). */
static void test_offsets_and_data_fail_together(void **state)
{
    fixture_t *f = *state;
    char err[512], dir[300];
    for (uint64_t nth = 1; nth <= 2; nth++) {
        snprintf(dir, sizeof(dir), "%s/fail%" PRIu64, f->dir, nth);
        segd_store_t *s = open_store(dir, 0, 0);
        segd_store_fault_set(s, SEGD_FAULT_WRITE, nth, 1);
        segd_applier_t ap;
        assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
        add_upsert(&ap, "alice", 42);
        segd_batch_set_offset(ap.batch, "events", 0, 77);
        (void)segd_applier_flush(&ap, err, sizeof(err)); /* then the process dies */
        segd_applier_free(&ap);
        segd_store_close(s);
        s = open_store(dir, 0, 0);
        int64_t off = -1;
        segd_err_t oe = segd_store_offset_get(s, "events", 0, &off, err, sizeof(err));
        segd_profile_t p;
        segd_profile_init(&p);
        assert_int_equal(segd_store_get(s, "alice", 5, &p, err, sizeof(err)), SEGD_OK);
        assert_int_equal(oe == SEGD_OK, p.n == 1);
        assert_int_equal(oe == SEGD_OK, nth == 2); /* the first write is the batch */
        segd_profile_free(&p);
        segd_store_close(s);
    }
}

static void test_reader_beside_writer(void **state)
{
    fixture_t *f = *state;
    char err[512];
    segd_store_t *w = open_store(f->dir, 0, 0);
    assert_non_null(w);
    segd_applier_t ap;
    assert_int_equal(segd_applier_init(&ap, w), SEGD_OK);
    add_upsert(&ap, "carol", 5);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    /* a second writer is refused (RocksDB's lock), a reader is not */
    assert_null(open_store(f->dir, 0, 0));
    segd_store_t *r = open_store(f->dir, 1, 0);
    assert_non_null(r);
    segd_profile_t p;
    segd_profile_init(&p);
    assert_int_equal(segd_store_get(r, "carol", 5, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.n, 1);
    segd_profile_free(&p);
    segd_store_close(r);
    segd_store_close(w);
}

/* The writer of test_reader_beside_compacting_writer: batches, flushes and
 * full compactions as fast as it can, so that files the readers' MANIFEST
 * names keep being deleted under them. */
typedef struct churn {
    segd_store_t *s;
    int stop; /* under mu: set once by the test */
    int rounds;
    pthread_mutex_t mu;
} churn_t;

static void *churn_run(void *arg)
{
    churn_t *c = arg;
    char err[512], user[32];
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int stop = c->stop;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            break;
        segd_applier_t ap;
        if (segd_applier_init(&ap, c->s) != SEGD_OK)
            break;
        for (int i = 0; i < 50; i++) {
            snprintf(user, sizeof(user), "u%d-%d", c->rounds, i);
            add_upsert(&ap, user, i + 1);
        }
        /* the offset travels with the round's data, as ingest's does */
        segd_batch_set_offset(ap.batch, "events", 0, c->rounds + 1);
        segd_applier_flush(&ap, err, sizeof(err));
        segd_applier_free(&ap);
        segd_store_flush(c->s, err, sizeof(err));
        if (c->rounds % 4 == 3)
            segd_store_compact(c->s, err, sizeof(err));
        c->rounds++;
    }
    return NULL;
}

/* Whether the reader holds every round up to its stored offset: the first
 * round it lacks, or -1. A reader that missed a write-ahead log has a later
 * round's offset without that log's rounds. */
static int64_t first_round_missing(segd_store_t *r)
{
    char err[512], user[32];
    int64_t next = 0;
    if (segd_store_offset_get(r, "events", 0, &next, err, sizeof(err)) != SEGD_OK)
        return -1; /* nothing written yet */
    segd_profile_t p;
    segd_profile_init(&p);
    int64_t missing = -1;
    for (int64_t k = 0; k < next && missing < 0; k++) {
        snprintf(user, sizeof(user), "u%" PRId64 "-0", k);
        if (segd_store_get(r, user, strlen(user), &p, err, sizeof(err)) != SEGD_OK || p.n != 1)
            missing = k;
    }
    segd_profile_free(&p);
    return missing;
}

/* A read-only open reads the MANIFEST, then opens every file it names, then
 * replays the write-ahead logs; a live writer's flush or compaction can
 * delete files in between. A table file: RocksDB refuses the open ("Can't
 * access /000022.sst"; CI's lib_install hit it). A log: RocksDB opens
 * without it, and the reader has later offsets without that log's data.
 * `segd stats`, `get`, `offsets show` and `snapshot export` beside `segd
 * run` must get neither: the open is tried again. */
static void test_reader_beside_compacting_writer(void **state)
{
    fixture_t *f = *state;
    char err[512];
    churn_t c = {.s = open_store(f->dir, 0, 0)};
    assert_non_null(c.s);
    pthread_mutex_init(&c.mu, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, churn_run, &c), 0);
    int opens = 0, failed = 0, torn = 0;
    char first[512] = "";
    for (; opens < 300; opens++) {
        segd_store_opts_t o;
        segd_app_store_opts(&o);
        o.path = f->dir;
        o.read_only = 1;
        o.now_ms = NOW_MS;
        o.block_cache_mb = 8;
        segd_store_t *r = NULL;
        if (segd_store_open(&r, &o, err, sizeof(err)) != SEGD_OK) {
            if (!failed++)
                snprintf(first, sizeof(first), "%s", err);
            continue;
        }
        int64_t gap = first_round_missing(r);
        if (gap >= 0 && !torn++)
            print_message("a reader lacks round %" PRId64 " below its offset\n", gap);
        segd_store_close(r);
    }
    pthread_mutex_lock(&c.mu);
    c.stop = 1;
    pthread_mutex_unlock(&c.mu);
    pthread_join(th, NULL);
    print_message("%d read-only opens beside %d write/flush rounds, %d refused %s, %d torn\n",
                  opens, c.rounds, failed, first, torn);
    assert_true(c.rounds > 10); /* the writer really churned */
    assert_int_equal(failed, 0);
    assert_int_equal(torn, 0);
    pthread_mutex_destroy(&c.mu);
    segd_store_close(c.s);
}

static void test_granularity_is_fixed(void **state)
{
    fixture_t *f = *state;
    segd_store_t *s = open_store(f->dir, 0, 3600);
    assert_non_null(s);
    segd_store_close(s);
    assert_null(open_store(f->dir, 0, 60));
    s = open_store(f->dir, 0, 3600);
    assert_non_null(s);
    assert_int_equal(segd_store_granularity(s), 3600);
    segd_store_close(s);
}

/* Issue 9 #10: a store made with another granularity opens without one
 * (the CLI gives none) and keeps its own. */
static void test_granularity_from_store(void **state)
{
    fixture_t *f = *state;
    segd_store_t *s = open_store(f->dir, 0, 60);
    assert_non_null(s);
    segd_store_close(s);
    s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    assert_int_equal(segd_store_granularity(s), 60);
    segd_store_close(s);
    assert_null(open_store(f->dir, 0, 3600));
}

static void test_retirement_persists(void **state)
{
    fixture_t *f = *state;
    char err[512];
    segd_store_t *s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    segd_applier_t ap;
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    add_upsert(&ap, "dave", 11);
    add_upsert(&ap, "dave", 12);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    assert_int_equal(segd_store_retire(s, 11, NOW_MS, NULL, err, sizeof(err)), SEGD_OK);
    segd_store_close(s);
    s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    segd_profile_t p;
    segd_profile_init(&p);
    assert_int_equal(segd_store_get(s, "dave", 4, &p, err, sizeof(err)), SEGD_OK);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.entries[0].segment_id, 12);
    segd_profile_free(&p);
    segd_store_close(s);
}

static void add_partner_upsert(segd_applier_t *ap, const char *user, int64_t seg,
                               int32_t partner, int64_t ts_ms)
{
    segd_event_t ev;
    segd_event_init(&ev);
    segd_event_set_user(&ev, user, strlen(user));
    ev.ts_ms = ts_ms;
    ev.op = SEGD_OP_UPSERT;
    segd_seg_update_t u = {seg, 86400, 0, partner};
    segd_event_add_segment(&ev, &u);
    assert_int_equal(segd_applier_add(ap, &ev), SEGD_OK);
    segd_event_free(&ev);
}

/* A partner retirement through the log, as segd run applies it: the
 * control event names the partner in its segment entry's partner_id. */
static void add_partner_retire(segd_applier_t *ap, int32_t partner, int64_t before_ms)
{
    segd_event_t ev;
    segd_event_init(&ev);
    const char *id = SEGD_CONTROL_RETIRE_PARTNER_USER;
    segd_event_set_user(&ev, id, strlen(id));
    ev.ts_ms = before_ms;
    ev.op = SEGD_OP_REMOVE;
    segd_seg_update_t u = {.segment_id = 0, .partner_id = partner};
    segd_event_add_segment(&ev, &u);
    assert_true(segd_event_is_control(&ev));
    assert_int_equal(segd_applier_add_from(ap, &ev, "t", 0, 0, 0), SEGD_OK);
    segd_event_free(&ev);
}

/* The segment ids of user's live entries, in order, as "1,3". */
static void live_ids(segd_store_t *s, const char *user, char *out, size_t n)
{
    char err[512];
    segd_profile_t p;
    segd_profile_init(&p);
    assert_int_equal(segd_store_get(s, user, strlen(user), &p, err, sizeof(err)), SEGD_OK);
    segd_prune_t rule; /* what a reader sees: the live entries (dead ones may be kept) */
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    size_t w = 0;
    out[0] = 0;
    for (size_t i = 0; i < p.n && w < n; i++)
        if (segd_entry_live(&p.entries[i], p.erased_before_ms, &rule))
            w += (size_t)snprintf(out + w, n - w, "%s%" PRId64, w ? "," : "",
                                  p.entries[i].segment_id);
    segd_profile_free(&p);
}

static int find_partner_marker(void *ctx, int64_t key, int64_t before_ms)
{
    int64_t *found = ctx;
    if (key == segd_retire_key_of_partner(7))
        *found = before_ms;
    return 0;
}

typedef struct raw_count {
    const char *user;
    int64_t entries; /* -1: not stored */
} raw_count_t;

static int count_raw(void *ctx, const char *user, size_t len, const uint8_t *v, size_t vlen)
{
    raw_count_t *c = ctx;
    segd_record_head_t h;
    if (len == strlen(c->user) && !memcmp(user, c->user, len) &&
        segd_record_head(v, vlen, &h) == SEGD_OK)
        c->entries = (int64_t)h.n;
    return 0;
}

/* Partner retirement (DESIGN 3.2): partner 7's entries at or before the
 * marker vanish from reads whatever their segment, other partners' entries
 * of the same users stay, a later entry of partner 7 lives, the marker
 * survives a restart, and compaction drops the covered entries below W. */
static void test_partner_retirement(void **state)
{
    fixture_t *f = *state;
    char err[512], ids[64];
    const int64_t before = NOW_MS - 500;
    segd_store_t *s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    segd_applier_t ap;
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    add_partner_upsert(&ap, "ann", 1, 7, NOW_MS - 1000);
    add_partner_upsert(&ap, "ann", 2, 7, NOW_MS - 1000);
    add_partner_upsert(&ap, "ann", 3, 8, NOW_MS - 1000);
    add_partner_upsert(&ap, "bob", 4, 7, NOW_MS - 1000);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    live_ids(s, "ann", ids, sizeof(ids));
    assert_string_equal(ids, "1,2,3");
    add_partner_retire(&ap, 7, before);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    add_partner_upsert(&ap, "bob", 5, 7, NOW_MS - 100); /* after the marker */
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    live_ids(s, "ann", ids, sizeof(ids));
    assert_string_equal(ids, "3");
    live_ids(s, "bob", ids, sizeof(ids));
    assert_string_equal(ids, "5");
    segd_store_close(s);

    s = open_store(f->dir, 0, 0); /* the marker is read back from meta */
    assert_non_null(s);
    live_ids(s, "ann", ids, sizeof(ids));
    assert_string_equal(ids, "3");
    live_ids(s, "bob", ids, sizeof(ids));
    assert_string_equal(ids, "5");
    segd_store_view_t *v = NULL;
    int64_t found = 0;
    assert_int_equal(segd_store_view_open(s, &v, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_view_retirements(v, find_partner_marker, &found, err,
                                                 sizeof(err)), SEGD_OK);
    segd_store_view_close(v);
    assert_int_equal(found, before);

    /* the compaction filter's own decision: a stored value holding ann's
     * three entries keeps partner 7's while they are above W (they still
     * beat other partners' older entries), and drops them below it (reads
     * above also prune, so only this tells the filter's part) */
    segd_profile_t stored, scratch;
    segd_profile_init(&stored);
    segd_profile_init(&scratch);
    segd_buf_t enc = {0}, out = {0};
    segd_entry_t e[3] = {{1, NOW_MS - 1000, NOW_MS / 1000 + 86400, 0, 7},
                         {2, NOW_MS - 1000, NOW_MS / 1000 + 86400, 0, 7},
                         {3, NOW_MS - 1000, NOW_MS / 1000 + 86400, 0, 8}};
    assert_int_equal(segd_profile_reserve(&stored, 3), SEGD_OK);
    memcpy(stored.entries, e, sizeof(e));
    stored.n = 3;
    assert_int_equal(segd_record_encode(&stored, &enc), SEGD_OK);
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    int changed = 0;
    assert_true(rule.gc_before_ms < NOW_MS - 1000); /* a fresh store: W below them */
    assert_int_equal(segd_filter_value(segd_store_policy(s), &rule, (const char *)enc.data,
                                       enc.len, &scratch, &out, &changed), 0);
    assert_false(changed);
    rule.gc_before_ms = NOW_MS - 900; /* W past them */
    assert_int_equal(segd_filter_value(segd_store_policy(s), &rule, (const char *)enc.data,
                                       enc.len, &scratch, &out, &changed), 0);
    assert_true(changed);
    assert_int_equal(segd_record_decode(out.data, out.len, &stored), SEGD_OK);
    assert_int_equal(stored.n, 1);
    assert_int_equal(stored.entries[0].segment_id, 3);
    segd_buf_free(&enc);
    segd_buf_free(&out);
    segd_profile_free(&stored);
    segd_profile_free(&scratch);

    assert_int_equal(segd_store_compact_ex(s, SEGD_COMPACT_KEEP_HISTORY, err, sizeof(err)),
                     SEGD_OK);
    raw_count_t ann = {"ann", -1};
    assert_int_equal(segd_store_view_open(s, &v, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_view_scan_raw(v, count_raw, &ann, err, sizeof(err)), SEGD_OK);
    segd_store_view_close(v);
    assert_int_equal(ann.entries, 3); /* W = 0: partner 7's stay on disk, dead */
    live_ids(s, "ann", ids, sizeof(ids));
    assert_string_equal(ids, "3");
    segd_store_close(s);
}

/* The depth moves only with written batches, counts only entries that
 * exist, and is the same after reopen. */
static void test_outbox_depth_is_exact(void **state)
{
    fixture_t *f = *state;
    char err[512];
    segd_store_t *s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    segd_batch_t *b;
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    uint64_t first = segd_batch_outbox_append(b, "a", 1);
    segd_batch_outbox_append(b, "b", 1);
    segd_batch_outbox_append(b, "c", 1);
    assert_int_equal(segd_store_outbox_depth(s), 0); /* not written yet */
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_outbox_depth(s), 3);
    segd_batch_clear(b);
    segd_batch_outbox_append(b, "lost", 4); /* a batch never written: a gap */
    segd_batch_clear(b);
    segd_batch_outbox_append(b, "d", 1);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_outbox_depth(s), 4);
    segd_batch_clear(b);
    for (uint64_t seq = first; seq < first + 4; seq++) /* a range over the gap */
        segd_batch_outbox_delete(b, seq);
    segd_store_fault_set(s, SEGD_FAULT_WRITE, 1, 1);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_ERR_IO);
    assert_int_equal(segd_store_outbox_depth(s), 4); /* a failed write moves nothing */
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_outbox_depth(s), 1);
    segd_batch_destroy(b);
    segd_store_close(s);
    s = open_store(f->dir, 0, 0);
    assert_int_equal(segd_store_outbox_depth(s), 1);
    segd_store_close(s);
}

static void *append_from_other_thread(void *arg)
{
    segd_store_t *s = arg;
    segd_batch_t *b;
    char err[512];
    if (segd_batch_new(s, &b)) /* no cmocka asserts off the test's thread */
        return NULL;
    uint64_t seq = segd_batch_outbox_append(b, "second", 6);
    segd_err_t written = segd_store_write(s, b, err, sizeof(err));
    segd_batch_destroy(b);
    return seq == SEGD_OUTBOX_REFUSED && written == SEGD_ERR_INVALID ? s : NULL;
}

/* The one-outbox-appender rule holds in release builds too (it was an
 * assert, compiled out under NDEBUG): a second thread's append is refused
 * and its batch cannot be written; the first appender goes on. */
static void test_second_outbox_appender_refused(void **state)
{
    fixture_t *f = *state;
    char err[512];
    segd_store_t *s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    segd_batch_t *b;
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    assert_int_not_equal(segd_batch_outbox_append(b, "a", 1), SEGD_OUTBOX_REFUSED);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    pthread_t t;
    void *ok = NULL;
    assert_int_equal(pthread_create(&t, NULL, append_from_other_thread, s), 0);
    assert_int_equal(pthread_join(t, &ok), 0);
    assert_ptr_equal(ok, s);
    assert_int_equal(segd_store_outbox_depth(s), 1);
    segd_batch_clear(b);
    assert_int_not_equal(segd_batch_outbox_append(b, "b", 1), SEGD_OUTBOX_REFUSED);
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_outbox_depth(s), 2);
    segd_batch_destroy(b);
    segd_store_close(s);
}

/* SQLite-style counters: exactly calls nth .. nth+times-1 fail. */
static void test_fault_points(void **state)
{
    fixture_t *f = *state;
    char err[512];
    int64_t off;
    segd_store_t *s = open_store(f->dir, 0, 0);
    assert_non_null(s);
    segd_store_fault_set(s, SEGD_FAULT_OFFSET_GET, 2, 2);
    segd_err_t want[] = {SEGD_ERR_NOTFOUND, SEGD_ERR_IO, SEGD_ERR_IO, SEGD_ERR_NOTFOUND};
    for (int i = 0; i < 4; i++)
        assert_int_equal(segd_store_offset_get(s, "t", 0, &off, err, sizeof(err)), want[i]);
    segd_store_fault_set(s, SEGD_FAULT_OFFSET_GET, 0, 0);
    assert_int_equal(segd_store_offset_get(s, "t", 0, &off, err, sizeof(err)),
                     SEGD_ERR_NOTFOUND);
    segd_store_close(s);
}

/* A record that does not decode is skipped by scans (and counted): a
 * snapshot exported over it would verify and load as if the user had no
 * state at all (its tombstones and erase marker included). The export fails. */
static void test_snapshot_refuses_undecodable(void **state)
{
    fixture_t *f = *state;
    char err[512], snap[300];
    segd_store_t *s = open_store(f->dir, 0, 0);
    segd_batch_t *b;
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    static const uint8_t garbage[] = {0x01, 0x99, 0x42, 0x42, 0x42, 0x42, 0x42};
    segd_batch_merge(b, "broken", 6, garbage, sizeof(garbage));
    assert_int_equal(segd_store_write(s, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    o.topic = "t";
    o.buckets = 2;
    snprintf(snap, sizeof(snap), "%s/snap", f->dir);
    size_t failed = 0;
    assert_int_equal(segd_snapshot_export(s, snap, &o, NULL, &failed, err, sizeof(err)),
                     SEGD_ERR_CORRUPT);
    assert_non_null(strstr(err, "do not decode"));
    assert_int_equal(failed, 2); /* no unit lands */
    char path[400];
    const char *names[] = {"p-00000/manifest.json", "p-00001/manifest.json", "topology.json"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/t/%s", snap, names[i]);
        assert_int_equal(access(path, F_OK), -1);
    }
    segd_store_close(s);
}

/* A store its first writer has only begun creating holds the default
 * family alone: a read-only open beside it (segd get, stats, a test reading
 * offsets) must be refused, not opened without meta and profiles. */
static void test_read_only_refuses_partial_store(void **state)
{
    fixture_t *f = *state;
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    char *rerr = NULL;
    rocksdb_t *db = rocksdb_open(o, f->dir, &rerr);
    assert_null(rerr);
    rocksdb_close(db);
    rocksdb_options_destroy(o);
    assert_null(open_store(f->dir, 1, 0));
    /* a complete store still opens read-only, the identity families read empty */
    segd_store_t *w = open_store(f->dir, 0, 0);
    assert_non_null(w);
    segd_store_close(w);
    segd_store_t *r = open_store(f->dir, 1, 0);
    assert_non_null(r);
    segd_store_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_offsets_travel_with_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compactions_yield_the_cpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_offsets_and_data_fail_together, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_beside_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_beside_compacting_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_granularity_is_fixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_granularity_from_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retirement_persists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partner_retirement, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outbox_depth_is_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_second_outbox_appender_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_points, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_refuses_undecodable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_refuses_partial_store, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
