/* `segd cache`: an edge cache. Loads every unit of a snapshot (checksums
 * verified; each unit's W judges the users of its partition), tails each
 * change partition from the minimum position over the units' manifests,
 * joins deltas exactly as the store does, and answers bidders over HTTP (cache/http.h)
 * and, with --resp, over the Redis protocol (cache/resp.h). The proof
 * that snapshot + deltas reproduce the store, and a usable cache. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/edge.h"
#include "cache/edge_load.h"
#include "cache/http.h"
#include "cache/resp.h"
#include "cache/resp_cmd.h"
#include "cache/tail.h"
#include "cli/cli.h"
#include "cli/cmd_args.h"
#include "metrics/process.h"
#include "metrics/registry.h"
#include "snapread/snapshot.h"
#include "publisher/snapshot.h"
#include "base/clock.h"
#include "base/secret.h"
#include "metrics/listen.h"


static void usage(FILE *f)
{
    fprintf(f,
            "usage: segd cache --snapshot SRC --brokers B --changes TOPIC\n"
            "                  [--listen HOST:PORT] [--now S] [--from-beginning]\n"
            "                  [--resp HOST:PORT] [--resp-threads N] [--resp-reply-cache-mb N]\n"
            "                  [--resp-max-clients N] [--resp-idle-timeout-s N]\n"
            "                  [--resp-password-file F] [--http-token-file F]\n"
            "                  [--horizon-s N] [--load-threads N] [--ready-max-lag N]\n"
            "                  [-X kafka.prop=value ...] [--config FILE]\n"
            "                  [--log-format logfmt|json] [--log-level debug|info|warn|error]\n"
            "                  [--batch-max N]\n"
            "  SRC: DEST/<topic> of segd snapshot export (or DEST holding one topic), a\n"
            "  directory, http(s):// or s3://; every unit p-PPPPP of its topology is loaded\n"
            "  --load-threads: units loaded side by side (default 2)\n"
            "  --listen: default 127.0.0.1:8080; GET /v1/users/{id}, POST /v1/users:batch,\n"
            "  GET /healthz,\n"
            "  GET /readyz (200 while serving and the tail is within --ready-max-lag\n"
            "  change events of the topic's end, default 1000), GET /metrics\n"
            "  --resp: also answer Redis clients (RESP2) on HOST:PORT: a user is a\n"
            "  sorted set of segment ids scored by expires_at (ZRANGEBYSCORE, ZRANGE,\n"
            "  ZCOUNT, ZSCORE, ZCARD, EXISTS, ...); off by default\n"
            "  --resp-threads: its worker threads (default: the CPUs, at most 16)\n"
            "  --resp-reply-cache-mb: each worker's cache of formatted range replies\n"
            "  (default 16; 0: none)\n"
            "  --resp-max-clients: connections at most; one more is answered\n"
            "  -ERR max number of clients reached and closed (default 10000, as Redis)\n"
            "  --resp-idle-timeout-s: close a connection idle this long (default 0:\n"
            "  never, as Redis: client pools keep idle connections)\n"
            "  --resp-password-file: Redis's requirepass: clients must AUTH [default] PW\n"
            "  (or HELLO 2 AUTH default PW) first; the file's first line, or the\n"
            "  SEGD_CACHE_RESP_PASSWORD environment variable (default: no password)\n"
            "  --http-token-file: every HTTP request but /healthz and /readyz needs\n"
            "  Authorization: Bearer TOKEN, else 401; the file's first line, or the\n"
            "  SEGD_CACHE_HTTP_TOKEN environment variable (default: no token)\n"
            "  A front on a non-loopback address without either is warned about at start.\n"
            "  --batch-max: users per POST /v1/users:batch (default 1000; more: 413)\n"
            "  --now: a fixed clock instead of the wall clock (tests, replays)\n"
            "  --log-format, --log-level: as segd run's log.format and log.level\n"
            "  (default logfmt, info); every option: docs/configuration.md\n"
            "  --config: a segd run configuration file: its brokers (unless --brokers)\n"
            "  and kafka.* connection settings (security.*, sasl.*, ssl.*) for the tail,\n"
            "  then the SEGD_* environment; -X wins over both\n"
            "  --from-beginning: tail every partition from its start, not from the\n"
            "  units' positions (slower, equally correct)\n"
            "  /healthz answers 200 once every unit is loaded and the tail reached\n"
            "  the change topic's end offsets seen at start. Exit 1 when the topic no\n"
            "  longer holds deltas the snapshot needs (load a newer snapshot).\n\n"
            "  --horizon-s: informational; what the cache drops is decided by the\n"
            "  units' GC watermarks, each for its partition's users (DESIGN §3.1),\n"
            "  never by its clock\n");
}

typedef struct cache_args {
    const char *snapshot, *brokers, *changes, *listen, *resp;
    const char *resp_password_file, *http_token_file;
    int64_t now_s, horizon_s, load_threads, ready_max_lag, resp_threads, batch_max;
    int64_t resp_reply_cache_mb, resp_max_clients, resp_idle_timeout_s;
    int from_beginning;
    segd_log_format_t log_format;
    segd_log_level_t log_level;
    const char *props[2 * 32 + 1];
    size_t nprops;
    const char *config; /* --config */
    segd_config_t cfg;  /* its settings; a's strings may point into it */
    const char *tail_props[2 * (SEGD_MAX_KAFKA_PROPS + 32) + 1]; /* cfg's, then props */
} cache_args_t;

