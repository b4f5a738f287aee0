/* Tests for config/memory.c (the split of memory.limit.mb) and its use by
 * config/config.c: the shares add up to no more than the budget, each is
 * within what its consumer accepts (librdkafka takes them, RocksDB opens
 * with them), they scale with the budget, and explicit keys keep their value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>

#include "app/app.h"
#include "config/config.h"
#include "config/memory.h"

#define MIB (1LL << 20)

/* What the shares can hold at most, in bytes: the sum the budget promises. */
static int64_t planned_bytes(const segd_memory_split_t *m)
{
    return SEGD_MEMORY_FIXED_MB * MIB + m->block_cache_mb * MIB + m->memtable_mb * MIB +
           m->fetch_queue_kb * 1024 +
           m->fetch_queue_messages * SEGD_MEMORY_QUEUED_MESSAGE_BYTES +
           /* a response in flight beyond the queue, at a typical message's
            * full cost */
           m->fetch_max_bytes / SEGD_MEMORY_QUEUED_TYPICAL_MESSAGE *
               (SEGD_MEMORY_QUEUED_TYPICAL_MESSAGE + SEGD_MEMORY_QUEUED_MESSAGE_BYTES) +
           m->producer_queue_kb * 1024 +
           m->publisher_entries * m->batch_max_messages * 1024 +
           m->batch_max_messages * (16 << 10) + m->restore_mb * MIB;
}

static void test_shares_fit_the_budget(void **state)
{
    (void)state;
    const int64_t limits[] = {128, 256, 512, 1024, 4096, 65536, 1 << 20};
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        segd_memory_split_t m;
        segd_memory_split(limits[i], 0, &m);
        assert_int_equal(m.limit_mb, limits[i]);
        assert_true(planned_bytes(&m) <= limits[i] * MIB);
        /* ... and leaves no more than a fifth of it unplanned (7 % headroom
         * plus what the caps leave over) below 4 GiB, where caps do not bind */
        if (limits[i] <= 4096)
            assert_true(planned_bytes(&m) >= limits[i] * MIB * 4 / 5);
        assert_true(m.block_cache_mb >= 8); /* store.block.cache.mb's lower bound */
        assert_true(m.memtable_mb >= m.write_buffer_mb * SEGD_MEMORY_WRITE_BUFFERS);
        assert_true(m.write_buffer_mb >= 1 && m.write_buffer_mb <= 128);
        assert_true(m.batch_max_messages >= 100 && m.batch_max_messages <= 1000);
        assert_true(m.publisher_entries >= 4 && m.publisher_entries <= 64);
        assert_true(m.fetch_max_bytes >= 1000000);
        /* librdkafka's range; a full queue of 200-byte messages hits the
         * length, not the payload, so the length is what bounds it */
        assert_true(m.fetch_queue_messages >= 1000 && m.fetch_queue_messages <= 10000000);
        assert_true(m.fetch_queue_kb * 1024 + 1024 >= m.fetch_queue_messages * SEGD_MEMORY_QUEUED_TYPICAL_MESSAGE ||
                    m.fetch_queue_kb == 2097151);
        assert_true(m.restore_mb >= 1);
    }
}

static void test_scales_and_clamps(void **state)
{
    (void)state;
    segd_memory_split_t small, mid, big, below, above;
    segd_memory_split(128, 0, &small);
    segd_memory_split(512, 0, &mid);
    segd_memory_split(8192, 0, &big);
    assert_true(small.block_cache_mb < mid.block_cache_mb);
    assert_true(mid.block_cache_mb < big.block_cache_mb);
    assert_true(small.memtable_mb < mid.memtable_mb);
    assert_true(small.fetch_queue_kb < mid.fetch_queue_kb);
    assert_true(small.fetch_queue_messages < mid.fetch_queue_messages);
    /* the default budget queues over a second of the pipeline's drain
     * (~300 000 messages/s on 2 cores): librdkafka 2.0.2 refills a full
     * queue only after a second */
    segd_memory_split_t def;
    segd_memory_split(SEGD_MEMORY_DEFAULT_MB, 0, &def);
    assert_true(def.fetch_queue_messages >= 250000);
    assert_int_equal(big.fetch_queue_messages, 1000000);
    assert_true(small.batch_max_messages < mid.batch_max_messages);
    assert_true(small.restore_mb < mid.restore_mb);
    /* memtables stop at 512 MiB; what they cannot use goes to the cache */
    assert_int_equal(big.memtable_mb, 512);
    assert_true(big.block_cache_mb > (8192 - SEGD_MEMORY_FIXED_MB) * 22 / 100);
    segd_memory_split(1, 0, &below);
    segd_memory_split(INT64_MAX / MIB, 0, &above);
    assert_int_equal(below.limit_mb, SEGD_MEMORY_MIN_MB);
    assert_int_equal(above.limit_mb, SEGD_MEMORY_MAX_MB);
    /* an explicit batch size sizes the publisher's cycle: bigger batches,
     * fewer outbox entries per cycle */
    segd_memory_split_t batch;
    segd_memory_split(512, 1000000, &batch);
    assert_int_equal(batch.publisher_entries, 4);
    assert_int_equal(batch.block_cache_mb, mid.block_cache_mb);
}

static void set(segd_config_t *c, const char *k, const char *v)
{
    char err[256];
    assert_int_equal(segd_config_set(c, k, v, err, sizeof(err)), SEGD_OK);
}

static void finish(segd_config_t *c)
{
    char err[256];
    set(c, "brokers", "b:9092");
    set(c, "topics", "events");
    set(c, "group", "g");
    set(c, "db", "/tmp/x");
    assert_int_equal(segd_config_finish(c, err, sizeof(err)), SEGD_OK);
}

