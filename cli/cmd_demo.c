/* `segd demo [--dir DIR] [--users N]`: the README's first command. Starts the
 * in-process Kafka broker, produces a seed-workload sample (plus a few bad
 * messages), runs the ingest pipeline into a fresh store, and prints what
 * happened and what a bidder reads for one user. The ingest is timed from
 * its first message, the consumer-group join apart (the mock broker's
 * initial rebalance delay is not segd's rate), and the store's read latency
 * is measured over a few thousand point reads. */
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "workload/dev_broker.h"
#include "app/daemon.h"
#include "cache/edge.h"
#include "cache/edge_load.h"
#include "cache/tail.h"
#include "workload/seed_producer.h"
#include "publisher/publisher.h"
#include "publisher/snapshot.h"
#include "base/clock.h"

#define DEMO_TOPIC "segments.events"

static int run(int (*cmd)(int, char **), char **argv)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    fflush(stdout);
    return cmd(argc, argv);
}

/* Two messages a real DMP might send by mistake: they go to the DLQ. */
static void produce_bad(const char *brokers)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        return;
    }
    rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(DEMO_TOPIC), RD_KAFKA_V_KEY("oops", 4),
                      RD_KAFKA_V_VALUE("{\"not\":\"avro\"}", 14),
                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(DEMO_TOPIC), RD_KAFKA_V_KEY("oops", 4),
                      RD_KAFKA_V_VALUE("\xC3\x01garbage!", 10),
                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    rd_kafka_flush(rk, 5000);
    rd_kafka_destroy(rk);
}

static int produce(const char *brokers, uint64_t users, int64_t now_s)
{
    segd_seed_produce_opts_t o = {0};
    segd_seed_produce_result_t res;
    char err[512];
    o.brokers = brokers;
    o.topic = DEMO_TOPIC;
    segd_seed_opts_default(&o.seed);
    o.seed.users = users;
    o.seed.now_ms = now_s * 1000;
    o.framing = SEGD_FRAMING_SINGLE_OBJECT;
    if (segd_seed_produce(&o, NULL, &res, err, sizeof(err)) != SEGD_OK) {
        fprintf(stderr, "segd demo: produce: %s\n", err);
        return -1;
    }
    printf("produced %" PRIu64 " events (%" PRIu64 " segments, %.1f MB of Avro, "
           "single-object framing) in %.2f s\n",
           res.events, res.segments, (double)res.bytes / 1e6, res.seconds);
    produce_bad(brokers);
    printf("produced 2 malformed messages (they must end in %s.dlq)\n", DEMO_TOPIC);
    return 0;
}

/* The ingest's figures; the clock starts at the first message consumed. */
static void print_ingest(const segd_pipeline_stats_t *st, double done_s)
{
    double dt = done_s - st->first_message_s;
    uint64_t dlq = 0;
    for (int i = 0; i < SEGD_DLQ_REASONS; i++)
        dlq += st->dlq[i];
    printf("joined consumer group segd-demo in %.2f s (the broker's initial rebalance delay, "
           "not ingest)\n", st->assigned_s - st->created_s);
    printf("consumed %" PRIu64 " messages in %.2f s from the first one: %" PRIu64
           " events applied (%.0f events/s, %.0f segments/s), %" PRIu64 " store batches, %" PRIu64
           " dead-lettered",
           st->messages, dt, st->events, (double)st->events / dt, (double)st->segments / dt,
           st->batches, dlq);
    for (int i = 0; i < SEGD_DLQ_REASONS; i++)
        if (st->dlq[i])
            printf(" [%s=%" PRIu64 "]", segd_dlq_reason_name(i), st->dlq[i]);
    printf("\n");
    /* a first run into an empty store is not what a store of 10^9 segments
     * lives with: point at the figures that are */
    printf("(a short run into an empty store; sustained figures into a store past memory: "
           "bench/RESULTS.md \"Ingest at scale\", segd bench ingest --prefill-users)\n");
}