typedef struct cache_state {
    const segd_log_t *log;
    char *resp_password, *http_token; /* segd_secret_read's; NULL = none */
    segd_edge_t *edge;
    segd_tail_t *tail;
    _Atomic int tailing; /* tail is set: the server's threads may read it */
    segd_manifest_t manifest;
    double load_s;
    int64_t ready_max_lag;
    segd_metrics_t *metrics;
    segd_metric_t *ids, *id_bytes;
    segd_metric_t *users, *entries, *bytes, *retirements, *applied, *skipped, *lag,
        *lag_seconds, *load_seconds, *units;
} cache_state_t;

static int add_prop(cache_args_t *a, char *kv)
{
    char *eq = strchr(kv, '=');
    if (!eq || eq == kv || a->nprops + 2 >= sizeof(a->props) / sizeof(a->props[0]))
        return -1;
    *eq = 0;
    a->props[a->nprops++] = strncmp(kv, "kafka.", 6) ? kv : kv + 6;
    a->props[a->nprops++] = eq + 1;
    a->props[a->nprops] = NULL;
    return 0;
}

static int parse(int argc, char **argv, cache_args_t *a)
{
    static const struct option opts[] = {{"snapshot", required_argument, 0, 's'},
                                         {"brokers", required_argument, 0, 'b'},
                                         {"changes", required_argument, 0, 'c'},
                                         {"listen", required_argument, 0, 'l'},
                                         {"now", required_argument, 0, 'n'},
                                         {"horizon-s", required_argument, 0, 'z'},
                                         {"from-beginning", no_argument, 0, 'f'},
                                         {"load-threads", required_argument, 0, 't'},
                                         {"log-format", required_argument, 0, 'F'},
                                         {"log-level", required_argument, 0, 'L'},
                                         {"ready-max-lag", required_argument, 0, 'r'},
                                         {"resp", required_argument, 0, 'R'},
                                         {"resp-threads", required_argument, 0, 'T'},
                                         {"resp-reply-cache-mb", required_argument, 0, 'M'},
                                         {"resp-max-clients", required_argument, 0, 'C'},
                                         {"resp-idle-timeout-s", required_argument, 0, 'I'},
                                         {"batch-max", required_argument, 0, 'B'},
                                         {"config", required_argument, 0, 'K'},
                                         {"resp-password-file", required_argument, 0, 'P'},
                                         {"http-token-file", required_argument, 0, 'H'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    a->listen = "127.0.0.1:8080";
    a->horizon_s = 7 * 86400;
    a->load_threads = 2;
    a->log_format = SEGD_LOG_LOGFMT;
    a->log_level = SEGD_LOG_INFO;
    a->ready_max_lag = 1000;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    a->resp_threads = cpus < 1 ? 1 : cpus > 16 ? 16 : cpus;
    a->batch_max = SEGD_HTTP_BATCH_MAX_DEFAULT;
    a->resp_reply_cache_mb = SEGD_RESP_REPLY_CACHE_DEFAULT_MB;
    a->resp_max_clients = SEGD_RESP_MAX_CLIENTS_DEFAULT;
    int c;
    optind = 1;
    while ((c = segd_args_next("cache", argc, argv, "hX:", opts)) != -1) {
        int bad = 0;
        switch (c) {
        case 's': a->snapshot = optarg; break;
        case 'b': a->brokers = optarg; break;
        case 'c': a->changes = optarg; break;
        case 'l': a->listen = optarg; break;
        case 'n': bad = segd_arg_int("cache", "--now", optarg, 1, INT64_MAX / 1000, &a->now_s); break;
        case 'z': bad = segd_arg_int("cache", "--horizon-s", optarg, 0, 90 * 86400, &a->horizon_s); break;
        case 'f': a->from_beginning = 1; break;
        case 't': bad = segd_arg_int("cache", "--load-threads", optarg, 1, 256, &a->load_threads); break;
        case 'r': bad = segd_arg_int("cache", "--ready-max-lag", optarg, 0, INT64_MAX / 2, &a->ready_max_lag); break;
        case 'B': bad = segd_arg_int("cache", "--batch-max", optarg, 1, 1000000, &a->batch_max); break;
        case 'X': bad = add_prop(a, optarg); break;
        case 'K': a->config = optarg; break;
        case 'R': a->resp = optarg; break;
        case 'P': a->resp_password_file = optarg; break;
        case 'H': a->http_token_file = optarg; break;
        case 'T': bad = segd_arg_int("cache", "--resp-threads", optarg, 1, 256, &a->resp_threads); break;
        case 'M': bad = segd_arg_int("cache", "--resp-reply-cache-mb", optarg, 0, 1 << 20, &a->resp_reply_cache_mb); break;
        case 'C': bad = segd_arg_int("cache", "--resp-max-clients", optarg, 1, 1000000, &a->resp_max_clients); break;
        case 'I': bad = segd_arg_int("cache", "--resp-idle-timeout-s", optarg, 0, 365 * 86400, &a->resp_idle_timeout_s); break;
        case 'F':
            if ((bad = segd_log_format_parse(optarg, &a->log_format)))
                fprintf(stderr, "segd cache: bad --log-format '%s' (logfmt or json)\n", optarg);
            break;
        case 'L':
            if ((bad = segd_log_level_parse(optarg, &a->log_level)))
                fprintf(stderr, "segd cache: bad --log-level '%s' (debug, info, warn or error)\n",
                        optarg);
            break;
        case 'h': usage(stdout); return 1;
        default: return 2; /* said by segd_args_next */
        }
        if (bad)
            return 2;
    }
    if (segd_args_kafka_props("cache", a->config, &a->cfg, a->nprops ? a->props : NULL,
                              a->tail_props, sizeof(a->tail_props) / sizeof(a->tail_props[0])))
        return 2;
    if (!a->brokers)
        a->brokers = a->cfg.brokers;
    if (!a->snapshot || !a->brokers || !a->changes || optind < argc) {
        usage(stderr);
        return 2;
    }
    return 0;
}

static void health(void *ctx, json_t *o)
{
    cache_state_t *cs = ctx;
    segd_edge_stats_t es;
    segd_tail_stats_t ts = {0};
    segd_edge_get_stats(cs->edge, &es);
    if (atomic_load(&cs->tailing))
        segd_tail_get_stats(cs->tail, &ts);
    int64_t now = segd_wall_ms();
    json_object_set_new(o, "users", json_integer((json_int_t)es.users));
    json_object_set_new(o, "entries", json_integer((json_int_t)es.entries));
    json_object_set_new(o, "bytes", json_integer((json_int_t)es.bytes));
    json_object_set_new(o, "snapshot_created_at_ms",
                        json_integer((json_int_t)cs->manifest.created_at_ms));
    json_object_set_new(o, "snapshot_load_s", json_real(cs->load_s));
    json_object_set_new(o, "snapshot_units", json_integer((json_int_t)cs->manifest.units));
    /* the smallest unit W: each partition's users are judged by their own */
    json_object_set_new(o, "gc_watermark_ms",
                        json_integer((json_int_t)segd_edge_gc_watermark(cs->edge)));
    json_object_set_new(o, "caught_up", json_boolean(ts.caught_up));
    json_object_set_new(o, "changes_applied", json_integer((json_int_t)ts.applied));
    json_object_set_new(o, "changes_skipped", json_integer((json_int_t)ts.skipped));
    json_object_set_new(o, "newest_committed_at_ms",
                        json_integer((json_int_t)ts.newest_committed_ms));
    json_object_set_new(o, "lag_ms", json_integer(ts.newest_committed_ms
                                                      ? (json_int_t)(now - ts.newest_committed_ms)
                                                      : -1));
    json_object_set_new(o, "retirements", json_integer((json_int_t)es.retirements));
}

/* /readyz once serving: the tail within --ready-max-lag change events. */
static int ready(void *ctx, segd_buf_t *body)
{
    cache_state_t *cs = ctx;
    segd_tail_stats_t ts = {0};
    segd_tail_get_stats(cs->tail, &ts);
    int ok = ts.lag_messages >= 0 && ts.lag_messages <= cs->ready_max_lag;
    char text[256];
    int len = snprintf(text, sizeof(text), "{\"ready\":%s,\"reason\":%s,\"lag\":%" PRId64
                       ",\"max_lag\":%" PRId64 "}", ok ? "true" : "false",
                       ok ? "null" : "\"lag\"", ts.lag_messages, cs->ready_max_lag);
    segd_buf_append(body, text, (size_t)len);
    return ok;
}

static void register_metrics(cache_state_t *cs)
{
    segd_metrics_t *m = cs->metrics;
    cs->users = segd_metrics_gauge(m, "segd_cache_users", "Profiles held (live or not).", NULL);
    cs->entries = segd_metrics_gauge(m, "segd_cache_entries",
                                     "Entries held, dead ones within the horizon included.", NULL);
    cs->bytes = segd_metrics_gauge(m, "segd_cache_profile_bytes",
                                   "Memory of the profiles (not the hash tables).", NULL);
    cs->retirements = segd_metrics_gauge(m, "segd_cache_retirements", "Segment retirements.",
                                         NULL);
    cs->ids = segd_metrics_gauge(m, "segd_cache_identity_ids",
                                 "Identity registers held (ids of the graph, DESIGN §10.6).", NULL);
    cs->id_bytes = segd_metrics_gauge(m, "segd_cache_identity_bytes",
                                      "Memory of the identity registers and their index.", NULL);
    cs->applied = segd_metrics_counter(m, "segd_cache_deltas_applied_total",
                                       "Change events joined into the table.", NULL);
    cs->skipped = segd_metrics_counter(m, "segd_cache_deltas_skipped_total",
                                       "Change events that did not decode.", NULL);
    cs->lag = segd_metrics_gauge(m, "segd_cache_tail_lag_messages",
                                 "Change events behind the change topic's high watermarks.", NULL);
    cs->lag_seconds = segd_metrics_gauge(m, "segd_cache_tail_lag_seconds",
                                         "Now less the commit time of the newest delta joined.",
                                         NULL);
    cs->load_seconds = segd_metrics_gauge(m, "segd_cache_snapshot_load_seconds",
                                          "Time the snapshot took to load.", NULL);
    cs->units = segd_metrics_gauge(m, "segd_cache_snapshot_units", "Snapshot units loaded.",
                                   NULL);
}

static void collect(void *ctx)
{
    cache_state_t *cs = ctx;
    segd_edge_stats_t es;
    segd_edge_get_stats(cs->edge, &es);
    segd_metric_set(cs->users, NULL, (double)es.users);
    segd_metric_set(cs->entries, NULL, (double)es.entries);
    segd_metric_set(cs->bytes, NULL, (double)es.bytes);
    segd_metric_set(cs->retirements, NULL, (double)es.retirements);
    segd_metric_set(cs->ids, NULL, (double)es.ids);
    segd_metric_set(cs->id_bytes, NULL, (double)es.id_bytes);
    if (!atomic_load(&cs->tailing)) /* still loading */
        return;
    segd_tail_stats_t ts;
    segd_tail_get_stats(cs->tail, &ts);
    segd_metric_set(cs->applied, NULL, (double)ts.applied);
    segd_metric_set(cs->skipped, NULL, (double)ts.skipped);
    if (ts.lag_messages >= 0)
        segd_metric_set(cs->lag, NULL, (double)ts.lag_messages);
    if (ts.newest_committed_ms)
        segd_metric_set(cs->lag_seconds, NULL,
                        (double)(segd_wall_ms() - ts.newest_committed_ms) / 1e3);
    segd_metric_set(cs->load_seconds, NULL, cs->load_s);
    segd_metric_set(cs->units, NULL, (double)cs->manifest.units);
}

/* Every unit into the table, then the units' retirements and each unit's W
 * as its partition's (cache/edge_load.h). */
static int load(const cache_args_t *a, cache_state_t *cs)
{
    char err[512] = "";
    double t0 = segd_mono_s();
    segd_snapshot_read_opts_t ro = {.threads = (uint32_t)a->load_threads};
    if (segd_edge_load_snapshot(cs->edge, a->snapshot, &ro, &cs->manifest, err, sizeof(err))) {
        segd_log(cs->log, SEGD_LOG_ERROR, "cache", "snapshot %s: %s", a->snapshot, err);
        return -1;
    }
    cs->load_s = segd_mono_s() - t0;
    char msg[300];
    snprintf(msg, sizeof(msg), "loaded %u units of %s", cs->manifest.units, cs->manifest.topic);
    segd_log_kv(cs->log, SEGD_LOG_INFO, "cache", msg,
                "units=%u users=%" PRIu64 " entries=%" PRIu64 " in_s=%.2f", cs->manifest.units,
                cs->manifest.records, cs->manifest.segments, cs->load_s);
    return 0;
}

/* Once the cache has decided to exit, its exit code is final and nothing it
 * holds outlives the process: the edge table is memory, and the tail's
 * consumer never joins a group nor commits an offset. A teardown that does
 * not finish must then not keep it alive: a `segd cache` that met a gap once
 * logged it and was still up 60 s later (tests/kafka/cache_log_start.sh, about 1
 * run in 12 on a loaded machine). Its teardown joins threads of
 * libmicrohttpd and of librdkafka 2.0.2, whose consumer is closed there while
 * the other partitions' out-of-range fetch answers may still be arriving
 * (one is then handled after its partition was stopped); no stacks were
 * taken of that run, so which join never returned is not known. This
 * watchdog ends the process with the decided code when the teardown takes
 * longer than SHUTDOWN_GRACE_S. */
#define SHUTDOWN_GRACE_S 10

/* The watchdog must never use the logger after it is gone. The teardown's
 * last step takes mu and sets done before the logger goes. A watchdog that
 * then finds done set has nothing to do, and one that fires first holds mu
 * until the process ends, so the teardown never gets past it. */
static struct {
    pthread_mutex_t mu;
    int done;
    const segd_log_t *log;
    int rc;
} exit_watchdog = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *exit_watchdog_main(void *arg)
{
    (void)arg;
    /* the whole grace even when a signal (a second SIGTERM) lands here */
    struct timespec left = {.tv_sec = SHUTDOWN_GRACE_S};
    while (nanosleep(&left, &left) == -1 && errno == EINTR)
        ;
    pthread_mutex_lock(&exit_watchdog.mu);
    if (!exit_watchdog.done) {
        segd_log_kv(exit_watchdog.log, SEGD_LOG_WARN, "cache",
                    "shutdown did not finish: exiting without it", "grace_s=%d exit=%d",
                    SHUTDOWN_GRACE_S, exit_watchdog.rc);
        _exit(exit_watchdog.rc);
    }
    pthread_mutex_unlock(&exit_watchdog.mu);
    return NULL;
}

/* Best effort: without the thread the teardown runs unguarded, as before. */
static void arm_exit_watchdog(const segd_log_t *log, int rc)
{
    pthread_t th;
    pthread_attr_t attr;
    exit_watchdog.log = log;
    exit_watchdog.rc = rc;
    if (pthread_attr_init(&attr))
        return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, exit_watchdog_main, NULL))
        segd_log(log, SEGD_LOG_WARN, "cache", "no shutdown watchdog: teardown unguarded");
    pthread_attr_destroy(&attr);
}

