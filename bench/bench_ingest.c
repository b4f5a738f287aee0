/* `segd bench ingest`: the seed workload through the in-process broker into
 * the store, end to end, against a raw librdkafka consume of the same
 * messages (no decode, no store) in the same run; prints a markdown report. */
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench/bench.h"
#include "app/app.h"
#include "base/args.h"
#include "workload/dev_broker.h"
#include "app/daemon.h"
#include "workload/seed_producer.h"
#include "publisher/publisher.h"
#include "base/clock.h"

#define TOPIC "bench.events"

typedef struct ingest_args {
    int64_t users, partitions, batch; /* batch 0 = memory.limit.mb's */
    int64_t memory_mb;                /* memory.limit.mb; 0 = the default */
    char dir[256];
} ingest_args_t;

/* What one pipeline run measured. */
typedef struct run_result {
    double seconds;             /* first message -> last delta acknowledged */
    segd_pipeline_stats_t st;
    segd_publisher_stats_t pub;
} run_result_t;

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
    double t0 = 0, end = segd_mono_s() + 300;
    while (got < want && segd_mono_s() < end) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (!m->err) {
            if (got++ == 0)
                t0 = segd_mono_s(); /* exclude the group join */
            for (size_t i = 0; i < m->len; i++)
                *checksum += ((const uint8_t *)m->payload)[i];
        }
        rd_kafka_message_destroy(m);
    }
    double dt = segd_mono_s() - t0;
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got == want ? dt : -1;
}

typedef struct paced {
    segd_seed_produce_opts_t o;
    segd_seed_produce_result_t res;
    int rc;
} paced_t;

static void *paced_main(void *arg)
{
    paced_t *pc = arg;
    char err[256];
    pc->rc = segd_seed_produce(&pc->o, NULL, &pc->res, err, sizeof(err)) ? -1 : 0;
    return NULL;
}

/* segd run's configuration for one benchmark pipeline: batch and budget
 * from the arguments (batch 0 = the budget's), the db a directory under a->dir. */
static segd_err_t bench_config(segd_config_t *c, const char *brokers, const ingest_args_t *a,
                               const char *topic, const char *name, int changes, char *err,
                               size_t n)
{
    char db[300], batch[32], group[64], memory[32];
    snprintf(db, sizeof(db), "%s/%s", a->dir, name);
    snprintf(batch, sizeof(batch), "%" PRId64, a->batch);
    snprintf(memory, sizeof(memory), "%" PRId64,
             a->memory_mb ? a->memory_mb : (int64_t)SEGD_MEMORY_DEFAULT_MB);
    snprintf(group, sizeof(group), "bench-%s", name);
    if (segd_config_set(c, "brokers", brokers, err, n) ||
        segd_config_set(c, "topics", topic, err, n) || segd_config_set(c, "group", group, err, n) ||
        segd_config_set(c, "db", db, err, n) ||
        (a->batch && segd_config_set(c, "batch.max.messages", batch, err, n)) ||
        segd_config_set(c, "memory.limit.mb", memory, err, n) ||
        segd_config_set(c, "changes.topic", TOPIC ".changes", err, n) ||
        segd_config_set(c, "changes.enable", changes ? "1" : "0", err, n) ||
        segd_config_set_x(c, "session.timeout.ms=6000", err, n) ||
        /* the mock broker holds an empty fetch for the whole wait (a real one
         * answers when data arrives): 500 ms would dominate the latency */
        segd_config_set_x(c, "fetch.wait.max.ms=5", err, n))
        return SEGD_ERR_CONFIG;
    return segd_config_finish(c, err, n);
}

/* Runs the pipeline (with its change publisher) over `want` messages of
 * topic, until every delta is acknowledged; db is a directory under a->dir. */
