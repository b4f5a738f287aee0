/* `segd bench ingest`: the seed workload through a broker (the in-process
 * mock, or a real cluster with --brokers) into the store, end to end,
 * against a raw librdkafka consume of the same messages (no decode, no
 * store) and the store's own write path (one writer, no broker) in the same
 * run; optionally into a store pre-filled past memory (--prefill-users),
 * with per-10 s windows of throughput, freshness and RocksDB's compaction
 * state so a stall shows; prints a markdown report. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/wait.h>
#include <inttypes.h>
#include <malloc.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "bench/bench.h"
#include "consumer/fetch_conf.h"
#include "transport/kconf.h"
#include "app/app.h"
#include "base/args.h"
#include "workload/dev_broker.h"
#include "app/daemon.h"
#include "workload/seed_producer.h"
#include "publisher/publisher.h"
#include "base/clock.h"
#include "consumer/apply.h"
#include "workload/seed.h"

#include "bench/bench_ingest_int.h"


static segd_err_t bench_config(segd_config_t *c, const char *brokers, const ingest_args_t *a,
                               const char *topic, const char *name, int changes, char *err,
                               size_t n);

/* Consumes `want` messages in a fresh group, touching each payload byte,
 * with the pipelines' fetch and queue settings (the budget's, then -X), so
 * that the ratio to it compares the pipeline, not two queue sizes. */
static double raw_consume(const ingest_args_t *a, const char *brokers, int64_t want,
                          uint64_t *checksum)
{
    char err[256];
    segd_config_t cfg;
    segd_config_init(&cfg);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t e = bench_config(&cfg, brokers, a, TOPIC, "raw", 0, err, sizeof(err));
    if (!e)
        e = segd_fetch_conf_apply(conf, "raw consumer", &cfg, SEGD_FETCH_MAIN, err, sizeof(err));
    for (size_t i = 0; !e && i < cfg.n_kafka; i++)
        e = segd_kconf_set(conf, "raw consumer", cfg.kafka[i].key, cfg.kafka[i].value, err,
                           sizeof(err));
    segd_config_free(&cfg);
    if (e) {
        fprintf(stderr, "bench ingest: raw consumer: %s\n", err);
        rd_kafka_conf_destroy(conf);
        return -1;
    }
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
    int process; /* as a `segd produce` child: its CPU is not this process's */
    int compact; /* a full compaction runs beside this run (--compact-during) */
    int rc;
} paced_t;

/* The paced producer as `segd produce` in its own process (the binary
 * running this bench), waited for. */
static int produce_process(const paced_t *pc)
{
    char users[32], rate[32], seed[32], now[32];
    snprintf(users, sizeof(users), "%" PRIu64, pc->o.seed.users);
    snprintf(rate, sizeof(rate), "%.0f", pc->o.rate);
    snprintf(seed, sizeof(seed), "%" PRIu64, pc->o.seed.seed);
    snprintf(now, sizeof(now), "%" PRId64, pc->o.seed.now_ms / 1000);
    char *argv[] = {"segd", "produce", "--brokers", (char *)pc->o.brokers, "--topic",
                    (char *)pc->o.topic, "--users", users, "--rate", rate, "--seed", seed,
                    "--now", now, NULL};
    pid_t pid;
    int status;
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ))
        return -1;
    while (waitpid(pid, &status, 0) < 0)
        ;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void *paced_main(void *arg)
{
    paced_t *pc = arg;
    char err[256];
    if (pc->process)
        pc->rc = produce_process(pc);
    else
        pc->rc = segd_seed_produce(&pc->o, NULL, &pc->res, err, sizeof(err)) ? -1 : 0;
    return NULL;
}

static void cpu_add(cpu_use_t *c, const char *name, double sec)
{
    size_t i = 0;
    while (i < c->n && strcmp(c->name[i], name))
        i++;
    if (i == c->n) {
        if (c->n == CPU_GROUPS)
            return;
        snprintf(c->name[c->n++], sizeof(c->name[0]), "%s", name);
        c->s[i] = 0;
    }
    c->s[i] += sec;
}