static void disarm_exit_watchdog(void)
{
    pthread_mutex_lock(&exit_watchdog.mu);
    exit_watchdog.done = 1;
    pthread_mutex_unlock(&exit_watchdog.mu);
}

/* The units' deltas go to the change topic their manifests name ("changes":
 * {"topic": ...}). A cache following another topic would serve the snapshot
 * as it was for ever and say it had caught up (issue 30), so that is refused
 * before the tail starts. Units that recorded no change topic, or no position
 * on it (a store that never published a delta: a backfilled or empty one,
 * whose export names only its configuration's default topic), have no
 * changes to miss there and are not checked. */
static int check_changes_topic(const cache_args_t *a, cache_state_t *cs)
{
    const char *named = cs->manifest.changes_topic;
    if (!named || !cs->manifest.n_changes || !strcmp(named, a->changes))
        return 0;
    segd_log(cs->log, SEGD_LOG_ERROR, "cache",
             "--changes %s is not the change topic the snapshot's units were taken beside "
             "(%s, named in their manifests): following it, the cache would never see their "
             "changes; pass --changes %s", a->changes, named, named);
    return -1;
}

static int start_tail(const cache_args_t *a, cache_state_t *cs)
{
    segd_tail_opts_t o;
    char err[512] = "";
    segd_tail_opts_default(&o);
    o.brokers = a->brokers;
    o.topic = a->changes;
    o.from_beginning = a->from_beginning;
    o.kafka_props = a->tail_props[0] ? a->tail_props : NULL;
    o.log = cs->log;
    if (segd_tail_new(&cs->tail, cs->edge, &o, &cs->manifest, err, sizeof(err))) {
        segd_log(cs->log, SEGD_LOG_ERROR, "cache", "%s", err);
        return -1;
    }
    return 0;
}

