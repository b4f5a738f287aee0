/* consumer/replay.c against librdkafka's mock cluster, for what the dev
 * broker cannot show: fetches answered "offset out of range" (as when
 * retention deletes the segment being read) are handled by replay itself,
 * with auto.offset.reset forced to `error`, so an operator's
 * kafka.auto.offset.reset=latest (or earliest) cannot make it skip or
 * re-read part of the range: every message of the range is read once and
 * the replay ends. */
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
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

#include "app/app.h"
#include "consumer/replay.h"
#include "store/store.h"
#include "workload/seed_producer.h"

#define TOPIC "events"
#define PARTITIONS 2
#define USERS 20
#define NOW_S 1800000000LL
#define FETCH 1 /* Kafka's ApiKey of Fetch */

typedef struct fixture {
    rd_kafka_t *rk; /* the mock cluster lives in it */
    rd_kafka_mock_cluster_t *mcl;
    char dir[64];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    char err[256];
    snprintf(f->dir, sizeof(f->dir), "/tmp/segd-test-replay-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof(err));
    f->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    f->mcl = f->rk ? rd_kafka_mock_cluster_new(f->rk, 1) : NULL;
    if (!f->mcl)
        return -1;
    const char *topics[] = {TOPIC, TOPIC ".dlq"};
    for (int i = 0; i < 2; i++)
        if (rd_kafka_mock_topic_create(f->mcl, topics[i], PARTITIONS, 1))
            return -1;
    segd_seed_produce_opts_t o = {0};
    segd_seed_produce_result_t res;
    o.brokers = rd_kafka_mock_cluster_bootstraps(f->mcl);
    o.topic = TOPIC;
    segd_seed_opts_default(&o.seed);
    o.seed.users = USERS;
    o.seed.seed = 7;
    o.seed.now_ms = NOW_S * 1000;
    o.framing = SEGD_FRAMING_SINGLE_OBJECT;
    if (segd_seed_produce(&o, NULL, &res, err, sizeof(err)) || res.events != USERS * 50)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    char cmd[128];
    rd_kafka_mock_cluster_destroy(f->mcl);
    rd_kafka_destroy(f->rk);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    int rc = system(cmd);
    free(f);
    return rc;
}

/* A replay of the whole topic with the operator's reset policy `policy`
 * while the broker answers the first `faults` fetches "out of range". */
static void replay_through_faults(fixture_t *f, const char *policy, int faults)
{
    char err[512], db[128], x[64];
    snprintf(db, sizeof(db), "%s/%s", f->dir, policy);
    segd_config_t cfg;
    segd_config_init(&cfg);
    const char *const kv[] = {"brokers", rd_kafka_mock_cluster_bootstraps(f->mcl), "topics",
                              TOPIC, "group", "g", "db", db, "batch.max.messages", "50",
                              "retry.max.ms", "400", NULL};
    for (size_t i = 0; kv[i]; i += 2)
        assert_int_equal(segd_config_set(&cfg, kv[i], kv[i + 1], err, sizeof(err)), SEGD_OK);
    snprintf(x, sizeof(x), "auto.offset.reset=%s", policy);
    assert_int_equal(segd_config_set_x(&cfg, x, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_finish(&cfg, err, sizeof(err)), SEGD_OK);

    segd_store_opts_t so;
    segd_app_store_opts(&so);
    so.path = db;
    so.now_ms = NOW_S * 1000;
    so.block_cache_mb = 8;
    segd_store_t *s = NULL;
    assert_int_equal(segd_store_open(&s, &so, err, sizeof(err)), SEGD_OK);

    rd_kafka_resp_err_t errs[16];
    assert_true(faults <= 16);
    for (int i = 0; i < faults; i++)
        errs[i] = RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE;
    rd_kafka_mock_push_request_errors_array(f->mcl, FETCH, (size_t)faults, errs);
    segd_replay_opts_t o = {0};
    o.cfg = &cfg;
    o.from = SEGD_REPLAY_BEGINNING;
    o.to = SEGD_REPLAY_END;
    o.no_changes = 1;
    volatile sig_atomic_t stop = 0;
    segd_replay_stats_t st;
    alarm(60); /* a partition that never ends fails the test instead of hanging it */
    segd_err_t e = segd_replay_run(&o, s, &stop, &st, err, sizeof(err));
    alarm(0);
    if (e)
        fail_msg("%s: %s", policy, err);
    assert_int_equal(st.partitions, PARTITIONS);
    assert_int_equal(st.total, USERS * 50);
    assert_int_equal(st.done, USERS * 50);
    assert_int_equal(st.messages, USERS * 50); /* none skipped, none read twice */
    assert_int_equal(st.events, USERS * 50);
    assert_int_equal(st.lost, 0); /* the log held every offset it refused */
    segd_store_close(s);
    segd_config_free(&cfg);
}

static void test_out_of_range_latest(void **state)
{
    replay_through_faults(*state, "latest", 3);
}

static void test_out_of_range_earliest(void **state)
{
    replay_through_faults(*state, "earliest", 2);
}

/* A dozen refusals in a row (a leader settling): asked again with a
 * backoff, not given up after a handful of immediate retries. */
static void test_out_of_range_many(void **state)
{
    replay_through_faults(*state, "error", 12);
}

static void test_out_of_range_error(void **state)
{
    replay_through_faults(*state, "error", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_out_of_range_latest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range_earliest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range_many, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