static int pipeline_consume(const char *brokers, const ingest_args_t *a, const char *topic,
                            const char *name, int64_t want, int changes, paced_t *pc,
                            run_result_t *r)
{
    pthread_t producer;
    int producing = 0, warm = 0;
    segd_config_t cfg;
    char err[512];
    volatile sig_atomic_t stop = 0;
    segd_config_init(&cfg);
    segd_store_opts_t so;
    segd_store_t *store = NULL;
    segd_daemon_t *d = NULL;
    segd_pipeline_t *p = NULL;
    double t0 = 0;
    int rc = -1;
    memset(r, 0, sizeof(*r));
    segd_err_t e = bench_config(&cfg, brokers, a, topic, name, changes, err, sizeof(err));
    if (!e) {
        segd_app_config_store_opts(&cfg, &so);
        e = segd_store_open(&store, &so, err, sizeof(err));
    }
    if (!e)
        e = segd_daemon_new(&d, &cfg, store, &stop, err, sizeof(err));
    if (e) {
        fprintf(stderr, "bench ingest: %s\n", err);
        goto out;
    }
    p = segd_daemon_pipeline(d);
    segd_publisher_t *pub = segd_daemon_publisher(d); /* NULL without changes */
    double end = segd_mono_s() + 600;
    do {
        if (segd_pipeline_step(p, err, sizeof(err))) {
            fprintf(stderr, "bench ingest: %s: %s\n", name, err);
            goto out;
        }
        /* a paced producer starts once the group has assigned partitions,
         * so the join's delay does not count as latency */
        if (pc && !producing && segd_pipeline_assigned(p) > 0) {
            if (pthread_create(&producer, NULL, paced_main, pc)) {
                fprintf(stderr, "bench ingest: %s: cannot start the producer\n", name);
                goto out;
            }
            producing = 1;
        }
        segd_pipeline_get_stats(p, &r->st);
        if (r->st.messages && t0 == 0)
            t0 = segd_mono_s();
        /* latency under steady load: the first 10% warm the consumer up */
        if (pc && !warm && (int64_t)r->st.messages * 10 >= want) {
            segd_publisher_reset_latency(pub);
            warm = 1;
        }
    } while ((int64_t)r->st.messages < want && segd_mono_s() < end);
    if ((int64_t)r->st.messages != want) {
        fprintf(stderr, "bench ingest: %s: %" PRIu64 " of %" PRId64 " messages consumed\n", name,
                r->st.messages, want);
        goto out;
    }
    /* the end is the last delta acknowledged, not the last message read */
    for (; pub;) {
        segd_publisher_get_stats(pub, &r->pub);
        if (r->pub.entries >= r->st.batches || segd_mono_s() > end)
            break;
        segd_pipeline_step(p, err, sizeof(err));
    }
    r->seconds = segd_mono_s() - t0;
    rc = !pub || r->pub.entries >= r->st.batches ? 0 : -1;
    if (rc)
        fprintf(stderr, "bench ingest: %s: %" PRIu64 " of %" PRIu64 " outbox entries "
                "acknowledged in time\n", name, r->pub.entries, r->st.batches);
out:
    if (producing)
        pthread_join(producer, NULL);
    segd_daemon_destroy(d);
    segd_store_close(store);
    segd_config_free(&cfg);
    return rc;
}

int segd_bench_consume(const char *brokers, const char *dir, int64_t batch, const char *topic,
                       const char *name, int64_t want, int changes, double *seconds,
                       uint64_t *segments)
{
    ingest_args_t a = {.batch = batch};
    snprintf(a.dir, sizeof(a.dir), "%s", dir);
    run_result_t r;
    int rc = pipeline_consume(brokers, &a, topic, name, want, changes, NULL, &r);
    *seconds = r.seconds;
    *segments = r.st.segments;
    return rc;
}

/* Freshness (DESIGN §8): a producer paced at `rate` events/s while the
 * pipeline consumes, so latency is event creation -> delta acknowledged
 * under load instead of the age of a backlog. */
