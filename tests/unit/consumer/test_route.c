/* Partitioning against librdkafka's mock cluster (DESIGN §5, §7): an input
 * event in another partition than input.partitioner puts its user in is
 * applied and counted (`misrouted`), and the count is kept with the batch's
 * offsets, so it survives a restart; through a real daemon, every delta
 * lands on the change partition of its source input partition, deltas with
 * no input source on the user's partition, a RETIRE on every partition;
 * `bucket` is the user's partition; a change topic with fewer partitions
 * than the input topic is refused at start, naming both counts. */
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/app.h"
#include "app/daemon.h"
#include "consumer/apply.h"
#include "consumer/pipeline.h"
#include "core/partition.h"
#include "publisher/publisher.h"
#include "store/store.h"
#include "wire/avro_codec.h"
#include "wire/outbox.h"
#include "pipeline_fixture.h"

#define TOPIC "events"
#define CHANGES "changes"
#define NARROW "narrow" /* a change topic with fewer partitions */
#define PARTITIONS 4
#define NOW_S FX_NOW_S
#define USERS 24

/* The fixture's topics, and NARROW beside them. */
static int setup(void **state)
{
    static const char *const topics[] = {TOPIC, TOPIC ".dlq", CHANGES, NULL};
    const fx_opts_t o = {"route", PARTITIONS, topics, 0};
    if (fx_setup(state, &o))
        return -1;
    fx_t *f = *state;
    if (rd_kafka_mock_topic_create(f->mcl, NARROW, 2, 1)) {
        fx_teardown(state);
        return -1;
    }
    return 0;
}

/* One store per test, at DIR/db. */
static segd_store_t *open_store(const fx_t *f)
{
    return fx_open_store(f, "db");
}

static void config(segd_config_t *cfg, const fx_t *f, int changes, const char *topic)
{
    char db[128];
    snprintf(db, sizeof(db), "%s/db", f->dir);
    const char *const kv[] = {"changes.enable", changes ? "1" : "0", "changes.topic", topic,
                              NULL};
    fx_config(cfg, f, "g-route", db, kv);
}

static int32_t home(const char *user)
{
    return segd_partition_of(SEGD_PARTITIONER_MURMUR2, user, strlen(user), PARTITIONS);
}

/* Produces one UPSERT of user to an explicit partition, as a producer with
 * another partitioner (or none) would. */
static void produce_to(const fx_t *f, const char *user, int32_t partition, int k)
{
    char err[256];
    segd_avro_codec_t *codec;
    segd_event_t ev;
    segd_buf_t buf = {0};
    segd_event_init(&ev);
    assert_int_equal(segd_avro_codec_new(&codec, NULL, NULL, err, sizeof(err)), SEGD_OK);
    segd_event_set_user(&ev, user, strlen(user));
    ev.ts_ms = NOW_S * 1000 - 5000 + k;
    ev.op = SEGD_OP_UPSERT;
    segd_seg_update_t u = {100 + k, 86400, 0, 0};
    segd_event_add_segment(&ev, &u);
    assert_int_equal(segd_avro_encode(codec, SEGD_FRAMING_SINGLE_OBJECT, 0, &ev, &buf), SEGD_OK);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", fx_bootstraps(f), err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    assert_non_null(rk);
    assert_int_equal(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_PARTITION(partition),
                                       RD_KAFKA_V_KEY(user, strlen(user)),
                                       RD_KAFKA_V_VALUE(buf.data, buf.len),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
                     0);
    assert_int_equal(rd_kafka_flush(rk, 10000), 0);
    rd_kafka_destroy(rk);
    segd_buf_free(&buf);
    segd_event_free(&ev);
    segd_avro_codec_destroy(codec);
}

/* Users 0..n-1 from `first`: the odd ones produced one partition past their
 * home partition. Returns how many are misrouted. */
static int produce_users(const fx_t *f, int first, int n)
{
    int misrouted = 0;
    char user[32];
    for (int i = first; i < first + n; i++) {
        snprintf(user, sizeof(user), "user-%03d", i);
        int off = i % 2;
        produce_to(f, user, (home(user) + off) % PARTITIONS, i);
        misrouted += off;
    }
    return misrouted;
}

static void step_until(segd_pipeline_t *p, uint64_t messages)
{
    char err[256];
    segd_pipeline_stats_t st;
    time_t end = time(NULL) + 60;
    do {
        assert_int_equal(segd_pipeline_step(p, err, sizeof(err)), SEGD_OK);
        segd_pipeline_get_stats(p, &st);
    } while (st.messages < messages && time(NULL) < end);
    assert_int_equal(st.messages, messages);
}