/* One thread's kind and CPU seconds from its stat line ("tid (comm) S ..."). */
static int thread_cpu(const char *path, pid_t self, char *kind, size_t n, double *sec)
{
    char line[1024], comm[64];
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t len = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[len] = 0;
    char *open = strchr(line, '('), *close = strrchr(line, ')');
    unsigned long ut = 0, st = 0;
    if (!open || !close || sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                                  &ut, &st) != 2)
        return -1;
    snprintf(comm, sizeof(comm), "%.*s", (int)(close - open - 1), open + 1);
    size_t k = strlen(comm);
    while (k && comm[k - 1] >= '0' && comm[k - 1] <= '9')
        comm[--k] = 0;
    pid_t tid = (pid_t)atol(line);
    if (tid == self)
        snprintf(kind, n, "main thread (the pipeline)");
    else if (!strncmp(comm, "segd:writer", 11))
        snprintf(kind, n, "the pipeline's writer thread");
    else if (!strncmp(comm, "rdk:", 4) || !strncmp(comm, "rocksdb:", 8))
        snprintf(kind, n, "%s", comm);
    else
        snprintf(kind, n, "other threads of segd (publisher, paced producer)");
    *sec = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    return 0;
}

static void cpu_sample(cpu_use_t *c)
{
    memset(c, 0, sizeof(*c));
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    c->total = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300], kind[64];
        double sec;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        if (!thread_cpu(path, getpid(), kind, sizeof(kind), &sec))
            cpu_add(c, kind, sec);
    }
    if (d)
        closedir(d);
    /* schedstat's second field is the time spent waiting on a run queue:
     * it tells a pipeline thread starved of CPU from one blocked on I/O */
    char path[64];
    unsigned long long run_ns = 0, wait_ns = 0;
    snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)getpid());
    FILE *f = fopen(path, "r");
    if (f && fscanf(f, "%llu %llu", &run_ns, &wait_ns) == 2)
        c->main_waited = (double)wait_ns / 1e9;
    if (f)
        fclose(f);
}

/* A full compaction beside the pipeline (--compact-during). */
typedef struct compactor {
    segd_store_t *store;
    double t0, from, to; /* mono start of the run; the compaction's span since */
    int rc;
} compactor_t;

static void *compact_main(void *arg)
{
    compactor_t *c = arg;
    char err[256];
    c->from = segd_mono_s() - c->t0;
    c->rc = segd_store_compact_beside_writers(c->store, err, sizeof(err)) ? -1 : 0;
    c->to = segd_mono_s() - c->t0;
    if (c->rc)
        fprintf(stderr, "bench ingest: compaction: %s\n", err);
    return NULL;
}

/* The resident set now (VmRSS of /proc/self/status), in MiB. */
static double rss_now_mib(void)
{
    char line[256];
    double kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %lf kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb / 1024;
}

/* Closes a window: the pipeline's counters, the latency of the entries
 * acknowledged since the last one (then reset), and the profiles family's
 * L0 files, pending compaction bytes and write-stall state. */
static void close_window(segd_store_t *s, segd_publisher_t *pub, const segd_pipeline_stats_t *st,
                         double t, run_result_t *r)
{
    if (r->nw == MAX_WINDOWS)
        return;
    window_t *w = &r->w[r->nw++];
    memset(w, 0, sizeof(*w));
    w->end_s = t;
    w->messages = st->messages;
    w->segments = st->segments;
    if (pub) {
        segd_publisher_stats_t ps;
        segd_publisher_get_stats(pub, &ps);
        w->p50 = ps.latency_p50_ms;
        w->p99 = ps.latency_p99_ms;
        w->max = ps.latency_max_ms;
        segd_publisher_reset_latency(pub);
    }
    uint64_t pending = 0;
    segd_store_property(s, 0, "rocksdb.num-files-at-level0", &w->l0);
    segd_store_property(s, 0, "rocksdb.estimate-pending-compaction-bytes", &pending);
    segd_store_property(s, -1, "rocksdb.actual-delayed-write-rate", &w->delayed);
    segd_store_property(s, -1, "rocksdb.is-write-stopped", &w->stopped);
    segd_store_property(s, -1, "rocksdb.num-running-compactions", &w->compacting);
    w->pending_mb = pending >> 20;
    w->rss_mib = rss_now_mib();
}

