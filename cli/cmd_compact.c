/* `segd compact` (full manual compaction at --now) and `segd stats` (with
 * the change stream's backlog: unpublished outbox entries). */
#include <getopt.h>
#include <inttypes.h>
#include <sys/time.h>

#include "cli/cli.h"
#include "consumer/pipeline.h"
#include "wire/outbox.h"
#include "base/clock.h"

extern char **environ;

static int parse_db_now(const char *cmd, int argc, char **argv, const char **db,
                        int64_t *now_s, int *json)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"now", required_argument, 0, 'n'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = segd_args_next(cmd, argc, argv, "h", opts)) != -1) {
        if (c == 'd')
            *db = optarg;
        else if (c == 'j')
            *json = 1;
        else if (c == 'n') {
            if (segd_arg_int(cmd, "--now", optarg, 1, INT64_MAX / 1000, now_s))
                return SEGD_EXIT_USAGE;
        } else if (c == 'h') {
            printf("usage: segd %s --db DIR [--now S]%s\n", cmd, json ? " [--json]" : "");
            return -1;
        } else
            return SEGD_EXIT_USAGE;
    }
    if (!*db) {
        fprintf(stderr, "segd %s: --db is required\n", cmd);
        return SEGD_EXIT_USAGE;
    }
    return 0;
}

/* The change stream's backlog as the store holds it (DESIGN §5). */
typedef struct outbox_figures {
    uint64_t entries;
    int64_t oldest_committed_ms; /* 0 = none */
} outbox_figures_t;

static int outbox_entry(void *ctx, uint64_t seq, const uint8_t *v, size_t n)
{
    outbox_figures_t *o = ctx;
    (void)seq;
    if (o->entries++ == 0) {
        segd_outbox_entry_t e;
        segd_outbox_entry_init(&e);
        if (segd_outbox_decode(v, n, &e) == SEGD_OK)
            o->oldest_committed_ms = e.committed_at_ms;
        segd_outbox_entry_free(&e);
    }
    return 0;
}

static void print_stats(const segd_store_stats_t *st, const outbox_figures_t *ob,
                        int64_t misrouted, int json)
{
    static const char *const verdicts[] = {"ok", "no_live", "not_flushed", "too_small"};
    double bps;
    char bps_text[256];
    segd_bps_verdict_t v = segd_store_stats_bytes_per_live(st, &bps, bps_text, sizeof(bps_text));
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int64_t age = ob->oldest_committed_ms
                      ? (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000 - ob->oldest_committed_ms
                      : 0;
    if (json) {
        printf("{\"users\":%" PRIu64 ",\"records\":%" PRIu64 ",\"live_segments\":%" PRIu64
               ",\"stored_entries\":%" PRIu64 ",\"sst_bytes\":%" PRIu64
               ",\"bytes_per_live_segment\":%.3f,\"bytes_per_live_segment_verdict\":\"%s\""
               ",\"memtable_bytes\":%" PRIu64 ",\"memtable_entries\":%" PRIu64
               ",\"sst_data_bytes\":%" PRIu64 ",\"sst_entries\":%" PRIu64
               ",\"corrupt_records\":%" PRIu64
               ",\"outbox_entries\":%" PRIu64 ",\"outbox_oldest_age_ms\":%" PRId64
               ",\"misrouted\":%" PRId64 "}\n",
               st->users, st->records, st->live_segments, st->stored_entries, st->sst_bytes,
               bps, verdicts[v], st->memtable_bytes, st->memtable_entries, st->sst_data_bytes,
               st->sst_entries, st->corrupt, ob->entries, age, misrouted);
        return;
    }
    /* Two counts of users, named apart: a cache's "users" (its /healthz,
     * segd_cache_users) counts every record it loaded, users whose segments
     * have all expired or were erased included, which is "records" here. */
    printf("users (live segments)  %" PRIu64 "\n"
           "records (known users)  %" PRIu64 "\n"
           "live segments          %" PRIu64 "\n"
           "stored entries         %" PRIu64 "\n"
           "on-disk bytes (sst)    %" PRIu64 "\n"
           "bytes per live segment %s\n"
           "corrupt records        %" PRIu64 "\n"
           "unpublished outbox     %" PRIu64 " entries, oldest %.1f s\n"
           "misrouted events       %" PRId64 "\n",
           st->users, st->records, st->live_segments, st->stored_entries, st->sst_bytes,
           bps_text, st->corrupt, ob->entries, (double)age / 1000.0, misrouted);
}

static void compact_usage(FILE *f)
{
    fprintf(f,
        "usage: segd compact --db DIR [--now S [--allow-future-now]] [--end-history]\n"
        "  A full compaction of the store (stop segd run first): every operand is\n"
        "  merged and the dead entries below the GC watermark W are dropped. It moves\n"
        "  W to its target, now - horizon - grace, for good (DESIGN 3.1): events\n"
        "  below the new W + grace are refused from then on (too_late). Prints W and\n"
        "  the ingest floor before and after.\n"
        "  --now S: the clock (Unix seconds) instead of the wall clock. W moves with\n"
        "    it, so a --now more than limits.max.clock.skew.ms (SEGD_LIMITS_MAX_CLOCK_\n"
        "    SKEW_MS, default 10 min) ahead of the wall clock is refused unless\n"
        "    --allow-future-now (tests; never on a production store: the store would\n"
        "    then refuse every real event as too_late).\n"
        "  --end-history: a store still taking history (W = 0 and no floor: fresh or\n"
        "    backfilled, its segd run not yet caught up) keeps taking events of any\n"
        "    age unless this is given; with it W moves as above.\n");
}

typedef struct compact_args {
    const char *db;
    int64_t now_s;
    int allow_future, end_history;
} compact_args_t;

/* 0 parsed, 1 --help, 2 usage error (said). */
static int parse_compact(int argc, char **argv, compact_args_t *a)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"now", required_argument, 0, 'n'},
                                         {"allow-future-now", no_argument, 0, 'F'},
                                         {"end-history", no_argument, 0, 'E'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = segd_args_next("compact", argc, argv, "h", opts)) != -1) {
        if (c == 'd')
            a->db = optarg;
        else if (c == 'F')
            a->allow_future = 1;
        else if (c == 'E')
            a->end_history = 1;
        else if (c == 'n') {
            if (segd_arg_int("compact", "--now", optarg, 1, INT64_MAX / 1000, &a->now_s))
                return 2;
        } else if (c == 'h') {
            compact_usage(stdout);
            return 1;
        } else
            return 2;
    }
    if (!a->db || optind != argc) {
        compact_usage(stderr);
        return 2;
    }
    return 0;
}

