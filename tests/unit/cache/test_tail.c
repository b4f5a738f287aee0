/* Tests for cache/tail.c against librdkafka's mock cluster (issue 9 #8): a
 * tail never hides a gap in the change stream. A snapshot position (or an
 * unlisted partition, which needs offset 0) below the log start is refused
 * by segd_tail_new; a fetch position the broker no longer has, found while
 * tailing, is final (SEGD_TAIL_GAP) instead of librdkafka's silent jump; and
 * caught_up turns on only once the end offsets seen at start are reached. */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
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

#include "base/log.h"
#include "cache/tail.h" /* the same path before and after the layer moves */
#include "wire/change_frame.h"
#include "wire/member.h"

#define TOPIC "changes"
#define FETCH 1 /* Kafka's ApiKey of Fetch */

typedef struct fixture {
    rd_kafka_t *mock_rk, *producer;
    rd_kafka_mock_cluster_t *mcl;
    const char *bootstraps;
    segd_edge_t *edge;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    char err[256];
    f->mock_rk = rd_kafka_new(RD_KAFKA_PRODUCER, rd_kafka_conf_new(), err, sizeof(err));
    f->mcl = f->mock_rk ? rd_kafka_mock_cluster_new(f->mock_rk, 1) : NULL;
    if (!f->mcl || rd_kafka_mock_topic_create(f->mcl, TOPIC, 1, 1))
        return -1;
    f->bootstraps = rd_kafka_mock_cluster_bootstraps(f->mcl);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", f->bootstraps, err, sizeof(err)) ||
        rd_kafka_conf_set(conf, "linger.ms", "0", err, sizeof(err)))
        return -1;
    f->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!f->producer || segd_edge_new(&f->edge, NULL))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    rd_kafka_destroy(f->producer);
    rd_kafka_mock_cluster_destroy(f->mcl);
    rd_kafka_destroy(f->mock_rk);
    segd_edge_destroy(f->edge);
    free(f);
    return 0;
}