/* RocksDB's cumulative write-stall time of the store, from the DB stats
 * text ("Cumulative stall: 00:00:1.234 H:M:S"), in microseconds. */
static uint64_t stall_micros(segd_store_t *s)
{
    char *t = segd_store_property_text(s, -1, "rocksdb.dbstats");
    const char *c = t ? strstr(t, "Cumulative stall: ") : NULL;
    unsigned h = 0, m = 0;
    double sec = 0;
    uint64_t us = 0;
    if (c && sscanf(c, "Cumulative stall: %u:%u:%lf", &h, &m, &sec) == 3)
        us = (uint64_t)(((double)h * 3600 + (double)m * 60 + sec) * 1e6);
    free(t);
    return us;
}

/* segd run's configuration for one benchmark pipeline: batch and budget
 * from the arguments (batch 0 = the budget's), the db a directory under a->dir. */
static segd_err_t bench_config(segd_config_t *c, const char *brokers, const ingest_args_t *a,
                               const char *topic, const char *name, int changes, char *err,
                               size_t n)
{
    char db[300], batch[32], group[160], memory[32];
    snprintf(db, sizeof(db), "%s/%s", a->dir, name);
    snprintf(batch, sizeof(batch), "%" PRId64, a->batch);
    snprintf(memory, sizeof(memory), "%" PRId64,
             a->memory_mb ? a->memory_mb : (int64_t)SEGD_MEMORY_DEFAULT_MB);
    /* One group per topic. On Apache Kafka the store's static member id
     * is the same in every phase, and a static member that rejoins gets
     * its previous assignment back (the last phase's topic), so a phase
     * sharing the group with the one before consumed nothing. */
    snprintf(group, sizeof(group), "bench-%s-%s", name, topic);
    if (segd_config_set(c, "brokers", brokers, err, n) ||
        segd_config_set(c, "topics", topic, err, n) || segd_config_set(c, "group", group, err, n) ||
        segd_config_set(c, "db", db, err, n) ||
        (a->batch && segd_config_set(c, "batch.max.messages", batch, err, n)) ||
        segd_config_set(c, "memory.limit.mb", memory, err, n) ||
        (a->writer != WRITER_DEFAULT &&
         segd_config_set(c, "ingest.writer.thread", a->writer ? "1" : "0", err, n)) ||
        segd_config_set(c, "changes.topic", TOPIC ".changes", err, n) ||
        segd_config_set(c, "changes.enable", changes ? "1" : "0", err, n) ||
        /* the seed's events lie in the last 30 days: once the pipeline is
         * caught up, a store with the default 1-day horizon starts its GC
         * phase at now - 1 day and dead-letters ~97 % of them as too_late
         * (which is what earlier freshness runs measured after 10 s) */
        segd_config_set(c, "store.horizon.s", "2678400", err, n) ||
        /* 6 s suits the mock; a real cluster on a loaded machine misses it
         * (the coordinator answers late, the static member is fenced) */
        segd_config_set_x(c, a->brokers ? "session.timeout.ms=45000" : "session.timeout.ms=6000",
                          err, n) ||
        /* the mock broker holds an empty fetch for the whole wait (a real one
         * answers when data arrives): 500 ms would dominate the latency */
        segd_config_set_x(c, "fetch.wait.max.ms=5", err, n))
        return SEGD_ERR_CONFIG;
    for (int i = 0; i < a->n_x; i++)
        if (segd_config_set_x(c, a->x[i], err, n))
            return SEGD_ERR_CONFIG;
    return segd_config_finish(c, err, n);
}

