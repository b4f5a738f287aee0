/* The change-stream publisher against librdkafka's mock cluster: every
 * ingest batch's outbox entry becomes change events whose join equals the
 * store; entries are deleted only when acknowledged; a broker outage keeps
 * them and publishing resumes; entries left by a crash are re-published by
 * the next publisher; retirements travel as RETIRE control events (one per
 * change partition); deltas go to their source's partition (none: the
 * user's partition, also their bucket) and a source partition the change
 * topic lacks keeps the entry; the
 * acknowledged change positions are recorded for snapshots; Confluent
 * framing registers change_event.avsc with a registry (nginx stand-in) and
 * frames every event with the id it answered. */
#include <librdkafka/rdkafka.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/app.h"
#include "base/clock.h"
#include "core/partition.h"
#include "consumer/apply.h"
#include "workload/dev_broker.h"
#include "wire/outbox.h"
#include "publisher/publisher.h"
#include "publisher/publisher_int.h" /* the delivery-report tally */
#include "store/store.h"
#include "tests/support/nginx_util.h"
#include "pipeline_fixture.h"

#define CHANGES "changes"
#define PARTITIONS 4
#define NOW_S FX_NOW_S
#define USERS 60
#define API_PRODUCE 0 /* Kafka's ApiKey of Produce (rdkafka_protocol.h is not installed) */

/* One store per test, at DIR/db, kept open in the fixture across the
 * publishers of a test. */
static segd_store_t *open_store(const fx_t *f)
{
    return fx_open_store(f, "db");
}

static int setup(void **state)
{
    static const char *const topics[] = {CHANGES, NULL};
    const fx_opts_t o = {"publish", PARTITIONS, topics, 0};
    if (fx_setup(state, &o))
        return -1;
    fx_t *f = *state;
    f->store = open_store(f);
    return 0;
}

static segd_publisher_t *new_publisher(const fx_t *f, segd_store_t *s)
{
    segd_publisher_opts_t o;
    segd_publisher_opts_default(&o);
    o.brokers = segd_dev_broker_bootstraps(f->broker);
    o.topic = CHANGES;
    o.max_entries = 3;       /* several cycles per test */
    o.max_delta_entries = 4; /* users with more changed segments go out in parts */
    o.ack_timeout_ms = 2000;
    static const char *const props[] = {"message.timeout.ms", "1500", NULL};
    o.kafka_props = props;
    segd_publisher_t *p = NULL;
    char err[256];
    assert_int_equal(segd_publisher_new(&p, s, &o, err, sizeof(err)), SEGD_OK);
    return p;
}

/* Batch b: every user gets an upsert of 3 segments, every third a remove of
 * one of them, user 7 an erase; so one batch holds several events per user. */
static void write_batch(segd_store_t *s, int b)
{
    segd_applier_t ap;
    segd_event_t ev;
    char user[32], err[256];
    segd_event_init(&ev);
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    segd_applier_enable_outbox(&ap);
    for (int u = 0; u < USERS; u++) {
        snprintf(user, sizeof(user), "user-%03d", u);
        segd_event_reset(&ev);
        segd_event_set_user(&ev, user, strlen(user));
        ev.ts_ms = NOW_S * 1000 - 60000 + b * 1000 + u;
        ev.op = SEGD_OP_UPSERT;
        for (int k = 0; k < 3; k++) {
            segd_seg_update_t seg = {(b * 7 + k * 13 + u) % 50, 3600 * (k + 1), k, u % 3};
            segd_event_add_segment(&ev, &seg);
        }
        assert_int_equal(segd_applier_add_from(&ap, &ev, "events", u % 4, b * 1000 + u,
                                               (int64_t)time(NULL) * 1000 - 1000),
                         SEGD_OK);
        if (u % 3 == 0) {
            ev.op = SEGD_OP_REMOVE;
            ev.n_segments = 1;
            ev.ts_ms += 500;
            assert_int_equal(segd_applier_add_from(&ap, &ev, "events", u % 4, b * 1000 + u + 500,
                                                   0),
                             SEGD_OK);
        }
        if (u == 7 && b == 1) {
            segd_event_reset(&ev);
            segd_event_set_user(&ev, user, strlen(user));
            ev.ts_ms = NOW_S * 1000 - 59000;
            ev.op = SEGD_OP_ERASE_USER;
            assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
        }
    }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
}