static int freshness(const char *brokers, const ingest_args_t *a, const char *topic,
                     double rate, run_result_t *r)
{
    paced_t pc;
    memset(&pc, 0, sizeof(pc));
    pc.o.brokers = brokers;
    pc.o.topic = topic;
    segd_seed_opts_default(&pc.o.seed);
    pc.o.seed.users = (uint64_t)a->users;
    pc.o.seed.seed = 2;
    pc.o.seed.now_ms = (int64_t)time(NULL) * 1000;
    pc.o.framing = SEGD_FRAMING_SINGLE_OBJECT;
    pc.o.rate = rate;
    int rc = pipeline_consume(brokers, a, topic, topic + strlen(TOPIC) + 1, a->users * 50, 1,
                              &pc, r);
    if (pc.rc)
        fprintf(stderr, "bench ingest: the paced producer of %s failed\n", topic);
    return rc || pc.rc ? -1 : 0;
}

static int parse(int argc, char **argv, ingest_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"partitions", required_argument, 0, 'p'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"memory-mb", required_argument, 0, 'm'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    a->users = 5000;
    a->partitions = 32;
    a->batch = 0;
    a->memory_mb = 0;
    snprintf(a->dir, sizeof(a->dir), "/tmp/segd-bench-ingest-XXXXXX");
    int have_dir = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'u' && !segd_arg_int("bench", "--users", optarg, 1, 10000000, &a->users))
            continue;
        if (c == 'p' && !segd_arg_int("bench", "--partitions", optarg, 1, 256, &a->partitions))
            continue;
        if (c == 'b' && !segd_arg_int("bench", "--batch", optarg, 1, 1000000, &a->batch))
            continue;
        if (c == 'm' && !segd_arg_int("bench", "--memory-mb", optarg, SEGD_MEMORY_MIN_MB,
                                      SEGD_MEMORY_MAX_MB, &a->memory_mb))
            continue;
        if (c == 'd') {
            snprintf(a->dir, sizeof(a->dir), "%s", optarg);
            have_dir = 1;
            continue;
        }
        fprintf(stderr, "usage: segd bench ingest [--users N] [--partitions P] [--batch N] "
                        "[--dir DIR] [--memory-mb M]\n");
        return -1;
    }
    return have_dir || mkdtemp(a->dir) ? 0 : -1;
}

/* Peak RSS of the whole process (getrusage's ru_maxrss, KiB on Linux) against
 * memory.limit.mb: the in-process broker, which holds every message produced,
 * and the producer count too, so the figure is an upper bound for segd run. */
static double peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024;
}

static void print_memory(const ingest_args_t *a, double harness)
{
    segd_memory_split_t m;
    int64_t limit = a->memory_mb ? a->memory_mb : SEGD_MEMORY_DEFAULT_MB;
    segd_memory_split(limit, a->batch, &m);
    double peak = peak_rss_mib();
    printf("\nmemory: memory.limit.mb = %" PRId64 " (block cache %" PRId64 " MiB, memtables %"
           PRId64 " MiB in %" PRId64 " MiB buffers, fetch queue %" PRId64 " KiB, fetch.max.bytes %"
           PRId64 ", batch %" PRId64 " messages, publisher %" PRId64 " entries/cycle and %" PRId64
           " KiB queue); peak RSS %.0f MiB (getrusage ru_maxrss, the whole process: broker and "
           "producer included; %.0f MiB before the first pipeline started), %s the budget + 10 %% "
           "(%.0f MiB)\n",
           m.limit_mb, m.block_cache_mb, m.memtable_mb, m.write_buffer_mb, m.fetch_queue_kb,
           m.fetch_max_bytes, a->batch ? a->batch : m.batch_max_messages, m.publisher_entries,
           m.producer_queue_kb, peak, harness, peak <= (double)limit * 1.1 ? "within" : "OVER",
           (double)limit * 1.1);
}