/* One pipeline run's moving parts: its store and daemon, the paced producer
 * and the full compaction started beside it, and the clock of its windows. */
typedef struct consume_run {
    const ingest_args_t *a;
    const char *name;
    int64_t want;
    paced_t *pc;
    run_result_t *r;
    segd_config_t cfg;
    segd_store_t *store;
    segd_daemon_t *d;
    segd_pipeline_t *p;
    segd_publisher_t *pub; /* NULL without changes */
    pthread_t producer, compaction;
    int producing, compacting;
    compactor_t cp;
    double t0, next_window, end;
} consume_run_t;

static int consume_open(consume_run_t *c, const char *brokers, const char *topic, int changes,
                        volatile sig_atomic_t *stop)
{
    char err[512];
    segd_store_opts_t so;
    segd_config_init(&c->cfg);
    segd_err_t e = bench_config(&c->cfg, brokers, c->a, topic, c->name, changes, err,
                                sizeof(err));
    if (!e) {
        segd_app_config_store_opts(&c->cfg, &so);
        e = segd_store_open(&c->store, &so, err, sizeof(err));
    }
    if (!e)
        e = segd_daemon_new(&c->d, &c->cfg, c->store, stop, err, sizeof(err));
    if (e) {
        fprintf(stderr, "bench ingest: %s\n", err);
        return -1;
    }
    c->p = segd_daemon_pipeline(c->d);
    c->pub = segd_daemon_publisher(c->d);
    c->end = segd_mono_s() + 1800;
    return 0;
}

/* What runs beside the pipeline, started when its time comes: the paced
 * producer once the group has assigned partitions (the join's delay is not
 * latency), the full compaction a quarter into the run (so that windows
 * before, during and after it show). */
static int consume_start_beside(consume_run_t *c)
{
    if (c->pc && !c->producing && segd_pipeline_assigned(c->p) > 0) {
        if (pthread_create(&c->producer, NULL, paced_main, c->pc)) {
            fprintf(stderr, "bench ingest: %s: cannot start the producer\n", c->name);
            return -1;
        }
        c->producing = 1;
    }
    if (c->pc && c->pc->compact && !c->compacting && (int64_t)c->r->st.messages * 4 >= c->want) {
        c->cp.store = c->store;
        c->cp.t0 = c->t0;
        if (pthread_create(&c->compaction, NULL, compact_main, &c->cp)) {
            fprintf(stderr, "bench ingest: %s: cannot start the compaction\n", c->name);
            return -1;
        }
        c->compacting = 1;
    }
    return 0;
}

/* The clock starts at the first message; windows close every WINDOW_S. */
static void consume_tick(consume_run_t *c)
{
    run_result_t *r = c->r;
    segd_pipeline_get_stats(c->p, &r->st);
    if (r->st.messages && c->t0 == 0) {
        c->t0 = segd_mono_s();
        r->st0 = r->st;
        cpu_sample(&r->cpu0);
        c->next_window = c->t0 + WINDOW_S;
        if (c->pub) /* the group join is not the ingest's latency */
            segd_publisher_reset_latency(c->pub);
    }
    if (c->t0 > 0 && segd_mono_s() >= c->next_window) {
        close_window(c->store, c->pub, &r->st, segd_mono_s() - c->t0, r);
        c->next_window += WINDOW_S;
    }
}

/* Steps the pipeline until `want` messages are consumed, then until every
 * delta is acknowledged: the run ends at the last acknowledgement, not at
 * the last message read. */
