/* `segd replay`: applies a range of an input topic to a store through segd
 * run's checks, dead-letter queue and write path (consumer/replay.h),
 * without touching the daemon's stored input offsets. Flags here, the
 * engine in consumer/replay.c. Exit 0 all applied, 3 some dead-lettered (or
 * lost to retention while replaying), 1 failure or interrupted, 2 usage. */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/progress.h"
#include "base/timeparse.h"
#include "cli/cli.h"
#include "cli/cmd_args.h"
#include "cli/repair_check.h"
#include "consumer/replay.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: segd replay --brokers B --topic T --db DIR [--partitions P,P...]\n"
        "                   (--from-beginning | --from-offset P:O[,P:O...] | --from-time T)\n"
        "                   [--to-end | --to-offset P:O[,P:O...] | --to-time T]\n"
        "                   [--config FILE] [-X kafka.prop=value ...] [--dlq-file F]\n"
        "                   [--no-changes] [--force] [--now UNIX_SECONDS]\n"
        "  Applies topic T's messages in the range to the store as `segd run` would\n"
        "  (same decoding, checks, dead letters, one WriteBatch per batch with its\n"
        "  outbox entry) but never moves the daemon's stored input offsets: replaying\n"
        "  what the store already holds changes nothing. The store must not be in use\n"
        "  (stop `segd run` first). No consumer group is joined, nothing committed.\n"
        "  Only events at or above the store's ingest floor can still be applied\n"
        "  exactly (DESIGN 3.1: the horizon, W + grace, or a partition's import\n"
        "  floor); a store that has caught up has one. Before applying anything,\n"
        "  replay reads the range once and counts the events below it: if there are\n"
        "  any it names them and the floor and refuses (exit 4), unless --force (they\n"
        "  are then dead-lettered as too_late, the rest applied).\n"
        SEGD_REPAIR_PATHS
        "  Ranges are [start, end) per partition:\n"
        "    --from-beginning      the log start of every partition\n"
        "    --from-offset P:O     offset O of partition P; only the partitions named\n"
        "                          are replayed (unless --partitions)\n"
        "    --from-time T         the first message with timestamp >= T\n"
        "    --to-end              the end of the log when replay starts (default)\n"
        "    --to-offset P:O       up to but NOT including offset O; partitions not\n"
        "                          named run to the end\n"
        "    --to-time T           up to but not including the first message with\n"
        "                          timestamp >= T\n"
        "  T is Unix milliseconds or RFC 3339 (2026-11-23T12:00:00Z, a fraction\n"
        "  .sss..., a zone +01:00, +0100 or +01 instead of Z; T and Z in any case),\n"
        "  compared with the messages' Kafka timestamps; where the broker cannot look a\n"
        "  time up (the dev broker) the partition is read from its start.\n"
        "  A start below the log start (deleted, compacted) begins at the log start and\n"
        "  an end beyond the log's end stops there; a range wholly outside the log\n"
        "  replays nothing; offsets that retention deletes during the replay are\n"
        "  skipped (auto.offset.reset is always `error`): all said on stderr.\n"
        "  --topic T      required: the one topic replayed (a config's topics are not\n"
        "                 read for it)\n"
        "  --dlq-file F   bad messages as JSON lines {topic, partition, offset, reason,\n"
        "                 error, key_b64, value_b64} appended to F and fsync'd before\n"
        "                 their batch is written; default: the DLQ topic `segd run`\n"
        "                 uses with the same config (dlq.topic, else the config's first\n"
        "                 topic + .dlq, else T.dlq)\n"
        "  --no-changes   write no outbox entries (caches will not see the replay);\n"
        "                 without it replay stops (exit 1) before a batch once the\n"
        "                 outbox holds more than changes.max.outbox entries\n"
        "  --config FILE, -X, SEGD_* variables: as `segd run` (input.*, limits.*,\n"
        "                 batch.*, store.*, dlq.topic, changes.enable,\n"
        "                 changes.max.outbox, kafka.*)\n"
        "  Prints a progress bar on a terminal and always a summary line on stderr,\n"
        "  then the outbox's depth (entries `segd run` has yet to publish).\n"
        "  Exit: 0 all applied, 3 some dead-lettered or lost to retention while\n"
        "  replaying, 4 refused (events below the ingest floor, no --force), 1 failure\n"
        "  or interrupted, 2 usage.\n");
}

