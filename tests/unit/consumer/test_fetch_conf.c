/* Tests for consumer/fetch_conf.c: the budget's fetch share as librdkafka
 * settings, whole for a process's main consumer and a sixteenth for one
 * beside it, each within what librdkafka takes; an operator's larger
 * message.max.bytes raises fetch.max.bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>

#include "config/config.h"
#include "consumer/fetch_conf.h"

static long long setting(rd_kafka_conf_t *c, const char *key)
{
    char v[64];
    size_t len = sizeof(v);
    assert_int_equal(rd_kafka_conf_get(c, key, v, &len), RD_KAFKA_CONF_OK);
    return strtoll(v, NULL, 10);
}

static void budget(segd_config_t *cfg, const char *mb)
{
    char err[256];
    segd_config_init(cfg);
    assert_int_equal(segd_config_set(cfg, "memory.limit.mb", mb, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_set(cfg, "brokers", "b:9092", err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_set(cfg, "topics", "t", err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_set(cfg, "group", "g", err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_set(cfg, "db", "/nonexistent/db", err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_finish(cfg, err, sizeof(err)), SEGD_OK);
}

/* the main consumer gets the split as it is, a side one a sixteenth */
static void test_main_and_side(void **state)
{
    (void)state;
    char err[256];
    segd_config_t cfg;
    budget(&cfg, "1024");
    const segd_memory_split_t *m = &cfg.memory;
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    assert_int_equal(segd_fetch_conf_apply(c, "t", &cfg, SEGD_FETCH_MAIN, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(setting(c, "queued.min.messages"), m->fetch_queue_messages);
    assert_int_equal(setting(c, "queued.max.messages.kbytes"), m->fetch_queue_kb);
    assert_int_equal(setting(c, "fetch.max.bytes"), m->fetch_max_bytes);
    assert_int_equal(setting(c, "max.partition.fetch.bytes"), m->partition_fetch_bytes);
    rd_kafka_conf_destroy(c);
    c = rd_kafka_conf_new();
    assert_int_equal(segd_fetch_conf_apply(c, "t", &cfg, SEGD_FETCH_SIDE, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(setting(c, "queued.min.messages"), m->fetch_queue_messages / 16);
    assert_int_equal(setting(c, "queued.max.messages.kbytes"), m->fetch_queue_kb / 16);
    assert_int_equal(setting(c, "fetch.max.bytes"), m->fetch_max_bytes / 16);
    rd_kafka_conf_destroy(c);
    segd_config_free(&cfg);
}

/* at the smallest budget a side consumer's settings stay usable and are
 * accepted by librdkafka, a client included */
static void test_smallest_budget(void **state)
{
    (void)state;
    char err[256], errbuf[512];
    segd_config_t cfg;
    budget(&cfg, "128");
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    assert_int_equal(segd_fetch_conf_apply(c, "t", &cfg, SEGD_FETCH_SIDE, err, sizeof(err)),
                     SEGD_OK);
    assert_true(setting(c, "queued.min.messages") >= 1000);
    assert_true(setting(c, "queued.max.messages.kbytes") >= 1024);
    assert_true(setting(c, "fetch.max.bytes") >= setting(c, "message.max.bytes"));
    rd_kafka_conf_set(c, "group.id", "g", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, errbuf, sizeof(errbuf));
    assert_non_null(rk);
    rd_kafka_destroy(rk);
    segd_config_free(&cfg);
}

/* librdkafka refuses fetch.max.bytes < message.max.bytes: an operator's
 * larger message.max.bytes raises it */
static void test_message_max_bytes_raises_fetch(void **state)
{
    (void)state;
    char err[256];
    segd_config_t cfg;
    budget(&cfg, "128");
    assert_int_equal(segd_config_set_x(&cfg, "message.max.bytes=60000000", err, sizeof(err)),
                     SEGD_OK);
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    assert_int_equal(segd_fetch_conf_apply(c, "t", &cfg, SEGD_FETCH_SIDE, err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(setting(c, "fetch.max.bytes"), 60000000);
    rd_kafka_conf_destroy(c);
    segd_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_main_and_side),
        cmocka_unit_test(test_smallest_budget),
        cmocka_unit_test(test_message_max_bytes_raises_fetch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