static int64_t stored_misrouted(segd_store_t *s)
{
    int64_t v = -1;
    char err[256];
    assert_int_equal(segd_store_counter_get(s, SEGD_COUNTER_MISROUTED, &v, err, sizeof(err)),
                     SEGD_OK);
    return v;
}

static void test_misrouted_applied_counted_kept(void **state)
{
    fx_t *f = *state;
    volatile sig_atomic_t stop = 0;
    char err[256], user[32];
    int want = produce_users(f, 0, 10);
    assert_int_equal(want, 5);
    segd_store_t *s = open_store(f);
    assert_int_equal(stored_misrouted(s), 0);
    segd_config_t cfg;
    config(&cfg, f, 0, CHANGES);
    segd_pipeline_t *p;
    assert_int_equal(segd_pipeline_new(&p, &cfg, s, &stop, err, sizeof(err)), SEGD_OK);
    step_until(p, 10);
    segd_pipeline_close(p);
    segd_pipeline_stats_t st;
    segd_pipeline_get_stats(p, &st);
    segd_pipeline_destroy(p);
    assert_int_equal(st.events, 10);
    assert_int_equal(st.misrouted, 5);
    /* applied as usual: every user, misrouted or not, is in the store */
    segd_profile_t prof;
    segd_profile_init(&prof);
    for (int i = 0; i < 10; i++) {
        snprintf(user, sizeof(user), "user-%03d", i);
        assert_int_equal(segd_store_get(s, user, strlen(user), &prof, err, sizeof(err)), SEGD_OK);
        assert_int_equal(prof.n, 1);
    }
    segd_profile_free(&prof);
    int32_t count = 0;
    assert_int_equal(segd_store_partition_count(s, TOPIC, &count, err, sizeof(err)), SEGD_OK);
    assert_int_equal(count, PARTITIONS);
    segd_store_close(s);

    /* a restart reads the count back and adds to it */
    s = open_store(f);
    assert_int_equal(stored_misrouted(s), 5);
    want = produce_users(f, 10, 4);
    assert_int_equal(segd_pipeline_new(&p, &cfg, s, &stop, err, sizeof(err)), SEGD_OK);
    step_until(p, 4);
    segd_pipeline_close(p);
    segd_pipeline_get_stats(p, &st);
    segd_pipeline_destroy(p);
    assert_int_equal(st.misrouted, (uint64_t)want);
    assert_int_equal(stored_misrouted(s), 5 + want);
    segd_store_close(s);
    segd_config_free(&cfg);
}

/* ---------- the change topic ---------- */

typedef struct seen {
    uint64_t deltas, sourced, sourceless, retires[PARTITIONS];
} seen_t;

static void check_event(seen_t *sn, const rd_kafka_message_t *m, const segd_change_t *c)
{
    assert_int_equal(c->buckets, PARTITIONS);
    if (c->kind == SEGD_CHANGE_RETIRE) {
        assert_int_equal(c->bucket, -1);
        sn->retires[m->partition]++;
        return;
    }
    char user[64];
    assert_true(c->user_id_len < sizeof(user));
    memcpy(user, c->user_id, c->user_id_len);
    user[c->user_id_len] = 0;
    assert_int_equal(c->bucket, home(user)); /* bucket = the user's partition */
    sn->deltas++;
    if (!c->n_sources) { /* backfill, erase: the user's partition */
        assert_int_equal(m->partition, home(user));
        sn->sourceless++;
        return;
    }
    for (size_t i = 0; i < c->n_sources; i++) /* one source partition per delta: its own */
        assert_int_equal(c->sources[i].partition, m->partition);
    sn->sourced++;
}

