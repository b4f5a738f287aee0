/* `segd run`: the daemon. Configuration from --config, SEGD_* environment and
 * flags (in rising precedence); SIGINT/SIGTERM finish the batch, write it,
 * commit and close; a second signal exits at once, which is safe because a
 * batch and its offsets are one atomic write. */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/rebuild.h"
#include "cli/cli.h"
#include "cli/cmd_args.h"
#include "app/daemon.h"
#include "app/health.h"
#include "metrics/server.h"
#include "publisher/publisher.h"
#include "publisher/snapshot.h"
#include "base/clock.h"
#include "transport/kconf.h"


static void usage(FILE *f)
{
    fprintf(f,
            "usage: segd run --brokers B --topic T[,T2] --group G --db DIR\n"
            "                [--config FILE] [-X kafka.prop=value ...] [--print-config]\n"
            "  The daemon: consumes SegmentEvents of the topics in group G into the store\n"
            "  DIR, publishes the change stream (and snapshots every snapshot.interval),\n"
            "  serves /metrics /healthz /readyz.\n"
            "  --print-config: print the effective configuration (every key, defaults\n"
            "  filled in, secrets masked) and exit.\n"
            "  Settings: FILE lines `key = value`, then SEGD_<KEY> variables (dots as _),\n"
            "  then the flags, which win. Every key with its default, bounds and effect:\n"
            "  docs/configuration.md (or --print-config). The common ones:\n"
            "    input.format (auto|confluent|single-object|raw), input.schema.registry.url,\n"
            "    input.offset.reset, input.partitioner, dlq.topic, group.instance.id,\n"
            "    memory.limit.mb (one budget: cache, memtables, fetch queue, batches),\n"
            "    batch.max.messages, batch.max.ms, commit.interval.ms (group offset commits),\n"
            "    store.horizon.s, store.gc.grace.s,\n"
            "    changes.enable, changes.topic, snapshot.interval (s), snapshot.to,\n"
            "    snapshot.format (avro|native), restore.from, sweep.after.s,\n"
            "    log.format (logfmt|json), log.level (debug|info|warn|error),\n"
            "    metrics.listen (HOST:PORT of /metrics /healthz /readyz, default\n"
            "    127.0.0.1:9464; off = none), ready.max.lag (messages, default 1000),\n"
            "    identity.enable (the links topic into the identity graph),\n"
            "    kafka.<librdkafka property> (as -X)\n"
            "  and the rest of input.*, limits.*, retry.*, store.* (store.log.level:\n"
            "  RocksDB's own log), compaction.*, changes.*, snapshot.* (snapshot.upload.*:\n"
            "  retries to http(s) and s3), restore.*, sweep.*, identity.*, ingest.*\n"
            "  (ingest.writer.thread: the store write on a thread of its own).\n");
}

static int apply_flag(void *ctx, segd_config_t *cfg, int c, char *arg, char *err, size_t n)
{
    switch (c) {
    case 'b': return segd_config_set(cfg, "brokers", arg, err, n) ? -1 : 0;
    case 't': return segd_config_set(cfg, "topics", arg, err, n) ? -1 : 0;
    case 'g': return segd_config_set(cfg, "group", arg, err, n) ? -1 : 0;
    case 'd': return segd_config_set(cfg, "db", arg, err, n) ? -1 : 0;
    case 'X': return segd_config_set_x(cfg, arg, err, n) ? -1 : 0;
    case 'p': *(int *)ctx = 1; return 0;
    }
    return 0;
}

/* Every kafka.* setting through librdkafka's own check, as the consumer's
 * configuration will take them: --print-config must refuse what segd run
 * would, and segd run refuses it before opening the store. */
static int check_kafka(const segd_config_t *cfg, char *err, size_t n)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    segd_err_t e = SEGD_OK;
    for (size_t i = 0; !e && i < cfg->n_kafka; i++)
        e = segd_kconf_set(conf, "consumer", cfg->kafka[i].key, cfg->kafka[i].value, err, n);
    rd_kafka_conf_destroy(conf);
    return e ? -1 : 0;
}

/* 0 to run, 1 done (--help, --print-config), 2 usage error (said). Flags
 * are applied after the file and environment, so they win. */
