/* Tests for config/config.c: file, environment and flag precedence, kafka
 * pass-through, and errors that name the offending key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"

static char *write_conf(const char *body)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/segd-test-conf-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, body, strlen(body)), (ssize_t)strlen(body));
    close(fd);
    return path;
}

static const char *kafka_value(const segd_config_t *c, const char *key)
{
    for (size_t i = 0; i < c->n_kafka; i++)
        if (!strcmp(c->kafka[i].key, key))
            return c->kafka[i].value;
    return NULL;
}

static void test_file_env_flags(void **state)
{
    (void)state;
    segd_config_t c;
    char err[512];
    segd_config_init(&c);
    char *path = write_conf("# a comment\n\n brokers = 10.0.0.1:9092 \n"
                            "topics = a,b\ngroup=g1\ndb = /var/lib/segd\n"
                            "batch.max.messages = 2000\nkafka.fetch.min.bytes = 1024\n"
                            "input.format = single-object\n");
    assert_int_equal(segd_config_load_file(&c, path, err, sizeof(err)), SEGD_OK);
    unlink(path);
    /* SEGD_S3_ENDPOINT is read by the S3 destination, not a key: not refused */
    char *env[] = {"PATH=/bin", "SEGD_BATCH_MAX_MESSAGES=3000", "SEGD_KAFKA_CLIENT_ID=segd-7",
                   "SEGD_S3_ENDPOINT=http://127.0.0.1:9000", NULL};
    assert_int_equal(segd_config_load_env(&c, env, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_set(&c, "group", "from-flag", err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_set_x(&c, "fetch.min.bytes=1", err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_finish(&c, err, sizeof(err)), SEGD_OK);
    assert_string_equal(c.brokers, "10.0.0.1:9092");
    assert_int_equal(c.n_topics, 2);
    assert_string_equal(c.topics[1], "b");
    assert_string_equal(c.group, "from-flag");              /* flag beats file */
    assert_int_equal(c.batch_max_messages, 3000);           /* env beats file */
    assert_string_equal(kafka_value(&c, "fetch.min.bytes"), "1"); /* -X beats file */
    assert_string_equal(kafka_value(&c, "client.id"), "segd-7");
    assert_int_equal(c.framing, SEGD_FRAMING_SINGLE_OBJECT);
    assert_string_equal(c.dlq_topic, "a.dlq");               /* derived default */
    segd_config_free(&c);
}

static void test_errors_name_the_key(void **state)
{
    (void)state;
    segd_config_t c;
    char err[512];
    segd_config_init(&c);
    char *path = write_conf("brokers = x\nbatch.max.mesages = 10\n");
    assert_int_equal(segd_config_load_file(&c, path, err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "batch.max.mesages"));
    assert_non_null(strstr(err, ":2:")); /* file:line */
    unlink(path);
    assert_int_equal(segd_config_set(&c, "batch.max.ms", "soon", err, sizeof(err)),
                     SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "batch.max.ms"));
    assert_int_equal(segd_config_set(&c, "batch.max.ms", "0", err, sizeof(err)),
                     SEGD_ERR_CONFIG);
    assert_int_equal(segd_config_set(&c, "input.format", "json", err, sizeof(err)),
                     SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "input.format"));
    assert_int_equal(c.partitioner, SEGD_PARTITIONER_MURMUR2); /* the default */
    assert_int_equal(segd_config_set(&c, "input.partitioner", "random", err, sizeof(err)),
                     SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "input.partitioner"));
    assert_int_equal(segd_config_set(&c, "input.partitioner", "fnv1a_random", err, sizeof(err)),
                     SEGD_OK);
    assert_int_equal(c.partitioner, SEGD_PARTITIONER_FNV1A);
    assert_int_equal(segd_config_set(&c, "snapshot.format", "parquet", err, sizeof(err)),
                     SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "snapshot.format"));
    assert_int_equal(segd_config_set(&c, "snapshot.format", "native", err, sizeof(err)), SEGD_OK);
    assert_int_equal(c.snapshot_native, 1);
    char *env[] = {"SEGD_NO_SUCH_THING=1", NULL};
    assert_int_equal(segd_config_load_env(&c, env, err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "SEGD_NO_SUCH_THING"));
    assert_int_equal(segd_config_set_x(&c, "novalue", err, sizeof(err)), SEGD_ERR_CONFIG);
    /* issue 23: a segd key given to -X is named as one, with where it goes */
    assert_int_equal(segd_config_set_x(&c, "metrics.listen=:9100", err, sizeof(err)),
                     SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "'metrics.listen' is a segd key, not a Kafka property"));
    assert_non_null(strstr(err, "SEGD_METRICS_LISTEN"));
    /* missing required settings, and confluent framing without a registry */
    assert_int_equal(segd_config_finish(&c, err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "topics"));
    segd_config_set(&c, "topics", "t", err, sizeof(err));
    segd_config_set(&c, "group", "g", err, sizeof(err));
    segd_config_set(&c, "db", "d", err, sizeof(err));
    segd_config_set(&c, "input.format", "confluent", err, sizeof(err));
    assert_int_equal(segd_config_finish(&c, err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "input.schema.registry.url"));
    segd_config_free(&c);
}

/* A key twice in one file and an empty name used to be accepted: the last
 * one won silently, and an empty dlq.topic failed only at the first bad
 * message. */