/* --from-time / --to-time (base/timeparse.h); a bare number small enough
 * to be seconds is taken as milliseconds as documented, but said. */
static int parse_time(const char *flag, const char *s, int64_t *out)
{
    int secs = 0;
    if (segd_time_parse_ms(s, out, &secs))
        return -1;
    if (secs)
        fprintf(stderr, "segd replay: warning: %s %s is read as Unix milliseconds (%s"
                " looks like seconds)\n", flag, s, s);
    return 0;
}

/* Parses "P:O,P:O" with offsets >= 0, or "P,P" when pos is NULL. Each
 * partition may appear once, because a second offset for it would
 * otherwise be ignored silently. */
static int parse_list(const char *s, segd_replay_pos_t *pos, int32_t *ids, size_t *n)
{
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long long part = strtoll(p, &end, 10), off = 0;
        if (end == p || part < 0 || part > INT32_MAX || *n == SEGD_REPLAY_MAX_PARTITIONS)
            return -1;
        p = end;
        if (pos) {
            if (*p++ != ':')
                return -1;
            off = strtoll(p, &end, 10);
            if (end == p || off < 0)
                return -1;
            p = end;
            for (size_t i = 0; i < *n; i++)
                if (pos[i].partition == part)
                    return -1;
            pos[*n].partition = (int32_t)part;
            pos[*n].offset = off;
        } else {
            ids[*n] = (int32_t)part;
        }
        (*n)++;
        if (*p == ',' && p[1])
            p++;
        else if (*p)
            return -1;
    }
    return *n ? 0 : -1;
}

typedef struct args {
    segd_config_t cfg;
    segd_replay_opts_t o;
    int32_t ids[SEGD_REPLAY_MAX_PARTITIONS];
    segd_replay_pos_t from[SEGD_REPLAY_MAX_PARTITIONS], to[SEGD_REPLAY_MAX_PARTITIONS];
    int64_t now_s;
    int n_from_flags, n_to_flags, topic_flag, force;
} args_t;

static const struct option opts[] = {
    {"brokers", required_argument, 0, 'b'},     {"topic", required_argument, 0, 't'},
    {"db", required_argument, 0, 'd'},          {"partitions", required_argument, 0, 'p'},
    {"from-beginning", no_argument, 0, 'B'},    {"from-offset", required_argument, 0, 'O'},
    {"from-time", required_argument, 0, 'T'},   {"to-end", no_argument, 0, 'E'},
    {"to-offset", required_argument, 0, 'o'},   {"to-time", required_argument, 0, 'u'},
    {"config", required_argument, 0, 'c'},      {"dlq-file", required_argument, 0, 'q'},
    {"no-changes", no_argument, 0, 'N'},        {"now", required_argument, 0, 'n'},
    {"force", no_argument, 0, 'F'},             {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0}};