static int consume_steps(consume_run_t *c)
{
    char err[512];
    run_result_t *r = c->r;
    do {
        if (segd_pipeline_step(c->p, err, sizeof(err))) {
            fprintf(stderr, "bench ingest: %s: %s\n", c->name, err);
            return -1;
        }
        if (consume_start_beside(c))
            return -1;
        consume_tick(c);
    } while ((int64_t)r->st.messages < c->want && segd_mono_s() < c->end);
    if ((int64_t)r->st.messages != c->want) {
        fprintf(stderr, "bench ingest: %s: %" PRIu64 " of %" PRId64 " messages consumed\n",
                c->name, r->st.messages, c->want);
        return -1;
    }
    for (; c->pub;) {
        segd_publisher_get_stats(c->pub, &r->pub);
        if (r->pub.entries >= r->st.batches || segd_mono_s() > c->end)
            break;
        if (segd_pipeline_step(c->p, err, sizeof(err))) { /* the count below says it */
            fprintf(stderr, "bench ingest: %s: %s\n", c->name, err);
            break;
        }
    }
    r->seconds = segd_mono_s() - c->t0;
    close_window(c->store, c->pub, &r->st, r->seconds, r); /* the last, partial one */
    r->stall_micros = stall_micros(c->store);
    cpu_sample(&r->cpu1);
    if (c->pub && r->pub.entries < r->st.batches) {
        fprintf(stderr, "bench ingest: %s: %" PRIu64 " of %" PRIu64 " outbox entries "
                "acknowledged in time\n", c->name, r->pub.entries, r->st.batches);
        return -1;
    }
    return 0;
}

static int consume_close(consume_run_t *c, int rc)
{
    if (c->producing)
        pthread_join(c->producer, NULL);
    if (c->compacting) {
        pthread_join(c->compaction, NULL);
        c->r->compact_from = c->cp.from;
        c->r->compact_to = c->cp.to;
        if (c->cp.rc)
            rc = -1;
    }
    segd_daemon_destroy(c->d);
    segd_store_close(c->store);
    segd_config_free(&c->cfg);
    return rc;
}

/* Runs the pipeline (with its change publisher) over `want` messages of
 * topic, until every delta is acknowledged; db is a directory under a->dir. */
static int pipeline_consume(const char *brokers, const ingest_args_t *a, const char *topic,
                            const char *name, int64_t want, int changes, paced_t *pc,
                            run_result_t *r)
{
    volatile sig_atomic_t stop = 0;
    consume_run_t c = {.a = a, .name = name, .want = want, .pc = pc, .r = r};
    memset(r, 0, sizeof(*r));
    /* what earlier phases freed goes back to the system, so that the
     * windows' resident sets are this pipeline's */
    malloc_trim(0);
    int rc = consume_open(&c, brokers, topic, changes, &stop);
    if (!rc)
        rc = consume_steps(&c);
    return consume_close(&c, rc);
}

/* The store's own write path into dir/name, as `segd bench store` times it:
 * one writer, seed `seed`'s events of `users` users through the applier in
 * WriteBatches of 1000 events, WAL on, no broker and no outbox; windows of
 * its rate and RocksDB state into r (r->seconds, r->st.segments). */