static int parse_args(int argc, char **argv, segd_config_t *cfg)
{
    static const struct option opts[] = {{"brokers", required_argument, 0, 'b'},
                                         {"topic", required_argument, 0, 't'},
                                         {"group", required_argument, 0, 'g'},
                                         {"db", required_argument, 0, 'd'},
                                         {"config", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {"print-config", no_argument, 0, 'p'},
                                         {0, 0, 0, 0}};
    static const segd_args_spec_t spec = {"run", opts, "hX:", usage, SEGD_ARGS_ENV, NULL,
                                          apply_flag};
    int print = 0;
    char err[512];
    int c = segd_args_parse_config(&spec, argc, argv, cfg, &print);
    if (c)
        return c;
    if (optind < argc) {
        snprintf(err, sizeof(err), "unexpected argument '%s'", argv[optind]);
        goto bad;
    }
    if (segd_config_finish(cfg, err, sizeof(err)) || check_kafka(cfg, err, sizeof(err)))
        goto bad;
    if (print) {
        segd_config_print(cfg, stdout);
        return 1;
    }
    return 0;
bad:
    fprintf(stderr, "segd run: %s\n", err);
    return 2;
}

/* Periodic snapshots run on their own thread: an export reads the whole
 * store through a RocksDB snapshot while ingestion goes on. Each exports
 * the units of the input partitions this member owns at that moment (a
 * partition revoked meanwhile still gets a whole, consistent unit). */
typedef struct snapshotter {
    const segd_config_t *cfg;
    segd_store_t *store;
    segd_pipeline_t *pipeline;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    uint64_t exported, failed;
    /* metrics (NULL without a registry) */
    segd_metric_t *runs, *duration, *bytes, *users, *last_ok, *age;
    _Atomic int64_t last_ok_ms; /* wall time of the last export that fully landed */
} snapshotter_t;

static void snapshot_age(void *ctx)
{
    snapshotter_t *sn = ctx;
    int64_t at = atomic_load(&sn->last_ok_ms);
    if (at)
        segd_metric_set(sn->age, NULL, (double)(segd_wall_ms() - at) / 1000.0);
}

static void snapshot_metrics(snapshotter_t *sn, segd_metrics_t *m)
{
    sn->runs = segd_metrics_counter(m, "segd_snapshot_exports_total",
                                    "Periodic snapshot exports of a topic, by result.",
                                    "topic,result");
    sn->duration = segd_metrics_gauge(m, "segd_snapshot_duration_seconds",
                                      "Duration of the last export of a topic.", "topic");
    sn->bytes = segd_metrics_gauge(m, "segd_snapshot_bytes",
                                   "Bytes of the files of the last export of a topic.", "topic");
    sn->users = segd_metrics_gauge(m, "segd_snapshot_users",
                                   "Users in the last export of a topic.", "topic");
    sn->last_ok = segd_metrics_gauge(m, "segd_snapshot_last_success_timestamp_seconds",
                                     "When the last export whose units all landed ended.", NULL);
    sn->age = segd_metrics_gauge(m, "segd_snapshot_age_seconds",
                                 "Seconds since the last export whose units all landed.", NULL);
    segd_metrics_add_collector(m, snapshot_age, sn);
}

static void report_export(snapshotter_t *sn, const char *topic, const segd_manifest_t *m,
                          double seconds, int ok)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < m->n_files; i++)
        bytes += m->files[i].bytes;
    const char *t[] = {topic}, *r[] = {topic, ok ? "ok" : "failed"};
    segd_metric_add(sn->runs, r, 1);
    segd_metric_set(sn->duration, t, seconds);
    segd_metric_set(sn->bytes, t, (double)bytes);
    segd_metric_set(sn->users, t, (double)m->records);
    if (ok) {
        atomic_store(&sn->last_ok_ms, segd_wall_ms());
        segd_metric_set(sn->last_ok, NULL, (double)segd_wall_ms() / 1000.0);
    }
}

/* Keeps the partitions the store holds an input offset for. A partition
 * assigned without one is being restored (paused) or replayed before its
 * first batch: its unit would have neither the partition's users nor its
 * offset, yet it would replace the good unit a restore of it is reading
 * (which then loads nothing and replays from input.offset.reset) and make
 * every cache fold it as "no offset". Found by tests/trials/fleet.py. */
static void keep_stored(snapshotter_t *sn, const char *topic, int32_t *parts, size_t *n)
{
    size_t k = 0;
    char err[256];
    for (size_t i = 0; i < *n; i++) {
        int64_t next;
        if (segd_store_offset_get(sn->store, topic, parts[i], &next, err, sizeof(err)) ==
            SEGD_OK)
            parts[k++] = parts[i];
    }
    *n = k;
}