/* One secret: file's when given, else env's when set, else none (*out
 * stays NULL). A variable set but empty is refused like an empty file, not
 * taken for "no secret": a deployment whose secret failed to reach the
 * variable would otherwise serve every user's segments to anyone. Logs why
 * it cannot be read, naming the file or the variable but never the
 * secret. */
static int read_secret(const char *flag, const char *file, const char *env, char **out,
                       const segd_log_t *log)
{
    char err[512] = "", what[300];
    if (!file && !getenv(env))
        return 0;
    snprintf(what, sizeof(what), "%s%s%s", file ? flag : env, file ? " " : "", file ? file : "");
    if (!segd_secret_read(what, file, env, out, err, sizeof(err)))
        return 0;
    segd_log(log, SEGD_LOG_ERROR, "cache", "%s", err);
    return -1;
}

/* The fronts' secrets, from their files or else the environment (never
 * argv: `ps` shows it to every user of the host). Logs why one cannot be
 * read. */
static int read_secrets(const cache_args_t *a, cache_state_t *cs)
{
    if (read_secret("--resp-password-file", a->resp_password_file, "SEGD_CACHE_RESP_PASSWORD",
                    &cs->resp_password, cs->log) ||
        read_secret("--http-token-file", a->http_token_file, "SEGD_CACHE_HTTP_TOKEN",
                    &cs->http_token, cs->log))
        return -1;
    if (cs->resp_password && !a->resp)
        segd_log(cs->log, SEGD_LOG_WARN, "cache", "a RESP password without --resp: unused");
    return 0;
}

