/* transport/kconf.c's segd_klog: a librdkafka client's log route that its
 * owner cuts before it goes away. librdkafka logs from its own threads, and a
 * handle segd leaves to process exit (the pipeline after a fatal error or
 * before its first assignment; the cache tail's abandoned destroy) keeps
 * logging after the logger is freed (issue 28: ASan saw log_cb write through a
 * stack frame the test had already left). The cut must wait for a line in
 * progress and let none through after it. */
#define _GNU_SOURCE /* fopencookie */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/log.h"
#include "transport/kconf.h"

/* The logger's stream: each write is counted, and one write at a time is slow
 * while slow is set, so a cut has a line in progress to wait for. */
typedef struct sink {
    atomic_int writing;
    atomic_int lines;
    atomic_int slow;
} sink_t;

static ssize_t sink_write(void *cookie, const char *buf, size_t size)
{
    (void)buf;
    sink_t *s = cookie;
    atomic_store(&s->writing, 1);
    atomic_fetch_add(&s->lines, 1);
    if (atomic_load(&s->slow))
        usleep(300 * 1000);
    atomic_store(&s->writing, 0);
    return (ssize_t)size;
}

static FILE *sink_open(sink_t *s)
{
    cookie_io_functions_t io = {.write = sink_write};
    FILE *f = fopencookie(s, "w", io);
    assert_non_null(f);
    setvbuf(f, NULL, _IONBF, 0);
    return f;
}

/* A producer that keeps logging on its own threads: its broker refuses every
 * connection and it has a message to deliver, with broker debug lines on. */
static rd_kafka_t *chatty_producer(segd_klog_t *k)
{
    char e[512];
    const char *const kv[] = {"bootstrap.servers", "127.0.0.1:1", "debug", "broker,topic,msg",
                              "reconnect.backoff.ms", "10", "reconnect.backoff.max.ms", "20",
                              NULL};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(segd_kconf_apply(conf, "test", kv, e, sizeof(e)), SEGD_OK);
    segd_klog_attach(k, conf);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    assert_non_null(rk);
    assert_int_equal(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("t"), RD_KAFKA_V_VALUE("v", 1),
                                       RD_KAFKA_V_END),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    return rk;
}

static int wait_writing(sink_t *s, int64_t ms)
{
    int64_t until = segd_mono_ms() + ms;
    while (!atomic_load(&s->writing) && segd_mono_ms() < until)
        usleep(1000);
    return atomic_load(&s->writing);
}

static int wait_lines(sink_t *s, int lines, int64_t ms)
{
    int64_t until = segd_mono_ms() + ms;
    while (atomic_load(&s->lines) < lines && segd_mono_ms() < until)
        usleep(1000);
    return atomic_load(&s->lines) >= lines;
}

static void test_cut_waits_and_silences(void **state)
{
    (void)state;
    sink_t s = {0};
    FILE *f = sink_open(&s);
    segd_log_t *log = NULL;
    assert_int_equal(segd_log_new(&log, f, SEGD_LOG_DEBUG, SEGD_LOG_LOGFMT), SEGD_OK);
    int owner = 7;
    segd_klog_t *k = segd_klog_new(log, &owner);
    assert_non_null(k);
    assert_ptr_equal(segd_klog_owner(k), &owner);
    rd_kafka_t *rk = chatty_producer(k);
    atomic_store(&s.slow, 1);
    /* a librdkafka thread is inside the logger, writing a slow line */
    assert_true(wait_writing(&s, 20000));
    segd_klog_cut(k);
    assert_int_equal(atomic_load(&s.writing), 0); /* the cut waited for it */
    int lines = atomic_load(&s.lines);
    usleep(500 * 1000); /* the client keeps failing to connect, logging each time */
    rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_destroy(rk); /* its teardown logs too */
    assert_int_equal(atomic_load(&s.lines), lines); /* nothing reached the logger */
    segd_klog_free(k);
    segd_log_destroy(log);
    fclose(f);
}

/* Uncut, the route writes the client's lines to the logger (the check above
 * would hold for a route that writes nothing). */
static void test_uncut_route_logs(void **state)
{
    (void)state;
    sink_t s = {0};
    FILE *f = sink_open(&s);
    segd_log_t *log = NULL;
    assert_int_equal(segd_log_new(&log, f, SEGD_LOG_DEBUG, SEGD_LOG_LOGFMT), SEGD_OK);
    segd_klog_t *k = segd_klog_new(log, NULL);
    assert_non_null(k);
    rd_kafka_t *rk = chatty_producer(k);
    assert_true(wait_lines(&s, 3, 20000)); /* lines from the client's threads */
    rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_destroy(rk);
    segd_klog_free(k);
    segd_log_destroy(log);
    fclose(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut_waits_and_silences),
        cmocka_unit_test(test_uncut_route_logs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