/* One flag (its value also in optarg); 0 ok, -1 bad (err says why), -2 said. */
static int apply_flag(void *ctx, segd_config_t *cfg, int c, char *arg, char *err, size_t n)
{
    args_t *a = ctx;
    (void)cfg, (void)arg;
    segd_replay_opts_t *o = &a->o;
    switch (c) {
    case 'b': return segd_config_set(&a->cfg, "brokers", optarg, err, n) ? -1 : 0;
    case 't':
        if (strchr(optarg, ','))
            return snprintf(err, n, "--topic takes one topic"), -1;
        a->topic_flag = 1;
        return segd_config_set(&a->cfg, "topics", optarg, err, n) ? -1 : 0;
    case 'd': return segd_config_set(&a->cfg, "db", optarg, err, n) ? -1 : 0;
    case 'X': return segd_config_set_x(&a->cfg, optarg, err, n) ? -1 : 0;
    case 'p':
        o->partitions = a->ids;
        if (parse_list(optarg, NULL, a->ids, &o->n_partitions))
            return snprintf(err, n, "bad --partitions '%s' (want P,P,...)", optarg), -1;
        return 0;
    case 'B': a->n_from_flags++; o->from = SEGD_REPLAY_BEGINNING; return 0;
    case 'O':
        a->n_from_flags++;
        o->from = SEGD_REPLAY_OFFSETS;
        o->from_offsets = a->from;
        if (parse_list(optarg, a->from, NULL, &o->n_from))
            return snprintf(err, n, "bad --from-offset '%s' (want P:O,..., each partition once)",
                            optarg), -1;
        return 0;
    case 'T':
        a->n_from_flags++;
        o->from = SEGD_REPLAY_TIME;
        if (parse_time("--from-time", optarg, &o->from_ms))
            return snprintf(err, n, "bad --from-time '%s' (ms or ISO 8601 with zone)", optarg), -1;
        return 0;
    case 'E': a->n_to_flags++; o->to = SEGD_REPLAY_END; return 0;
    case 'o':
        a->n_to_flags++;
        o->to = SEGD_REPLAY_TO_OFFSETS;
        o->to_offsets = a->to;
        if (parse_list(optarg, a->to, NULL, &o->n_to))
            return snprintf(err, n, "bad --to-offset '%s' (want P:O,..., each partition once)",
                            optarg), -1;
        return 0;
    case 'u':
        a->n_to_flags++;
        o->to = SEGD_REPLAY_TO_TIME;
        if (parse_time("--to-time", optarg, &o->to_ms))
            return snprintf(err, n, "bad --to-time '%s' (ms or ISO 8601 with zone)", optarg), -1;
        return 0;
    case 'q': o->dlq_file = optarg; return 0;
    case 'N': o->no_changes = 1; return 0;
    case 'F': a->force = 1; return 0;
    case 'n':
        return segd_arg_int("replay", "--now", optarg, 1, INT64_MAX / 1000, &a->now_s) ? -2 : 0;
    }
    return 0;
}

/* Dead letters go where segd run's would: fixed before --topic replaces
 * the topic list. */
static int default_dlq(void *ctx, segd_config_t *cfg, char *err, size_t n)
{
    (void)ctx;
    return segd_config_default_dlq(cfg) ? snprintf(err, n, "out of memory"), -1 : 0;
}

/* 0 ok, 1 --help, 2 usage error (said). Flags win over the file and the
 * environment, as for segd run. */
static int parse_args(int argc, char **argv, args_t *a)
{
    static const segd_args_spec_t spec = {"replay", opts, "hX:", usage, SEGD_ARGS_ENV,
                                          default_dlq, apply_flag};
    char err[512];
    int c = segd_args_parse_config(&spec, argc, argv, &a->cfg, a);
    if (c)
        return c;
    if (optind < argc) {
        snprintf(err, sizeof(err), "unexpected argument '%s'", argv[optind]);
        goto bad;
    }
    if (!a->topic_flag) {
        snprintf(err, sizeof(err), "--topic is required (a config file's topics are not "
                 "read for it: replay reads one topic, named)");
        goto bad;
    }
    if (a->n_from_flags != 1 || a->n_to_flags > 1) {
        snprintf(err, sizeof(err), a->n_from_flags != 1
                 ? "give one of --from-beginning, --from-offset, --from-time"
                 : "give at most one of --to-end, --to-offset, --to-time");
        goto bad;
    }
    if (a->o.from == SEGD_REPLAY_TIME && a->o.to == SEGD_REPLAY_TO_TIME &&
        a->o.to_ms < a->o.from_ms) {
        snprintf(err, sizeof(err), "--to-time is before --from-time");
        goto bad;
    }
    /* segd run's config wants a group; replay joins none */
    if (!a->cfg.group && segd_config_set(&a->cfg, "group", "segd-replay", err, sizeof(err)))
        goto bad;
    if (segd_config_finish(&a->cfg, err, sizeof(err)))
        goto bad;
    a->o.cfg = &a->cfg;
    return 0;
bad:
    fprintf(stderr, "segd replay: %s\n", err);
    return 2;
}

