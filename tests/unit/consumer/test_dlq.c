/* Tests for consumer/dlq.c's file sink (segd replay --dlq-file): every
 * field of a line, null vs empty key and value, base64 against known
 * answers, whole values (no truncation, unlike the topic), letters written
 * once however often deliver is called, appending to an existing file, and
 * a write failing part-way (RLIMIT_FSIZE) cut back, then retried once.
 * The topic sink is driven by test_ingest (segd run) and cli_replay.sh;
 * here only its producer's configuration: the consumer's connection
 * settings (SASL, TLS, client.id), which a secured cluster requires. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "consumer/dlq.h"

static char *tmp_path(void)
{
    char *p = strdup("/tmp/segd-test-dlq-XXXXXX");
    int fd = mkstemp(p);
    assert_true(fd >= 0);
    close(fd);
    unlink(p); /* the sink creates it */
    return p;
}

static json_t **read_lines(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    json_t **out = calloc(64, sizeof(*out));
    size_t cap = 4 * 1024 * 1024; /* the longest line: a 1.2 MB value in base64 */
    char *buf = malloc(cap);
    *n = 0;
    while (fgets(buf, (int)cap, f)) {
        assert_true(*n < 64);
        assert_int_equal(buf[strlen(buf) - 1], '\n');
        json_error_t e;
        out[*n] = json_loads(buf, 0, &e);
        assert_non_null(out[*n]);
        (*n)++;
    }
    free(buf);
    fclose(f);
    return out;
}