static int ingest(const char *brokers, const char *db, uint64_t want)
{
    segd_config_t cfg;
    char err[512];
    volatile sig_atomic_t stop = 0;
    segd_log_t *log = NULL;
    segd_config_init(&cfg);
    /* warnings only: the demo's own lines tell the story */
    if (segd_log_new(&log, stderr, SEGD_LOG_WARN, SEGD_LOG_LOGFMT))
        return -1;
    cfg.log = log;
    segd_store_opts_t so;
    segd_app_store_opts(&so);
    so.path = db;
    segd_store_t *store = NULL;
    segd_daemon_t *d = NULL;
    segd_pipeline_t *p = NULL;
    int rc = -1;
    if (segd_config_set(&cfg, "brokers", brokers, err, sizeof(err)) ||
        segd_config_set(&cfg, "topics", DEMO_TOPIC, err, sizeof(err)) ||
        segd_config_set(&cfg, "group", "segd-demo", err, sizeof(err)) ||
        segd_config_set(&cfg, "db", db, err, sizeof(err)) ||
        segd_config_set_x(&cfg, "session.timeout.ms=6000", err, sizeof(err)) ||
        segd_config_finish(&cfg, err, sizeof(err)) ||
        segd_store_open(&store, &so, err, sizeof(err)) ||
        segd_daemon_new(&d, &cfg, store, &stop, err, sizeof(err)))
        goto out;
    p = segd_daemon_pipeline(d);
    double t0 = segd_mono_s();
    segd_pipeline_stats_t st;
    do {
        if (segd_pipeline_step(p, err, sizeof(err)))
            goto out;
        segd_pipeline_get_stats(p, &st);
    } while (st.messages < want && segd_mono_s() - t0 < 120);
    double done_s = segd_mono_s();
    segd_daemon_close(d);
    if (st.messages)
        print_ingest(&st, done_s);
    segd_publisher_stats_t ps;
    segd_publisher_get_stats(segd_daemon_publisher(d), &ps);
    printf("change stream %s: %" PRIu64 " deltas (%" PRIu64 " segment entries, %.2f bytes per "
           "ingested segment) from %" PRIu64 " outbox entries, %" PRIu64 " left unpublished, "
           "event -> published p99 <= %" PRId64 " ms\n",
           cfg.changes_topic, ps.events, ps.segments,
           st.segments ? (double)ps.bytes / (double)st.segments : 0.0, ps.entries, ps.depth,
           ps.latency_p99_ms);
    rc = st.messages >= want && ps.depth == 0 ? 0 : -1;
out:
    if (rc)
        fprintf(stderr, "segd demo: ingest: %s\n", rc && err[0] ? err : "timed out");
    segd_daemon_destroy(d);
    segd_store_close(store);
    segd_config_free(&cfg);
    segd_log_destroy(log);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What a bidder team asks first: the latency of one user's read (RocksDB
 * point read, record decode, live filter), p50/p99 over READS users drawn
 * from the demo's, on the store just written (block cache warm after the
 * first reads, as in a running bidder). */
#define READS 5000
static int read_latency(const char *db, uint64_t users, const char *when)
{
    segd_store_t *s = segd_app_open_store("demo", db, 0, 1);
    double *lat = malloc(READS * sizeof(*lat));
    if (!s || !lat) {
        segd_store_close(s);
        free(lat);
        return -1;
    }
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    segd_profile_t p;
    segd_profile_init(&p);
    char uid[32], err[256];
    uint64_t x = 0x9e3779b97f4a7c15ull, live = 0;
    int rc = 0;
    for (int i = 0; i < READS && !rc; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: any user, any order */
        segd_seed_user_id(x % users, uid, sizeof(uid));
        double t = segd_mono_s();
        rc = segd_store_get(s, uid, strlen(uid), &p, err, sizeof(err)) ? -1 : 0;
        for (size_t k = 0; !rc && k < p.n; k++)
            live += segd_entry_live(&p.entries[k], p.erased_before_ms, &rule);
        lat[i] = segd_mono_s() - t;
    }
    if (!rc) {
        qsort(lat, READS, sizeof(*lat), cmp_double);
        printf("store reads %s: %d gets of random demo users (%.1f live segments each): "
               "p50 %.1f us, p99 %.1f us\n", when, READS, (double)live / READS,
               lat[READS / 2] * 1e6, lat[READS * 99 / 100] * 1e6);
    } else {
        fprintf(stderr, "segd demo: read: %s\n", err);
    }
    segd_profile_free(&p);
    segd_store_close(s);
    free(lat);
    return rc;
}

