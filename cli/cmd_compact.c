/* `segd compact` (full manual compaction at --now) and `segd stats` (with
 * the change stream's backlog: unpublished outbox entries). */
#include <getopt.h>
#include <inttypes.h>
#include <sys/time.h>

#include "cli/cli.h"
#include "consumer/pipeline.h"
#include "wire/outbox.h"
#include "base/clock.h"

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
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'd')
            *db = optarg;
        else if (c == 'j' && json)
            *json = 1;
        else if (c == 'n') {
            if (segd_arg_int(cmd, "--now", optarg, 1, INT64_MAX / 1000, now_s))
                return SEGD_EXIT_USAGE;
        } else {
            fprintf(c == 'h' ? stdout : stderr, "usage: segd %s --db DIR [--now S]%s\n", cmd,
                    json ? " [--json]" : "");
            return c == 'h' ? -1 : SEGD_EXIT_USAGE;
        }
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
    double bps = st->live_segments ? (double)st->sst_bytes / (double)st->live_segments : 0;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int64_t age = ob->oldest_committed_ms
                      ? (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000 - ob->oldest_committed_ms
                      : 0;
    if (json) {
        printf("{\"users\":%" PRIu64 ",\"records\":%" PRIu64 ",\"live_segments\":%" PRIu64
               ",\"stored_entries\":%" PRIu64 ",\"sst_bytes\":%" PRIu64
               ",\"bytes_per_live_segment\":%.3f,\"corrupt_records\":%" PRIu64
               ",\"outbox_entries\":%" PRIu64 ",\"outbox_oldest_age_ms\":%" PRId64
               ",\"misrouted\":%" PRId64 "}\n",
               st->users, st->records, st->live_segments, st->stored_entries, st->sst_bytes,
               bps, st->corrupt, ob->entries, age, misrouted);
        return;
    }
    printf("users                  %" PRIu64 "\n"
           "records                %" PRIu64 "\n"
           "live segments          %" PRIu64 "\n"
           "stored entries         %" PRIu64 "\n"
           "on-disk bytes (sst)    %" PRIu64 "\n"
           "bytes per live segment %.3f\n"
           "corrupt records        %" PRIu64 "\n"
           "unpublished outbox     %" PRIu64 " entries, oldest %.1f s\n"
           "misrouted events       %" PRId64 "\n",
           st->users, st->records, st->live_segments, st->stored_entries, st->sst_bytes, bps,
           st->corrupt, ob->entries, (double)age / 1000.0, misrouted);
}

int segd_cmd_compact(int argc, char **argv)
{
    const char *db = NULL;
    int64_t now_s = 0;
    int rc = parse_db_now("compact", argc, argv, &db, &now_s, NULL);
    if (rc)
        return rc < 0 ? SEGD_EXIT_OK : rc;
    segd_store_t *s = segd_app_open_existing_store("compact", db, now_s);
    if (!s)
        return SEGD_EXIT_FAIL;
    char err[512];
    double t0 = segd_mono_s();
    rc = segd_store_compact(s, err, sizeof(err)) ? SEGD_EXIT_FAIL : SEGD_EXIT_OK;
    if (rc)
        fprintf(stderr, "segd compact: %s\n", err);
    else
        printf("compacted in %.2f s\n", segd_mono_s() - t0);
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
