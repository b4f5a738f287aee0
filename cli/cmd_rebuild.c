/* `segd rebuild`: the exact repair of a store that has an ingest floor
 * (DESIGN 3.2, app/rebuild.h). A fresh store beside the live one takes
 * history of any age, so every input topic is replayed into it from the log
 * start to the end, with the input offsets and partition counts segd run
 * keeps; renamed DB.rebuilt when complete, it replaces DB when `segd run`
 * next starts. With identity.enable the links topic is rebuilt into it too.
 * The live store and its segd run are not touched meanwhile. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/rebuild.h"
#include "app/rebuild_history.h"
#include "cli/cli.h"
#include "cli/cmd_args.h"
#include "consumer/links.h"
#include "consumer/replay.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: segd rebuild --config FILE [--brokers B] [--topic T[,T...]] [--db DIR]\n"
        "                    [--base DEST] [--accept-history-loss] [--force]\n"
        "                    [-X kafka.prop=value ...]\n"
        "  Rebuilds the store DIR (segd run's db) from its input topics into a fresh\n"
        "  store beside it, DIR.rebuild.tmp: every partition from the log start to\n"
        "  its end now, through segd run's checks, with the input offsets segd run\n"
        "  continues from. A fresh store has no ingest floor, so history of any age\n"
        "  still in the topics is applied exactly: the repair for a store whose\n"
        "  replay or rewind is refused below its floor (docs/cli.md#repairing-a-store).\n"
        "  Runs beside the live `segd run`, which it does not touch. When complete\n"
        "  the new store is renamed DIR.rebuilt, and the next `segd run` on DIR swaps\n"
        "  it in before opening the store, keeping the live store's erasures,\n"
        "  retirements and import floors (the old one is kept as\n"
        "  DIR.replaced-<unix seconds>; remove it once satisfied); restart segd run\n"
        "  when convenient: it re-consumes what arrived since the rebuild ended.\n"
        "  Writes no outbox entries: caches need a snapshot exported after the swap.\n"
        "  Bad messages go to DIR.rebuild-dlq.jsonl (JSON lines, as replay's\n"
        "  --dlq-file), not to the DLQ topic, which already holds them.\n"
        "  An interrupted rebuild continues into DIR.rebuild.tmp when run again.\n"
        "  With identity.enable = 1 the identity graph is rebuilt too: the links\n"
        "  topic from its start to its end as segd run applies it (dead letters to\n"
        "  the same file), then its components as `segd identity rebuild` makes\n"
        "  them (a new identity epoch); the next segd run continues after its offsets.\n"
        "  Only what the input topics hold is rebuilt: data loaded by `segd backfill`\n"
        "  or a snapshot restore is not in them and is lost by the swap. A live store\n"
        "  with restored snapshot units (import floors) is refused unless --force.\n"
        "  History retention already deleted is not in the topics: a partition whose\n"
        "  log start is above 0 when the rebuild begins lacks [0, log start). Unless\n"
        "  a base covers it, the rebuild names each such partition, its gone range,\n"
        "  how many messages that is and the timestamp of the first message still\n"
        "  held, and is not renamed DIR.rebuilt (exit 5).\n"
        "  --base DEST: snapshot units (a directory, http(s):// or s3://, as\n"
        "  restore.from) loaded into the fresh store first; each partition is then\n"
        "  replayed from its unit's offset, and a unit at or past the log start\n"
        "  covers what is gone. Export them with `segd snapshot export` before\n"
        "  retention passes.\n"
        "  --accept-history-loss: rename it DIR.rebuilt anyway, saying what is lost.\n"
        "  Not renamed DIR.rebuilt (DIR.rebuild.tmp stays, exit 3) when messages\n"
        "  were lost to retention during the rebuild, or --topic named only some of\n"
        "  the config's input topics (run again with all of them to finish).\n"
        "  segd run refuses the swap (exit 1) when the rebuilt store lacks an offset\n"
        "  of a partition of a topic it consumes (its config and --topic), or\n"
        "  retention deleted messages past the rebuilt offsets meanwhile (a broker\n"
        "  silent for 5 s is not waited for: swap soon after the rebuild).\n"
        "  --config FILE, -X, SEGD_* variables: as `segd run`.\n"
        "  Exit: 0 rebuilt, 3 dead-lettered messages or not complete (see above),\n"
        "  5 history gone before the rebuild and no base covering it (not renamed),\n"
        "  4 refused (restored data; --force goes on), 1 failure, 2 usage.\n");
}

typedef struct rebuild_args {
    int force;
    int accept_loss;  /* --accept-history-loss */
    const char *base; /* --base DEST, borrowed from argv; NULL = none */
    char missing[1024]; /* the config's input topics --topic left out, comma-separated */
} rebuild_args_t;

