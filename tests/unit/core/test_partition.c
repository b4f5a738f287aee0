/* Tests for core/partition.c: segd's partitioners equal librdkafka's own
 * (its public rd_kafka_msg_partitioner_* functions) on random keys and
 * partition counts, and murmur2 equals the Java client's on the vectors
 * librdkafka's unit test takes from it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>

#include "core/partition.h"

static void test_java_murmur2_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        uint32_t h;
    } v[] = {
        {"kafka", 0xd067cf64},
        {"giberish123456789", 0x8f552b0c},
        {"1234", 0x9fc97b14},
        {"234", 0xe7c009ca},
        {"34", 0x873930da},
        {"4", 0x5a4b5ca1},
        {"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x78424f1c},
        {"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4a62b377},
        {"eAmbleWillBeRemoved,ThePrePartThatIs", 0xe0e4e09e},
        {"AmbleWillBeRemoved,ThePrePartThatIs", 0x62b8b43f},
        {"", 0x106e08d9},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        assert_int_equal(segd_murmur2(v[i].key, strlen(v[i].key)), v[i].h);
}

typedef int32_t (*rdk_partitioner)(const rd_kafka_topic_t *, const void *, size_t, int32_t,
                                   void *, void *);

static void test_equals_librdkafka(void **state)
{
    (void)state;
    static const struct {
        segd_partitioner_t p;
        rdk_partitioner f;
    } pairs[] = {
        {SEGD_PARTITIONER_MURMUR2, rd_kafka_msg_partitioner_murmur2_random},
        {SEGD_PARTITIONER_CRC32, rd_kafka_msg_partitioner_consistent_random},
        {SEGD_PARTITIONER_FNV1A, rd_kafka_msg_partitioner_fnv1a_random},
    };
    static const int32_t counts[] = {1, 2, 3, 7, 12, 32, 100, 1024, 65536};
    uint64_t x = 42;
    uint8_t key[80];
    int differ[3] = {0};
    for (int i = 0; i < 20000; i++) {
        size_t len = 1 + (size_t)(x % 72);
        for (size_t k = 0; k < len; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            key[k] = (uint8_t)(x >> 56);
        }
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
            for (int p = 0; p < 3; p++) {
                int32_t want = pairs[p].f(NULL, key, len, counts[c], NULL, NULL);
                int32_t got = segd_partition_of(pairs[p].p, key, len, counts[c]);
                if (got != want)
                    fail_msg("%s: %d != %d (len %zu, count %d)", segd_partitioner_name(pairs[p].p), got, want, len, counts[c]);
                differ[p] += counts[c] == 12 && got != (int32_t)(i % 12);
            }
    }
    for (int p = 0; p < 3; p++) /* keys spread: not a constant partition */
        assert_true(differ[p] > 1000);
}

static void test_names(void **state)
{
    (void)state;
    segd_partitioner_t p;
    assert_int_equal(segd_partitioner_parse("murmur2_random", &p), 0);
    assert_int_equal(p, SEGD_PARTITIONER_MURMUR2);
    assert_int_equal(segd_partitioner_parse("consistent_random", &p), 0);
    assert_int_equal(p, SEGD_PARTITIONER_CRC32);
    assert_int_equal(segd_partitioner_parse("fnv1a_random", &p), 0);
    assert_int_equal(p, SEGD_PARTITIONER_FNV1A);
    assert_int_equal(segd_partitioner_parse("random", &p), -1);
    assert_int_equal(segd_partitioner_parse("", &p), -1);
    for (int i = 0; i < 3; i++) {
        segd_partitioner_t q;
        assert_int_equal(segd_partitioner_parse(segd_partitioner_name((segd_partitioner_t)i), &q),
                         0);
        assert_int_equal(q, (segd_partitioner_t)i);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_java_murmur2_vectors),
        cmocka_unit_test(test_equals_librdkafka),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