/* Live segments of every user: the edge cache against the store. */
static int compare_users(segd_edge_t *e, const char *db, uint64_t users, uint64_t *live)
{
    segd_store_t *s = segd_app_open_store("demo", db, 0, 1);
    if (!s)
        return -1;
    segd_prune_t rule;
    segd_policy_rule(segd_store_policy(s), &rule, 1);
    segd_edge_set_now(e, rule.now_ms);
    segd_profile_t p;
    segd_profile_init(&p);
    segd_entry_t *a = malloc(8192 * sizeof(*a));
    char uid[32], err[256];
    int differ = 0;
    *live = 0;
    for (uint64_t u = 0; a && u < users; u++) {
        size_t n = 0, k = 0;
        segd_seed_user_id(u, uid, sizeof(uid));
        if (segd_store_get(s, uid, strlen(uid), &p, err, sizeof(err)) ||
            segd_edge_lookup(e, uid, strlen(uid), a, 8192, &n)) {
            differ++;
            continue;
        }
        for (size_t i = 0; i < p.n; i++)
            if (segd_entry_live(&p.entries[i], p.erased_before_ms, &rule)) {
                differ += k >= n || memcmp(&p.entries[i], &a[k], sizeof(*a)) != 0;
                k++;
            }
        differ += k != n;
        *live += n;
    }
    free(a);
    segd_profile_free(&p);
    segd_store_close(s);
    return a ? differ : -1;
}

/* An edge cache in process: the snapshot, then every delta of the change
 * topic from its beginning. The older deltas are already in the snapshot,
 * and joining them again is harmless. */
static int edge_cache(const char *brokers, const char *snap, const char *db, uint64_t users)
{
    segd_manifest_t m;
    segd_edge_t *e = NULL;
    segd_tail_t *t = NULL;
    segd_tail_opts_t to;
    char err[512] = "";
    double t0 = segd_mono_s();
    int rc = -1;
    segd_tail_opts_default(&to);
    to.brokers = brokers;
    to.from_beginning = 1;
    segd_manifest_init(&m);
    if (segd_edge_new(&e, NULL) ||
        segd_edge_load_snapshot(e, snap, NULL, &m, err, sizeof(err)))
        goto out;
    double load_s = segd_mono_s() - t0;
    if (segd_tail_new(&t, e, &to, &m, err, sizeof(err)) ||
        segd_tail_catch_up(t, 60000, err, sizeof(err)))
        goto out;
    segd_tail_stats_t ts;
    segd_tail_get_stats(t, &ts);
    uint64_t live = 0;
    int differ = compare_users(e, db, users, &live);
    printf("loaded %" PRIu64 " users in %.2f s, joined %" PRIu64 " deltas from %s; %" PRIu64
           " users, %" PRIu64 " live segments: %s\n", m.records, load_s, ts.applied,
           to.topic, users, live, differ == 0 ? "every one equal to the store" : "DIFFERENT");
    rc = differ == 0 ? 0 : -1;
out:
    segd_manifest_free(&m);
    if (rc && err[0])
        fprintf(stderr, "segd demo: edge cache: %s\n", err);
    segd_tail_destroy(t);
    segd_edge_destroy(e);
    return rc;
}