static void export_topic(snapshotter_t *sn, const char *topic)
{
    segd_snapshot_opts_t o;
    segd_snapshot_opts_default(&o);
    int32_t *parts = NULL;
    char err[512] = "";
    if (segd_pipeline_assignment(sn->pipeline, topic, &parts, &o.n_partitions,
                                 &o.partition_count, err, sizeof(err))) {
        segd_log(sn->cfg->log, SEGD_LOG_WARN, "snapshot", "snapshot of %s skipped: %s", topic,
                 err);
        sn->failed++;
        return;
    }
    /* partitions still restoring hold no offset yet: not exported (the plan
     * drops them too), and none at all is not a failure */
    if (parts)
        keep_stored(sn, topic, parts, &o.n_partitions);
    if (!o.n_partitions) { /* nothing of this topic is ours (and restored) now */
        free(parts);
        return;
    }
    o.topic = topic;
    o.partitions = parts;
    o.partitioner = sn->cfg->partitioner;
    o.buckets = (uint32_t)sn->cfg->snapshot_buckets;
    o.changes_topic = sn->cfg->changes_topic;
    o.format = sn->cfg->snapshot_native ? SEGD_SNAPFMT_NATIVE : SEGD_SNAPFMT_AVRO;
    o.codec = segd_snapshot_default_codec(o.format);
    o.log = sn->cfg->log;
    o.dest.max_retries = (int)sn->cfg->snapshot_upload_retries;
    o.dest.backoff_ms = (long)sn->cfg->snapshot_upload_backoff_ms;
    segd_manifest_t m;
    size_t failed = 0;
    double t0 = segd_mono_s();
    segd_err_t e = segd_snapshot_export(sn->store, sn->cfg->snapshot_to, &o, &m, &failed, err,
                                        sizeof(err));
    char to[1024];
    segd_config_mask_url(sn->cfg->snapshot_to, to, sizeof(to));
    if (m.units) { /* the msg keeps the text it had before the logger
                    * ("snapshot: N units of T") because scripts grep it */
        char msg[300];
        snprintf(msg, sizeof(msg), "snapshot: %u units of %s", m.units, topic);
        segd_log_kv(sn->cfg->log, SEGD_LOG_INFO, "snapshot", msg,
                    "units=%u topic=%s users=%" PRIu64 " entries=%" PRIu64 " to=%s in_s=%.1f",
                    m.units, topic, m.records, m.segments, to, segd_mono_s() - t0);
    }
    if (e)
        segd_log(sn->cfg->log, SEGD_LOG_ERROR, "snapshot",
                 "snapshot of %s to %s: %zu of %zu units failed (their "
                 "previous units stay): %s", topic, to,
                 failed ? failed : o.n_partitions, o.n_partitions, err);
    report_export(sn, topic, &m, segd_mono_s() - t0, !e);
    segd_manifest_free(&m);
    free(parts);
    if (e)
        sn->failed++;
    else
        sn->exported++;
}

static void export_once(snapshotter_t *sn)
{
    for (size_t i = 0; i < sn->cfg->n_topics; i++)
        export_topic(sn, sn->cfg->topics[i]);
}

static void *snapshot_main(void *arg)
{
    snapshotter_t *sn = arg;
    pthread_mutex_lock(&sn->mu);
    while (!sn->stop) {
        struct timespec ts;
        segd_realtime_after(&ts, sn->cfg->snapshot_interval_s * 1000);
        while (!sn->stop && pthread_cond_timedwait(&sn->cv, &sn->mu, &ts) == 0)
            ;
        if (sn->stop)
            break;
        pthread_mutex_unlock(&sn->mu);
        export_once(sn);
        pthread_mutex_lock(&sn->mu);
    }
    pthread_mutex_unlock(&sn->mu);
    return NULL;
}

/* The publisher's line: msg "changes" (periodic) or "final changes". */
static void report_changes(const segd_log_t *log, segd_publisher_t *pub, const char *msg)
{
    if (!pub)
        return;
    segd_publisher_stats_t st;
    segd_publisher_get_stats(pub, &st);
    segd_log_kv(log, SEGD_LOG_INFO, "publisher", msg,
                "deltas=%" PRIu64 " entries=%" PRIu64 " bytes=%" PRIu64 " outbox_depth=%" PRIu64
                " oldest_unacked_ms=%" PRId64 " latency_p50_ms=%" PRId64
                " latency_p99_ms=%" PRId64 " publish_retries=%" PRIu64,
                st.events, st.segments, st.bytes, st.depth, st.oldest_unacked_ms,
                st.latency_p50_ms, st.latency_p99_ms, st.retries);
}