/* The topics of the file and environment that --topic did not name. */
static void note_missing(const segd_config_t *cfg, char *const *all, size_t n_all,
                         rebuild_args_t *a)
{
    size_t len = 0;
    a->missing[0] = 0;
    for (size_t i = 0; i < n_all; i++) {
        int found = 0;
        for (size_t j = 0; j < cfg->n_topics && !found; j++)
            found = !strcmp(all[i], cfg->topics[j]);
        if (!found && len < sizeof(a->missing))
            len += (size_t)snprintf(a->missing + len, sizeof(a->missing) - len, "%s%s",
                                    len ? "," : "", all[i]);
    }
}

/* What parse's passes share: the args, and the config's topics as the file
 * and environment gave them, before --topic. */
typedef struct parse_ctx {
    rebuild_args_t *a;
    char *all[SEGD_MAX_TOPICS];
    size_t n_all;
} parse_ctx_t;

static int keep_topics(void *ctx, segd_config_t *cfg, char *err, size_t n)
{
    parse_ctx_t *p = ctx;
    for (; p->n_all < cfg->n_topics; p->n_all++)
        if (!(p->all[p->n_all] = strdup(cfg->topics[p->n_all])))
            return snprintf(err, n, "out of memory"), -1;
    return 0;
}

static int apply_flag(void *ctx, segd_config_t *cfg, int c, char *arg, char *err, size_t n)
{
    rebuild_args_t *a = ((parse_ctx_t *)ctx)->a;
    switch (c) {
    case 'b': return segd_config_set(cfg, "brokers", arg, err, n) ? -1 : 0;
    case 't': return segd_config_set(cfg, "topics", arg, err, n) ? -1 : 0;
    case 'd': return segd_config_set(cfg, "db", arg, err, n) ? -1 : 0;
    case 'X': return segd_config_set_x(cfg, arg, err, n) ? -1 : 0;
    case 'f': a->force = 1; return 0;
    case 'B': a->base = arg; return 0;
    case 'L': a->accept_loss = 1; return 0;
    }
    return 0;
}