static void test_duplicate_and_empty_values(void **state)
{
    (void)state;
    segd_config_t c;
    char err[512];
    segd_config_init(&c);
    char *path = write_conf("brokers = x\ngroup = g\n# again:\ngroup = h\n");
    assert_int_equal(segd_config_load_file(&c, path, err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, ":4: 'group' is already set on line 2"));
    unlink(path);
    assert_int_equal(segd_config_set(&c, "dlq.topic", "", err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "dlq.topic: empty value"));
    /* but an empty group.instance.id turns static membership off */
    assert_int_equal(segd_config_set(&c, "group.instance.id", "", err, sizeof(err)), SEGD_OK);
    assert_string_equal(c.group_instance_id, "");
    char *env[] = {"SEGD_CHANGES_TOPIC=", NULL};
    assert_int_equal(segd_config_load_env(&c, env, err, sizeof(err)), SEGD_ERR_CONFIG);
    /* a flag may still override what the file set once */
    assert_int_equal(segd_config_set(&c, "group", "flag", err, sizeof(err)), SEGD_OK);
    segd_config_free(&c);
}

/* The key table read back, and --print-config's output: every key once,
 * values as set, secrets and URL passwords masked, log.* parsed. */
static void test_print_and_secrets(void **state)
{
    (void)state;
    segd_config_t c;
    char err[512], v[256];
    segd_config_init(&c);
    const char *set[][2] = {{"brokers", "b:9092"}, {"topics", "x,y"}, {"group", "g"},
                            {"db", "/d"}, {"log.format", "json"}, {"log.level", "warn"},
                            {"input.schema.registry.url", "https://alice:s3cret@reg/"},
                            {"input.schema.registry.auth", "alice:s3cret"},
                            {"kafka.sasl.password", "hunter2"},
                            {"kafka.ssl.key.pem", "-----BEGIN"}, {"kafka.client.id", "c1"}};
    for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
        assert_int_equal(segd_config_set(&c, set[i][0], set[i][1], err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_config_finish(&c, err, sizeof(err)), SEGD_OK);
    assert_int_equal(c.log_format, SEGD_LOG_JSON);
    assert_int_equal(c.log_level, SEGD_LOG_WARN);
    assert_int_equal(segd_config_set(&c, "log.level", "loud", err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_non_null(strstr(err, "log.level"));
    assert_int_equal(segd_config_set(&c, "log.format", "text", err, sizeof(err)), SEGD_ERR_CONFIG);
    assert_int_equal(segd_config_value(&c, "topics", v, sizeof(v)), SEGD_OK);
    assert_string_equal(v, "x,y");
    assert_int_equal(segd_config_value(&c, "batch.max.ms", v, sizeof(v)), SEGD_OK);
    assert_string_equal(v, "50");
    assert_int_equal(segd_config_value(&c, "store.granularity.s", v, sizeof(v)), SEGD_OK);
    assert_string_equal(v, ""); /* unset: the store's */
    assert_int_equal(segd_config_value(&c, "no.such", v, sizeof(v)), SEGD_ERR_NOTFOUND);
    assert_true(segd_config_is_secret("kafka.sasl.password"));
    assert_true(segd_config_is_secret("input.schema.registry.auth"));
    assert_false(segd_config_is_secret("kafka.client.id"));
    segd_config_mask_url("https://u:pw@h:1/p?a=b@c", v, sizeof(v));
    assert_string_equal(v, "https://u:***@h:1/p?a=b@c");
    segd_config_mask_url("http://h/p@q:r", v, sizeof(v)); /* '@' only after the host */
    assert_string_equal(v, "http://h/p@q:r");
    segd_config_mask_url("s3://bucket/prefix", v, sizeof(v));
    assert_string_equal(v, "s3://bucket/prefix");

    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    segd_config_print(&c, f);
    fclose(f);
    assert_null(strstr(out, "s3cret"));
    assert_null(strstr(out, "hunter2"));
    assert_null(strstr(out, "BEGIN"));
    assert_non_null(strstr(out, "input.schema.registry.url = https://alice:***@reg/\n"));
    assert_non_null(strstr(out, "input.schema.registry.auth = ***\n"));
    assert_non_null(strstr(out, "kafka.sasl.password = ***\n"));
    assert_non_null(strstr(out, "kafka.client.id = c1\n"));
    assert_non_null(strstr(out, "log.format = json\n"));
    assert_non_null(strstr(out, "# store.granularity.s = (unset)\n"));
    /* every key of the table, once */
    for (size_t i = 0; i < segd_config_key_count(); i++) {
        segd_config_key_info_t k;
        segd_config_key_at(i, &k);
        char line[128];
        snprintf(line, sizeof(line), "\n%s = ", k.key);
        char *hit = strstr(out, line);
        snprintf(line, sizeof(line), "# %s = ", k.key);
        assert_true(hit || strstr(out, line) || !strncmp(out, line + 2, strlen(line + 2)));
        assert_true(!strcmp(k.type, "enum") == (k.values != NULL));
    }
    free(out);
    segd_config_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_env_flags),
        cmocka_unit_test(test_errors_name_the_key),
        cmocka_unit_test(test_duplicate_and_empty_values),
        cmocka_unit_test(test_print_and_secrets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