/* The progress line, logged as msg "progress" every 10 s and "final" at the
 * end. Dead letters by reason (dlq.REASON=N) appear only for reasons that
 * have some. */
static void report(const segd_log_t *log, const segd_pipeline_t *p, double t0, const char *msg)
{
    segd_pipeline_stats_t st;
    segd_pipeline_get_stats(p, &st);
    uint64_t dlq = 0;
    char reasons[SEGD_DLQ_REASONS * 48] = "";
    size_t len = 0;
    for (int i = 0; i < SEGD_DLQ_REASONS; i++) {
        dlq += st.dlq[i];
        if (st.dlq[i] && len < sizeof(reasons))
            len += (size_t)snprintf(reasons + len, sizeof(reasons) - len, " dlq.%s=%" PRIu64,
                                    segd_dlq_reason_name(i), st.dlq[i]);
    }
    double dt = segd_mono_s() - t0;
    segd_log_kv(log, SEGD_LOG_INFO, "pipeline", msg,
                "consumed=%" PRIu64 " events=%" PRIu64 " segments=%" PRIu64 " dlq=%" PRIu64
                " misrouted=%" PRIu64 " batches=%" PRIu64 " fault_waits=%" PRIu64
                " segments_per_s=%.0f%s",
                st.messages, st.events, st.segments, dlq, st.misrouted, st.batches, st.retries,
                dt > 0 ? (double)st.segments / dt : 0.0, reasons);
    if (st.sweep.passes)
        segd_log_kv(log, SEGD_LOG_INFO, "sweep", msg,
                    "users_deleted=%" PRIu64 " partitions_swept=%" PRIu64
                    " records_examined=%" PRIu64 " passes=%" PRIu64,
                    st.sweep.users_deleted, st.sweep.partitions_swept,
                    st.sweep.records_examined, st.sweep.passes);
}

/* Steps the pipeline until a signal or a fault, with the progress line
 * every 10 s; returns the fault (err filled) or SEGD_OK. */
static segd_err_t consume(const segd_config_t *cfg, segd_daemon_t *d,
                          volatile sig_atomic_t *stop, double t0, char *err, size_t n)
{
    segd_pipeline_t *p = segd_daemon_pipeline(d);
    segd_publisher_t *pub = segd_daemon_publisher(d);
    double last = t0;
    segd_err_t e = SEGD_OK;
    while (!*stop && !e) {
        e = segd_pipeline_step(p, err, n);
        if (segd_mono_s() - last >= 10) {
            report(cfg->log, p, t0, "progress");
            report_changes(cfg->log, pub, "changes");
            last = segd_mono_s();
        }
    }
    return e;
}

/* The metrics server of metrics.listen, with the daemon's figures and
 * readiness. Starting it gives SEGD_EXIT_OK when it runs or is off, else
 * the exit code to leave with: a bad address is a usage error and a port in
 * use a failure, and both are logged. */
typedef struct observability {
    segd_metrics_t *m;
    segd_health_t *health;
    segd_metrics_server_t *server;
} observability_t;

static int start_metrics(observability_t *o, const segd_config_t *cfg, segd_daemon_t *d,
                         segd_store_t *store, snapshotter_t *sn)
{
    char err[512];
    if (!segd_metrics_listen_enabled(cfg->metrics_listen))
        return SEGD_EXIT_OK;
    o->m = segd_metrics_new();
    if (!o->m || segd_health_new(&o->health, o->m, d, store, cfg)) {
        segd_log(cfg->log, SEGD_LOG_ERROR, "metrics", "out of memory");
        return SEGD_EXIT_FAIL;
    }
    snapshot_metrics(sn, o->m);
    segd_err_t e = segd_metrics_server_start(&o->server, cfg->metrics_listen, o->m,
                                             segd_health_ready, o->health, err, sizeof(err));
    if (e) {
        segd_log(cfg->log, SEGD_LOG_ERROR, "metrics", "%s", err);
        return e == SEGD_ERR_CONFIG ? SEGD_EXIT_USAGE : SEGD_EXIT_FAIL;
    }
    segd_log_kv(cfg->log, SEGD_LOG_INFO, "metrics", "serving",
                "url=http://%s/metrics endpoints=/metrics,/healthz,/readyz",
                cfg->metrics_listen);
    return SEGD_EXIT_OK;
}