/* What a cache would hold: every delta of the topic joined per user. */
typedef struct joined {
    char users[USERS + 1][32];
    segd_profile_t prof[USERS + 1];
    uint64_t events, retire_events, max_retired_seg;
    int64_t sources_seen;
    size_t max_len; /* the largest message value seen */
} joined_t;

static void join_change(joined_t *j, const segd_change_t *c)
{
    if (c->kind == SEGD_CHANGE_RETIRE) {
        j->retire_events++;
        for (size_t i = 0; i < c->n_retirements; i++)
            if ((uint64_t)c->retirements[i].segment_id > j->max_retired_seg)
                j->max_retired_seg = (uint64_t)c->retirements[i].segment_id;
        return;
    }
    assert_int_equal(c->user_id_len, 8);
    int u = (c->user_id[5] - '0') * 100 + (c->user_id[6] - '0') * 10 + (c->user_id[7] - '0');
    assert_true(u >= 0 && u < USERS);
    /* bucket = the user's partition under input.partitioner (default murmur2) */
    assert_int_equal(c->buckets, PARTITIONS);
    assert_int_equal(c->bucket, segd_partition_of(SEGD_PARTITIONER_MURMUR2, c->user_id,
                                                  c->user_id_len, PARTITIONS));
    j->sources_seen += (int64_t)c->n_sources;
    segd_profile_t out;
    segd_profile_init(&out);
    const segd_profile_t *in[2] = {&j->prof[u], &c->profile};
    assert_int_equal(segd_profile_join(&out, in, 2, NULL), SEGD_OK);
    segd_profile_free(&j->prof[u]);
    j->prof[u] = out;
}

static void query_ends(rd_kafka_t *rk, int64_t *end)
{
    for (int i = 0; i < PARTITIONS; i++) {
        int64_t lo = 0;
        assert_int_equal(rd_kafka_query_watermark_offsets(rk, CHANGES, i, &lo, &end[i], 10000),
                         RD_KAFKA_RESP_ERR_NO_ERROR);
    }
}