/* --now ahead of the wall clock by more than the skew ingest allows would
 * move W past every real event: the store would refuse them all for good. */
static int check_now(const compact_args_t *a)
{
    if (!a->now_s || a->allow_future)
        return 0;
    segd_config_t cfg;
    char err[512];
    segd_config_init(&cfg);
    int bad = segd_config_load_env(&cfg, environ, err, sizeof(err)) != SEGD_OK;
    int64_t skew = cfg.limits.max_clock_skew_ms;
    segd_config_free(&cfg);
    if (bad) {
        fprintf(stderr, "segd compact: %s\n", err);
        return 1;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int64_t wall_ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    if (a->now_s * 1000 <= wall_ms + skew)
        return 0;
    fprintf(stderr, "segd compact: --now %" PRId64 " is %" PRId64 " s ahead of the wall clock, "
            "more than limits.max.clock.skew.ms %" PRId64 ": W would move past every real "
            "event and the store refuse them all as too_late, for good; refused "
            "(--allow-future-now for a test store)\n", a->now_s,
            a->now_s - wall_ms / 1000, skew);
    return 1;
}

static void print_w(const char *when, segd_store_t *s)
{
    char why[160];
    segd_policy_floor_explain(segd_store_policy(s), 0, why, sizeof(why));
    printf("%s: gc_watermark_ms %" PRId64 ", ingest floor %s\n", when,
           segd_store_gc_watermark(s), why);
}

int segd_cmd_compact(int argc, char **argv)
{
    compact_args_t a = {0};
    int rc = parse_compact(argc, argv, &a);
    if (rc)
        return rc == 1 ? SEGD_EXIT_OK : SEGD_EXIT_USAGE;
    if (check_now(&a))
        return SEGD_EXIT_USAGE;
    segd_store_t *s = segd_app_open_existing_store("compact", a.db, a.now_s);
    if (!s)
        return SEGD_EXIT_FAIL;
    segd_policy_t *pol = segd_store_policy(s);
    int history = !segd_store_gc_watermark(s) && !segd_policy_ts_floor(pol);
    print_w("before", s);
    char err[512];
    double t0 = segd_mono_s();
    rc = segd_store_compact_ex(s, a.end_history ? 0 : SEGD_COMPACT_KEEP_HISTORY, err,
                               sizeof(err))
             ? SEGD_EXIT_FAIL
             : SEGD_EXIT_OK;
    if (rc) {
        fprintf(stderr, "segd compact: %s\n", err);
    } else {
        print_w("after", s);
        if (history && !a.end_history)
            printf("the store still takes history of any age (W not moved; --end-history "
                   "ends that)\n");
        printf("compacted in %.2f s\n", segd_mono_s() - t0);
    }
    segd_store_close(s);
    return rc;
}

int segd_cmd_stats(int argc, char **argv)
{
    const char *db = NULL;
    int64_t now_s = 0;
    int json = 0;
    int rc = parse_db_now("stats", argc, argv, &db, &now_s, &json);
    if (rc)
        return rc < 0 ? SEGD_EXIT_OK : rc;
    segd_store_t *s = segd_app_open_reader("stats", db, now_s);
    if (!s)
        return SEGD_EXIT_FAIL;
    segd_store_stats_t st;
    outbox_figures_t ob = {0};
    int64_t misrouted = 0;
    char err[512];
    rc = SEGD_EXIT_OK;
    if (segd_store_stats(s, &st, err, sizeof(err)) != SEGD_OK ||
        segd_store_outbox_scan(s, 0, SIZE_MAX, outbox_entry, &ob, err, sizeof(err)) != SEGD_OK ||
        segd_store_counter_get(s, SEGD_COUNTER_MISROUTED, &misrouted, err, sizeof(err))) {
        fprintf(stderr, "segd stats: %s\n", err);
        rc = SEGD_EXIT_FAIL;
    } else {
        print_stats(&st, &ob, misrouted, json);
    }
    segd_store_close(s);
    return rc;
}
