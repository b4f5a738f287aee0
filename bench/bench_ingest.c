/* `segd bench ingest`: the seed workload through the in-process broker into
 * the store, end to end, against a raw librdkafka consume of the same
 * messages (no decode, no store) in the same run; prints a markdown report. */
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cli/cli.h"
#include "consumer/dev_broker.h"
#include "consumer/pipeline.h"
#include "consumer/seed_producer.h"

#define TOPIC "bench.events"

typedef struct ingest_args {
    int64_t users, partitions, batch;
    char dir[256];
} ingest_args_t;

/* Consumes `want` messages in a fresh group, touching each payload byte. */
static double raw_consume(const char *brokers, int64_t want, uint64_t *checksum)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err));
    rd_kafka_conf_set(conf, "group.id", "bench-raw", err, sizeof(err));
    rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof(err));
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err));
    rd_kafka_conf_set(conf, "session.timeout.ms", "6000", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *t = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(t, TOPIC, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, t);
    rd_kafka_topic_partition_list_destroy(t);
    int64_t got = 0;
    double t0 = 0, end = segd_cli_seconds() + 300;
    while (got < want && segd_cli_seconds() < end) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (!m->err) {
            if (got++ == 0)
                t0 = segd_cli_seconds(); /* exclude the group join */
            for (size_t i = 0; i < m->len; i++)
                *checksum += ((const uint8_t *)m->payload)[i];
        }
        rd_kafka_message_destroy(m);
    }
    double dt = segd_cli_seconds() - t0;
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got == want ? dt : -1;
}

static double pipeline_consume(const char *brokers, const ingest_args_t *a, int64_t want,
                               segd_pipeline_stats_t *st)
{
    segd_config_t cfg;
    char err[512], db[300], batch[32];
    volatile sig_atomic_t stop = 0;
    segd_config_init(&cfg);
    snprintf(db, sizeof(db), "%s/db", a->dir);
    snprintf(batch, sizeof(batch), "%" PRId64, a->batch);
    segd_store_opts_t so;
    segd_store_opts_default(&so);
    so.path = db;
    segd_store_t *store = NULL;
    segd_pipeline_t *p = NULL;
    double dt = -1, t0 = 0;
    if (segd_config_set(&cfg, "brokers", brokers, err, sizeof(err)) ||
        segd_config_set(&cfg, "topics", TOPIC, err, sizeof(err)) ||
        segd_config_set(&cfg, "group", "bench-segd", err, sizeof(err)) ||
        segd_config_set(&cfg, "db", db, err, sizeof(err)) ||
        segd_config_set(&cfg, "batch.max.messages", batch, err, sizeof(err)) ||
        segd_config_set_x(&cfg, "session.timeout.ms=6000", err, sizeof(err)) ||
        segd_config_finish(&cfg, err, sizeof(err)) ||
        segd_store_open(&store, &so, err, sizeof(err)) ||
        segd_pipeline_new(&p, &cfg, store, &stop, err, sizeof(err))) {
        fprintf(stderr, "bench ingest: %s\n", err);
        goto out;
    }
    double end = segd_cli_seconds() + 600;
    do {
        if (segd_pipeline_step(p, err, sizeof(err)))
            goto out;
        segd_pipeline_get_stats(p, st);
        if (st->messages && t0 == 0)
            t0 = segd_cli_seconds();
    } while ((int64_t)st->messages < want && segd_cli_seconds() < end);
    dt = (int64_t)st->messages == want ? segd_cli_seconds() - t0 : -1;
out:
    segd_pipeline_destroy(p);
    segd_store_close(store);
    segd_config_free(&cfg);
    return dt;
}

static int parse(int argc, char **argv, ingest_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"partitions", required_argument, 0, 'p'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"dir", required_argument, 0, 'd'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    a->users = 5000;
    a->partitions = 32;
    a->batch = 1000;
    snprintf(a->dir, sizeof(a->dir), "/tmp/segd-bench-ingest-XXXXXX");
    int have_dir = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'u' && !segd_cli_int("bench", "--users", optarg, 1, 10000000, &a->users))
            continue;
        if (c == 'p' && !segd_cli_int("bench", "--partitions", optarg, 1, 256, &a->partitions))
            continue;
        if (c == 'b' && !segd_cli_int("bench", "--batch", optarg, 1, 1000000, &a->batch))
            continue;
        if (c == 'd') {
            snprintf(a->dir, sizeof(a->dir), "%s", optarg);
            have_dir = 1;
            continue;
        }
        fprintf(stderr, "usage: segd bench ingest [--users N] [--partitions P] [--batch N] "
                        "[--dir DIR]\n");
        return -1;
    }
    return have_dir || mkdtemp(a->dir) ? 0 : -1;
}

int segd_bench_ingest(int argc, char **argv)
{
    ingest_args_t a;
    if (parse(argc, argv, &a))
        return SEGD_EXIT_USAGE;
    const char *topics[] = {TOPIC, TOPIC ".dlq"};
    segd_dev_broker_t *b = NULL;
    char err[512];
    if (segd_dev_broker_new(&b, 1, (int)a.partitions, topics, 2, err, sizeof(err))) {
        fprintf(stderr, "bench ingest: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    segd_seed_produce_opts_t o = {0};
    segd_seed_produce_result_t res;
    o.brokers = segd_dev_broker_bootstraps(b);
    o.topic = TOPIC;
    segd_seed_opts_default(&o.seed);
    o.seed.users = (uint64_t)a.users;
    o.seed.now_ms = (int64_t)time(NULL) * 1000;
    o.framing = SEGD_FRAMING_SINGLE_OBJECT;
    int rc = SEGD_EXIT_FAIL;
    if (segd_seed_produce(&o, NULL, &res, err, sizeof(err))) {
        fprintf(stderr, "bench ingest: produce: %s\n", err);
        goto out;
    }
    uint64_t sum = 0;
    segd_pipeline_stats_t st;
    double raw = raw_consume(o.brokers, (int64_t)res.events, &sum);
    double e2e = pipeline_consume(o.brokers, &a, (int64_t)res.events, &st);
    if (raw <= 0 || e2e <= 0) {
        fprintf(stderr, "bench ingest: not every message was consumed (mock broker keeps "
                        "5 MiB per partition: use fewer --users or more --partitions)\n");
        goto out;
    }
    double segs = (double)res.segments;
    printf("## segd bench ingest --users %" PRId64 " --partitions %" PRId64 " --batch %" PRId64
           "\n\n", a.users, a.partitions, a.batch);
    printf("%" PRIu64 " events, %" PRIu64 " segments, %.1f MB Avro (single-object), "
           "in-process mock broker, lz4\n\n", res.events, res.segments, (double)res.bytes / 1e6);
    printf("| path | seconds | events/s | segments/s |\n|---|---|---|---|\n");
    printf("| raw librdkafka consume (no decode, no store) | %.2f | %.0f | %.0f |\n", raw,
           (double)res.events / raw, segs / raw);
    printf("| segd end to end (decode, validate, merge + offsets WriteBatch, WAL) | %.2f | "
           "%.0f | %.0f |\n", e2e, (double)res.events / e2e, segs / e2e);
    printf("\nratio end-to-end / raw: %.2f (target >= 0.70); %" PRIu64 " store batches; "
           "target >= 1M segments/s: %s\n", raw / e2e, st.batches,
           segs / e2e >= 1e6 ? "met" : "missed");
    rc = SEGD_EXIT_OK;
out:
    segd_dev_broker_destroy(b);
    return rc;
}
