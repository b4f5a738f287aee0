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
#include "pipeline_fixture.h"

#define TOPIC "events"
#define PARTITIONS 2
#define USERS 20
#define FETCH 1 /* Kafka's ApiKey of Fetch */

static int setup(void **state)
{
    static const char *const topics[] = {TOPIC, TOPIC ".dlq", NULL};
    const fx_opts_t o = {"replay", PARTITIONS, topics, 0};
    uint64_t events = 0;
    if (fx_setup(state, &o))
        return -1;
    if (fx_seed_produce(*state, USERS, 7, &events) || events != USERS * 50) {
        fx_teardown(state);
        return -1;
    }
    return 0;
}

/* A replay of the whole topic with the operator's reset policy `policy`
 * while the broker answers the first `faults` fetches "out of range". */
static void replay_through_faults(fx_t *f, const char *policy, int faults)
{
    char err[512], db[128], x[64];
    snprintf(db, sizeof(db), "%s/%s", f->dir, policy);
    /* not fx_config: a replay assigns its partitions itself (no group
     * session to time out) and this one retries at its own pace */
    segd_config_t cfg;
    segd_config_init(&cfg);
    const char *const kv[] = {"brokers", fx_bootstraps(f), "topics", TOPIC, "group", "g",
                              "db", db, "batch.max.messages", "50", "retry.max.ms", "400",
                              NULL};
    for (size_t i = 0; kv[i]; i += 2)
        assert_int_equal(segd_config_set(&cfg, kv[i], kv[i + 1], err, sizeof(err)), SEGD_OK);
    snprintf(x, sizeof(x), "auto.offset.reset=%s", policy);
    assert_int_equal(segd_config_set_x(&cfg, x, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_finish(&cfg, err, sizeof(err)), SEGD_OK);

    segd_store_t *s = fx_open_store(f, policy); /* at db */

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
        cmocka_unit_test_setup_teardown(test_out_of_range_latest, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range_earliest, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range_error, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range_many, setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