static void consume_changes(const fx_t *f, seen_t *sn)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", fx_bootstraps(f), err, sizeof(err));
    rd_kafka_conf_set(conf, "group.id", "reader", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(PARTITIONS);
    for (int i = 0; i < PARTITIONS; i++)
        rd_kafka_topic_partition_list_add(parts, CHANGES, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    /* read to the end offsets as they are now (the publisher has drained):
     * a fixed idle time would end early on a slow machine */
    int64_t end[PARTITIONS], next[PARTITIONS] = {0};
    for (int i = 0; i < PARTITIONS; i++) {
        int64_t lo;
        assert_int_equal(rd_kafka_query_watermark_offsets(rk, CHANGES, i, &lo, &end[i], 10000),
                         RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    segd_change_t c;
    segd_change_init(&c);
    for (int polls = 0; polls < 600;) {
        int behind = 0;
        for (int i = 0; i < PARTITIONS; i++)
            behind |= next[i] < end[i];
        if (!behind)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m) {
            polls++;
            continue;
        }
        if (!m->err) {
            next[m->partition] = m->offset + 1;
            const uint8_t *body;
            size_t blen;
            assert_int_equal(segd_change_unframe(m->payload, m->len, -1, &body, &blen), SEGD_OK);
            assert_int_equal(segd_change_decode(body, blen, &c), SEGD_OK);
            check_event(sn, m, &c);
        }
        rd_kafka_message_destroy(m);
    }
    segd_change_free(&c);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

/* What an offline command leaves in the outbox: erases with no input
 * source (segd erase) and a retirement (segd segments retire). */
static void write_sourceless(segd_store_t *s, int users)
{
    segd_applier_t ap;
    segd_event_t ev;
    char user[32], err[256];
    segd_event_init(&ev);
    assert_int_equal(segd_applier_init(&ap, s), SEGD_OK);
    segd_applier_enable_outbox(&ap);
    for (int i = 0; i < users; i++) {
        snprintf(user, sizeof(user), "user-%03d", i);
        segd_event_reset(&ev);
        segd_event_set_user(&ev, user, strlen(user));
        ev.ts_ms = NOW_S * 1000 - 1000;
        ev.op = SEGD_OP_ERASE_USER;
        assert_int_equal(segd_applier_add(&ap, &ev), SEGD_OK);
    }
    assert_int_equal(segd_applier_flush(&ap, err, sizeof(err)), SEGD_OK);
    segd_applier_free(&ap);
    segd_event_free(&ev);
    segd_batch_t *b;
    segd_buf_t v = {0};
    segd_retirement_t r = {100, NOW_S * 1000};
    assert_int_equal(segd_batch_new(s, &b), SEGD_OK);
    assert_int_equal(segd_outbox_retire_value(&r, 1, NOW_S * 1000, &v), SEGD_OK);
    segd_batch_outbox_append(b, v.data, v.len);
    assert_int_equal(segd_store_retire(s, 100, NOW_S * 1000, b, err, sizeof(err)), SEGD_OK);
    segd_batch_destroy(b);
    segd_buf_free(&v);
}

static void wait_drained(segd_store_t *s)
{
    for (int i = 0; i < 600 && segd_store_outbox_depth(s); i++)
        usleep(50000);
    assert_int_equal(segd_store_outbox_depth(s), 0);
}

static void test_deltas_on_their_source_partition(void **state)
{
    fx_t *f = *state;
    volatile sig_atomic_t stop = 0;
    char err[256];
    produce_users(f, 0, USERS);
    segd_store_t *s = open_store(f);
    segd_config_t cfg;
    config(&cfg, f, 1, CHANGES);
    segd_daemon_t *d;
    assert_int_equal(segd_daemon_new(&d, &cfg, s, &stop, err, sizeof(err)), SEGD_OK);
    step_until(segd_daemon_pipeline(d), USERS);
    wait_drained(s);
    segd_daemon_destroy(d);
    /* then what offline commands wrote, published by the next start */
    write_sourceless(s, 6);
    assert_int_equal(segd_daemon_new(&d, &cfg, s, &stop, err, sizeof(err)), SEGD_OK);
    wait_drained(s);
    segd_daemon_destroy(d);
    seen_t sn = {0};
    consume_changes(f, &sn);
    assert_int_equal(sn.sourced, USERS); /* half of them from a partition not their home */
    assert_int_equal(sn.sourceless, 6);
    for (int p = 0; p < PARTITIONS; p++)
        assert_int_equal(sn.retires[p], 1);
    segd_store_close(s);
    segd_config_free(&cfg);
}

static void test_narrow_change_topic_refused(void **state)
{
    fx_t *f = *state;
    volatile sig_atomic_t stop = 0;
    char err[512] = "";
    segd_store_t *s = open_store(f);
    segd_config_t cfg;
    config(&cfg, f, 1, NARROW);
    segd_daemon_t *d = NULL;
    assert_int_equal(segd_daemon_new(&d, &cfg, s, &stop, err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_null(d);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "change topic " NARROW " has 2 partitions"));
    assert_non_null(strstr(err, "4 of input topic " TOPIC));
    /* the same store and input with a wide enough change topic start */
    segd_config_free(&cfg);
    config(&cfg, f, 1, CHANGES);
    assert_int_equal(segd_daemon_new(&d, &cfg, s, &stop, err, sizeof(err)), SEGD_OK);
    segd_daemon_destroy(d);
    segd_store_close(s);
    segd_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_misrouted_applied_counted_kept, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_deltas_on_their_source_partition, setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_narrow_change_topic_refused, setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