static const char *str(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The dead-letter producer must reach a secured cluster as the consumer
 * does: security.*, sasl.*, ssl.* and client.id from the kafka.* settings;
 * a consumer-only one stays out (the producer would warn about it). */
static void test_topic_producer_takes_connection_settings(void **state)
{
    (void)state;
    segd_config_t c;
    char err[256], v[256];
    segd_config_init(&c);
    assert_int_equal(segd_config_set(&c, "brokers", "127.0.0.1:1", err, sizeof(err)), SEGD_OK);
    const char *kv[] = {"security.protocol", "sasl_plaintext", "sasl.mechanisms", "PLAIN",
                        "sasl.username", "dlq-user", "sasl.password", "dlq-secret",
                        "client.id", "segd-dlq-test", "ssl.endpoint.identification.algorithm",
                        "none", "enable.auto.offset.store", "false", NULL};
    for (size_t i = 0; kv[i]; i += 2)
        assert_int_equal(segd_config_set_kafka(&c, kv[i], kv[i + 1], err, sizeof(err)), SEGD_OK);
    volatile sig_atomic_t stop = 0;
    segd_dlq_t *d = NULL;
    assert_int_equal(segd_dlq_new_topic(&d, &c, &stop, NULL, err, sizeof(err)), SEGD_OK);
    const rd_kafka_conf_t *conf = rd_kafka_conf(segd_dlq_producer(d));
    for (size_t i = 0; kv[i] && strcmp(kv[i], "enable.auto.offset.store"); i += 2) {
        size_t len = sizeof(v);
        assert_int_equal(rd_kafka_conf_get(conf, kv[i], v, &len), RD_KAFKA_CONF_OK);
        if (strcmp(kv[i], "sasl.mechanisms")) /* librdkafka keeps it as sasl.mechanism */
            assert_string_equal(v, kv[i + 1]);
    }
    size_t len = sizeof(v);
    assert_int_equal(rd_kafka_conf_get(conf, "sasl.mechanisms", v, &len), RD_KAFKA_CONF_OK);
    assert_string_equal(v, "PLAIN");
    len = sizeof(v);
    assert_int_equal(rd_kafka_conf_get(conf, "enable.auto.offset.store", v, &len),
                     RD_KAFKA_CONF_OK);
    assert_string_equal(v, "true"); /* the default: the consumer's setting stayed out */
    segd_dlq_destroy(d);
    segd_config_free(&c);
}

static void test_fields(void **state)
{
    (void)state;
    char *path = tmp_path();
    char err[256];
    segd_dlq_t *d = NULL;
    assert_int_equal(segd_dlq_new_file(&d, path, err, sizeof(err)), SEGD_OK);
    /* base64 known answers: RFC 4648 §10 */
    assert_int_equal(segd_dlq_add(d, "ev", 3, 41, "fo", 2, "foobar", 6, "decode", "bad"), 0);
    assert_int_equal(segd_dlq_add(d, "ev", 3, 42, NULL, 0, "", 0, "invalid", "why \xff"), 0);
    assert_int_equal(segd_dlq_add(d, "ev", 0, 7, "", 0, NULL, 0, "oversize", "x"), 0);
    assert_int_equal(segd_dlq_count(d), 3);
    assert_int_equal(segd_dlq_deliver(d, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_dlq_deliver(d, err, sizeof(err)), SEGD_OK); /* nothing twice */
    segd_dlq_clear(d);
    assert_int_equal(segd_dlq_count(d), 0);
    segd_dlq_destroy(d);
    size_t n;
    json_t **l = read_lines(path, &n);
    assert_int_equal(n, 3);
    assert_string_equal(str(l[0], "topic"), "ev");
    assert_int_equal(json_integer_value(json_object_get(l[0], "partition")), 3);
    assert_int_equal(json_integer_value(json_object_get(l[0], "offset")), 41);
    assert_string_equal(str(l[0], "reason"), "decode");
    assert_string_equal(str(l[0], "error"), "bad");
    assert_string_equal(str(l[0], "key_b64"), "Zm8=");
    assert_string_equal(str(l[0], "value_b64"), "Zm9vYmFy");
    assert_true(json_is_null(json_object_get(l[1], "key_b64")));
    assert_string_equal(str(l[1], "value_b64"), "");
    assert_string_equal(str(l[1], "error"), "why ?"); /* JSON is UTF-8; the bytes are in value_b64 */
    assert_string_equal(str(l[2], "key_b64"), "");
    assert_true(json_is_null(json_object_get(l[2], "value_b64")));
    for (size_t i = 0; i < n; i++)
        json_decref(l[i]);
    free(l);
    unlink(path);
    free(path);
}

/* A second sink on the same file appends; a value over the DLQ topic's
 * limit is kept whole. */
static void test_append_whole_values(void **state)
{
    (void)state;
    char *path = tmp_path();
    char err[256];
    size_t big = 1200000;
    char *v = malloc(big);
    for (size_t i = 0; i < big; i++)
        v[i] = (char)(i * 7);
    for (int round = 0; round < 2; round++) {
        segd_dlq_t *d = NULL;
        assert_int_equal(segd_dlq_new_file(&d, path, err, sizeof(err)), SEGD_OK);
        assert_int_equal(segd_dlq_add(d, "ev", round, 1, "k", 1, v, big, "oversize", "big"), 0);
        assert_int_equal(segd_dlq_deliver(d, err, sizeof(err)), SEGD_OK);
        segd_dlq_destroy(d);
    }
    size_t n;
    json_t **l = read_lines(path, &n);
    assert_int_equal(n, 2);
    assert_int_equal(json_integer_value(json_object_get(l[1], "partition")), 1);
    assert_int_equal(strlen(str(l[0], "value_b64")), (big + 2) / 3 * 4);
    for (size_t i = 0; i < n; i++)
        json_decref(l[i]);
    free(l);
    free(v);
    unlink(path);
    free(path);
}

static off_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

/* A write that fails part-way (RLIMIT_FSIZE, SIGXFSZ ignored: write()
 * writes up to the limit, then EFBIG) is cut back to the file's size
 * before it, and a retry after the limit is raised writes each letter
 * exactly once: no half line, no duplicate. */
static void test_failed_write_is_cut_back(void **state)
{
    (void)state;
    char *path = tmp_path();
    char err[256], v[2000];
    memset(v, 'v', sizeof(v));
    segd_dlq_t *d = NULL;
    assert_int_equal(segd_dlq_new_file(&d, path, err, sizeof(err)), SEGD_OK);
    assert_int_equal(segd_dlq_add(d, "ev", 0, 1, "k0", 2, "v", 1, "decode", "bad"), 0);
    assert_int_equal(segd_dlq_deliver(d, err, sizeof(err)), SEGD_OK);
    segd_dlq_clear(d);
    off_t before = file_size(path);
    assert_int_equal(segd_dlq_add(d, "ev", 0, 2, "k1", 2, v, sizeof(v), "decode", "bad"), 0);
    assert_int_equal(segd_dlq_add(d, "ev", 0, 3, "k2", 2, v, sizeof(v), "decode", "bad"), 0);

    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*saved)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)before + 1000; /* inside the first new line */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    segd_err_t e = segd_dlq_deliver(d, err, sizeof(err));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, saved);
    assert_int_equal(e, SEGD_ERR_IO);
    assert_non_null(strstr(err, path));
    assert_int_equal(file_size(path), before);

    assert_int_equal(segd_dlq_deliver(d, err, sizeof(err)), SEGD_OK);
    segd_dlq_destroy(d);
    size_t n;
    json_t **l = read_lines(path, &n);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(json_integer_value(json_object_get(l[i], "offset")), (json_int_t)i + 1);
        json_decref(l[i]);
    }
    free(l);
    unlink(path);
    free(path);
}

static void test_unwritable(void **state)
{
    (void)state;
    char err[256];
    segd_dlq_t *d = NULL;
    assert_int_equal(segd_dlq_new_file(&d, "/nonexistent-dir/x", err, sizeof(err)), SEGD_ERR_IO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topic_producer_takes_connection_settings),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_append_whole_values),
        cmocka_unit_test(test_failed_write_is_cut_back),
        cmocka_unit_test(test_unwritable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