static void test_config_applies_the_split(void **state)
{
    (void)state;
    segd_config_t c;
    segd_memory_split_t m, d;
    segd_memory_split(256, 0, &m);
    segd_memory_split(SEGD_MEMORY_DEFAULT_MB, 0, &d);
    /* the default budget without finish (commands that skip it) */
    segd_config_init(&c);
    assert_int_equal(c.block_cache_mb, d.block_cache_mb);
    assert_int_equal(c.batch_max_messages, d.batch_max_messages);
    set(&c, "memory.limit.mb", "256");
    finish(&c);
    assert_int_equal(c.memory.limit_mb, 256);
    assert_int_equal(c.block_cache_mb, m.block_cache_mb);
    assert_int_equal(c.batch_max_messages, m.batch_max_messages);
    assert_int_equal(c.memory.fetch_queue_kb, m.fetch_queue_kb);
    segd_config_free(&c);
    /* explicit keys win, set before or after the budget */
    segd_config_init(&c);
    set(&c, "store.block.cache.mb", "100");
    set(&c, "memory.limit.mb", "256");
    set(&c, "batch.max.messages", "5000");
    finish(&c);
    assert_int_equal(c.block_cache_mb, 100);
    assert_int_equal(c.batch_max_messages, 5000);
    assert_int_equal(c.memory.memtable_mb, m.memtable_mb);
    segd_memory_split_t b;
    segd_memory_split(256, 5000, &b);
    assert_int_equal(c.memory.publisher_entries, b.publisher_entries);
    segd_config_free(&c);
}

static void test_bad_budget_names_the_key(void **state)
{
    (void)state;
    segd_config_t c;
    char err[256];
    segd_config_init(&c);
    assert_int_equal(segd_config_set(&c, "memory.limit.mb", "64", err, sizeof(err)),
                     SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "memory.limit.mb"));
    assert_int_equal(segd_config_set(&c, "memory.limit.mb", "lots", err, sizeof(err)),
                     SEGD_ERR_CONFIG);
    segd_config_free(&c);
}

/* librdkafka takes the fetch and producer shares at both ends of the range
 * (a fetch.max.bytes below message.max.bytes, for one, it refuses). */
static void test_librdkafka_accepts_the_shares(void **state)
{
    (void)state;
    const int64_t limits[] = {SEGD_MEMORY_MIN_MB, SEGD_MEMORY_MAX_MB};
    for (size_t i = 0; i < 2; i++) {
        segd_memory_split_t m;
        segd_memory_split(limits[i], 0, &m);
        char q[24], qm[24], f[24], p[24], pq[24], err[512];
        snprintf(q, sizeof(q), "%lld", (long long)m.fetch_queue_kb);
        snprintf(qm, sizeof(qm), "%lld", (long long)m.fetch_queue_messages);
        snprintf(f, sizeof(f), "%lld", (long long)m.fetch_max_bytes);
        snprintf(p, sizeof(p), "%lld", (long long)m.partition_fetch_bytes);
        snprintf(pq, sizeof(pq), "%lld", (long long)m.producer_queue_kb);
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        assert_int_equal(rd_kafka_conf_set(conf, "group.id", "g", err, sizeof(err)), 0);
        assert_int_equal(rd_kafka_conf_set(conf, "queued.max.messages.kbytes", q, err,
                                           sizeof(err)), 0);
        assert_int_equal(rd_kafka_conf_set(conf, "queued.min.messages", qm, err, sizeof(err)),
                         0);
        assert_int_equal(rd_kafka_conf_set(conf, "fetch.max.bytes", f, err, sizeof(err)), 0);
        assert_int_equal(rd_kafka_conf_set(conf, "max.partition.fetch.bytes", p, err,
                                           sizeof(err)), 0);
        rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
        if (!rk)
            fail_msg("consumer at %lld MiB: %s", (long long)limits[i], err);
        rd_kafka_destroy(rk);
        conf = rd_kafka_conf_new();
        assert_int_equal(rd_kafka_conf_set(conf, "queue.buffering.max.kbytes", pq, err,
                                           sizeof(err)), 0);
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
        if (!rk)
            fail_msg("producer at %lld MiB: %s", (long long)limits[i], err);
        rd_kafka_destroy(rk);
    }
}

/* The store opens and writes with the smallest budget's cache and memtables. */
static void test_store_opens_with_the_split(void **state)
{
    (void)state;
    char dir[] = "/tmp/segd-test-memory-XXXXXX", err[512];
    assert_non_null(mkdtemp(dir));
    segd_config_t c;
    segd_config_init(&c);
    set(&c, "memory.limit.mb", "128");
    finish(&c);
    free(c.db);
    c.db = strdup(dir);
    segd_store_opts_t o;
    segd_app_config_store_opts(&c, &o);
    assert_int_equal(o.block_cache_mb, (size_t)c.memory.block_cache_mb);
    assert_int_equal(o.memtable_mb, (size_t)c.memory.memtable_mb);
    assert_int_equal(o.write_buffer_mb, (size_t)c.memory.write_buffer_mb);
    segd_store_t *s = NULL;
    if (segd_store_open(&s, &o, err, sizeof(err)))
        fail_msg("open: %s", err);
    char id[128];
    assert_int_equal(segd_store_instance_id(s, id, sizeof(id), err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_store_flush(s, err, sizeof(err)), SEGD_OK);
    segd_store_close(s);
    segd_config_free(&c);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_fit_the_budget),
        cmocka_unit_test(test_scales_and_clamps),
        cmocka_unit_test(test_config_applies_the_split),
        cmocka_unit_test(test_bad_budget_names_the_key),
        cmocka_unit_test(test_librdkafka_accepts_the_shares),
        cmocka_unit_test(test_store_opens_with_the_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