typedef struct bar {
    segd_progress_t p;
    int started;
} bar_t;

static void on_progress(void *ctx, const segd_replay_stats_t *st)
{
    bar_t *b = ctx;
    if (!b->started) { /* the total is known once the ranges are */
        segd_progress_init(&b->p, stderr, "messages", st->total, 0);
        b->started = 1;
    }
    segd_progress_update(&b->p, st->done, st->messages, st->segments);
}

int segd_cmd_replay(int argc, char **argv)
{
    args_t *a = calloc(1, sizeof(*a));
    if (!a)
        return SEGD_EXIT_FAIL;
    segd_config_init(&a->cfg);
    int rc = parse_args(argc, argv, a);
    if (rc) {
        rc = rc == 1 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
        goto out_args;
    }
    volatile sig_atomic_t *stop = segd_app_stop_on_signals();
    double t0 = segd_mono_s();
    segd_replay_stats_t st = {0};
    /* as segd run opens it (the config's store.* settings), read-write: a
     * store another process holds is refused by RocksDB's LOCK */
    segd_store_t *store = segd_app_open_config_store("replay", &a->cfg, a->now_s);
    if (!store) { /* said; a summary of nothing would read as a replay that ran */
        rc = SEGD_EXIT_FAIL;
        goto out_store;
    }
    /* the check first: a refused replay applies nothing and prints no summary */
    rc = segd_repair_check("replay", &a->o, store, stop, a->force);
    if (rc)
        goto out_store;
    bar_t bar = {0};
    a->o.progress = on_progress;
    a->o.progress_ctx = &bar;
    char err[512] = "";
    segd_err_t e = segd_replay_run(&a->o, store, stop, &st, err, sizeof(err));
    if (bar.started)
        segd_progress_end(&bar.p);
    if (e)
        fprintf(stderr, "segd replay: %s\n", err);
    /* the summary also after a failure midway: scripts read it */
    fprintf(stderr, "replayed %" PRIu64 " messages (%" PRIu64 " events, %" PRIu64
            " segments, %" PRIu64 " dead-lettered, %" PRIu64 " misrouted) from %" PRIu64
            " partitions in %.2f s\n", st.messages, st.events, st.segments, st.dead,
            st.misrouted, st.partitions, segd_mono_s() - t0);
    fprintf(stderr, "outbox: %" PRIu64 " entries not yet published (segd run publishes "
                "them)\n", segd_store_outbox_depth(store));
    if (st.lost)
        fprintf(stderr, "lost: %" PRIu64 " offsets of the ranges were deleted by retention or "
                "truncated while replaying (not applied)\n", st.lost);
    for (int i = 0; i < SEGD_DLQ_REASONS; i++)
        if (st.dlq[i])
            fprintf(stderr, "  dlq.%s=%" PRIu64 "\n", segd_dlq_reason_name(i), st.dlq[i]);
    rc = e == SEGD_ERR_CONFIG ? SEGD_EXIT_USAGE
         : e                  ? SEGD_EXIT_FAIL
         : st.dead || st.lost ? SEGD_EXIT_PARTIAL
                              : SEGD_EXIT_OK;
out_store:
    if (store)
        segd_store_close(store);
out_args:
    segd_config_free(&a->cfg);
    free(a);
    return rc;
}