static int store_write(const ingest_args_t *a, const char *name, uint64_t seed, int64_t users,
                       run_result_t *r)
{
    segd_config_t cfg;
    segd_store_opts_t so;
    segd_store_t *store = NULL;
    segd_seed_t *g = NULL;
    segd_applier_t ap;
    segd_event_t ev;
    char err[512] = "";
    int rc = -1;
    memset(r, 0, sizeof(*r));
    memset(&ap, 0, sizeof(ap)); /* zeroed, segd_applier_free is safe on every path */
    segd_config_init(&cfg);
    segd_event_init(&ev);
    segd_seed_opts_t o;
    segd_seed_opts_default(&o);
    o.users = (uint64_t)users;
    o.seed = seed;
    o.now_ms = (int64_t)time(NULL) * 1000;
    segd_err_t e = bench_config(&cfg, "localhost:9", a, TOPIC, name, 0, err, sizeof(err));
    if (!e) {
        segd_app_config_store_opts(&cfg, &so);
        e = segd_store_open(&store, &so, err, sizeof(err));
    }
    if (!e && (segd_seed_new(&g, &o) || segd_applier_init(&ap, store)))
        e = segd_errf(SEGD_ERR_NOMEM, err, sizeof(err), "out of memory");
    cpu_sample(&r->cpu0);
    double t0 = segd_mono_s(), next = t0 + WINDOW_S;
    while (!e && segd_seed_next(g, &ev)) {
        e = segd_applier_add(&ap, &ev);
        r->st.messages++;
        r->st.segments += ev.n_segments;
        if (!e && segd_batch_count(ap.batch) >= 1000)
            e = segd_applier_flush(&ap, err, sizeof(err));
        if (segd_mono_s() >= next) {
            close_window(store, NULL, &r->st, segd_mono_s() - t0, r);
            next += WINDOW_S;
        }
    }
    if (!e)
        e = segd_applier_flush(&ap, err, sizeof(err));
    if (e)
        fprintf(stderr, "bench ingest: store write %s: %s\n", name, err[0] ? err : segd_err_str(e));
    r->seconds = segd_mono_s() - t0;
    if (store) {
        close_window(store, NULL, &r->st, r->seconds, r);
        r->stall_micros = stall_micros(store);
    }
    cpu_sample(&r->cpu1);
    rc = e ? -1 : 0;
    segd_applier_free(&ap);
    segd_seed_destroy(g);
    segd_event_free(&ev);
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
 * pipeline consumes into dir/name, so latency is event creation -> delta
 * acknowledged under load instead of the age of a backlog. */
static int freshness(const char *brokers, const ingest_args_t *a, const char *topic,
                     const char *name, double rate, int compact, run_result_t *r)
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
    pc.process = a->producer_process;
    pc.compact = compact;
    int rc = pipeline_consume(brokers, a, topic, name, a->users * 50, 1, &pc, r);
    if (pc.rc)
        fprintf(stderr, "bench ingest: the paced producer of %s failed\n", topic);
    return rc || pc.rc ? -1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: segd bench ingest [--users N] [--partitions P] [--batch N] [--dir DIR]\n"
               "                         [--memory-mb M] [--prefill-users N] [--brokers LIST]\n"
               "                         [--producer-process] [--compact-during] [--ratio-only]\n"
               "                         [--writer on|off|both] [-X key=value ...]\n"
               "  --dir DIR: made if missing, and it must hold no stores of an earlier run\n"
               "  -X key=value: a librdkafka setting of the pipelines (as segd run -X), after\n"
               "                the bench's own and the budget's: the way to compare settings\n");
}

/* An explicit --dir is made if missing and must be empty: a store left by
 * an earlier run already holds the events' offsets, and its pipeline would
 * wait forever for messages it will never be given. */