static void produce(fixture_t *f, const void *v, size_t len)
{
    assert_int_equal(rd_kafka_producev(f->producer, RD_KAFKA_V_TOPIC(TOPIC),
                                       RD_KAFKA_V_PARTITION(0),
                                       RD_KAFKA_V_VALUE((void *)v, len),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
                     0);
    assert_int_equal(rd_kafka_flush(f->producer, 10000), 0);
}

/* One small message. The tail counts what is not a change event as
 * skipped; positions, gaps and readiness do not depend on the contents. */
static void produce_small(fixture_t *f, int u)
{
    char v[16];
    int n = snprintf(v, sizeof(v), "m%d", u);
    produce(f, v, (size_t)n);
}

static void low_high(fixture_t *f, int64_t *low, int64_t *high)
{
    assert_int_equal(rd_kafka_query_watermark_offsets(f->producer, TOPIC, 0, low, high, 10000),
                     0);
}

static segd_tail_t *new_tail(fixture_t *f, const segd_manifest_t *m, int from_beginning,
                             segd_err_t want, const char *want_msg)
{
    segd_tail_opts_t o;
    segd_tail_opts_default(&o);
    o.brokers = f->bootstraps;
    o.topic = TOPIC;
    o.from_beginning = from_beginning;
    segd_tail_t *t = NULL;
    char err[512] = "";
    segd_err_t got = segd_tail_new(&t, f->edge, &o, m, err, sizeof(err));
    if (got != want)
        fail_msg("segd_tail_new: %d, want %d: %s", got, want, err);
    if (want_msg && !strstr(err, want_msg))
        fail_msg("segd_tail_new: '%s' lacks '%s'", err, want_msg);
    return t;
}

/* The mock keeps <= 5 MiB per partition: 7 MB move the log start past 0. */
static void test_snapshot_older_than_retention_is_refused(void **state)
{
    fixture_t *f = *state;
    produce_small(f, 1);
    char *junk = calloc(1, 100000);
    for (int i = 0; i < 70; i++)
        produce(f, junk, 100000);
    free(junk);
    produce_small(f, 2);
    int64_t low, high;
    low_high(f, &low, &high);
    assert_true(low > 1);
    print_message("log start %lld, end %lld\n", (long long)low, (long long)high);

    segd_manifest_t m;
    segd_manifest_init(&m);
    m.changes_topic = strdup(TOPIC);
    m.changes = calloc(1, sizeof(*m.changes));
    m.n_changes = 1;
    m.changes[0].offset = 1; /* the delta after the first: gone */
    const char *msg = "snapshot older than the change topic's retention: load a newer snapshot";
    new_tail(f, &m, 0, SEGD_ERR_INVALID, msg);
    new_tail(f, &m, 1, SEGD_ERR_INVALID, msg); /* --from-beginning does not hide it */
    m.n_changes = 0; /* a partition the manifest does not list needs offset 0 */
    new_tail(f, &m, 0, SEGD_ERR_INVALID, msg);
    m.n_changes = 1;
    m.changes[0].offset = high + 5; /* beyond the end: another topic */
    new_tail(f, &m, 0, SEGD_ERR_INVALID, "recreated");

    /* a position still held: tails, catches up, reads the last message */
    m.changes[0].offset = high - 1;
    segd_tail_t *t = new_tail(f, &m, 0, SEGD_OK, NULL);
    char err[512];
    assert_int_equal(segd_tail_catch_up(t, 20000, err, sizeof(err)), SEGD_OK);
    segd_tail_stats_t st;
    segd_tail_get_stats(t, &st);
    assert_int_equal(st.applied + st.skipped, 1);
    assert_true(st.caught_up);
    segd_tail_destroy(t);
    /* without a manifest (nothing known) it starts at the log start */
    t = new_tail(f, NULL, 0, SEGD_OK, NULL);
    assert_int_equal(segd_tail_catch_up(t, 20000, err, sizeof(err)), SEGD_OK);
    segd_tail_destroy(t);
    segd_manifest_free(&m);
}

/* A position that becomes out of range while tailing (here the broker
 * answers a fetch with OFFSET_OUT_OF_RANGE, as when retention passes a
 * lagging cache) stops the tail instead of jumping to an end. */
static void test_gap_while_tailing_is_final(void **state)
{
    fixture_t *f = *state;
    for (int u = 0; u < 3; u++)
        produce_small(f, u);
    segd_tail_t *t = new_tail(f, NULL, 0, SEGD_OK, NULL);
    segd_tail_stats_t st;
    segd_tail_get_stats(t, &st);
    assert_false(st.caught_up); /* 3 messages behind */
    for (int i = 0; i < 100 && !st.caught_up; i++) {
        assert_true(segd_tail_poll(t, 100) >= 0);
        segd_tail_get_stats(t, &st);
    }
    assert_true(st.caught_up);
    assert_int_equal(st.applied + st.skipped, 3);
    rd_kafka_mock_push_request_errors(f->mcl, FETCH, 4, RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE,
                                      RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE,
                                      RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE,
                                      RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE);
    produce_small(f, 3);
    int rc = 0;
    time_t end = time(NULL) + 15;
    while (rc != SEGD_TAIL_GAP && time(NULL) < end)
        rc = segd_tail_poll(t, 100);
    assert_int_equal(rc, SEGD_TAIL_GAP);
    assert_int_equal(segd_tail_poll(t, 0), SEGD_TAIL_GAP); /* final */
    segd_tail_destroy(t);
}

static void produce_delta(fixture_t *f, const char *user, int64_t committed_at_ms)
{
    segd_change_t c;
    segd_change_init(&c);
    c.user_id = user;
    c.user_id_len = strlen(user);
    c.bucket = 0;
    c.buckets = 1;
    c.committed_at_ms = committed_at_ms;
    segd_buf_t b = {0};
    assert_int_equal(segd_change_frame(SEGD_CHANGE_SINGLE_OBJECT, -1, &b), SEGD_OK);
    assert_int_equal(segd_change_encode(&c, &b), SEGD_OK);
    produce(f, b.data, b.len);
    segd_buf_free(&b);
    segd_change_free(&c);
}

static void produce_member(fixture_t *f, const char *id, int64_t committed_at_ms)
{
    segd_member_t m = {.id = id, .id_len = strlen(id), .master = id, .master_len = strlen(id),
                       .master_first_seen_ms = 1, .bucket = 0, .buckets = 1,
                       .committed_at_ms = committed_at_ms};
    segd_buf_t b = {0};
    assert_int_equal(segd_frame(SEGD_FRAME_MEMBER, SEGD_CHANGE_SINGLE_OBJECT, -1, &b), SEGD_OK);
    assert_int_equal(segd_member_encode(&m, &b), SEGD_OK);
    produce(f, b.data, b.len);
    segd_buf_free(&b);
}

static segd_tail_stats_t poll_until_applied(segd_tail_t *t, uint64_t applied)
{
    segd_tail_stats_t st;
    segd_tail_get_stats(t, &st);
    time_t end = time(NULL) + 30;
    while (st.applied < applied && time(NULL) < end) {
        assert_true(segd_tail_poll(t, 100) >= 0);
        segd_tail_get_stats(t, &st);
    }
    assert_int_equal(st.applied, applied);
    return st;
}

/* A MemberEvent's committed_at_ms is its own: the newest commit time seen
 * took the last change event's (stale, or 0 before any) instead. */
static void test_member_event_commit_time_is_its_own(void **state)
{
    fixture_t *f = *state;
    segd_tail_t *t = new_tail(f, NULL, 0, SEGD_OK, NULL);
    produce_member(f, "alice", 2000);
    assert_int_equal(poll_until_applied(t, 1).newest_committed_ms, 2000);
    produce_delta(f, "bob", 3000);
    assert_int_equal(poll_until_applied(t, 2).newest_committed_ms, 3000);
    produce_member(f, "carol", 9000);
    assert_int_equal(poll_until_applied(t, 3).newest_committed_ms, 9000);
    segd_tail_destroy(t);
}

/* The exit path of a cache that met a gap: every partition of a topic led
 * by three brokers fails its fetches out of range at once, the tail stops
 * at the first, and the consumer is destroyed while the other partitions'
 * out-of-range answers are still arriving (with real brokers, one of them
 * was seen handled after its partition had already been stopped). Each
 * round's replies come back with other delays, so the answers land at
 * other points of the close. A destroy that never returns fails the test
 * (SIGALRM) instead of hanging the suite. */
static void test_gap_on_every_partition_then_destroy(void **state)
{
    fixture_t *f = *state;
    rd_kafka_mock_cluster_t *mcl = rd_kafka_mock_cluster_new(f->mock_rk, 3);
    assert_non_null(mcl);
    const char *bootstraps = rd_kafka_mock_cluster_bootstraps(mcl);
    for (int round = 0; round < 12; round++) {
        char topic[32];
        snprintf(topic, sizeof(topic), "changes%d", round);
        assert_int_equal(rd_kafka_mock_topic_create(mcl, topic, 4, 3), 0);
        for (int32_t p = 0; p < 4; p++)
            assert_int_equal(rd_kafka_mock_partition_set_leader(mcl, topic, p, 1 + p % 3), 0);
        segd_tail_opts_t o;
        segd_tail_opts_default(&o);
        o.brokers = bootstraps;
        o.topic = topic;
        segd_tail_t *t = NULL;
        char err[512] = "";
        if (segd_tail_new(&t, f->edge, &o, NULL, err, sizeof(err)))
            fail_msg("segd_tail_new: %s", err);
        segd_tail_stats_t st = {0};
        for (int i = 0; i < 100 && !st.caught_up; i++) {
            assert_true(segd_tail_poll(t, 100) >= 0);
            segd_tail_get_stats(t, &st);
        }
        assert_true(st.caught_up);
        for (int32_t b = 1; b <= 3; b++)
            assert_int_equal(rd_kafka_mock_broker_push_request_error_rtts(
                                 mcl, b, FETCH, 1, RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE,
                                 (round * 7 + b * 5) % 40),
                             0);
        int rc = 0;
        time_t end = time(NULL) + 15;
        while (rc != SEGD_TAIL_GAP && time(NULL) < end)
            rc = segd_tail_poll(t, 100);
        assert_int_equal(rc, SEGD_TAIL_GAP);
        alarm(60);
        segd_tail_destroy(t);
        alarm(0);
        rd_kafka_mock_clear_request_errors(mcl, FETCH);
    }
    rd_kafka_mock_cluster_destroy(mcl);
}

/* A destroy that librdkafka does not finish within destroy_wait_ms returns
 * anyway and leaves the teardown to its own thread, which frees the tail
 * when it ends (a negative wait takes that path every time). Under ASan a
 * use after free or a leak there fails the test. */
static void test_destroy_left_to_its_thread(void **state)
{
    fixture_t *f = *state;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    segd_log_t *log = NULL;
    assert_int_equal(segd_log_new(&log, out, SEGD_LOG_WARN, SEGD_LOG_LOGFMT), SEGD_OK);
    for (int round = 0; round < 3; round++) {
        segd_tail_opts_t o;
        segd_tail_opts_default(&o);
        o.brokers = f->bootstraps;
        o.topic = TOPIC;
        o.log = log;
        o.destroy_wait_ms = -1;
        segd_tail_t *t = NULL;
        char err[512] = "";
        if (segd_tail_new(&t, f->edge, &o, NULL, err, sizeof(err)))
            fail_msg("segd_tail_new: %s", err);
        assert_true(segd_tail_poll(t, 100) >= 0);
        time_t t0 = time(NULL);
        segd_tail_destroy(t);
        assert_true(time(NULL) - t0 < 5);
    }
    sleep(3); /* the teardowns end and free their tails */
    fflush(out);
    assert_non_null(strstr(text, "left to finish on its own thread"));
    segd_log_destroy(log);
    fclose(out);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_snapshot_older_than_retention_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gap_while_tailing_is_final, setup, teardown),
        cmocka_unit_test_setup_teardown(test_member_event_commit_time_is_its_own, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_destroy_left_to_its_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gap_on_every_partition_then_destroy, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