/* A front anyone on the network can reach, and no secret asked of them:
 * every bidder (and anything else there) reads every user's segments. Not
 * refused, as a private network may be the protection meant, but said. */
static void warn_open(const char *what, const char *listen, int has_auth, const segd_log_t *log)
{
    struct sockaddr_storage sa;
    socklen_t len;
    char err[256];
    if (has_auth || segd_listen_parse(what, listen, &sa, &len, err, sizeof(err)) ||
        segd_listen_is_loopback(&sa))
        return;
    segd_log_kv(log, SEGD_LOG_WARN, "cache",
                "listening beyond loopback without authentication",
                "front=%s listen=%s hint=%s", what, listen,
                !strcmp(what, "--resp") ? "--resp-password-file" : "--http-token-file");
}

/* Starts the Redis-protocol front on a->resp; logs why it could not. */
static int start_resp(const cache_args_t *a, cache_state_t *cs, segd_resp_t **resp)
{
    char err[512] = "";
    segd_resp_opts_t ro;
    segd_resp_opts_default(&ro);
    ro.reply_cache_bytes = (size_t)a->resp_reply_cache_mb << 20;
    ro.max_clients = (int)a->resp_max_clients;
    ro.idle_timeout_ms = a->resp_idle_timeout_s * 1000;
    ro.password = cs->resp_password;
    if (segd_resp_start_opts(resp, a->resp, (int)a->resp_threads, &ro, cs->edge, cs->metrics,
                             err, sizeof(err))) {
        segd_log(cs->log, SEGD_LOG_ERROR, "cache", "%s", err);
        return -1;
    }
    /* --resp is HOST:PORT. The log line gives the port actually bound,
     * since PORT may be 0. */
    const char *colon = strrchr(a->resp, ':');
    int host_len = colon ? (int)(colon - a->resp) : (int)strlen(a->resp);
    segd_log_kv(cs->log, SEGD_LOG_INFO, "cache", "listening for Redis clients",
                "resp=%.*s:%d threads=%" PRId64 " reply_cache_mb=%" PRId64
                " max_clients=%" PRId64 " idle_timeout_s=%" PRId64 " auth=%s", host_len, a->resp,
                segd_resp_port(*resp), a->resp_threads, a->resp_reply_cache_mb,
                a->resp_max_clients, a->resp_idle_timeout_s,
                cs->resp_password ? "password" : "none");
    warn_open("--resp", a->resp, cs->resp_password != NULL, cs->log);
    return 0;
}

