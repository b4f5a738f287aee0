/* `segd bench queue`: what a message costs in librdkafka's consumer queue,
 * beyond its payload, per payload size (config/memory.h's
 * SEGD_MEMORY_QUEUED_MESSAGE_BYTES comes from this; DESIGN §4.1).
 * queued.max.messages.kbytes counts payload only, so a queue sized by it
 * alone holds more memory than it says, most of all for small events.
 *
 * Per size: an in-process mock broker is filled with N messages of that
 * payload, then a consumer assigned to its partitions fetches them into its
 * queue (queue limits above N: it never stops) without the application
 * polling any; the process's resident memory grows by what the queued
 * messages hold. Measured after the producer and broker are settled, with
 * freed memory trimmed before each reading. */
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "base/args.h"
#include "base/clock.h"
#include "bench/bench.h"

#define TOPIC "bench.queue"
#define FILL_WAIT_S 60.0
#define SETTLE_S 1.0

typedef struct queue_args {
    int64_t messages;
} queue_args_t;

typedef struct queue_cost {
    int64_t payload, queued;
    double grew_mib, per_message;
} queue_cost_t;

/* the process's VmRSS in bytes, after returning freed memory to the system */
static int64_t rss_bytes(void)
{
    malloc_trim(0);
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int64_t kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = strtoll(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* a delivery that failed: the first one's reason is said */
static void delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    int64_t *failed = opaque;
    (void)rk;
    if (m->err && !(*failed)++)
        fprintf(stderr, "bench queue: delivery: %s\n", rd_kafka_err2str(m->err));
}

static rd_kafka_t *new_client(rd_kafka_type_t type, const char *const *kv, int64_t *failed)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (failed) {
        rd_kafka_conf_set_opaque(conf, failed);
        rd_kafka_conf_set_dr_msg_cb(conf, delivered);
    }
    for (size_t i = 0; kv[i]; i += 2)
        if (rd_kafka_conf_set(conf, kv[i], kv[i + 1], err, sizeof(err)) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "bench queue: %s: %s\n", kv[i], err);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "bench queue: %s\n", err);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

/* the mock keeps at most 100 000 messages and 5 MiB per partition (older
 * ones are deleted): enough partitions that each holds its share */
static int32_t partitions_for(int64_t n, int64_t payload)
{
    int64_t by_bytes = n * (payload + 100) / (4 << 20) + 1, by_count = n / 90000 + 1;
    return (int32_t)(by_bytes > by_count ? by_bytes : by_count);
}

/* n messages of payload bytes spread over the mock's parts partitions,
 * every one of them held there */
static int fill(rd_kafka_t *p, int64_t n, int64_t payload, int32_t parts)
{
    char *buf = malloc((size_t)payload);
    if (!buf)
        return -1;
    memset(buf, 'x', (size_t)payload);
    for (int64_t i = 0; i < n;) {
        rd_kafka_resp_err_t e =
            rd_kafka_producev(p, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_PARTITION((int32_t)(i % parts)),
                              RD_KAFKA_V_VALUE(buf, (size_t)payload),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(p, 10);
            continue;
        }
        if (e) {
            fprintf(stderr, "bench queue: produce: %s\n", rd_kafka_err2str(e));
            free(buf);
            return -1;
        }
        i++;
    }
    free(buf);
    int64_t held = 0;
    int rc = rd_kafka_flush(p, 60000) ? -1 : 0;
    for (int32_t i = 0; !rc && i < parts; i++) {
        int64_t lo = 0, hi = 0;
        rc = rd_kafka_query_watermark_offsets(p, TOPIC, i, &lo, &hi, 10000) ? -1 : 0;
        held += hi - lo;
    }
    if (!rc && held != n)
        rc = -1;
    if (rc)
        fprintf(stderr, "bench queue: the mock holds %" PRId64 " of %" PRId64 " messages\n",
                held, n);
    return rc;
}

/* a consumer assigned at the partition's start fills its queue; returns
 * how many messages it holds once it stops growing (or -1) */