int segd_cmd_demo(int argc, char **argv)
{
    static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                         {"users", required_argument, 0, 'u'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    char dir[512] = "segd-demo", db[600], snap[600], tomorrow[32];
    int64_t users = 2000;
    int c;
    optind = 1;
    while ((c = segd_args_next("demo", argc, argv, "h", opts)) != -1) {
        if (c == 'd')
            snprintf(dir, sizeof(dir), "%s", optarg);
        else if (c == 'u') {
            if (segd_arg_int("demo", "--users", optarg, 1, 1000000, &users))
                return SEGD_EXIT_USAGE;
        } else if (c == 'h') {
            printf("usage: segd demo [--dir DIR] [--users N]   (default ./segd-demo, 2000)\n");
            return SEGD_EXIT_OK;
        } else
            return SEGD_EXIT_USAGE;
    }
    int64_t now_s = (int64_t)time(NULL);
    mkdir(dir, 0755);
    snprintf(db, sizeof(db), "%s/db-%" PRId64, dir, now_s);
    snprintf(snap, sizeof(snap), "%s/snapshot-%" PRId64, dir, now_s);
    snprintf(tomorrow, sizeof(tomorrow), "%" PRId64, now_s + 86400);
    /* the change topic as wide as the input: change partition p carries the
     * deltas of input partition p (DESIGN §5) */
    const char *topics[] = {DEMO_TOPIC, DEMO_TOPIC ".dlq", SEGD_DEFAULT_CHANGES_TOPIC};
    segd_dev_broker_t *b = NULL;
    char err[512];
    if (segd_dev_broker_new(&b, 1, 8, topics, 3, err, sizeof(err))) {
        fprintf(stderr, "segd demo: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    const char *brokers = segd_dev_broker_bootstraps(b);
    int rc = SEGD_EXIT_FAIL;
    printf("== 1. in-process Kafka broker (librdkafka mock cluster) at %s, topic %s x 8 "
           "partitions\n", brokers, DEMO_TOPIC);
    printf("\n== 2. a synthetic DMP: %" PRId64 " users x 50 UPSERT events x 20 segments\n",
           users);
    if (produce(brokers, (uint64_t)users, now_s))
        goto out;
    printf("\n== 3. segd pipeline: consumer group -> decode -> merge operands + offsets "
           "in one WriteBatch -> %s\n", db);
    if (ingest(brokers, db, (uint64_t)users * 50 + 2))
        goto out;
    printf("\n== 4. a bidder's read of u0000000000: live segments expiring after tomorrow, "
           "and how many are in [0, 9999]; then the store's read latency\n");
    char *get[] = {"get", "--db", db, "--expiring-after", tomorrow, "--count-range",
                   "0:9999", "--limit", "8", "u0000000000", NULL};
    if (run(segd_cmd_get, get) ||
        read_latency(db, (uint64_t)users, "(each user's 50 events still unmerged operands)"))
        goto out;
    printf("\n== 5. full compaction, then the store's figures and read latency\n");
    char *cp[] = {"compact", "--db", db, NULL};
    char *st[] = {"stats", "--db", db, NULL};
    if (run(segd_cmd_compact, cp) || run(segd_cmd_stats, st) ||
        read_latency(db, (uint64_t)users, "after compaction (one merged record per user)"))
        goto out;
    printf("\n== 6. a consistent snapshot for caches: one unit (Avro file + manifest.json) per "
           "input partition\n");
    char *ex[] = {"snapshot", "export", "--db", db, "--to", snap, NULL};
    if (run(segd_cmd_snapshot, ex))
        goto out;
    printf("\n== 7. an edge cache in process: snapshot + change stream, compared with the "
           "store\n");
    if (edge_cache(brokers, snap, db, (uint64_t)users))
        goto out;
    /* the binary that ran the demo, wherever it was installed or built */
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    const char *bin = len > 0 ? (self[len] = 0, self) : "segd";
    printf("\nTry: %s get --db %s --json u0000000042\n"
           "     %s snapshot verify %s\n", bin, db, bin, snap);
    rc = SEGD_EXIT_OK;
out:
    segd_dev_broker_destroy(b);
    return rc;
}