int segd_bench_ingest(int argc, char **argv)
{
    ingest_args_t a;
    if (parse(argc, argv, &a))
        return SEGD_EXIT_USAGE;
    const char *topics[] = {TOPIC,          TOPIC ".dlq",         TOPIC ".changes",
                            TOPIC ".half",  TOPIC ".half.dlq",    TOPIC ".quarter",
                            TOPIC ".quarter.dlq"};
    segd_dev_broker_t *b = NULL;
    char err[512];
    if (segd_dev_broker_new(&b, 1, (int)a.partitions, topics, 7, err, sizeof(err))) {
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
    run_result_t e2e, bare, fresh, fresh4;
    double raw = raw_consume(o.brokers, (int64_t)res.events, &sum);
    double harness = peak_rss_mib(); /* broker, producer, raw consumer: not segd run's */
    if (raw <= 0 ||
        pipeline_consume(o.brokers, &a, TOPIC, "db", (int64_t)res.events, 1, NULL, &e2e) ||
        pipeline_consume(o.brokers, &a, TOPIC, "bare", (int64_t)res.events, 0, NULL, &bare)) {
        fprintf(stderr, "bench ingest: not every message was consumed (mock broker keeps "
                        "5 MiB per partition: use fewer --users or more --partitions)\n");
        goto out;
    }
    double segs = (double)res.segments, t = e2e.seconds;
    double half = (double)res.events / t / 2;
    if (freshness(o.brokers, &a, TOPIC ".half", half, &fresh) ||
        freshness(o.brokers, &a, TOPIC ".quarter", half / 2, &fresh4)) {
        fprintf(stderr, "bench ingest: the paced freshness run did not complete\n");
        goto out;
    }
    printf("## segd bench ingest --users %" PRId64 " --partitions %" PRId64, a.users,
           a.partitions);
    if (a.batch)
        printf(" --batch %" PRId64, a.batch);
    if (a.memory_mb)
        printf(" --memory-mb %" PRId64, a.memory_mb);
    printf("\n\n");
    printf("%" PRIu64 " events, %" PRIu64 " segments, %.1f MB Avro (single-object), "
           "in-process mock broker, lz4\n\n", res.events, res.segments, (double)res.bytes / 1e6);
    printf("| path | seconds | events/s | segments/s |\n|---|---|---|---|\n");
    printf("| raw librdkafka consume (no decode, no store) | %.2f | %.0f | %.0f |\n", raw,
           (double)res.events / raw, segs / raw);
    printf("| segd end to end (decode, merge + offsets + outbox WriteBatch, WAL, deltas "
           "published and acknowledged) | %.2f | %.0f | %.0f |\n", t, (double)res.events / t,
           segs / t);
    printf("| the same without the change stream (changes.enable = 0) | %.2f | %.0f | %.0f |\n",
           bare.seconds, (double)res.events / bare.seconds, segs / bare.seconds);
    printf("\nratio end-to-end / raw: %.2f (target >= 0.70); %" PRIu64 " store batches; "
           "target >= 1M segments/s: %s\n", raw / t, e2e.st.batches,
           segs / t >= 1e6 ? "met" : "missed");
    printf("\nchange stream: %" PRIu64 " deltas carrying %" PRIu64 " entries, %.2f value bytes "
           "per ingested segment (before lz4), %" PRIu64 " publish cycles\n", e2e.pub.events,
           e2e.pub.segments, (double)e2e.pub.bytes / segs, e2e.pub.cycles);
    printf("\nfreshness, event created -> its delta acknowledged, with the producer paced in "
           "the same process:\n\n| load | events/s | p50 ms | p99 ms | max ms |\n"
           "|---|---|---|---|---|\n");
    printf("| half of peak | %.0f | %" PRId64 " | %" PRId64 " | %" PRId64 " |\n", half,
           fresh.pub.latency_p50_ms, fresh.pub.latency_p99_ms, fresh.pub.latency_max_ms);
    printf("| quarter of peak | %.0f | %" PRId64 " | %" PRId64 " | %" PRId64 " |\n", half / 2,
           fresh4.pub.latency_p50_ms, fresh4.pub.latency_p99_ms, fresh4.pub.latency_max_ms);
    print_memory(&a, harness);
    rc = SEGD_EXIT_OK;
out:
    segd_dev_broker_destroy(b);
    return rc;
}