/* 0 ok, 1 --help, 2 usage error (said). Flags over the file and environment. */
static int parse(int argc, char **argv, segd_config_t *cfg, rebuild_args_t *a)
{
    static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                         {"brokers", required_argument, 0, 'b'},
                                         {"topic", required_argument, 0, 't'},
                                         {"db", required_argument, 0, 'd'},
                                         {"force", no_argument, 0, 'f'},
                                         {"base", required_argument, 0, 'B'},
                                         {"accept-history-loss", no_argument, 0, 'L'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    static const segd_args_spec_t spec = {"rebuild", opts, "hX:", usage, SEGD_ARGS_ENV,
                                          keep_topics, apply_flag};
    parse_ctx_t p = {.a = a};
    char err[512];
    int rc = segd_args_parse_config(&spec, argc, argv, cfg, &p);
    if (rc)
        goto out;
    rc = 2;
    if (optind < argc) {
        snprintf(err, sizeof(err), "unexpected argument '%s'", argv[optind]);
        goto bad;
    }
    if ((!cfg->group && segd_config_set(cfg, "group", "segd-rebuild", err, sizeof(err))) ||
        segd_config_finish(cfg, err, sizeof(err)))
        goto bad;
    note_missing(cfg, p.all, p.n_all, a);
    rc = 0;
bad:
    if (rc)
        fprintf(stderr, "segd rebuild: %s\n", err);
out:
    while (p.n_all)
        free(p.all[--p.n_all]);
    return rc;
}

/* One input topic: the history it starts with (log starts, first messages
 * held), the base's units, that history recorded in the store, then each
 * partition from its unit's offset or its log start to its end, offsets
 * stored. h is the caller's to destroy. */
static int rebuild_topic(segd_config_t *one, const rebuild_args_t *a, segd_store_t *s,
                         const char *dlq, segd_history_t *h, segd_replay_stats_t *st)
{
    const char *topic = one->topics[0];
    char err[512] = "";
    size_t units = 0;
    segd_replay_pos_t *from = NULL;
    memset(st, 0, sizeof(*st));
    segd_err_t e = segd_history_probe(one, topic, h, err, sizeof(err));
    if (!e && a->base)
        e = segd_history_load_base(one, a->base, s, h, &units, err, sizeof(err));
    if (!e)
        e = segd_history_record(s, h, err, sizeof(err));
    if (!e && !(from = calloc((size_t)h->partitions + 1, sizeof(*from))))
        e = segd_errf(SEGD_ERR_NOMEM, err, sizeof(err), "out of memory");
    for (int32_t i = 0; !e && i < h->partitions; i++) {
        from[i].partition = h->p[i].partition;
        from[i].offset = segd_history_replay_from(h, (size_t)i);
    }
    if (!e) {
        volatile sig_atomic_t *stop = segd_app_stop_on_signals();
        segd_replay_opts_t o = {.cfg = one, .from = SEGD_REPLAY_OFFSETS, .from_offsets = from,
                                .n_from = (size_t)h->partitions, .to = SEGD_REPLAY_END,
                                .dlq_file = dlq, .no_changes = 1, .write_offsets = 1};
        e = segd_replay_run(&o, s, stop, st, err, sizeof(err));
        fprintf(stderr, "segd rebuild: %s: %" PRIu64 " messages (%" PRIu64 " events, %" PRIu64
                " dead-lettered) from %" PRIu64 " partitions%s\n", topic, st->messages,
                st->events, st->dead, st->partitions, units ? " after the base's units" : "");
    }
    free(from);
    if (e)
        fprintf(stderr, "segd rebuild: %s: %s\n", topic, err);
    return e ? -1 : 0;
}

/* Each input topic (rebuild_topic); hist[i] is topic i's history, destroyed
 * by the caller. */
static int rebuild_topics(segd_config_t *cfg, const rebuild_args_t *a, segd_store_t *s,
                          const char *dlq, segd_history_t *hist, segd_replay_stats_t *sum)
{
    segd_config_t *one = malloc(sizeof(*one)); /* a shallow copy: nothing of it is freed */
    int bad = !one;
    memset(sum, 0, sizeof(*sum));
    for (size_t i = 0; !bad && i < cfg->n_topics; i++) {
        /* replay reads the config's first topic */
        *one = *cfg;
        one->topics[0] = cfg->topics[i];
        one->n_topics = 1;
        segd_replay_stats_t st;
        bad = rebuild_topic(one, a, s, dlq, &hist[i], &st);
        sum->messages += st.messages;
        sum->events += st.events;
        sum->dead += st.dead;
        sum->lost += st.lost + st.clamped;
    }
    free(one);
    return bad ? -1 : 0;
}

/* The identity graph (identity.enable): the links topic from its start to
 * its end through segd run's links consumer (consumer/links.h: the same
 * checks, guard and dead letters, into the file; offsets stored, so segd run
 * continues after them), then the components as `segd identity rebuild`
 * computes them (UNLINKs split there only; it also starts a new identity
 * epoch, past the live store's, so caches take the swapped store's
 * masters). No membership outbox entries, as for the profiles. */
static int rebuild_links(segd_config_t *cfg, segd_store_t *s, const char *dlq,
                         segd_links_stats_t *st)
{
    volatile sig_atomic_t *stop = segd_app_stop_on_signals();
    segd_links_opts_t lo = {.dlq_file = dlq, .no_changes = 1, .catch_up = 1};
    segd_ident_opts_t io = {cfg->identity_min_weight, (uint32_t)cfg->identity_max_component,
                            (uint32_t)cfg->identity_max_links};
    segd_backoff_t bo = {0};
    segd_links_t *l = NULL;
    segd_ident_rebuild_stats_t is;
    char err[512] = "";
    segd_err_t e = segd_links_new_opts(&l, cfg, s, &lo, stop, &bo, err, sizeof(err));
    if (!e)
        e = segd_links_catch_up(l, err, sizeof(err));
    memset(st, 0, sizeof(*st));
    if (l)
        segd_links_get_stats(l, st);
    segd_links_destroy(l);
    fprintf(stderr, "segd rebuild: %s: %" PRIu64 " link messages (%" PRIu64 " applied, %" PRIu64
            " dead-lettered)\n", cfg->identity_links_topic, st->messages, st->applied, st->dlq);
    if (!e)
        e = segd_ident_rebuild(s, &io, NULL, NULL, NULL, NULL, &is, err, sizeof(err));
    if (e) {
        fprintf(stderr, "segd rebuild: identity graph: %s\n", err);
        return -1;
    }
    fprintf(stderr, "segd rebuild: identity graph: %" PRIu64 " ids in %" PRIu64 " components, "
            "epoch_ms %" PRId64 "\n", is.ids, is.components, is.epoch_ms);
    return 0;
}

static int count_floor(void *ctx, const char *topic, int32_t partition, int64_t floor_ms)
{
    (void)topic, (void)partition, (void)floor_ms;
    (*(uint64_t *)ctx)++;
    return 0;
}

/* Restored snapshot units leave import floors in the live store: their data
 * is not in the topics, so the rebuilt store would lose it. 0 = go on. */
static int check_restored(const segd_config_t *cfg, int force)
{
    struct stat st;
    char cur[4200], err[512];
    snprintf(cur, sizeof(cur), "%s/CURRENT", cfg->db);
    if (stat(cur, &st))
        return 0; /* no live store yet */
    segd_store_opts_t so;
    segd_app_config_store_opts(cfg, &so);
    so.read_only = 1;
    so.log = NULL;
    segd_store_t *s = NULL;
    if (segd_store_open(&s, &so, err, sizeof(err))) {
        fprintf(stderr, "segd rebuild: cannot read %s: %s\n", cfg->db, err);
        return SEGD_EXIT_FAIL;
    }
    uint64_t floors = 0;
    segd_store_import_floors(s, count_floor, &floors);
    segd_store_close(s);
    if (!floors)
        return 0;
    fprintf(stderr, "segd rebuild: %s holds data restored from snapshots (%" PRIu64 " import "
            "floors), which the input topics do not hold: the rebuilt store would lose it%s\n",
            cfg->db, floors, force ? " (--force: going on)" : "; refused (--force goes on)");
    return force ? 0 : SEGD_EXIT_REFUSED;
}

/* History retention deleted before the rebuild began and no base unit
 * covers (rebuild_history.h): said per partition on stdout. 1 = not
 * complete: the store stays DIR.rebuild.tmp. With --accept-history-loss it
 * is said as lost and the rebuild goes on to be renamed (0). */
static int history_gone(const segd_config_t *cfg, const rebuild_args_t *a,
                        const segd_history_t *hist, const char *tmp, const char *done,
                        const segd_replay_stats_t *sum)
{
    size_t gone = 0;
    for (size_t i = 0; i < cfg->n_topics; i++)
        for (int32_t j = 0; j < hist[i].partitions; j++) {
            int64_t from;
            gone += (size_t)segd_history_gone(&hist[i], (size_t)j, &from);
        }
    if (!gone)
        return 0;
    if (a->accept_loss) {
        printf("history lost (--accept-history-loss) in %zu partitions:\n", gone);
        for (size_t i = 0; i < cfg->n_topics; i++)
            segd_history_say(stdout, "  lost: ", &hist[i]);
        return 0;
    }
    printf("rebuilt %" PRIu64 " messages into %s, not renamed %s: the topics no longer hold "
           "the whole history of %zu partitions, and no base covers it:\n", sum->messages,
           tmp, done, gone);
    for (size_t i = 0; i < cfg->n_topics; i++)
        segd_history_say(stdout, "  gone: ", &hist[i]);
    printf("  to finish: run segd rebuild again with --base DEST (snapshot units exported "
           "before retention passed, their offsets at or past each log start), or with "
           "--accept-history-loss to swap in a store without that history\n");
    return 1;
}

int segd_cmd_rebuild(int argc, char **argv)
{
    segd_config_t cfg;
    rebuild_args_t a = {0};
    segd_config_init(&cfg);
    int rc = parse(argc, argv, &cfg, &a);
    if (rc) {
        segd_config_free(&cfg);
        return rc == 1 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    }
    char tmp[4096], done[4096], dlq[4200], err[512];
    segd_history_t hist[SEGD_MAX_TOPICS] = {0};
    segd_rebuild_tmp_path(cfg.db, tmp, sizeof(tmp));
    segd_rebuild_done_path(cfg.db, done, sizeof(done));
    snprintf(dlq, sizeof(dlq), "%s.rebuild-dlq.jsonl", cfg.db);
    struct stat st;
    rc = SEGD_EXIT_FAIL;
    if (stat(done, &st) == 0) {
        fprintf(stderr, "segd rebuild: %s is a rebuilt store not yet swapped in: start "
                "`segd run` to swap it in, or remove it\n", done);
        goto out;
    }
    if ((rc = check_restored(&cfg, a.force)))
        goto out;
    rc = SEGD_EXIT_FAIL;
    fprintf(stderr, "segd rebuild: note: only the input topics%s are rebuilt; data loaded by "
            "`segd backfill`%s or restored from snapshots is not in them\n",
            cfg.identity_enable ? " and the links topic" : "",
            cfg.identity_enable ? ", `segd identity backfill`" : "");
    segd_store_opts_t so;
    segd_app_config_store_opts(&cfg, &so);
    so.path = tmp;
    so.log = NULL;
    segd_store_t *s = NULL;
    if (segd_store_open(&s, &so, err, sizeof(err))) {
        fprintf(stderr, "segd rebuild: cannot open %s: %s\n", tmp, err);
        goto out;
    }
    segd_replay_stats_t sum;
    segd_links_stats_t links = {0};
    int bad = rebuild_topics(&cfg, &a, s, dlq, hist, &sum);
    if (!bad && cfg.identity_enable)
        bad = rebuild_links(&cfg, s, dlq, &links);
    segd_store_close(s);
    if (bad)
        goto out; /* DIR.rebuild.tmp stays: a second run continues into it */
    if (!sum.lost && !a.missing[0] && history_gone(&cfg, &a, hist, tmp, done, &sum)) {
        rc = SEGD_EXIT_HISTORY;
        goto out;
    }
    if (sum.lost || a.missing[0]) {
        /* not the topics' whole history: swapped in, it would drop what it lacks */
        printf("rebuilt %" PRIu64 " messages into %s, not renamed %s: ", sum.messages, tmp, done);
        if (sum.lost)
            printf("%" PRIu64 " offsets were deleted by retention during the rebuild (the "
                   "topics no longer hold the whole history)\n", sum.lost);
        else
            printf("--topic left out the config's input topics %s (run again with all of "
                   "them to finish)\n", a.missing);
        rc = SEGD_EXIT_PARTIAL;
        goto out;
    }
    if (rename(tmp, done)) {
        fprintf(stderr, "segd rebuild: rename %s to %s failed\n", tmp, done);
        goto out;
    }
    printf("rebuilt %" PRIu64 " messages (%" PRIu64 " events, %" PRIu64 " dead-lettered%s%s) ",
           sum.messages, sum.events, sum.dead, sum.dead ? " to " : "", sum.dead ? dlq : "");
    if (cfg.identity_enable)
        printf("and the identity graph from %" PRIu64 " link messages (%" PRIu64
               " dead-lettered%s%s) ", links.messages, links.dlq, links.dlq ? " to " : "",
               links.dlq ? dlq : "");
    printf("into %s: it replaces %s when segd run next starts\n", done, cfg.db);
    rc = sum.dead || links.dlq ? SEGD_EXIT_PARTIAL : SEGD_EXIT_OK;
out:
    for (size_t i = 0; i < SEGD_MAX_TOPICS; i++)
        segd_history_destroy(&hist[i]);
    segd_config_free(&cfg);
    return rc;
}