static int64_t fetch_into_queue(const char *bootstrap, int64_t n, int32_t parts,
                                rd_kafka_t **out)
{
    char msgs[24];
    snprintf(msgs, sizeof(msgs), "%" PRId64, n + 1000);
    const char *const kv[] = {"bootstrap.servers", bootstrap, "group.id", "bench-queue",
                              "queued.min.messages", msgs, "queued.max.messages.kbytes",
                              "2097151", "enable.auto.commit", "false", NULL};
    rd_kafka_t *c = new_client(RD_KAFKA_CONSUMER, kv, NULL);
    if (!(*out = c))
        return -1;
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t *tp = rd_kafka_topic_partition_list_new(parts);
    for (int32_t i = 0; i < parts; i++)
        rd_kafka_topic_partition_list_add(tp, TOPIC, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_resp_err_t e = rd_kafka_assign(c, tp);
    rd_kafka_topic_partition_list_destroy(tp);
    if (e) {
        fprintf(stderr, "bench queue: assign: %s\n", rd_kafka_err2str(e));
        return -1;
    }
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(c);
    int64_t len = 0;
    double end = segd_mono_s() + FILL_WAIT_S;
    while ((len = (int64_t)rd_kafka_queue_length(q)) < n && segd_mono_s() < end)
        segd_sleep_ms(50);
    rd_kafka_queue_destroy(q);
    if (len < n)
        fprintf(stderr, "bench queue: the queue held %" PRId64 " of %" PRId64 " after %.0f s\n",
                len, n, FILL_WAIT_S);
    return len < n ? -1 : len;
}

static int measure(int64_t n, int64_t payload, queue_cost_t *r)
{
    const char *const pkv[] = {"test.mock.num.brokers", "1", "linger.ms", "5",
                               "compression.type", "none", NULL};
    int64_t failed = 0;
    rd_kafka_t *p = new_client(RD_KAFKA_PRODUCER, pkv, &failed), *c = NULL;
    rd_kafka_mock_cluster_t *mcl = p ? rd_kafka_handle_mock_cluster(p) : NULL;
    int32_t parts = partitions_for(n, payload);
    int rc = mcl ? 0 : -1;
    if (!rc)
        rc = rd_kafka_mock_topic_create(mcl, TOPIC, parts, 1) ? -1 : fill(p, n, payload, parts);
    int64_t before = -1, after = -1;
    if (!rc) {
        segd_sleep_ms((int64_t)(SETTLE_S * 1000));
        before = rss_bytes();
        r->queued = fetch_into_queue(rd_kafka_mock_cluster_bootstraps(mcl), n, parts, &c);
        segd_sleep_ms((int64_t)(SETTLE_S * 1000)); /* the last fetch's buffers freed */
        after = rss_bytes();
        rc = r->queued > 0 && before > 0 && after > 0 ? 0 : -1;
    }
    if (!rc) {
        r->payload = payload;
        r->grew_mib = (double)(after - before) / (1 << 20);
        r->per_message = (double)(after - before) / (double)r->queued;
    }
    if (c) {
        rd_kafka_consumer_close(c);
        rd_kafka_destroy(c);
    }
    if (p)
        rd_kafka_destroy(p);
    return rc;
}

static int parse(int argc, char **argv, queue_args_t *a)
{
    static const struct option opts[] = {{"messages", required_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = segd_args_next("bench queue", argc, argv, "h", opts)) != -1) {
        if (c == 'm' &&
            !segd_arg_int("bench queue", "--messages", optarg, 1000, 10000000, &a->messages))
            continue;
        if (c == 'h') {
            printf("usage: segd bench queue [--messages N]\n");
            return 1;
        }
        return -1; /* said */
    }
    return 0;
}

int segd_bench_queue(int argc, char **argv)
{
    queue_args_t a = {.messages = 100000};
    int pa = parse(argc, argv, &a);
    if (pa)
        return pa > 0 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    static const int64_t sizes[] = {50, 200, 500, 2000};
    printf("## librdkafka's consumer queue (segd bench queue --messages %" PRId64
           "; librdkafka %s)\n\n| payload B | messages queued | RSS grew MiB | bytes per "
           "message | beyond the payload |\n|---|---|---|---|---|\n",
           a.messages, rd_kafka_version_str());
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        queue_cost_t r = {0};
        if (measure(a.messages, sizes[i], &r))
            return SEGD_EXIT_FAIL;
        printf("| %" PRId64 " | %" PRId64 " | %.1f | %.0f | %.0f |\n", r.payload, r.queued,
               r.grew_mib, r.per_message, r.per_message - (double)r.payload);
        fflush(stdout);
    }
    return SEGD_EXIT_OK;
}