/* Follows the change topic until a signal. The cache turns ready only once
 * it has caught up with the end offsets seen at start, because until then
 * lookups would miss deltas the topic already holds. Returns nonzero on a
 * gap in the topic: the edge table then misses deltas and must never serve
 * again (the tail has logged why). */
static int serve(cache_state_t *cs, segd_http_t *http, segd_resp_t *resp,
                 volatile sig_atomic_t *stop)
{
    for (int ready = 0; !*stop;) {
        if (segd_tail_poll(cs->tail, 200) == SEGD_TAIL_GAP)
            return -1;
        segd_tail_stats_t ts;
        segd_tail_get_stats(cs->tail, &ts);
        if (!ready && ts.caught_up) {
            segd_log_kv(cs->log, SEGD_LOG_INFO, "cache", "caught up; serving",
                        "deltas_joined=%" PRIu64, ts.applied);
            segd_http_set_ready(http, ready = 1);
            if (resp)
                segd_resp_set_ready(resp, 1);
        }
    }
    return 0;
}

/* The cache's life once parsed; a is the parsed copy (its strings are
 * argv's and --config's, which segd_cmd_cache frees after). */
static int cache_run(cache_args_t a)
{
    int rc;
    volatile sig_atomic_t *stop = segd_app_stop_on_signals();
    cache_state_t cs;
    memset(&cs, 0, sizeof(cs));
    segd_manifest_init(&cs.manifest);
    segd_edge_opts_t eo;
    segd_edge_opts_default(&eo);
    eo.now_ms = a.now_s * 1000;
    eo.horizon_ms = a.horizon_s * 1000;
    segd_http_t *http = NULL;
    segd_resp_t *resp = NULL;
    segd_log_t *log = NULL;
    char err[512] = "";
    rc = SEGD_EXIT_FAIL;
    cs.ready_max_lag = a.ready_max_lag;
    if (segd_log_new(&log, stderr, a.log_level, a.log_format) || segd_edge_new(&cs.edge, &eo) ||
        !(cs.metrics = segd_metrics_new()) || segd_process_metrics_register(cs.metrics) ||
        segd_metrics_add_collector(cs.metrics, collect, &cs))
        goto out;
    cs.log = log;
    register_metrics(&cs);
    if (read_secrets(&a, &cs)) {
        rc = SEGD_EXIT_USAGE;
        goto out;
    }
    if (segd_http_start_auth(&http, a.listen, cs.edge, health, cs.metrics, ready, &cs,
                             cs.http_token, err, sizeof(err))) {
        segd_log(log, SEGD_LOG_ERROR, "cache", "%s", err);
        rc = SEGD_EXIT_USAGE;
        goto out;
    }
    segd_http_set_batch_max(http, (size_t)a.batch_max);
    segd_log_kv(log, SEGD_LOG_INFO, "cache", "listening", "url=http://%s auth=%s", a.listen,
                cs.http_token ? "bearer" : "none");
    warn_open("--listen", a.listen, cs.http_token != NULL, log);
    if (a.resp && start_resp(&a, &cs, &resp)) {
        rc = SEGD_EXIT_USAGE;
        goto out;
    }
    if (load(&a, &cs))
        goto out;
    if (check_changes_topic(&a, &cs)) {
        rc = SEGD_EXIT_USAGE;
        goto out;
    }
    if (start_tail(&a, &cs))
        goto out;
    atomic_store(&cs.tailing, 1);
    if (serve(&cs, http, resp, stop))
        goto out;
    rc = SEGD_EXIT_OK;
out:
    if (log)
        arm_exit_watchdog(log, rc);
    segd_resp_stop(resp);
    segd_http_stop(http);
    segd_metrics_destroy(cs.metrics);
    segd_tail_destroy(cs.tail);
    segd_edge_destroy(cs.edge);
    segd_manifest_free(&cs.manifest);
    segd_secret_free(cs.resp_password);
    segd_secret_free(cs.http_token);
    disarm_exit_watchdog();
    segd_log_destroy(log);
    return rc;
}

int segd_cmd_cache(int argc, char **argv)
{
    cache_args_t *a = calloc(1, sizeof(*a)); /* the props arrays: too large for a stack */
    if (!a)
        return SEGD_EXIT_FAIL;
    segd_config_init(&a->cfg);
    int rc = parse(argc, argv, a);
    rc = rc ? (rc == 1 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE) : cache_run(*a);
    segd_config_free(&a->cfg);
    free(a);
    return rc;
}