static void consume_framed(const fx_t *f, joined_t *j, int32_t expected_id)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", segd_dev_broker_bootstraps(f->broker), err,
                      sizeof(err));
    rd_kafka_conf_set(conf, "group.id", "reader", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(PARTITIONS);
    for (int i = 0; i < PARTITIONS; i++)
        rd_kafka_topic_partition_list_add(parts, CHANGES, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    /* Read up to each partition's end offset: everything the publisher had
     * acknowledged. (Stopping after 2 s without a message, as this did
     * before, stopped early when the consumer was slow to start.) Once
     * there, it reads on for 2 s and asks for the ends again, so that a
     * message that arrives late (a test expecting none) is still seen. A
     * partition that never reaches its end fails the test at the deadline. */
    int64_t end[PARTITIONS], next[PARTITIONS] = {0};
    query_ends(rk, end);
    segd_change_t c;
    segd_change_init(&c);
    int64_t deadline = segd_wall_ms() + 60000, settle_until = 0;
    for (;;) {
        int behind = 0;
        for (int i = 0; i < PARTITIONS; i++)
            behind += next[i] < end[i];
        if (!behind && !settle_until)
            settle_until = segd_wall_ms() + 2000;
        if (!behind && segd_wall_ms() >= settle_until) {
            query_ends(rk, end);
            behind = 0;
            for (int i = 0; i < PARTITIONS; i++)
                behind += next[i] < end[i];
            if (!behind)
                break;
        }
        assert_true(segd_wall_ms() < deadline);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (!m->err) {
            if (m->partition >= 0 && m->partition < PARTITIONS)
                next[m->partition] = m->offset + 1;
            const uint8_t *body;
            size_t blen;
            if (expected_id >= 0)
                assert_int_equal(((const uint8_t *)m->payload)[0], 0); /* Confluent magic */
            assert_int_equal(segd_change_unframe(m->payload, m->len, expected_id, &body, &blen),
                             SEGD_OK);
            assert_int_equal(segd_change_decode(body, blen, &c), SEGD_OK);
            if (c.kind == SEGD_CHANGE_DELTA)
                assert_memory_equal(m->key, c.user_id, m->key_len);
            /* a delta on its source's partition, one without on its bucket's */
            for (size_t i = 0; i < c.n_sources; i++)
                assert_int_equal(c.sources[i].partition, m->partition);
            if (c.kind == SEGD_CHANGE_DELTA && !c.n_sources)
                assert_int_equal(c.bucket, m->partition);
            join_change(j, &c);
            j->events++;
            if (m->len > j->max_len)
                j->max_len = m->len;
        }
        rd_kafka_message_destroy(m);
    }
    segd_change_free(&c);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

static void consume_all(const fx_t *f, joined_t *j) { consume_framed(f, j, -1); }

static void joined_free(joined_t *j)
{
    for (int u = 0; u <= USERS; u++)
        segd_profile_free(&j->prof[u]);
}

/* The joined deltas, pruned as the store's reads prune, equal the store. */
static void assert_joined_equals_store(segd_store_t *s, joined_t *j)
{
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    segd_profile_t p;
    segd_profile_init(&p);
    char user[32], err[256];
    for (int u = 0; u < USERS; u++) {
        snprintf(user, sizeof(user), "user-%03d", u);
        assert_int_equal(segd_store_get(s, user, strlen(user), &p, err, sizeof(err)), SEGD_OK);
        segd_profile_prune(&j->prof[u], &rule);
        assert_int_equal(j->prof[u].n, p.n);
        assert_int_equal(j->prof[u].erased_before_ms, p.erased_before_ms);
        if (p.n)
            assert_memory_equal(j->prof[u].entries, p.entries, p.n * sizeof(segd_entry_t));
    }
    segd_profile_free(&p);
}

static int positions_cb(void *ctx, const char *topic, int32_t partition, int64_t next)
{
    (void)partition;
    if (!strcmp(topic, CHANGES))
        *(int64_t *)ctx += next;
    return 0;
}

static int64_t recorded_positions(segd_store_t *s)
{
    segd_store_view_t *v;
    char err[256];
    int64_t sum = 0;
    assert_int_equal(segd_store_view_open(s, &v, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_view_positions(v, "changes", positions_cb, &sum, err,
                                               sizeof(err)),
                     SEGD_OK);
    segd_store_view_close(v);
    return sum;
}

static void test_deltas_join_to_the_store(void **state)
{
    fx_t *f = *state;
    for (int b = 0; b < 5; b++)
        write_batch(f->store, b);
    assert_int_equal(fx_outbox_entries(f->store), 5);
    segd_publisher_t *p = new_publisher(f, f->store);
    char err[256];
    assert_int_equal(segd_publisher_drain(p, 20000, err, sizeof(err)), SEGD_OK);
    segd_publisher_stats_t st;
    segd_publisher_get_stats(p, &st);
    assert_int_equal(fx_outbox_entries(f->store), 0);
    assert_int_equal(st.entries, 5);
    assert_int_equal(st.depth, 0);
    /* max_entries 3: two cycles; per changed user one delta, in parts of at
     * most 4 entries (9 or 6 changed segments: 3 or 2 parts) */
    assert_int_equal(st.cycles, 2);
    assert_true(st.events > 2 * USERS);
    assert_true(st.latency_max_ms > 0);
    segd_publisher_destroy(p);
    joined_t *j = calloc(1, sizeof(*j));
    consume_all(f, j);
    assert_int_equal(j->events, st.events);
    assert_true(j->sources_seen >= 2 * USERS);
    assert_joined_equals_store(f->store, j);
    /* every delivered delta lies below the recorded positions */
    assert_int_equal(recorded_positions(f->store), (int64_t)j->events);
    joined_free(j);
    free(j);
}

/* Issue 9 #13: nine valid events of 4096 segments (ids >= 2^62, attributes
 * whose varints take 5 bytes) for one user coalesce into one delta of 36864
 * entries, ~31 bytes each: 32768 of them (the entry cap) make a ~1.02 MB
 * message, over librdkafka's default message.max.bytes (1,000,000), which
 * stopped the stream for good. Parts are cut by encoded bytes: every message
 * fits, the outbox drains, and the parts join to the store's state. */
static void test_oversized_delta_is_split_by_bytes(void **state)
{
    fx_t *f = *state;
    segd_applier_t ap;
    segd_event_t ev;
    char err[256];
    segd_event_init(&ev);
    assert_int_equal(segd_applier_init(&ap, f->store), SEGD_OK);
    segd_applier_enable_outbox(&ap);
    for (int e = 0; e < 9; e++) {
        segd_event_reset(&ev);
        segd_event_set_user(&ev, "user-000", 8);
        ev.ts_ms = NOW_S * 1000 - 60000 + e;
        ev.op = SEGD_OP_UPSERT;
        for (int k = 0; k < 4096; k++) {
            segd_seg_update_t seg = {(INT64_C(1) << 62) + (int64_t)e * 4096 * 1000 + k * 997,
                                     30 * 86400, INT32_MAX - k, INT32_MIN + e};
            assert_int_equal(segd_event_add_segment(&ev, &seg), SEGD_OK);
        }
        segd_limits_t lim;
        segd_limits_default(&lim);
        assert_int_equal(segd_event_validate(&ev, &lim, err, sizeof(err)), SEGD_OK);
        assert_int_equal(segd_applier_add_from(&ap, &ev, "events", 0, e, 0), SEGD_OK);
    }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);

    segd_publisher_opts_t o;
    segd_publisher_opts_default(&o); /* the default entry cap, 32768 */
    o.brokers = segd_dev_broker_bootstraps(f->broker);
    o.topic = CHANGES;
    o.ack_timeout_ms = 5000;
    segd_publisher_t *p = NULL;
    assert_int_equal(segd_publisher_new(&p, f->store, &o, err, sizeof(err)), SEGD_OK);
    err[0] = 0;
    segd_err_t rc = segd_publisher_drain(p, 20000, err, sizeof(err));
    if (rc != SEGD_OK)
        fail_msg("drain: %s", err);
    segd_publisher_stats_t st;
    segd_publisher_get_stats(p, &st);
    segd_publisher_destroy(p);
    assert_int_equal(fx_outbox_entries(f->store), 0);
    assert_int_equal(st.segments, 9 * 4096);
    joined_t *j = calloc(1, sizeof(*j));
    consume_all(f, j);
    assert_int_equal(j->events, st.events);
    assert_true(j->events >= 2);
    assert_true(j->max_len <= 1000000 - 1024);
    print_message("%llu parts, largest %zu bytes\n", (unsigned long long)j->events, j->max_len);
    assert_int_equal(j->prof[0].n, 9 * 4096);
    assert_joined_equals_store(f->store, j);
    joined_free(j);
    free(j);
}

/* The cut follows the producer's message.max.bytes when it is set lower:
 * 8192 large entries (~254 KB) under a 64 KiB limit go out in parts of at
 * most 64 KiB less the headroom (1 KiB + 1/64), joining to the store. */
static void test_delta_parts_follow_message_max_bytes(void **state)
{
    fx_t *f = *state;
    segd_applier_t ap;
    segd_event_t ev;
    char err[256];
    segd_event_init(&ev);
    assert_int_equal(segd_applier_init(&ap, f->store), SEGD_OK);
    segd_applier_enable_outbox(&ap);
    for (int e = 0; e < 2; e++) {
        segd_event_reset(&ev);
        segd_event_set_user(&ev, "user-001", 8);
        ev.ts_ms = NOW_S * 1000 - 60000 + e;
        ev.op = SEGD_OP_UPSERT;
        for (int k = 0; k < 4096; k++) {
            segd_seg_update_t seg = {(INT64_C(1) << 62) + (int64_t)(2 * k + e), 86400,
                                     INT32_MIN + k, INT32_MAX - e};
            assert_int_equal(segd_event_add_segment(&ev, &seg), SEGD_OK);
        }
        assert_int_equal(segd_applier_add_from(&ap, &ev, "events", 1, e, 0), SEGD_OK);
    }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
    segd_publisher_opts_t o;
    segd_publisher_opts_default(&o);
    o.brokers = segd_dev_broker_bootstraps(f->broker);
    o.topic = CHANGES;
    o.ack_timeout_ms = 5000;
    static const char *const props[] = {"message.max.bytes", "65536", NULL};
    o.kafka_props = props;
    segd_publisher_t *p = NULL;
    assert_int_equal(segd_publisher_new(&p, f->store, &o, err, sizeof(err)), SEGD_OK);
    if (segd_publisher_drain(p, 20000, err, sizeof(err)) != SEGD_OK)
        fail_msg("drain: %s", err);
    segd_publisher_destroy(p);
    assert_int_equal(fx_outbox_entries(f->store), 0);
    joined_t *j = calloc(1, sizeof(*j));
    consume_all(f, j);
    print_message("%llu parts, largest %zu bytes\n", (unsigned long long)j->events, j->max_len);
    assert_true(j->events >= 4);
    assert_true(j->max_len <= 65536 - 1024 - 65536 / 64);
    assert_int_equal(j->prof[1].n, 8192);
    assert_joined_equals_store(f->store, j);
    joined_free(j);
    free(j);
}

static void test_outage_keeps_outbox_then_resumes(void **state)
{
    fx_t *f = *state;
    write_batch(f->store, 0);
    write_batch(f->store, 1);
    segd_publisher_t *p = new_publisher(f, f->store);
    char err[256];
    segd_dev_broker_set_down(f->broker, 1, 1);
    size_t acked = 99;
    assert_int_not_equal(segd_publisher_cycle(p, &acked, err, sizeof(err)), SEGD_OK);
    assert_int_equal(acked, 0);
    assert_int_equal(fx_outbox_entries(f->store), 2);
    assert_int_equal(recorded_positions(f->store), 0);
    /* the oldest entry's age goes on growing while nothing is acknowledged
     * (it was taken once per cycle and stood still through an outage) */
    segd_publisher_stats_t s1, s2;
    segd_publisher_get_stats(p, &s1);
    usleep(300 * 1000);
    segd_publisher_get_stats(p, &s2);
    assert_true(s1.oldest_unacked_ms > 0);
    assert_true(s2.oldest_unacked_ms >= s1.oldest_unacked_ms + 250);
    segd_dev_broker_set_down(f->broker, 1, 0);
    assert_int_equal(segd_publisher_drain(p, 30000, err, sizeof(err)), SEGD_OK);
    assert_int_equal(fx_outbox_entries(f->store), 0);
    segd_publisher_destroy(p);
    joined_t *j = calloc(1, sizeof(*j));
    consume_all(f, j);
    assert_joined_equals_store(f->store, j); /* duplicates from the failed cycle are harmless */
    joined_free(j);
    free(j);
}

/* A fatal error of the idempotent change producer (librdkafka's "out of
 * order sequence number ... sequence desynchronization" after two brokers
 * died) failed every later produce: the publisher retried for ever with the
 * outbox kept and the change stream stopped (defect C). The producer is
 * replaced, and everything reaches the topic. */
static void test_fatal_producer_replaced(void **state)
{
    fx_t *f = *state;
    write_batch(f->store, 0);
    segd_publisher_t *p = new_publisher(f, f->store);
    char err[256];
    size_t acked = 0;
    assert_int_equal(segd_publisher_cycle(p, &acked, err, sizeof(err)), SEGD_OK);
    assert_true(acked > 0); /* a cycle went out before the fault */
    write_batch(f->store, 1);
    assert_int_equal(rd_kafka_test_fatal_error(p->rk, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                                               "test: sequence desynchronization"),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(segd_publisher_drain(p, 30000, err, sizeof(err)), SEGD_OK);
    assert_int_equal(fx_outbox_entries(f->store), 0);
    segd_publisher_stats_t st;
    segd_publisher_get_stats(p, &st);
    assert_int_equal(st.producer_renewals, 1);
    segd_publisher_destroy(p);
    joined_t *j = calloc(1, sizeof(*j));
    consume_all(f, j);
    assert_joined_equals_store(f->store, j);
    joined_free(j);
    free(j);
}

/* With the brokers down and the producer's queue full, a cycle gives up after
 * ack_timeout_ms (it waited for ever, so a stopping segd run hung until a
 * second signal) and keeps the outbox; once the brokers return, all of it is
 * published. The failed cycle takes its queued delta back out of
 * librdkafka's queue: left there, it would reach the topic beside the
 * retry's copy, so the topic holds exactly the events the successful cycles
 * counted as acknowledged. */
static void test_full_queue_gives_up(void **state)
{
    fx_t *f = *state;
    write_batch(f->store, 0);
    segd_publisher_opts_t o;
    segd_publisher_opts_default(&o);
    o.brokers = segd_dev_broker_bootstraps(f->broker);
    o.topic = CHANGES;
    o.ack_timeout_ms = 1000;
    static const char *const props[] = {"queue.buffering.max.messages", "1",
                                        "message.timeout.ms", "60000", NULL};
    o.kafka_props = props;
    segd_publisher_t *p = NULL;
    char err[256];
    assert_int_equal(segd_publisher_new(&p, f->store, &o, err, sizeof(err)), SEGD_OK);
    segd_dev_broker_set_down(f->broker, 1, 1);
    size_t acked = 99;
    time_t t0 = time(NULL);
    assert_int_not_equal(segd_publisher_cycle(p, &acked, err, sizeof(err)), SEGD_OK);
    assert_true(time(NULL) - t0 < 30); /* bounded, not a hang: the old loop never returned */
    assert_int_equal(acked, 0);
    assert_int_equal(fx_outbox_entries(f->store), 1);
    segd_dev_broker_set_down(f->broker, 1, 0);
    assert_int_equal(segd_publisher_drain(p, 60000, err, sizeof(err)), SEGD_OK);
    assert_int_equal(fx_outbox_entries(f->store), 0);
    segd_publisher_stats_t st;
    segd_publisher_get_stats(p, &st);
    segd_publisher_destroy(p);
    joined_t *j = calloc(1, sizeof(*j));
    consume_all(f, j);
    assert_true(st.events >= USERS); /* one delta per user at least */
    assert_int_equal(j->events, st.events);
    assert_joined_equals_store(f->store, j);
    joined_free(j);
    free(j);
}

/* A delivery report counts only for the cycle whose id its message carries.
 * The purge of a failed cycle normally serves that cycle's reports before
 * the next cycle starts, which hides the match from the tests above, so it
 * is checked here on its own: a report of cycle 1's message arriving during
 * cycle 2 is stale and credits cycle 2 with nothing. */
static void test_report_of_another_cycle_is_stale(void **state)
{
    (void)state;
    segd_publisher_t *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    p->acks.cycle = 2;
    rd_kafka_message_t m;
    memset(&m, 0, sizeof(m));
    m.partition = 1;
    m.offset = 41;
    m.len = 10;
    m._private = (void *)(uintptr_t)1;
    segd_publisher_dr_cb(NULL, &m, p);
    assert_int_equal(p->acks.ok, 0);
    assert_int_equal(p->acks.stale, 1);
    assert_int_equal(p->acks.bytes, 0);
    assert_int_equal(p->acks.next[1], 0);
    m._private = (void *)(uintptr_t)2;
    segd_publisher_dr_cb(NULL, &m, p);
    assert_int_equal(p->acks.ok, 1);
    assert_int_equal(p->acks.bytes, 10);
    assert_int_equal(p->acks.next[1], 42);
    free(p);
}

static void test_crash_leftovers_republished(void **state)
{
    fx_t *f = *state;
    write_batch(f->store, 0);
    write_batch(f->store, 1);
    /* "crash": the process ends with its outbox unpublished */
    segd_store_close(f->store);
    f->store = NULL; /* a failing reopen leaves the teardown nothing to close twice */
    f->store = open_store(f);
    assert_int_equal(fx_outbox_entries(f->store), 2);
    write_batch(f->store, 2); /* continues after the leftovers, overwrites nothing */
    assert_int_equal(fx_outbox_entries(f->store), 3);
    segd_publisher_t *p = new_publisher(f, f->store);
    char err[256];
    assert_int_equal(segd_publisher_start(p, err, sizeof(err)), SEGD_OK);
    for (int i = 0; i < 200 && fx_outbox_entries(f->store); i++)
        usleep(50000);
    segd_publisher_stop(p, 1000);
    assert_int_equal(fx_outbox_entries(f->store), 0);
    segd_publisher_destroy(p);
    joined_t *j = calloc(1, sizeof(*j));
    consume_all(f, j);
    assert_joined_equals_store(f->store, j);
    joined_free(j);
    free(j);
}

static void test_retirement_is_a_control_event(void **state)
{
    fx_t *f = *state;
    write_batch(f->store, 0);
    segd_batch_t *b;
    segd_buf_t v = {0};
    char err[256];
    segd_retirement_t r = {42, NOW_S * 1000};
    assert_int_equal(segd_batch_new(f->store, &b), SEGD_OK);
    assert_int_equal(segd_outbox_retire_value(&r, 1, NOW_S * 1000, &v), SEGD_OK);
    segd_batch_outbox_append(b, v.data, v.len);
    assert_int_equal(segd_store_retire(f->store, 42, NOW_S * 1000, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_buf_free(&v);
    assert_int_equal(fx_outbox_entries(f->store), 2);
    segd_publisher_t *p = new_publisher(f, f->store);
    assert_int_equal(segd_publisher_drain(p, 20000, err, sizeof(err)), SEGD_OK);
    segd_publisher_destroy(p);
    joined_t *j = calloc(1, sizeof(*j));
    consume_all(f, j);
    assert_int_equal(j->retire_events, PARTITIONS); /* one per change partition */
    assert_int_equal(j->max_retired_seg, 42);
    assert_int_equal(j->events, USERS + PARTITIONS); /* 3 entries per user: one part each */
    joined_free(j);
    free(j);
}

/* A delta whose input partition the change topic lacks (the input topic
 * grew) is not sent to a shard that does not own its user: the cycle fails
 * saying why and the outbox entry stays until partitions are added. */
static void test_input_partition_past_change_topic_kept(void **state)
{
    fx_t *f = *state;
    segd_applier_t ap;
    segd_event_t ev;
    char err[256];
    segd_event_init(&ev);
    assert_int_equal(segd_applier_init(&ap, f->store), SEGD_OK);
    segd_applier_enable_outbox(&ap);
    segd_event_set_user(&ev, "user-001", 8);
    ev.ts_ms = NOW_S * 1000 - 60000;
    ev.op = SEGD_OP_UPSERT;
    segd_seg_update_t seg = {5, 3600, 0, 0};
    segd_event_add_segment(&ev, &seg);
    assert_int_equal(segd_applier_add_from(&ap, &ev, "events", PARTITIONS + 2, 7, 0), SEGD_OK);
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
    segd_publisher_t *p = new_publisher(f, f->store);
    assert_int_equal(segd_publisher_partitions(p), PARTITIONS);
    size_t acked = 9;
    assert_int_equal(segd_publisher_cycle(p, &acked, err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "has 4 partitions, fewer than input partition 6 needs"));
    assert_int_equal(acked, 0);
    assert_int_equal(fx_outbox_entries(f->store), 1);
    assert_int_equal(recorded_positions(f->store), 0);
    segd_publisher_destroy(p);
}

/* One ingest batch: user-000..user-(n-1), user i read from input partition
 * parts[i], each with one upserted segment. */
static void write_users_from(segd_store_t *s, const int32_t *parts, int n)
{
    segd_applier_t ap;
    segd_event_t ev;
    char user[32], err[256];
    segd_event_init(&ev);
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    segd_applier_enable_outbox(&ap);
    for (int u = 0; u < n; u++) {
        snprintf(user, sizeof(user), "user-%03d", u);
        segd_event_reset(&ev);
        segd_event_set_user(&ev, user, strlen(user));
        ev.ts_ms = NOW_S * 1000 - 60000 + u;
        ev.op = SEGD_OP_UPSERT;
        segd_seg_update_t seg = {5 + u, 3600, 0, 0};
        segd_event_add_segment(&ev, &seg);
        assert_int_equal(segd_applier_add_from(&ap, &ev, "events", parts[u], 7 + u, 0), SEGD_OK);
    }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
}

/* A cycle whose second delta the change topic cannot take sends nothing:
 * the refusal used to come after the first delta was produced, and every
 * retry sent that delta again (and kept it queued in librdkafka). */
static void test_refused_route_sends_nothing(void **state)
{
    fx_t *f = *state;
    const int32_t parts[] = {0, PARTITIONS + 2}; /* user-000 routes, user-001 cannot */
    write_users_from(f->store, parts, 2);
    segd_publisher_t *p = new_publisher(f, f->store);
    char err[256];
    size_t acked = 9;
    for (int i = 0; i < 3; i++)
        assert_int_equal(segd_publisher_cycle(p, &acked, err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_int_equal(fx_outbox_entries(f->store), 1);
    usleep(1000 * 1000); /* what was left queued would be delivered by now */
    joined_t *j = calloc(1, sizeof(*j));
    consume_all(f, j);
    assert_int_equal(j->events, 0);
    joined_free(j);
    free(j);
    segd_publisher_destroy(p);
}

/* A late delivery report of a failed cycle's message does not count for
 * the next cycle. Two brokers: partition 0's leader refuses the first
 * Produce, partition 1's answers its first two after 4 s. Cycle 1 fails on
 * the refusal (its flush ends at 3 s with partition 1's message in
 * flight). Cycle 2 sends both again; its partition-1 message is answered
 * after its 3 s, but cycle 1's arrives within them: counted as cycle 2's,
 * it let cycle 2 delete the outbox entry without its own acknowledgement. */
static void test_late_report_not_credited_to_next_cycle(void **state)
{
    fx_t *f = *state;
    const char *topics[] = {"late"};
    segd_dev_broker_t *b = NULL;
    char err[256];
    assert_int_equal(segd_dev_broker_new(&b, 2, 2, topics, 1, err, sizeof(err)), SEGD_OK);
    rd_kafka_mock_cluster_t *mc = segd_dev_broker_mock(b);
    assert_int_equal(rd_kafka_mock_partition_set_leader(mc, "late", 0, 1), 0);
    assert_int_equal(rd_kafka_mock_partition_set_leader(mc, "late", 1, 2), 0);
    assert_int_equal(rd_kafka_mock_broker_push_request_error_rtts(
                         mc, 1, API_PRODUCE, 1,
                         RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, 0),
                     0);
    assert_int_equal(rd_kafka_mock_broker_push_request_error_rtts(
                         mc, 2, API_PRODUCE, 2, RD_KAFKA_RESP_ERR_NO_ERROR, 4000,
                         RD_KAFKA_RESP_ERR_NO_ERROR, 4000),
                     0);
    const int32_t parts[] = {0, 1};
    write_users_from(f->store, parts, 2);
    segd_publisher_opts_t o;
    segd_publisher_opts_default(&o);
    o.brokers = segd_dev_broker_bootstraps(b);
    o.topic = "late";
    o.ack_timeout_ms = 3000; /* message.timeout.ms stays 0: retried until acked */
    segd_publisher_t *p = NULL;
    assert_int_equal(segd_publisher_new(&p, f->store, &o, err, sizeof(err)), SEGD_OK);
    size_t acked = 9;
    assert_int_not_equal(segd_publisher_cycle(p, &acked, err, sizeof(err)), SEGD_OK);
    assert_int_equal(fx_outbox_entries(f->store), 1);
    segd_err_t second = segd_publisher_cycle(p, &acked, err, sizeof(err));
    assert_int_not_equal(second, SEGD_OK);
    assert_int_equal(acked, 0);
    assert_int_equal(fx_outbox_entries(f->store), 1);
    /* the faults spent, the entry goes out and is deleted on its own acks */
    assert_int_equal(segd_publisher_drain(p, 60000, err, sizeof(err)), SEGD_OK);
    assert_int_equal(fx_outbox_entries(f->store), 0);
    segd_publisher_destroy(p);
    segd_dev_broker_destroy(b);
}

static void test_confluent_framing_registers(void **state)
{
    fx_t *f = *state;
    nginx_t reg;
    assert_int_equal(nginx_start(&reg,
                                 "location = /subjects/" CHANGES "-value/versions {\n"
                                 "   if ($request_method != POST) { return 405; }\n"
                                 "   return 200 '{\"id\":42}';\n  }\n"),
                     0);
    char url[64], err[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", reg.port);
    write_batch(f->store, 0);
    segd_publisher_opts_t o;
    segd_publisher_opts_default(&o);
    o.brokers = segd_dev_broker_bootstraps(f->broker);
    o.topic = CHANGES;
    o.framing = SEGD_CHANGE_CONFLUENT;
    o.registry_url = url;
    segd_publisher_t *p = NULL;
    assert_int_equal(segd_publisher_new(&p, f->store, &o, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_publisher_drain(p, 20000, err, sizeof(err)), SEGD_OK);
    segd_publisher_destroy(p);
    nginx_stop(&reg);
    joined_t *j = calloc(1, sizeof(*j));
    consume_framed(f, j, 42);
    assert_int_equal(j->events, USERS);
    assert_joined_equals_store(f->store, j);
    joined_free(j);
    free(j);
    /* without a reachable registry nothing is published and the outbox stays */
    write_batch(f->store, 1);
    o.registry_url = "http://127.0.0.1:1";
    assert_int_equal(segd_publisher_new(&p, f->store, &o, err, sizeof(err)), SEGD_OK);
    size_t acked = 9;
    assert_int_equal(segd_publisher_cycle(p, &acked, err, sizeof(err)), SEGD_ERR_HTTP);
    assert_int_equal(acked, 0);
    assert_int_equal(fx_outbox_entries(f->store), 1);
    segd_publisher_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_deltas_join_to_the_store, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_oversized_delta_is_split_by_bytes, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_delta_parts_follow_message_max_bytes, setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_outage_keeps_outbox_then_resumes, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_full_queue_gives_up, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fatal_producer_replaced, setup, fx_teardown),
        cmocka_unit_test(test_report_of_another_cycle_is_stale),
        cmocka_unit_test_setup_teardown(test_crash_leftovers_republished, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_retirement_is_a_control_event, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_input_partition_past_change_topic_kept, setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_refused_route_sends_nothing, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_late_report_not_credited_to_next_cycle, setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_confluent_framing_registers, setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