static int usable_dir(const char *dir)
{
    if (mkdir(dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "bench ingest: --dir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "bench ingest: --dir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    if (!empty)
        fprintf(stderr, "bench ingest: --dir %s is not empty: an earlier run's stores would "
                        "already hold the events; give a new or empty directory\n", dir);
    return empty ? 0 : -1;
}

/* -X is checked before anything is produced: a key librdkafka refuses
 * would otherwise stop the bench only when its first pipeline starts,
 * after the pre-fill */
static int check_x(const ingest_args_t *a)
{
    char err[256];
    segd_config_t cfg;
    segd_config_init(&cfg);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t e = SEGD_OK;
    for (int i = 0; !e && i < a->n_x; i++)
        e = segd_config_set_x(&cfg, a->x[i], err, sizeof(err));
    if (e)
        fprintf(stderr, "bench ingest: %s\n", err);
    for (size_t i = 0; !e && i < cfg.n_kafka; i++)
        if ((e = segd_kconf_set(conf, "bench ingest -X", cfg.kafka[i].key, cfg.kafka[i].value,
                                err, sizeof(err))))
            fprintf(stderr, "%s\n", err); /* it names the bench */
    rd_kafka_conf_destroy(conf);
    segd_config_free(&cfg);
    return e ? -1 : 0;
}

static int parse(int argc, char **argv, ingest_args_t *a)
{
    static const struct option opts[] = {{"users", required_argument, 0, 'u'},
                                         {"partitions", required_argument, 0, 'p'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"memory-mb", required_argument, 0, 'm'},
                                         {"prefill-users", required_argument, 0, 'f'},
                                         {"brokers", required_argument, 0, 'k'},
                                         {"producer-process", no_argument, 0, 'x'},
                                         {"compact-during", no_argument, 0, 'c'},
                                         {"ratio-only", no_argument, 0, 'r'},
                                         {"writer", required_argument, 0, 'w'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    memset(a, 0, sizeof(*a));
    a->users = 5000;
    a->partitions = 32;
    a->writer = WRITER_DEFAULT;
    snprintf(a->dir, sizeof(a->dir), "/tmp/segd-bench-ingest-XXXXXX");
    int have_dir = 0;
    while ((c = segd_args_next("bench ingest", argc, argv, "hX:", opts)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        if (c == 'X' && a->n_x < BENCH_X_MAX) {
            a->x[a->n_x++] = optarg;
            continue;
        }
        if (c == 'X') {
            fprintf(stderr, "bench ingest: at most %d -X settings\n", BENCH_X_MAX);
            return -1;
        }
        if (c == 'u' && !segd_arg_int("bench ingest", "--users", optarg, 1, 10000000, &a->users))
            continue;
        if (c == 'p' && !segd_arg_int("bench ingest", "--partitions", optarg, 1, 256, &a->partitions))
            continue;
        if (c == 'b' && !segd_arg_int("bench ingest", "--batch", optarg, 1, 1000000, &a->batch))
            continue;
        if (c == 'm' && !segd_arg_int("bench ingest", "--memory-mb", optarg, SEGD_MEMORY_MIN_MB,
                                      SEGD_MEMORY_MAX_MB, &a->memory_mb))
            continue;
        if (c == 'f' &&
            !segd_arg_int("bench ingest", "--prefill-users", optarg, 1, 100000000, &a->prefill_users))
            continue;
        if (c == 'k') {
            a->brokers = optarg;
            continue;
        }
        if (c == 'x') {
            a->producer_process = 1;
            continue;
        }
        if (c == 'c') {
            a->compact_during = 1;
            continue;
        }
        if (c == 'r') {
            a->ratio_only = 1;
            continue;
        }
        if (c == 'w' && (!strcmp(optarg, "on") || !strcmp(optarg, "off") ||
                         !strcmp(optarg, "both"))) {
            a->writer = !strcmp(optarg, "on") ? 1 : !strcmp(optarg, "off") ? 0 : WRITER_BOTH;
            continue;
        }
        if (c == 'w') {
            fprintf(stderr, "bench ingest: --writer takes on, off or both\n");
            return -1;
        }
        if (c == 'd') {
            snprintf(a->dir, sizeof(a->dir), "%s", optarg);
            have_dir = 1;
            continue;
        }
        return -1; /* said by segd_args_next or segd_arg_int */
    }
    if (check_x(a))
        return -1;
    return have_dir ? usable_dir(a->dir) : mkdtemp(a->dir) ? 0 : -1;
}

static const char *const topics[] = {TOPIC,          TOPIC ".dlq",         TOPIC ".changes",
                                     TOPIC ".half",  TOPIC ".half.dlq",    TOPIC ".quarter",
                                     TOPIC ".quarter.dlq"};

/* Every measured phase, in order; the db named "db" takes the pre-fill,
 * the end-to-end run, the store pass and (pre-filled) the freshness runs. */
static int run_phases(const ingest_args_t *a, const char *brokers, ingest_run_t *x)
{
    const char *name = a->prefill_users ? "db" : NULL;
    x->raw = raw_consume(a, brokers, (int64_t)x->res.events, &x->sum);
    x->harness = segd_bench_ingest_peak_rss_mib(); /* broker, producer, raw consumer: not segd run's */
    if (x->raw <= 0) {
        fprintf(stderr, "bench ingest: the raw consume did not read every message\n");
        return -1;
    }
    if (a->prefill_users && store_write(a, "db", 7, a->prefill_users, &x->prefill))
        return -1;
    if (a->writer == WRITER_BOTH) { /* off first, into a store of its own */
        ingest_args_t off = *a;
        off.writer = 0;
        if (pipeline_consume(brokers, &off, TOPIC, "db-writer-off", (int64_t)x->res.events, 1,
                             NULL, &x->e2e_off)) {
            fprintf(stderr, "bench ingest: the run with the writer thread off failed\n");
            return -1;
        }
    }
    ingest_args_t on = *a;
    if (on.writer == WRITER_BOTH)
        on.writer = 1;
    if (pipeline_consume(brokers, &on, TOPIC, "db", (int64_t)x->res.events, 1, NULL, &x->e2e) ||
        (!a->prefill_users && !a->ratio_only && pipeline_consume(brokers, a, TOPIC, "bare",
                                               (int64_t)x->res.events, 0, NULL, &x->bare))) {
        fprintf(stderr, "bench ingest: not every message was consumed (mock broker keeps "
                        "5 MiB per partition: use fewer --users or more --partitions)\n");
        return -1;
    }
    if (store_write(a, "db", 1, a->users, &x->store))
        return -1;
    if (a->ratio_only)
        return 0;
    double half = (double)x->res.events / x->e2e.seconds / 2;
    if (freshness(brokers, a, TOPIC ".half", name ? name : "half", half, a->compact_during,
                  &x->fresh) ||
        freshness(brokers, a, TOPIC ".quarter", name ? name : "quarter", half / 2, 0,
                  &x->fresh4)) {
        fprintf(stderr, "bench ingest: the paced freshness run did not complete\n");
        return -1;
    }
    return 0;
}

int segd_bench_ingest(int argc, char **argv)
{
    ingest_args_t a;
    int pa = parse(argc, argv, &a);
    if (pa)
        return pa > 0 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    segd_dev_broker_t *b = NULL;
    char err[512];
    if (!a.brokers &&
        segd_dev_broker_new(&b, 1, (int)a.partitions, topics, 7, err, sizeof(err))) {
        fprintf(stderr, "bench ingest: %s\n", err);
        return SEGD_EXIT_FAIL;
    }
    ingest_run_t *x = calloc(1, sizeof(*x));
    segd_seed_produce_opts_t o = {0};
    o.brokers = a.brokers ? a.brokers : segd_dev_broker_bootstraps(b);
    o.topic = TOPIC;
    segd_seed_opts_default(&o.seed);
    o.seed.users = (uint64_t)a.users;
    o.seed.now_ms = (int64_t)time(NULL) * 1000;
    o.framing = SEGD_FRAMING_SINGLE_OBJECT;
    int rc = SEGD_EXIT_FAIL;
    if (!x)
        goto out;
    if (segd_seed_produce(&o, NULL, &x->res, err, sizeof(err))) {
        fprintf(stderr, "bench ingest: produce: %s\n", err);
        goto out;
    }
    if (run_phases(&a, o.brokers, x))
        goto out;
    segd_bench_ingest_report(&a, x);
    rc = SEGD_EXIT_OK;
out:
    free(x);
    segd_dev_broker_destroy(b);
    return rc;
}