/* After the daemon: its pipeline and publisher report into the registry
 * until they are destroyed. */
static void stop_metrics(observability_t *o)
{
    segd_metrics_server_stop(o->server);
    segd_health_destroy(o->health);
    segd_metrics_destroy(o->m);
}

static int run_daemon(segd_config_t *cfg, segd_store_t *store, volatile sig_atomic_t *stop)
{
    char err[512];
    segd_daemon_t *d = NULL;
    if (segd_daemon_new(&d, cfg, store, stop, err, sizeof(err)) != SEGD_OK) {
        segd_log(cfg->log, SEGD_LOG_ERROR, "daemon", "%s", err);
        return SEGD_EXIT_USAGE;
    }
    segd_pipeline_t *p = segd_daemon_pipeline(d);
    char topics[4096];
    segd_config_value(cfg, "topics", topics, sizeof(topics));
    segd_log_kv(cfg->log, SEGD_LOG_INFO, "daemon", "consuming", "topics=%s group=%s db=%s",
                topics, cfg->group, cfg->db);
    snapshotter_t sn = {.cfg = cfg, .store = store, .pipeline = p};
    observability_t obs = {0};
    int rc = start_metrics(&obs, cfg, d, store, &sn);
    if (rc) {
        segd_daemon_destroy(d);
        stop_metrics(&obs);
        return rc;
    }
    pthread_t snap_thread;
    int snapshots = cfg->snapshot_interval_s > 0;
    pthread_mutex_init(&sn.mu, NULL);
    pthread_cond_init(&sn.cv, NULL);
    if (snapshots && pthread_create(&snap_thread, NULL, snapshot_main, &sn))
        snapshots = 0;
    double t0 = segd_mono_s();
    segd_err_t e = consume(cfg, d, stop, t0, err, sizeof(err));
    if (e)
        segd_log(cfg->log, SEGD_LOG_ERROR, "daemon", "stopping: %s", err);
    if (snapshots) { /* an export in progress finishes first */
        pthread_mutex_lock(&sn.mu);
        sn.stop = 1;
        pthread_cond_signal(&sn.cv);
        pthread_mutex_unlock(&sn.mu);
        pthread_join(snap_thread, NULL);
    }
    pthread_cond_destroy(&sn.cv);
    pthread_mutex_destroy(&sn.mu);
    segd_metrics_server_stop(obs.server); /* nothing scrapes what is torn down */
    obs.server = NULL;
    segd_daemon_close(d); /* finishes the batch, commits, leaves the group */
    report(cfg->log, p, t0, "final");
    report_changes(cfg->log, segd_daemon_publisher(d), "final changes");
    segd_daemon_destroy(d);
    stop_metrics(&obs);
    return e ? SEGD_EXIT_FAIL : SEGD_EXIT_OK;
}

int segd_cmd_run(int argc, char **argv)
{
    segd_config_t cfg;
    segd_config_init(&cfg);
    int rc = parse_args(argc, argv, &cfg);
    if (rc) {
        segd_config_free(&cfg);
        return rc == 1 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    }
    /* owned here, borrowed by every component through cfg.log */
    segd_log_t *log = NULL;
    rc = SEGD_EXIT_FAIL;
    if (segd_log_new(&log, stderr, cfg.log_level, cfg.log_format))
        goto out_config;
    cfg.log = log;
    volatile sig_atomic_t *stop = segd_app_stop_on_signals();
    /* a store `segd rebuild` finished beside this one replaces it now */
    char err[512];
    int swapped;
    segd_store_opts_t so;
    segd_app_config_store_opts(&cfg, &so);
    if (segd_rebuild_check_log_start(&cfg, err, sizeof(err)) ||
        segd_rebuild_swap(&so, cfg.partitioner, log, &swapped, err, sizeof(err))) {
        segd_log(log, SEGD_LOG_ERROR, "store", "%s", err);
        goto out_log;
    }
    segd_store_t *store = segd_app_open_config_store("run", &cfg, 0);
    if (!store)
        goto out_log;
    rc = run_daemon(&cfg, store, stop);
    segd_store_close(store);
out_log:
    segd_log_destroy(log);
out_config:
    segd_config_free(&cfg);
    return rc;
}
